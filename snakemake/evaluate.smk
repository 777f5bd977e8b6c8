# Stage 5: re-evaluate every trained strategy from its final checkpoint (`rvfedprs evaluate`)
# and compare them: results/train/comparison.{csv,md} and the per-client AUC figure.

POOLED_TARGETS += multiext(f"{TRAIN}/comparison", ".csv", ".md") + [f"{TRAIN}/client_auc.png"]


rule evaluate_strategy:
    input:
        checkpoint=f"{TRAIN}/{{strategy}}/{FINAL_CHECKPOINT}",
        trained=f"{TRAIN}/{{strategy}}/metrics.json",
    output:
        metrics="results/evaluate/{strategy}/metrics.json",
    params:
        out=lambda wildcards: f"results/evaluate/{wildcards.strategy}",
    log:
        f"{LOGS}/evaluate/{{strategy}}.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} rvfedprs evaluate --checkpoint {input.checkpoint}"
        " --out {params.out} > {log} 2>&1"


rule compare_strategies:
    input:
        metrics=expand("results/evaluate/{strategy}/metrics.json", strategy=COMPARE),
        benchmarks=expand(f"{TRAIN}/{{strategy}}/benchmark.tsv", strategy=COMPARE),
    output:
        csv=f"{TRAIN}/comparison.csv",
        md=f"{TRAIN}/comparison.md",
        png=f"{TRAIN}/client_auc.png",
    log:
        f"{LOGS}/compare_strategies.log",
    script:
        "../pipelines/compare_strategies.py"
