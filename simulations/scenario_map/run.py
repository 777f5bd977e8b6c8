"""The scenario map (issue #17 item 3, SPEC §12): where does RV-FedPRS help, and by how much?

For every scenario of ``scenarios.yaml``: simulate a *tuning* cohort and ``--cohorts``
independent *inference* cohorts, prepare each with the Snakemake workflow, then

1. **tune** every method on the tuning cohort's validation split with the same budget
   (``--budget`` configurations each, early stopping on validation AUC; grids in
   :mod:`rvfedprs.protocol.grids`) — the inference cohorts' data take no part in any choice;
2. on every inference cohort, train each method's chosen configuration with early stopping on
   *that* cohort's validation split, and evaluate once on its test split (the FedCE ablations
   take FedCE's configuration; the L2 logistic regression its chosen C); also score the
   PRS-only floor and the oracle ceiling (true genetic values) on the same test split;
3. **analyse** within cohort: Δ carrier AUC and Δ pooled AUC of FedCE vs tuned FedAvg (the
   pre-stated primary endpoint: Δ carrier AUC vs FedAvg, pooled over clusters) and vs the best
   baseline (per cohort, the federated baseline with the best validation AUC), per cluster and
   pooled, mean and 95% t-interval over cohorts; the ablations against FedCE; one forest plot.

``--tune-per-cohort`` tunes every method on every inference cohort instead (B times the
cost). ``--prepared DIR`` runs one scenario on one existing cohort (the paper scale): tuning
and inference share its split, and its intervals are paired bootstraps over test samples.
Layout of ``--out``::

    work/cohorts/<scenario>/<role><i>-<key>/    simulated cohort + prepared inputs
    work/tuning/<scenario>/<method>/<key>/      tuning trials (trial.json), tuning.tsv
    work/runs/<scenario>/<cohort>/<method>/<key>/  the cohort's trial (trial.json) and its test
                                                predictions (predictions.parquet)
    work/runs/<scenario>/<cohort>/outcomes.tsv  the cohort's AUCs (rebuilt on every call)
    summary/                                    tables (TSV + Markdown) and forest.png
    provenance.json, progress.log

Resumable: every cohort folder, trial and prediction file is keyed by a hash of what defines
it and skipped when present; a changed setting invalidates only what depends on it. Runs in
``--jobs`` processes with one torch thread each.

Usage (from the repository root, PYTHONPATH=$PWD)::

    python simulations/scenario_map/run.py --out simulations/scenario_map/results/map \\
        --cohorts 10 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[2]
SCENARIOS_FILE = Path(__file__).with_name("scenarios.yaml")

#: Tuned with the same budget each (``logistic``: the L2 logistic regression).
TUNED = (
    "fedavg",
    "fedprox",
    "fedadam",
    "fedavgm",
    "fedavg_masked",
    "clustered",
    "ditto",
    "local",
    "centralized",
    "logistic",
    "fedce",
    "fedglm",
    "fedce_glm",
)
#: Exact federated GLMs (issues 29, 40): rare features are the top-k variants (and burdens,
#: :func:`_base_config`); each run fits its whole penalty path (no early stopping: patience None).
GLMS = ("fedglm", "fedce_glm")
#: Run with FedCE's chosen configuration (one mechanism changed each).
ABLATIONS = ("fedce_oracle", "fedce_random", "fedce_global_head", "fedce_carried")
#: Eligible as "the best baseline" (federated; chosen per cohort on validation AUC).
BASELINES = tuple(
    m for m in TUNED if m not in ("centralized", "logistic", "fedce", "fedglm", "fedce_glm")
)
#: "Federation's cost": the best federated method vs the best pooled one, each chosen per
#: cohort on the selection score (validation AUC, or log-loss with --criterion log_loss).
FEDERATED = (*BASELINES, "fedce", "fedglm", "fedce_glm")
POOLED = ("centralized", "logistic")
#: Global methods (one rare effect per variant or region for everybody) that per-cluster rare
#: effects (fedce_glm) must beat where effects conflict between groups.
GLOBAL = ("fedavg", "fedglm", "centralized", "logistic")
FLOOR, ORACLE, CEILING = "prs_only", "oracle", "ceiling"

log = logging.getLogger("scenario_map")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--scenarios", help="comma-separated subset of scenarios.yaml (default: all)")
    p.add_argument("--cohorts", type=int, default=10, help="inference cohorts per scenario")
    p.add_argument("--budget", type=int, default=6, help="configurations per tuned method")
    p.add_argument("--max-rounds", type=int, default=30, help="round budget of every run")
    p.add_argument("--patience", type=int, default=5, help="early-stopping patience (rounds)")
    p.add_argument("--validation-fraction", type=float, default=0.2)
    p.add_argument("--methods", help="comma-separated subset of the methods (default: all)")
    p.add_argument("--tune-per-cohort", action="store_true",
                   help="tune every method on every inference cohort (B× the cost)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=2, help="parallel processes (one thread each)")
    p.add_argument("--seed", type=int, default=20261123, help="master seed of the map")
    p.add_argument("--simulator-path", type=Path,
                   help="PYTHONPATH entry for the simulate step only (a checkout of the "
                        "`simulate` branch until it is merged)")  # fmt: skip
    p.add_argument("--keep-genotypes", action="store_true",
                   help="keep each cohort's genotypes after its runs (≈60 MB each)")  # fmt: skip
    p.add_argument("--criterion", choices=("auc", "log_loss"), default="auc",
                   help="validation score of early stopping, of the best round and of every "
                        "choice: pooled AUC (default; simulations/stopping_rule/ says why) or "
                        "pooled log-loss (lower is better); trials of each keep their own "
                        "keys")  # fmt: skip
    p.add_argument(
        "--glm-window-bp",
        type=int,
        default=0,
        help="burden windows the GLMs read beside their top-k variants where a "
        "cohort ships no gene regions (0, the default: none; 1 Mb gives ≤ 440 "
        "windows on the map's genome, which FedCE-GLM's partially pooled "
        "system of M + 1 blocks fits under fedglm.max_features for M ≤ 2)",
    )
    p.add_argument("--analyse-only", action="store_true",
                   help="rebuild summary/ from the finished cohorts; run nothing")  # fmt: skip
    p.add_argument("--label", default="", help="title of the summary (e.g. 'PILOT')")
    p.add_argument("--prepared", type=Path, metavar="DIR",
                   help="run one scenario on this simulated and prepared cohort (DIR/cohort: "
                        "`rvfedprs simulate` output, DIR/results: the workflow's) instead of "
                        "simulating cohorts: tuning and inference share its validation split, "
                        "and its intervals are paired bootstraps over test samples (one "
                        "cohort is one replicate); for cohorts too large to simulate ten of, "
                        "e.g. the paper scale")  # fmt: skip
    return p.parse_args(argv)


# --- scenarios and cohorts ---------------------------------------------------------------------
def load_scenarios(names: str | None) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The scenarios to run (file order) and the file's settings."""
    spec = yaml.safe_load(SCENARIOS_FILE.read_text())
    scenarios = spec["scenarios"]
    chosen = list(scenarios) if not names else [s for s in names.split(",") if s]
    unknown = sorted(set(chosen) - set(scenarios))
    if unknown:
        raise SystemExit(f"scenarios {unknown} unknown; choose from {list(scenarios)}")
    runnable = {}
    for name in chosen:
        if not spec["presets"] and "simulate" not in scenarios[name]:
            log.warning("scenario %s needs the simulator's presets (presets: false): skipped", name)
            continue
        runnable[name] = scenarios[name]
    return runnable, spec


