# A consortium study (`study.enabled`, config/consortium.yaml): every site holds its own folder
# under study.sites_dir and prepares, trains and evaluates on it through the engine of
# study.engine; the coordinator writes only aggregates under study.out.
#   one-machine form: the cohort (simulated demo, or pipeline.cohort) is split into one folder
#   per client (rule site_inputs, per site, with resources), then the study runs.
#   real sites: give study.samplesheet (each row a site's own files) and run `rvfedprs study`.
import os

import yaml

STUDY = config["study"]
SITES_DIR = STUDY["sites_dir"]
STUDY_OUT = STUDY["out"]
SAMPLESHEET = STUDY["samplesheet"] or f"{SITES_DIR}/samplesheet.tsv"

STUDY_TARGETS += [f"{STUDY_OUT}/study.json"] + [
    f"{STUDY_OUT}/train/{strategy}/metrics.json" for strategy in study_strategies()
]


if STUDY["samplesheet"] is None:

    checkpoint site_list:
        input:
            samples=COHORT["samples"],
        output:
            f"{SITES_DIR}/sites.txt",
        resources:
            **job_size("site_list"),
        log:
            f"{LOGS}/site_list.log",
        script:
            "../pipelines/site_list.py"

    rule site_inputs:
        input:
            genotypes=GENOTYPE_FILES,
            samples=COHORT["samples"],
            phenotypes=COHORT["phenotypes"],
            truth=[EVALUATE["truth"]] if EVALUATE["truth"] else [],
        output:
            f"{SITES_DIR}/{{client}}/inputs.json",
        params:
            genotypes=COHORT["genotypes"],
            id_column=PIPE["phenotype"]["id_column"],
            folder=lambda wildcards: f"{SITES_DIR}/{wildcards.client}",
        resources:
            **job_size("site_inputs"),
        threads: 1
        log:
            f"{LOGS}/site_inputs/{{client}}.log",
        script:
            "../pipelines/site_inputs.py"

    rule samplesheet:
        input:
            split_sites(f"{SITES_DIR}/{{client}}/inputs.json"),
        output:
            SAMPLESHEET,
        resources:
            **job_size("samplesheet"),
        log:
            f"{LOGS}/samplesheet.log",
        script:
            "../pipelines/samplesheet.py"


# writes a file from the configuration: on the submitting host, not as a cluster job
localrules:
    study_config,


rule study_config:
    output:
        f"{STUDY_OUT}/study_config.yaml",
    params:
        text=yaml.safe_dump(
            {k: v for k, v in config.items() if k not in ("simulate", "paper_evaluation", "resources")},
            sort_keys=True,
        ),
    log:
        f"{LOGS}/study_config.log",
    run:
        with open(output[0], "w") as handle:
            handle.write(params.text)


rule study:
    input:
        config=f"{STUDY_OUT}/study_config.yaml",
        samplesheet=SAMPLESHEET,
        scoring_file=COHORT["scoring_file"],
    output:
        summary=f"{STUDY_OUT}/study.json",
        metrics=[f"{STUDY_OUT}/train/{strategy}/metrics.json" for strategy in study_strategies()],
    params:
        out=lambda wildcards, output: os.path.dirname(output.summary),
    resources:
        **job_size("study"),
    log:
        f"{LOGS}/study.log",
    threads: 1
    shell:
        "OMP_NUM_THREADS={threads} rvfedprs study --config {input.config}"
        " --samplesheet {input.samplesheet} --scoring-file {input.scoring_file}"
        " --out {params.out} > {log} 2>&1"
