# Stage 3 (data): the data report a person reads before training.

POOLED_TARGETS += ["results/report/data_report.html"]


rule data_report:
    input:
        clients="results/clients.tsv",
        variants=f"{PREP}/variants.tsv",
        match=f"{LOGS}/score_match.tsv",
        exclusions=f"{LOGS}/exclusions.tsv",
        samples=per_client("results/clients/{client}/samples.parquet"),
    output:
        html="results/report/data_report.html",
        figures=multiext("results/report/figures/", "clients.png", "maf_spectrum.png", "prs_by_client.png"),
    params:
        rare_maf_max=PIPE["rare_maf_max"],
    log:
        f"{LOGS}/data_report.log",
    script:
        "../pipelines/data_report.py"