@dataclass(frozen=True)
class Cohort:
    """One simulated cohort of a scenario."""

    scenario: str
    role: str  # "tune" or "c"
    index: int
    seed: int
    folder: Path

    @property
    def name(self) -> str:
        return f"{self.role}{self.index:02d}"

    @property
    def data(self) -> Path:
        return self.folder / "results"

    @property
    def sim(self) -> Path:
        return self.folder / "cohort"


def cohort_of(args, spec: dict, scenario: str, role: str, index: int) -> Cohort:
    from rvfedprs.federation.seeds import derive_seed
    from rvfedprs.protocol.tuning import trial_key

    if args.prepared is not None:  # tuning and inference on one cohort (and one split)
        return Cohort(scenario, "c", 0, _prepared_seed(args.prepared), args.prepared)
    seed = derive_seed(args.seed, "cohort", scenario, role, index)
    definition = {
        "scenario": scenario,
        "presets": spec["presets"],
        "simulate": spec["scenarios"][scenario].get("simulate"),
        "base": spec.get("simulate_base") if not spec["presets"] else None,
        # the simulator's presets are part of what defines a cohort: a changed preset file
        # must never resume from cohorts simulated under the old one
        "preset_file": _preset_text(args.simulator_path) if spec["presets"] else None,
        "seed": seed,
    }
    key = trial_key(definition)[:10]
    folder = args.out / "work" / "cohorts" / scenario / f"{role}{index:02d}-{key}"
    return Cohort(scenario, role, index, seed, folder)


def _prepared_seed(folder: Path) -> int:
    """The simulation seed of a prepared cohort (its ``cohort/provenance.json``)."""
    path = folder / "cohort" / "provenance.json"
    if not (folder / "results" / "clients.tsv").is_file() or not path.is_file():
        raise SystemExit(
            f"--prepared {folder}: expected cohort/provenance.json (rvfedprs simulate --out "
            "DIR/cohort) and results/clients.tsv (the workflow)"
        )
    return int(json.loads(path.read_text())["seed"])


def _preset_text(simulator_path: Path | None) -> str:
    """The text of the scenario presets the simulate step will read."""
    return ((simulator_path or REPO) / "rvfedprs" / "simulate" / "scenarios.yaml").read_text()


def _env(first: Path | None = None) -> dict[str, str]:
    """One thread per process; ``first`` (a simulator checkout) ahead of this repository."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    paths = ([str(first)] if first else []) + [str(REPO), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


def build_cohort(cohort: Cohort, spec: dict, simulator_path: Path | None) -> Cohort:
    """Simulate and prepare one cohort (skipped when its prepared inputs exist)."""
    done = cohort.data / "clients.tsv"
    if done.is_file():
        return cohort
    t0 = time.time()
    cohort.folder.mkdir(parents=True, exist_ok=True)
    logs = cohort.folder / "logs"
    logs.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "rvfedprs.cli", "simulate", "--out", str(cohort.sim),
               "--seed", str(cohort.seed), "--no-progress"]  # fmt: skip
    if spec["presets"]:
        command += ["--scenario", cohort.scenario]
    else:
        from rvfedprs.config import deep_merge

        section = deep_merge(spec["simulate_base"], spec["scenarios"][cohort.scenario]["simulate"])
        path = cohort.folder / "simulate.yaml"
        path.write_text(yaml.safe_dump({"simulate": section}, sort_keys=True))
        command += ["--config", str(path)]
    if not (cohort.sim / "provenance.json").is_file():
        _call(command, logs / "simulate.log", _env(simulator_path))
    from rvfedprs.simulate.cohort import as_pipeline_cohort

    prepare = {
        "pipeline": {
            "cohort": as_pipeline_cohort(cohort.sim),
            "random_seed": cohort.seed,
        }
    }
    config = cohort.folder / "prepare.yaml"
    config.write_text(yaml.safe_dump(prepare, sort_keys=True))
    _call(
        [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--cores",
         "1", "--rerun-incomplete", "--configfile", str(config), "--directory", str(cohort.folder),
         "results/clients.tsv", "results/rare_variants.tsv", "results/logs/exclusions.tsv"],
        logs / "prepare.log",
        _env(),
    )  # fmt: skip
    log.info("cohort %s/%s ready (%.0f s)", cohort.scenario, cohort.name, time.time() - t0)
    return cohort


def _call(command: list[str], log_path: Path, env: dict[str, str]) -> None:
    # run from the log's folder: `python -m` puts the working directory first on sys.path
    with open(log_path, "w") as handle:
        code = subprocess.call(command, stdout=handle, stderr=subprocess.STDOUT, env=env,
                               cwd=log_path.parent)  # fmt: skip
    if code != 0:
        raise RuntimeError(f"{' '.join(command[:6])} ... failed ({code}); see {log_path}")


def drop_genotypes(cohort: Cohort) -> None:
    """Delete the bulky genotypes and intermediates once a cohort's runs are done."""
    for path in (cohort.sim / "genotypes", cohort.data / "prepare"):
        shutil.rmtree(path, ignore_errors=True)


