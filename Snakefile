# rvfedprs workflow: simulate (or read) a cohort -> prepare per-client inputs -> report.
#   snakemake --cores 2                                     # the embedded default (demo cohort)
#   snakemake --cores 2 --configfile config/cineca.yaml     # the CINECA synthetic excerpt
#   snakemake --cores 2 --configfile config/consortium.yaml # the demo as a federated study
from snakemake.utils import min_version

import copy
import os
import sys

from rvfedprs.config import inherited_settings, validate_config
from rvfedprs.snakemake_cores import honour_cores

min_version("9.0")
# Snakemake 9.16.3 charges no cores for a job that is ready alone, so --cores was exceeded
# after every such job (up to 8 jobs under --cores 2 after the validate_inputs checkpoint).
honour_cores()


# Relative to the Snakefile, so that `--directory` may point elsewhere.
configfile: os.path.join(workflow.basedir, "config", "config.yaml")


# A --configfile is read over config/config.yaml here, over the schema defaults by `rvfedprs`
# commands: say which settings it takes from config/config.yaml, so one file means one thing.
for _key, _value, _default in inherited_settings(
    os.path.join(workflow.basedir, "config", "config.yaml"), list(workflow.overwrite_configfiles)
):
    print(
        f"rvfedprs: warning: {_key} = {_value!r} comes from config/config.yaml, which your "
        f"--configfile is read over (the schema default, which `rvfedprs` commands use, is "
        f"{_default!r}); set it in your file to silence this",
        file=sys.stderr,
    )

# The simulate section as written (before defaults): `rvfedprs simulate` merges it over a preset.
RAW_SIMULATE = copy.deepcopy(config.get("simulate") or {})
# Fill every default in place and stop early, naming the key, on a bad configuration.
config.update(validate_config(config))

# Final targets: each stage's .smk appends its own. The pooled workflow's (one process reads
# every client's genotypes) and a consortium study's (study.enabled: every site prepares, trains
# and evaluates on its own folder, snakemake/study.smk) are alternatives.
POOLED_TARGETS = []
STUDY_TARGETS = []


include: "snakemake/common.smk"
include: "snakemake/simulate.smk"
include: "snakemake/prepare.smk"
include: "snakemake/report.smk"
include: "snakemake/train.smk"
include: "snakemake/evaluate.smk"
include: "snakemake/paper.smk"
include: "snakemake/study.smk"


FINAL_TARGETS = STUDY_TARGETS if config["study"]["enabled"] else POOLED_TARGETS


# The terminal hears every exclusion at the end of a run, and a failed rule's message last.
onstart:
    from rvfedprs.rulelog import clear_errors

    clear_errors(LOGS)


onsuccess:
    from rvfedprs.rulelog import report_exclusions

    report_exclusions(LOGS)


onerror:
    from rvfedprs.rulelog import report_errors

    report_errors(LOGS)


rule all:
    default_target: True
    input:
        FINAL_TARGETS,
