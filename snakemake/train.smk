# Stage 4: train every strategy of `train.compare` on the per-client inputs (results/clients/)
# into results/train/{strategy}/ (metrics.json, the final checkpoint, provenance.json).
import yaml

TRAIN = "results/train"
COMPARE = list(config["train"]["compare"])


POOLED_TARGETS += [f"{TRAIN}/{strategy}/metrics.json" for strategy in COMPARE]


wildcard_constraints:
    strategy="[a-z_]+",


# writes a file from the configuration: on the submitting host, not as a cluster job
localrules:
    train_config,


rule train_config:
    output:
        f"{TRAIN}/{{strategy}}/config.yaml",
    params:
        text=lambda wildcards: yaml.safe_dump(train_sections(wildcards.strategy), sort_keys=True),
    log:
        f"{LOGS}/train_config/{{strategy}}.log",
    run:
        with open(output[0], "w") as handle:
            handle.write(params.text)


rule train_strategy:
    input:
        config=f"{TRAIN}/{{strategy}}/config.yaml",
        clients="results/clients.tsv",
        rare="results/rare_variants.tsv",
        outcome="results/outcome.json",
        samples=per_client("results/clients/{client}/samples.parquet"),
        dosages=per_client("results/clients/{client}/rare_dosages.npz"),
        truth=TRUTH_FILES,
        burden=burden_files,
    output:
        # and checkpoints/round_XXX.pt: the last round's, which a GLM that converged reaches
        # before train.rounds (the evaluate rule reads the latest)
        metrics=f"{TRAIN}/{{strategy}}/metrics.json",
    params:
        out=lambda wildcards: f"{TRAIN}/{wildcards.strategy}",
    benchmark:
        f"{TRAIN}/{{strategy}}/benchmark.tsv"
    resources:
        **job_size("train_strategy"),
    log:
        f"{LOGS}/train/{{strategy}}.log",
    threads: 1
    # One torch thread per job so that `--cores N` runs N strategies side by side. Every round
    # writes a checkpoint (tens of MB with 60k rare variants); train.keep_checkpoints (default
    # 1) keeps only the latest, the final one.
    shell:
        "OMP_NUM_THREADS={threads} rvfedprs train --config {input.config}"
        " --strategy {wildcards.strategy} --out {params.out} --no-progress > {log} 2>&1"