# --- loading a cohort for the protocol ------------------------------------------------------------
class Loaded:
    """A prepared cohort split three ways, with its truth (for evaluation and the oracle only)."""

    def __init__(
        self, cohort: Cohort, validation_fraction: float, master_seed: int, *, truth: bool = True
    ) -> None:
        from rvfedprs.evaluation import carrier_masks, load_truth
        from rvfedprs.evaluation.metrics import true_client_clusters
        from rvfedprs.federation.seeds import derive_seed
        from rvfedprs.genomic.data import load_federation
        from rvfedprs.protocol import three_way_split
        from rvfedprs.protocol.references import causal_columns

        self.cohort = cohort
        self.train_seed = derive_seed(master_seed, "train", cohort.scenario, cohort.name)
        federation = load_federation(cohort.data)
        self.data = three_way_split(federation, validation_fraction, random_seed=self.train_seed)
        self.data_key = cohort.folder.name
        if not truth:  # tuning: nothing here may read the truth
            return
        truth = load_truth(cohort.sim / "truth" / "causal_variants.tsv", cohort.sim / "samples.tsv")
        samples = truth.samples
        group_column = "architecture" if "architecture" in samples.columns else "cluster"
        # carriers of a causal rare variant of their own (architecture) group
        grouped = type(truth)(truth.causal, samples.assign(cluster=samples[group_column]))
        self.carriers = carrier_masks(self.data.test, federation.variant_keys, grouped)
        self.causal_columns = causal_columns(truth.causal, federation.variant_keys)
        # effects differ by group where a causal variant has a row per group
        self.group_specific = bool(truth.causal["variant_key"].duplicated().any())
        self.sample_groups = dict(zip(samples["sample_id"].astype(str),
                                      samples[group_column].astype(str), strict=True))  # fmt: skip
        self.client_groups = true_client_clusters(samples.assign(cluster=samples[group_column]))


def _base_config(method: str | None = None, cohort: Cohort | None = None,
                 window_bp: int = 0) -> dict[str, Any]:  # fmt: skip
    """Every method's base configuration; the GLMs' adds their rare features.

    A GLM's rare features are the top-k variants by score test on the training split (k and,
    for FedCE-GLM, the per-cluster ranking tuned; :mod:`rvfedprs.strategies.top_variants`),
    with the burdens of ``cohort``'s own gene regions (``regions/genes.tsv``, shipped with the
    ``gene_burden`` cohorts: public information, not the truth) where present, else of fixed
    windows of ``window_bp`` when > 0. FedGLM and FedCE-GLM read the same features.
    """
    from rvfedprs.config import validate_config

    config: dict[str, Any] = {"train": {"progress": False, "keep_checkpoints": 1}}
    if method in GLMS and cohort is not None:
        genes = cohort.sim / "regions" / "genes.tsv"
        regions = str(genes) if genes.is_file() else None
        config["train"]["data"] = str(cohort.data)
        # both GLMs read the same features: the top-k variants (k tuned; FedCE-GLM ranks them
        # per cluster), and the burdens of the cohort's genes (or of windows, when asked)
        burdens = regions is not None or window_bp > 0
        config["fedglm"] = {"features": "burden+top_k" if burdens else "top_k", "top_k": 10}
        if burdens:
            config["burden"] = {"regions": regions, "window_bp": int(window_bp or 1_000_000)}
    return validate_config(config)


#: The round budget of a GLM's run: its whole penalty path, each λ to Newton convergence.
GLM_ROUNDS = 300


def _max_rounds(args, method: str) -> int:
    """A GLM runs its whole penalty path (it stops when done); the networks ``--max-rounds``."""
    return max(args.max_rounds, GLM_ROUNDS) if method in GLMS else args.max_rounds


def _patience(args, method: str) -> int | None:
    """GLMs converge and stop on their own: no early stopping."""
    return None if method in GLMS else args.patience


def _init_worker() -> None:
    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")


# --- stage 2: tuning on the tuning cohort -------------------------------------------------------
def tune_task(args, spec, scenario: str, method: str) -> dict[str, Any]:
    """Tune ``method`` on the scenario's tuning cohort; returns its chosen configuration."""
    from rvfedprs.protocol import tune

    cohort = cohort_of(args, spec, scenario, "tune", 0)
    loaded = Loaded(cohort, args.validation_fraction, args.seed, truth=False)
    tuned = tune(
        loaded.data, method, out=args.out / "work" / "tuning" / scenario,
        base_config=_base_config(method, cohort, args.glm_window_bp),
        data_key=loaded.data_key, max_rounds=_max_rounds(args, method),
        patience=_patience(args, method), random_seed=loaded.train_seed, budget=args.budget,
        grid_seed=args.seed, refit=False, criterion=args.criterion,
    )  # fmt: skip
    return {"scenario": scenario, "method": method, "configuration": tuned.chosen.configuration,
            "validation_auc": tuned.chosen.validation_auc}  # fmt: skip


