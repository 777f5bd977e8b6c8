# Stage 0: simulate the demo cohort (CINECA layout) when no real cohort is configured.
import yaml

if PIPE["cohort"]["simulate"]:

    rule simulate_config:
        output:
            f"{COHORT_DIR}/simulate_config.yaml",
        params:
            # Only the simulate section: other sections changing must not re-simulate.
            text=yaml.safe_dump({"simulate": config.get("simulate", {})}, sort_keys=True),
        log:
            f"{LOGS}/simulate_config.log",
        run:
            with open(output[0], "w") as handle:
                handle.write(params.text)

    rule simulate_cohort:
        input:
            config=f"{COHORT_DIR}/simulate_config.yaml",
        output:
            genotypes=multiext(f"{COHORT_DIR}/genotypes/cohort", ".bed", ".bim", ".fam"),
            samples=f"{COHORT_DIR}/samples.tsv",
            phenotypes=f"{COHORT_DIR}/phenotypes.tsv",
            scoring_file=f"{COHORT_DIR}/scores/PGS_sim.txt.gz",
        params:
            out=COHORT_DIR,
        log:
            f"{LOGS}/simulate_cohort.log",
        shell:
            "rvfedprs simulate --config {input.config} --out {params.out} > {log} 2>&1"
