# Stage 5: re-evaluate every trained strategy from its final checkpoint (`rvfedprs evaluate`:
# metrics and test predictions) and compare them: results/train/comparison.{csv,md} (AUCs with
# DeLong intervals, the PRS-only floor, on a simulated cohort the oracle ceiling and the carrier
# AUC per true cluster) and the per-client AUC figure.

POOLED_TARGETS += multiext(f"{TRAIN}/comparison", ".csv", ".md") + [f"{TRAIN}/client_auc.png"]


rule evaluate_strategy:
    input:
        trained=f"{TRAIN}/{{strategy}}/metrics.json",
    output:
        metrics="results/evaluate/{strategy}/metrics.json",
        predictions="results/evaluate/{strategy}/predictions.parquet",
    params:
        out=lambda wildcards: f"results/evaluate/{wildcards.strategy}",
        run=lambda wildcards: f"{TRAIN}/{wildcards.strategy}",
    resources:
        **job_size("evaluate_strategy"),
    log:
        f"{LOGS}/evaluate/{{strategy}}.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} rvfedprs evaluate --checkpoint {params.run}"
        " --out {params.out} > {log} 2>&1"


rule compare_strategies:
    input:
        metrics=expand("results/evaluate/{strategy}/metrics.json", strategy=COMPARE),
        predictions=expand("results/evaluate/{strategy}/predictions.parquet", strategy=COMPARE),
        benchmarks=expand(f"{TRAIN}/{{strategy}}/benchmark.tsv", strategy=COMPARE),
        clients="results/clients.tsv",
        causal=EVALUATE["truth"] or [],
        samples=EVALUATE["samples"] or [],
        # the oracle reads the genotypes when the truth has no genetic_values.tsv
        genotypes=GENOTYPE_FILES if EVALUATE["truth"] else [],
    output:
        csv=f"{TRAIN}/comparison.csv",
        md=f"{TRAIN}/comparison.md",
        png=f"{TRAIN}/client_auc.png",
    resources:
        **job_size("compare_strategies"),
    log:
        f"{LOGS}/compare_strategies.log",
    script:
        "../pipelines/compare_strategies.py"