# --- stage 3: inference cohorts -----------------------------------------------------------
def cohort_task(args, spec, scenario: str, index: int, chosen: dict[str, dict]) -> Path:
    """Every method on one inference cohort: early stopping on validation, test once."""
    from rvfedprs.protocol import TUNED_AS, tune
    from rvfedprs.protocol.outcomes import outcome_table, predictions_frame
    from rvfedprs.protocol.references import prs_only_scores

    cohort = cohort_of(args, spec, scenario, "c", index)
    build_cohort(cohort, spec, args.simulator_path)
    out = args.out / "work" / "runs" / scenario / cohort.name
    loaded = Loaded(cohort, args.validation_fraction, args.seed)
    data = loaded.data
    frames, validation = [], []

    def record(folder: Path, method: str, scores, extra: dict[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        frame = predictions_frame(scores, data.test, sample_clusters=loaded.sample_groups,
                                  carriers=loaded.carriers)  # fmt: skip
        (folder / "validation.json").write_text(json.dumps({"method": method, **extra}) + "\n")
        frame.to_parquet(folder / "predictions.parquet", index=False)  # last: marks it done

    def collect(folder: Path, method: str) -> None:
        frame = pd.read_parquet(folder / "predictions.parquet")
        frames.append(outcome_table(frame).assign(method=method))
        validation.append({**json.loads((folder / "validation.json").read_text()),
                           "predictions": str(folder.relative_to(args.out))})  # fmt: skip

    picked: dict[str, dict] = {}  # each method's configuration in this cohort
    for method in _methods(args):
        source = TUNED_AS.get(method, method)
        if args.tune_per_cohort:
            options = ({"candidates": [picked[source]]} if method in TUNED_AS
                       else {"budget": args.budget, "grid_seed": args.seed})  # fmt: skip
        else:
            options = {"candidates": [chosen[source]]}
        common = {
            "out": out, "base_config": _base_config(method, cohort, args.glm_window_bp),
            "data_key": loaded.data_key, "max_rounds": _max_rounds(args, method),
            "criterion": args.criterion,
            "patience": _patience(args, method),
            "random_seed": loaded.train_seed,
            "groups": loaded.client_groups if method == "fedce_oracle" else None, **options,
        }  # fmt: skip
        tuned = tune(data, method, refit=False, **common)
        trial = tuned.chosen
        picked[method] = trial.configuration
        # the test predictions live in the chosen trial's folder: a changed choice has its own
        folder = out / method / trial.key
        if not (folder / "predictions.parquet").is_file():
            if tuned.fitted is None:
                tuned = tune(data, method, **common)
            record(folder, method, tuned.fitted.predict(data.test), {
                "validation_auc": trial.validation_auc,
                "validation_log_loss": trial.validation_log_loss, "criterion": trial.criterion,
                "selection_score": trial.score, "best_round": trial.best_round,
                "rounds_run": trial.rounds_run, "wall_s": trial.wall_s, "cpu_s": trial.cpu_s,
                "configuration": trial.configuration, "clusters": trial.clusters})  # fmt: skip
        collect(folder, method)
    references = ((FLOOR, lambda: (prs_only_scores(data.fit.train, data.test), {})),
                  (ORACLE, lambda: (_oracle(cohort, data), {})),
                  (CEILING, lambda: _ceiling(loaded)))  # fmt: skip
    for name, reference in references:
        if not (out / name / "predictions.parquet").is_file():
            scores, extra = reference()
            record(out / name, name, scores, extra)
        collect(out / name, name)
    table = pd.DataFrame(validation)
    for column in ("configuration", "clusters"):
        table[column] = table.get(column, "")
        table[column] = [json.dumps(v) if isinstance(v, dict) else "" for v in table[column]]
    table.assign(scenario=scenario, cohort=cohort.name).to_csv(
        out / "validation.tsv", sep="\t", index=False
    )
    summary = out / "outcomes.tsv"
    table = pd.concat(frames, ignore_index=True).assign(scenario=scenario, cohort=cohort.name)
    table.to_csv(summary, sep="\t", index=False)
    if not args.keep_genotypes and args.prepared is None:
        drop_genotypes(cohort)
    return summary


def _oracle(cohort: Cohort, data) -> dict:
    from rvfedprs.protocol.references import genetic_values, oracle_scores

    ids = [s for c in sorted(data.test) for s in data.test[c].sample_ids]
    values = genetic_values(cohort.sim / "truth", ids,
                            genotypes=cohort.sim / "genotypes" / "cohort")  # fmt: skip
    return oracle_scores(data.test, dict(zip(ids, values, strict=True)))


def _ceiling(loaded: Loaded) -> tuple[dict, dict]:
    """The learnable ceiling's test scores and chosen C (per true group where effects differ)."""
    from rvfedprs.protocol.references import ceiling_scores

    data = loaded.data
    groups = loaded.client_groups if loaded.group_specific else None
    scores, c = ceiling_scores(data.fit.train, data.validation, data.test,
                               loaded.causal_columns, groups)  # fmt: skip
    return scores, {
        "configuration": {
            "C": c,
            "per_group": groups is not None,
            "causal_columns": len(loaded.causal_columns),
        }
    }


def _methods(args) -> list[str]:
    every = list(TUNED) + list(ABLATIONS)
    if not args.methods:
        return every
    chosen = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(chosen) - set(every))
    if unknown:
        raise SystemExit(f"methods {unknown} unknown; choose from {every}")
    if set(chosen) & set(ABLATIONS):
        chosen.append("fedce")  # the ablations take FedCE's configuration
    return [m for m in every if m in chosen]


# --- stage 4: analysis ----------------------------------------------------------------------------
def analyse(args, scenarios: dict[str, dict]) -> list[Path]:
    """Tables and the forest plot from every finished cohort."""
    from rvfedprs.protocol.analysis import (
        BEST_BASELINE,
        best_baselines,
        forest_plot,
        paired_deltas,
    )

    runs = args.out / "work" / "runs"
    outcomes = [pd.read_csv(p, sep="\t") for p in sorted(runs.glob("*/*/outcomes.tsv"))]
    if not outcomes:
        log.warning("no finished cohort to analyse")
        return []
    outcomes = pd.concat(outcomes, ignore_index=True)
    outcomes = outcomes[outcomes["scenario"].isin(scenarios)]
    tables = [pd.read_csv(p, sep="\t") for p in sorted(runs.glob("*/*/validation.tsv"))]
    validation = pd.concat(tables, ignore_index=True)
    # the score every choice was made on, higher is better (records before --criterion: AUC)
    validation["selection_score"] = validation.get(
        "selection_score", validation["validation_auc"]
    ).fillna(validation["validation_auc"])
    summary = args.out / "summary"
    summary.mkdir(parents=True, exist_ok=True)
    outcomes.to_csv(summary / "outcomes.tsv", sep="\t", index=False)
    validation.to_csv(summary / "validation.tsv", sep="\t", index=False)
    tuning = [pd.read_csv(p, sep="\t").assign(scenario=p.parts[-3])
              for p in sorted((args.out / "work" / "tuning").glob("*/*/tuning.tsv"))]  # fmt: skip
    if tuning:  # every configuration's validation score, on each scenario's tuning cohort
        tuning = pd.concat(tuning, ignore_index=True)
        tuning[tuning["scenario"].isin(scenarios)].to_csv(summary / "tuning.tsv", sep="\t",
                                                          index=False)  # fmt: skip
    methods = set(outcomes["method"])
    best = best_baselines(validation, [m for m in BASELINES if m in methods],
                          score="selection_score")  # fmt: skip
    best.to_csv(summary / "best_baseline.tsv", sep="\t", index=False)
    # federation's cost: per cohort, the best federated and the best pooled method (validation)
    outcomes, picks = _best_of(outcomes, validation, methods)
    picks.to_csv(summary / "best_methods.tsv", sep="\t", index=False)
    methods = set(outcomes["method"])
    comparisons = [("fedce", "fedavg"), ("fedce", BEST_BASELINE), ("fedce", "centralized"),
                   ("fedce", "logistic")] + [(a, "fedce") for a in ABLATIONS] + \
                  [("fedavg_masked", "fedavg"), ("fedavgm", "fedavg")] + \
                  [("fedce_glm", r) for r in ("fedavg", "fedglm", "fedce", "centralized",
                                              "logistic")] + \
                  [("fedglm", "fedavg"), ("fedglm", "logistic"),
                   ("best_federated", "best_pooled")]  # fmt: skip
    pairs = [(m, r) for m, r in comparisons
             if m in methods and (r in methods or r == BEST_BASELINE)]  # fmt: skip
    if not pairs:
        raise SystemExit(
            f"the analysis compares methods, but the finished cohorts hold only {sorted(methods)}: "
            f"run a pair of {sorted({m for pair in comparisons for m in pair} - {BEST_BASELINE})}"
        )
    deltas = pd.concat([paired_deltas(outcomes, m, r, best=best) for m, r in pairs],
                       ignore_index=True)  # fmt: skip
    deltas["interval"] = "t over cohorts"
    single = [s for s, k in outcomes.groupby("scenario")["cohort"].nunique().items() if k == 1]
    if single:
        deltas = _bootstrap_single_cohorts(args, deltas, validation, best, single, comparisons)
    deltas.to_csv(summary / "deltas.tsv", sep="\t", index=False)
    order = list(scenarios)
    labels = {s: f"{s}\n({scenarios[s]['expectation']})" for s in order}
    title = "RV-FedPRS (FedCE) minus tuned baselines, paired within cohort, " + (
        "95% bootstrap CI over test samples"
        if set(single) >= set(scenarios)
        else "95% CI over cohorts"
    )
    if args.label:
        title = f"{args.label}: {title}"
    primary = deltas[(deltas["method"] == "fedce")
                     & deltas["reference"].isin(["fedavg", BEST_BASELINE])]  # fmt: skip
    paths = []
    if not primary.empty:
        paths.append(forest_plot(primary, summary / "forest.png", scenarios=order,
                                 labels=labels, title=title))  # fmt: skip
    glm = deltas[(deltas["method"] == "fedce_glm")
                 & deltas["reference"].isin(["fedavg", "fedglm", "logistic"])]  # fmt: skip
    if not glm.empty:
        title_glm = title.replace("RV-FedPRS (FedCE)", "FedCE-GLM (per-cluster rare effects)")
        paths.append(forest_plot(glm, summary / "forest_glm.png", scenarios=order,
                                 labels=labels, title=title_glm))  # fmt: skip
    paths += write_markdown(summary, outcomes, deltas, best, scenarios, args, validation, picks)
    return paths


def _best_of(outcomes: pd.DataFrame, validation: pd.DataFrame, methods: set[str]):
    """Outcomes with two pseudo-methods added: per cohort, the best federated method
    (``best_federated``, among :data:`FEDERATED`) and the best pooled one (``best_pooled``,
    among :data:`POOLED`), each chosen on the validation score; and the picks."""
    from rvfedprs.protocol.analysis import best_baselines

    frames, picks = [outcomes], []
    for name, pool in (("best_federated", FEDERATED), ("best_pooled", POOLED)):
        candidates = [m for m in pool if m in methods]
        if not candidates:
            continue
        chosen = best_baselines(validation, candidates, score="selection_score")
        picks.append(chosen.assign(role=name))
        pick = chosen[["scenario", "cohort", "method"]].rename(columns={"method": "picked"})
        rows = outcomes.merge(pick, on=["scenario", "cohort"])
        rows = rows[rows["method"] == rows["picked"]]
        frames.append(rows.drop(columns="picked").assign(method=name))
    table = pd.concat(picks, ignore_index=True) if picks else pd.DataFrame()
    return pd.concat(frames, ignore_index=True), table


def _bootstrap_single_cohorts(args, deltas, validation, best, scenarios, comparisons):
    """Replace the (undefined) t-intervals of one-cohort scenarios by paired bootstraps."""
    from rvfedprs.protocol.analysis import BEST_BASELINE, bootstrap_deltas

    rows = [deltas[~deltas["scenario"].isin(scenarios)]]
    for scenario in scenarios:
        chosen = validation[validation["scenario"] == scenario]
        paths = dict(zip(chosen["method"], chosen["predictions"], strict=True))
        frames = {
            m: pd.read_parquet(args.out / p / "predictions.parquet") for m, p in paths.items()
        }
        for method, reference in comparisons:
            name = reference
            if reference == BEST_BASELINE:
                pick = best.loc[best["scenario"] == scenario, "method"]
                name = pick.iloc[0] if len(pick) else None
            if method not in frames or name not in frames:
                continue
            part = bootstrap_deltas(frames, method, name, scenario=scenario,
                                    random_seed=args.seed)  # fmt: skip
            interval = "bootstrap over test samples (one cohort)"
            rows.append(part.assign(reference=reference, references=name, interval=interval))
    return pd.concat(rows, ignore_index=True)


def _mean_cell(values: list[float], digits: int = 3) -> str:
    from rvfedprs.evaluation.report.tables import mean_ci

    mean, half, k = mean_ci(values)
    if k == 0:
        return "–"
    return f"{mean:.{digits}f}" if k == 1 else f"{mean:.{digits}f} ± {half:.{digits}f}"


def _fmt(mean: float, low: float, high: float) -> str:
    if pd.isna(mean):
        return "–"
    if pd.isna(low):
        return f"{mean:+.3f}"
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


def write_markdown(summary, outcomes, deltas, best, scenarios, args, validation=None,
                   picks=None) -> list[Path]:  # fmt: skip
    """``summary.md``: the primary endpoint, per-cluster deltas, ablations, the GLMs,
    federation's cost, absolute AUCs and shares of the floor→oracle gap."""
    lines = [f"# Scenario map{' — ' + args.label if args.label else ''}", ""]
    n = outcomes.groupby("scenario")["cohort"].nunique()
    where = ("every inference cohort" if args.tune_per_cohort
             else "the cohort's own validation split" if args.prepared is not None
             else "one tuning cohort per scenario")  # fmt: skip
    score = ("pooled validation AUC" if args.criterion == "auc"
             else "pooled validation log-loss (lower is better)")  # fmt: skip
    lines += [f"Cohorts per scenario: {', '.join(f'{s} {n.get(s, 0)}' for s in scenarios)}. "
              f"Budget {args.budget} configurations per tuned method, ≤ {args.max_rounds} rounds, "
              f"patience {args.patience} (the GLMs: none, they run to Newton convergence), "
              f"validation fraction {args.validation_fraction}, tuned on {where}; early "
              f"stopping, best round and every choice on the {score}.", ""]  # fmt: skip
    if args.prepared is not None:
        lines += [f"One prepared cohort (`{args.prepared}`), tuned and evaluated on one "
                  "train/validation/test split: every interval below is a paired bootstrap "
                  "over its test samples (cases and controls resampled separately, 2,000 "
                  "resamples), which covers test-set sampling noise only, not cohort-to-cohort "
                  "variation; 'cohorts > 0' is 1/1 when Δ > 0.", ""]  # fmt: skip

    def table(frame: pd.DataFrame, title: str, note: str = "") -> None:
        lines.extend([f"## {title}", ""] + ([note, ""] if note else []))
        lines.append("| scenario | expectation | Δ carrier AUC [95% CI] | cohorts > 0 "
                     "| Δ AUC [95% CI] | cohorts > 0 |")  # fmt: skip
        lines.append("|---|---|---|---|---|---|")
        for s in scenarios:
            row = []
            for metric in ("carrier_auc", "auc"):
                part = frame[(frame["scenario"] == s) & (frame["metric"] == metric)]
                if part.empty:
                    row += ["–", "–"]
                    continue
                r = part.iloc[0]
                row += [_fmt(r.delta, r.ci_low, r.ci_high), f"{r.n_positive}/{r.n_cohorts}"]
            lines.append(f"| {s} | {scenarios[s]['expectation']} | " + " | ".join(row) + " |")
        lines.append("")

    pooled = deltas[deltas["subset"] == "pooled"]
    for method, reference, title, note in [
        ("fedce", "fedavg", "Primary endpoint: FedCE − tuned FedAvg (pooled over clusters)", ""),
        ("fedce", "best_baseline", "FedCE − best tuned federated baseline",
         "The baseline is chosen per cohort by validation AUC among "
         + ", ".join(BASELINES) + " (counts in deltas.tsv, column references)."),
        ("fedce", "centralized", "FedCE − centralised network (weight decay tuned)", ""),
        ("fedce", "logistic", "FedCE − L2 logistic regression on [PRS, covariates, rare "
         "dosages]", ""),
        ("fedavg_masked", "fedavg", "Ablation: count-normalised FedAvg − FedAvg",
         "Positive: FedAvg's shrunken step on private columns costs accuracy."),
        ("fedavgm", "fedavg", "Ablation: FedAvgM − FedAvg", ""),
        *[(a, "fedce", f"Ablation: {a} − FedCE", "") for a in ABLATIONS],
        ("fedce_glm", "fedavg", "FedCE-GLM (per-cluster rare effects) − tuned FedAvg", ""),
        ("fedce_glm", "fedglm", "FedCE-GLM − FedGLM (one global GLM)",
         "The same model class and features; FedGLM ranks the top k pooled with one coefficient "
         "each, FedCE-GLM ranks them per cluster and fits them per cluster, partially pooled."),
        ("fedce_glm", "fedce", "FedCE-GLM − FedCE", ""),
        ("fedce_glm", "centralized", "FedCE-GLM − centralised network", ""),
        ("fedce_glm", "logistic", "FedCE-GLM − L2 logistic regression (pooled dosages)", ""),
        ("fedglm", "fedavg", "FedGLM − tuned FedAvg", ""),
        ("fedglm", "logistic", "FedGLM (federated top k) − L2 logistic regression "
         "(pooled dosages)", ""),
        ("best_federated", "best_pooled", "Federation's cost: best federated − best pooled method",
         "Per cohort, the federated method (" + ", ".join(FEDERATED) + ") and the pooled one ("
         + ", ".join(POOLED) + ") with the best validation score; which ones in "
         "best_methods.tsv and below. Negative: what federation costs."),
    ]:  # fmt: skip
        part = pooled[(pooled["method"] == method) & (pooled["reference"] == reference)]
        if not part.empty:
            table(part, title, note)

    if picks is not None and not picks.empty:
        lines += ["Picked per cohort (role: method × cohorts): " + "; ".join(
            f"{s} — " + ", ".join(
                f"{role.replace('_', ' ')}: " + ", ".join(
                    f"{m}×{k}" for m, k in part["method"].value_counts().items())
                for role, part in picks[picks["scenario"] == s].groupby("role"))
            for s in scenarios if (picks["scenario"] == s).any()), ""]  # fmt: skip
    lines += _verdict_lines(pooled, scenarios)
    if validation is not None:
        lines += _glm_rounds(validation, scenarios)

    lines += _per_cluster_table(deltas, "fedce", "fedavg", "FedCE − tuned FedAvg")
    if not _per_cluster(deltas, "fedce_glm", "fedglm").empty:
        lines += _per_cluster_table(deltas, "fedce_glm", "fedglm", "FedCE-GLM − FedGLM")

    lines += _ceiling_share_lines(outcomes, scenarios)
    lines += ["## Absolute test AUCs, pooled (mean over cohorts ± 95% t half-width)", "",
              "Share of the learnable signal (the floor→oracle gap): (AUC − PRS-only floor)/"
              "(oracle − floor), per cohort, then averaged (± 95% t half-width). "
              "best_federated / best_pooled: per cohort the method chosen on validation.", "",
              "Share of the ceiling: the same against the learnable ceiling (L2 logistic on the "
              "floor's features plus the true causal rare dosages, per true group where effects "
              "differ, C on validation; an analysis reference, never a choice).", "",
              "| scenario | method | carrier AUC | AUC | share floor→oracle "
              "(carrier AUC / AUC) | share floor→ceiling (carrier AUC / AUC) |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    pooled_outcomes = outcomes[outcomes["subset"] == "pooled"]
    wide = pooled_outcomes.pivot_table(index=["scenario", "cohort", "metric"], columns="method",
                                       values="value")  # fmt: skip
    for s in scenarios:
        for method, part in pooled_outcomes[pooled_outcomes["scenario"] == s].groupby("method"):
            cells = []
            for metric in ("carrier_auc", "auc"):
                cells.append(_mean_cell(part.loc[part["metric"] == metric, "value"].tolist()))
            for top in (ORACLE, CEILING):
                for metric in ("carrier_auc", "auc"):
                    share = []
                    if s in wide.index.get_level_values(0) and {FLOOR, top} <= set(wide.columns):
                        w = wide.xs((s, metric), level=["scenario", "metric"])
                        share = ((w[method] - w[FLOOR]) / (w[top] - w[FLOOR])).tolist()
                    cells.append(_mean_cell(share, 2))
            lines.append(
                f"| {s} | {method} | {cells[0]} | {cells[1]} | {cells[2]} / {cells[3]} "
                f"| {cells[4]} / {cells[5]} |"
            )
    lines.append("")
    path = summary / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return [path]


def _ceiling_share_lines(outcomes: pd.DataFrame, scenarios, n_boot: int = 2000) -> list[str]:
    """Each method's share of the floor→ceiling carrier-AUC gap as a ratio of means over cohorts.

    share = mean(method − floor) / mean(ceiling − floor), with a 95% percentile interval from
    resampling cohorts (seeded); beside it ceiling − floor itself, to say whether the ceiling is
    resolvably above the floor at this size. More stable than the mean of per-cohort ratios,
    whose denominators come near 0.
    """
    pooled = outcomes[(outcomes["subset"] == "pooled") & (outcomes["metric"] == "carrier_auc")]
    wide = pooled.pivot_table(index=["scenario", "cohort"], columns="method", values="value")
    if not {FLOOR, CEILING} <= set(wide.columns):
        return []
    rng = np.random.default_rng(20261203)
    lines = ["## Share of the floor→ceiling carrier-AUC gap (ratio of means over cohorts)", "",
             "mean(method − floor) / mean(ceiling − floor), 95% interval from resampling "
             f"cohorts ({n_boot} draws); the ceiling's own gap over the floor first.", "",
             "| scenario | ceiling − floor [95% CI] | method | share [95% CI] |",
             "|---|---|---|---|"]  # fmt: skip
    for s in scenarios:
        if s not in wide.index.get_level_values(0):
            continue
        w = wide.xs(s, level="scenario").dropna(subset=[FLOOR, CEILING])
        if w.empty:
            continue
        gap = (w[CEILING] - w[FLOOR]).to_numpy()
        draws = rng.integers(0, len(w), size=(n_boot, len(w)))
        low, high = np.percentile(gap[draws].mean(axis=1), [2.5, 97.5])
        gap_cell = f"{gap.mean():+.3f} [{low:+.3f}, {high:+.3f}]"
        for method in [m for m in w.columns if m not in (FLOOR, CEILING, ORACLE)]:
            part = w[method].notna().to_numpy()
            gain = (w[method] - w[FLOOR]).to_numpy()[part]
            own = gap[part]
            if not part.any() or own.mean() == 0:
                continue
            boot = rng.integers(0, part.sum(), size=(n_boot, part.sum()))  # cohorts resampled
            ratios = gain[boot].mean(axis=1) / own[boot].mean(axis=1)
            low_r, high_r = np.percentile(ratios, [2.5, 97.5])
            lines.append(f"| {s} | {gap_cell} | {method} | {gain.mean() / own.mean():.2f} "
                         f"[{low_r:.2f}, {high_r:.2f}] |")  # fmt: skip
    return lines + [""]


def _per_cluster(deltas: pd.DataFrame, method: str, reference: str) -> pd.DataFrame:
    """The per-cluster rows of ``method`` − ``reference`` in ``deltas``."""
    return deltas[(deltas["method"] == method) & (deltas["reference"] == reference)
                  & (deltas["subset"] != "pooled")]  # fmt: skip


def _per_cluster_table(deltas: pd.DataFrame, method: str, reference: str, title: str) -> list[str]:
    """A Markdown table of ``method`` − ``reference`` per scenario and cluster."""
    lines = [f"## Per cluster: {title}", "",
             "| scenario | cluster | Δ carrier AUC [95% CI] | Δ AUC [95% CI] |",
             "|---|---|---|---|"]  # fmt: skip
    per = _per_cluster(deltas, method, reference)
    for (s, subset), part in per.groupby(["scenario", "subset"], sort=False):
        cells = []
        for metric in ("carrier_auc", "auc"):
            r = part[part["metric"] == metric]
            cells.append(_fmt(*r[["delta", "ci_low", "ci_high"]].iloc[0]) if len(r) else "–")
        lines.append(f"| {s} | {subset.split('=', 1)[1]} | {cells[0]} | {cells[1]} |")
    return [*lines, ""]


def _verdict_lines(pooled: pd.DataFrame, scenarios) -> list[str]:
    """Per scenario: does FedCE-GLM beat every global method with an interval excluding 0?"""
    rows = pooled[(pooled["method"] == "fedce_glm") & pooled["reference"].isin(GLOBAL)]
    if rows.empty:
        return []
    lines = ["## Per-cluster rare effects vs every global method", "",
             "FedCE-GLM minus each global method (" + ", ".join(GLOBAL) + "), pooled over "
             "clusters; 'beats all' when every interval lies above 0 (sign_conflict is where "
             "it should).", "",
             "| scenario | metric | " + " | ".join(f"− {r}" for r in GLOBAL)
             + " | beats all |", "|---|---|" + "---|" * (len(GLOBAL) + 1)]  # fmt: skip
    for s in scenarios:
        for metric in ("carrier_auc", "auc"):
            part = rows[(rows["scenario"] == s) & (rows["metric"] == metric)]
            if part.empty:
                continue
            cells, wins = [], []
            for reference in GLOBAL:
                r = part[part["reference"] == reference]
                if r.empty:
                    cells.append("–")
                    continue
                r = r.iloc[0]
                cells.append(_fmt(r.delta, r.ci_low, r.ci_high))
                wins.append(bool(r.ci_low > 0))
            verdict = ("yes" if wins and all(wins) and len(wins) == len(GLOBAL)
                       else "no" if wins else "–")  # fmt: skip
            if wins and len(wins) < len(GLOBAL) and all(wins):
                verdict = f"yes against the {len(wins)} run"
            lines.append(f"| {s} | {metric.replace('_', ' ')} | " + " | ".join(cells)
                         + f" | {verdict} |")  # fmt: skip
    return lines + [""]


def _glm_rounds(validation: pd.DataFrame, scenarios) -> list[str]:
    """How the GLMs' runs ended: Newton rounds run, and the round BestRound kept."""
    rows = validation[validation["method"].isin(GLMS)]
    if rows.empty or "rounds_run" not in rows:
        return []
    lines = ["## The GLMs' runs", "",
             "Rounds run (a run fits its whole penalty path, every λ to Newton convergence, and "
             "stops) and the round kept (BestRound: the best validation score among the floor, "
             "round 0, and the converged fits every round serves). 'kept the floor' counts "
             "cohorts where no converged fit beat the floor on validation.", "",
             "| scenario | method | rounds run (median, range) | round kept (median, range) "
             "| kept the floor |", "|---|---|---|---|---|"]  # fmt: skip
    for s in scenarios:
        for method in GLMS:
            part = rows[(rows["scenario"] == s) & (rows["method"] == method)]
            if part.empty:
                continue
            run, kept = part["rounds_run"].astype(float), part["best_round"].astype(float)
            lines.append(
                f"| {s} | {method} | {run.median():.0f} ({run.min():.0f}–{run.max():.0f}) | "
                f"{kept.median():.0f} ({kept.min():.0f}–{kept.max():.0f}) | "
                f"{int((kept == 0).sum())}/{len(part)} |"
            )
    return lines + [""]


# --- main -----------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run the map; returns 0."""
    args = parse_args(argv)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    _init_worker()
    handler = logging.FileHandler(args.out / "progress.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger().addHandler(handler)
    scenarios, spec = load_scenarios(args.scenarios)
    if args.prepared is not None:
        args.prepared = args.prepared.resolve()
        _prepared_seed(args.prepared)
        if len(scenarios) != 1 or args.cohorts != 1 or args.tune_per_cohort:
            raise SystemExit("--prepared runs one scenario (--scenarios NAME, its architecture) "
                             "on one cohort (--cohorts 1), tuned once on its validation split "
                             "(no --tune-per-cohort)")  # fmt: skip
    if args.analyse_only:
        for path in analyse(args, scenarios):
            log.info("wrote %s", path)
        return 0
    _write_provenance(args, spec, scenarios)
    t0 = time.time()
    with ProcessPoolExecutor(args.jobs, initializer=_init_worker) as pool:
        chosen: dict[str, dict[str, dict]] = {s: {} for s in scenarios}
        if not args.tune_per_cohort:
            tuning = [cohort_of(args, spec, s, "tune", 0) for s in scenarios]
            list(pool.map(build_cohort, tuning, [spec] * len(tuning),
                          [args.simulator_path] * len(tuning)))  # fmt: skip
            tunable = [m for m in _methods(args) if m in TUNED]
            jobs = [(s, m) for s in scenarios for m in tunable]
            for result in pool.map(tune_task, [args] * len(jobs), [spec] * len(jobs),
                                   *zip(*jobs, strict=True)):  # fmt: skip
                chosen[result["scenario"]][result["method"]] = result["configuration"]
            (args.out / "work" / "chosen.json").write_text(json.dumps(chosen, indent=2) + "\n")
            log.info("tuning done (%.0f s)", time.time() - t0)
        # cohort-major: a map stopped early has about as many cohorts in every scenario
        jobs = [(s, i) for i in range(args.cohorts) for s in scenarios]
        futures = [pool.submit(cohort_task, args, spec, s, i, chosen[s]) for s, i in jobs]
        for (s, i), future in zip(jobs, futures, strict=True):
            future.result()
            log.info("cohort %s/c%02d done (%.0f s since start)", s, i, time.time() - t0)
    for path in analyse(args, scenarios):
        log.info("wrote %s", path)
    log.info("map done in %.0f s", time.time() - t0)
    return 0


def _write_provenance(args, spec, scenarios) -> None:
    from rvfedprs.provenance import write_provenance

    parameters = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    write_provenance(args.out, command="simulations/scenario_map/run.py",
                     parameters={"arguments": parameters, "scenarios_file": spec,
                                 "scenarios": list(scenarios)},
                     seed=args.seed, inputs=[SCENARIOS_FILE])  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
