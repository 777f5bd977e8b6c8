# Stage 0: simulate the demo cohort (CINECA layout) when no real cohort is configured.
import os

import yaml

if PIPE["cohort"]["simulate"]:

    # writes a file from the configuration: on the submitting host, not as a cluster job
    localrules:
        simulate_config,

    rule simulate_config:
        output:
            f"{COHORT_DIR}/simulate_config.yaml",
        params:
            # Only the simulate section: other sections changing must not re-simulate.
            text=yaml.safe_dump({"simulate": RAW_SIMULATE}, sort_keys=True),
        log:
            f"{LOGS}/simulate_config.log",
        run:
            with open(output[0], "w") as handle:
                handle.write(params.text)

    rule simulate_cohort:
        input:
            config=f"{COHORT_DIR}/simulate_config.yaml",
        output:
            genotypes=[f"{COHORT_DIR}/{path}" for path in SIMULATED_GENOTYPES[1]],
            samples=f"{COHORT_DIR}/samples.tsv",
            phenotypes=f"{COHORT_DIR}/phenotypes.tsv",
            scoring_file=f"{COHORT_DIR}/scores/PGS_sim.txt.gz",
            truth=f"{COHORT_DIR}/truth/causal_variants.tsv",
        params:
            out=lambda wildcards, output: os.path.dirname(output.samples),
            source=(
                f"--scenario {PIPE['cohort']['simulate_scenario']}"
                if PIPE["cohort"]["simulate_scenario"]
                else f"--preset {PIPE['cohort']['simulate_preset']}"
            ),
        resources:
            **job_size("simulate_cohort"),
        log:
            f"{LOGS}/simulate_cohort.log",
        shell:
            "rvfedprs simulate {params.source} --config {input.config} --out {params.out}"
            " --no-progress > {log} 2>&1"
