# Stage 3 (data): the data report a person reads before training, and the score report
# (assess section): the workflow's PRS assessed per site and pooled as `rvfedprs assess` does,
# with, when ancestry.reference names a panel, each sample's projected PCs, assigned population
# and PRS normalised on the PCs (rvfedprs/ancestry).
import os

ASSESS = config["assess"]
ANCESTRY = config["ancestry"]
ANCESTRY_DIR = "results/ancestry"
REPORT = "results/report"

POOLED_TARGETS += [f"{REPORT}/data_report.html"]
if ASSESS["enabled"]:
    POOLED_TARGETS += [f"{REPORT}/assess.html"]


rule data_report:
    input:
        clients="results/clients.tsv",
        outcome="results/outcome.json",
        variants=f"{PREP}/variants.tsv",
        match=f"{LOGS}/score_match.tsv",
        exclusions=f"{LOGS}/exclusions.tsv",
        samples=per_client("results/clients/{client}/samples.parquet"),
    output:
        html=f"{REPORT}/data_report.html",
        figures=multiext(f"{REPORT}/figures/", "clients.png", "maf_spectrum.png", "prs_by_client.png"),
    params:
        rare_maf_max=PIPE["rare_maf_max"],
    resources:
        **job_size("data_report"),
    log:
        f"{LOGS}/data_report.log",
    script:
        "../pipelines/data_report.py"


if ANCESTRY["reference"] is not None:

    rule ancestry:
        input:
            reference=genotype_files(ANCESTRY["reference"]),
            labels=ANCESTRY["labels"] or [],
            genotypes=GENOTYPE_FILES,
            weights=f"{PREP}/score_weights.txt.gz",
        output:
            pcs=f"{ANCESTRY_DIR}/pcs.tsv",
            assigned=f"{ANCESTRY_DIR}/ancestry.tsv",
            variants=f"{ANCESTRY_DIR}/variants.tsv",
            figure=f"{ANCESTRY_DIR}/pca.png",
            reference_prs=f"{ANCESTRY_DIR}/reference_prs.tsv",
        params:
            reference=lambda wildcards, input: input.reference[0],  # the .bed or .pgen
            genotypes=GENOTYPES,
            settings=ANCESTRY,
            out=lambda wildcards, output: os.path.dirname(output.pcs),
        resources:
            **job_size("ancestry"),
        log:
            f"{LOGS}/ancestry.log",
        script:
            "../pipelines/ancestry.py"


rule assess_report:
    input:
        samples=per_client("results/clients/{client}/samples.parquet"),
        outcome="results/outcome.json",
        pcs=f"{ANCESTRY_DIR}/pcs.tsv" if ANCESTRY["reference"] else [],
        reference_prs=f"{ANCESTRY_DIR}/reference_prs.tsv" if ANCESTRY["reference"] else [],
    output:
        html=f"{REPORT}/assess.html",
        md=f"{REPORT}/assess.md",
        tsv=f"{REPORT}/assess.tsv",
        provenance=f"{REPORT}/provenance.json",
        # individual rows: kept with the prepared inputs, not in the report folder
        inputs=f"{PREP}/assess_inputs.tsv",
    params:
        settings=ASSESS,
        covariates=PIPE["covariates"],
        out=lambda wildcards, output: os.path.dirname(output.html),
        n_normalisation_pcs=ANCESTRY["n_normalisation_pcs"],
    resources:
        **job_size("assess_report"),
    log:
        f"{LOGS}/assess_report.log",
    script:
        "../pipelines/assess_report.py"
