# Shared helpers: where the cohort's files are, and the client list (known after validation).
import pandas as pd

from rvfedprs.exceptions import ConfigError
from rvfedprs.genotypes.convert import CONVERTIBLE_FORMATS, plink2_available
from rvfedprs.genotypes.formats import genotype_files, genotype_format
from rvfedprs.genotypes.readers import READER_OPTIONS

PIPE = config["pipeline"]
COHORT_DIR = "results/cohort"
PREP = "results/prepare"
LOGS = "results/logs"


wildcard_constraints:
    client="[^/]+",


def _simulated_genotypes():
    """The simulated cohort's genotype path and files (PLINK1 or PLINK2, as the simulate
    section merged over its preset or scenario writes them), relative to COHORT_DIR."""
    from rvfedprs.config import load_config
    from rvfedprs.simulate.cohort import cohort_genotypes
    from rvfedprs.simulate.scenarios import scenario_section

    scenario = PIPE["cohort"]["simulate_scenario"]
    resolved = load_config(
        preset=None if scenario else PIPE["cohort"]["simulate_preset"],
        base={"simulate": scenario_section(scenario)} if scenario else None,
        overrides={"simulate": RAW_SIMULATE},
    )
    return cohort_genotypes(resolved["simulate"]["output"])


def _cohort_paths():
    """The cohort's input files: simulated into results/cohort/ or taken from the config."""
    cohort = PIPE["cohort"]
    if cohort["simulate"]:
        return {
            "genotypes": [f"{COHORT_DIR}/{SIMULATED_GENOTYPES[0]}"],
            "samples": f"{COHORT_DIR}/samples.tsv",
            "phenotypes": f"{COHORT_DIR}/phenotypes.tsv",
            "scoring_file": f"{COHORT_DIR}/scores/PGS_sim.txt.gz",
        }
    missing = [k for k in ("genotypes", "phenotypes", "scoring_file") if not cohort[k]]
    if cohort["samples"] is None and PIPE["clients_from"] is None:
        missing.append("samples (or pipeline.clients_from)")
    if missing:
        raise ConfigError(
            f"pipeline.cohort.simulate is false but pipeline.cohort lacks {missing}"
        )
    samples = cohort["samples"]
    if PIPE["clients_from"] is not None:
        samples = f"{PREP}/samples_sheet.tsv"
    return {
        "genotypes": list(cohort["genotypes"]),
        "samples": samples,
        "phenotypes": cohort["phenotypes"],
        "scoring_file": cohort["scoring_file"],
    }


SIMULATED_GENOTYPES = _simulated_genotypes() if PIPE["cohort"]["simulate"] else None
COHORT = _cohort_paths()


def _genotypes_read():
    """The genotype paths read by the steps: each VCF/BGEN converted once to .pgen
    (import_genotypes) when pipeline.convert_to_pgen and plink2 is installed, else the input."""
    convert = PIPE["convert_to_pgen"] and plink2_available()
    return [
        f"{PREP}/genotypes/{i}.pgen"
        if convert and genotype_format(path, default="bfile") in CONVERTIBLE_FORMATS
        else path
        for i, path in enumerate(COHORT["genotypes"])
    ]


GENOTYPES = _genotypes_read()
# The files behind each genotype path, from the genotype layer's one format registry.
GENOTYPE_FILES = [f for path in GENOTYPES for f in genotype_files(path)]
# How every rule opens them (rvfedprs.genotypes.readers.READER_OPTIONS).
READER_KEYS = READER_OPTIONS


def clients(wildcards=None):
    """Clients kept by validation (reads the checkpoint's cohort table)."""
    cohort = checkpoints.validate_inputs.get().output.cohort
    return sorted(pd.read_csv(cohort, sep="\t", dtype=str)["client"].unique())


def per_client(pattern):
    """An input function expanding ``pattern`` over the validated clients."""

    def expand_clients(wildcards):
        return [pattern.format(client=c) for c in clients()]

    return expand_clients


def settings(*keys):
    """The named keys of the pipeline section: a rule re-runs only when these change."""
    return {key: PIPE[key] for key in keys}


# Training and evaluation (train.smk, evaluate.smk): linted to live here with the other functions.
def _evaluate_section():
    """The evaluate section; a simulated cohort brings its own truth."""
    evaluate = dict(config["evaluate"])
    if PIPE["cohort"]["simulate"]:
        if evaluate["truth"] is None:
            evaluate["truth"] = f"{COHORT_DIR}/truth/causal_variants.tsv"
        if evaluate["samples"] is None:
            evaluate["samples"] = COHORT["samples"]
    return evaluate


EVALUATE = _evaluate_section()
TRUTH_FILES = [EVALUATE[k] for k in ("truth", "samples") if EVALUATE[k]]


def train_sections(strategy):
    """The sections `rvfedprs train` reads for ``strategy``, and only those it uses.

    Each strategy gets its own configuration file, so that changing a FedCE option retrains
    FedCE alone and changing the list of compared strategies retrains nothing.
    """
    train = {k: v for k, v in config["train"].items() if k != "compare"}
    train["strategy"] = strategy
    train["progress"] = False
    from rvfedprs.strategies import FEDCE_VARIANTS

    sections = {"model": dict(config["model"]), "train": train, "evaluate": EVALUATE}
    glm = strategy in ("fedglm", "fedce_glm")
    # FedCE and its ablations read fedce (and strategies for their own knobs); the GLMs
    # fedglm and, for collapsed features, burden; privacy and engine settings apply to all
    own = ["fedce", "strategies"] if strategy in (*FEDCE_VARIANTS, "fedce_glm") else ["strategies"]
    if glm:
        own.append("fedglm")
    if glm or config["model"].get("rare_input", "dosages") != "dosages":
        own.append("burden")
    for name in (*own, "secagg", "dp", "flower"):
        if config.get(name) is not None:
            sections[name] = dict(config[name])
    return sections


def burden_files(wildcards):
    """The region and annotation files the strategy's burden map reads (editing one retrains)."""
    burden = train_sections(wildcards.strategy).get("burden") or {}
    return [burden[key] for key in ("regions", "annotations") if burden.get(key)]


def split_sites(pattern):
    """An input function expanding ``pattern`` over the sites of the one-machine split."""

    def expand_sites(wildcards):
        listed = checkpoints.site_list.get().output[0]
        with open(listed) as handle:
            return [pattern.format(client=line.strip()) for line in handle if line.strip()]

    return expand_sites


def study_strategies():
    """The strategies of train.compare a study runs (those that pool every site's data cannot)."""
    from rvfedprs.strategies import strategy_class

    return [s for s in config["train"]["compare"] if not strategy_class(s).pooled]


def job_size(rule_name):
    """The memory (MB) and wall time (minutes) a job of ``rule_name`` asks a cluster for: the
    resources section (its `rules` entry, else the defaults), times the attempt number, so that
    a job retried after running out of either gets more."""
    size = {key: config["resources"][key] for key in ("mem_mb", "runtime")}
    size.update(config["resources"]["rules"].get(rule_name, {}))
    return {
        key: (lambda wildcards, attempt, value=value: value * attempt)
        for key, value in size.items()
    }
