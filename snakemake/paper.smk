# Stage 6 (optional, `paper_evaluation.enabled`): the paper's evaluation protocol
# (simulations/rvfedprs_paper/run.py) on the prepared per-client inputs: every strategy over
# `paper_evaluation.seeds` seeds, MIA audits, the DP / keyed-hashing sweep, the sensitivity grid,
# then Tables II–V (Markdown + CSV) and the figures in results/paper_evaluation/report/.
# The driver is resumable: runs under results/paper_evaluation/runs/ whose metrics.json exists
# are kept, so after changing a training option delete that folder to start afresh.
import os
import shlex
import sys

import yaml

PAPER = config["paper_evaluation"]
PAPER_OUT = "results/paper_evaluation"
PAPER_DRIVER = os.path.join(workflow.basedir, "simulations", "rvfedprs_paper", "run.py")
# Sections that do not change what the driver computes: editing them re-runs nothing here.
PAPER_IGNORED = {"simulate", "pipeline", "paper_evaluation", "imaging", "flower", "resources"}


# The configuration the driver reads (`--config`): training, model, audits, report. (Plain
# statements, no functions: the linter wants functions in common.smk only.)
PAPER_SECTIONS = {k: v for k, v in config.items() if k not in PAPER_IGNORED}
PAPER_SECTIONS["train"] = {
    k: v for k, v in config["train"].items() if k not in ("compare", "data", "progress")
}
PAPER_SECTIONS["evaluate"] = EVALUATE

# The driver's command-line options from the `paper_evaluation` section.
PAPER_FLAGS = ["--seeds", str(PAPER["seeds"]), "--strategies", ",".join(PAPER["strategies"])]
PAPER_FLAGS += ["--rounds", str(PAPER["rounds"])] if PAPER["rounds"] is not None else []
PAPER_FLAGS += [
    flag
    for key, flag in (
        ("mia", "--no-mia"),
        ("privacy", "--no-privacy"),
        ("sensitivity", "--no-sensitivity"),
        ("selected", "--no-selected"),
    )
    if not PAPER[key]
]
PAPER_FLAGS += ["--quick"] if PAPER["quick"] else []
# a simulated cohort brings its truth (carrier AUC, ARI); EVALUATE is set in common.smk
PAPER_FLAGS += [
    x for key in ("samples", "truth") if EVALUATE[key] for x in (f"--{key}", EVALUATE[key])
]


if PAPER["enabled"]:

    POOLED_TARGETS += [f"{PAPER_OUT}/report/table2_performance.md"]


# writes a file from the configuration: on the submitting host, not as a cluster job
localrules:
    paper_evaluation_config,


rule paper_evaluation_config:
    output:
        f"{PAPER_OUT}/config.yaml",
    params:
        text=yaml.safe_dump(PAPER_SECTIONS, sort_keys=True),
    log:
        f"{LOGS}/paper_evaluation_config.log",
    run:
        with open(output[0], "w") as handle:
            handle.write(params.text)


rule paper_evaluation:
    input:
        config=f"{PAPER_OUT}/config.yaml",
        clients="results/clients.tsv",
        rare="results/rare_variants.tsv",
        samples=per_client("results/clients/{client}/samples.parquet"),
        dosages=per_client("results/clients/{client}/rare_dosages.npz"),
        truth=TRUTH_FILES,
    output:
        tables=multiext(f"{PAPER_OUT}/report/table2_performance", ".md", ".csv"),
        headline=f"{PAPER_OUT}/report/headline.json",
    params:
        python=sys.executable,
        driver=PAPER_DRIVER,
        # the driver writes runs/ and report/ under --out
        out=lambda wildcards, output: os.path.dirname(os.path.dirname(output.headline)),
        flags=shlex.join(PAPER_FLAGS),
    benchmark:
        f"{PAPER_OUT}/benchmark.tsv"
    resources:
        **job_size("paper_evaluation"),
    log:
        f"{LOGS}/paper_evaluation.log",
    threads: PAPER["threads"]
    shell:
        "OMP_NUM_THREADS={threads} {params.python} {params.driver} --config {input.config}"
        " --data results --out {params.out} {params.flags} > {log} 2>&1"
