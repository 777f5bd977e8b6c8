"""Which validation criterion should stop training and choose configurations? (issue 29.6)

The protocol (SPEC §12, :mod:`rvfedprs.protocol.tuning`) chooses a method's round (early
stopping) and its configuration on one pooled validation score. This study compares the
pooled validation AUC (the default) with the pooled validation log-loss on data that neither
choice sees:

1. on every scenario-map cohort (prepared by ``simulations/scenario_map/run.py``; the same
   train/validation split and training seed as the map), the validation split is cut in two
   halves A and B, stratified by phenotype per client and seeded; training is untouched and
   the test split is never read;
2. every configuration of every method (the map's grid, ``--budget`` each) is trained once for
   up to ``--rounds`` rounds without early stopping, keeping every round's validation
   probabilities (round 0: the starting models, the floor fit);
3. for each criterion, (configuration, round) is chosen on A as the protocol would — early
   stopping with ``--patience`` emulated on A's scores (none for the GLMs, which run to Newton
   convergence), then the configuration with the best score — and measured on B: AUC, carrier
   AUC (carriers of a causal rare variant of their own group: the truth, for scoring only),
   log-loss, and whether its AUC on B is below the PRS-only floor's; then B chooses and A
   measures. ``best_federated`` chooses among every method's candidates at once;
4. per cohort the two directions are averaged; criteria are compared by the paired difference
   (log-loss choice − AUC choice) with a 95% t-interval over cohorts per scenario and a
   bootstrap over cohorts pooled over scenarios. The split-half agreement of each criterion
   (Spearman correlation, over one trial's rounds, of the score on A with the score on B)
   says how noisy each is as a signal.

Layout of ``--out`` (a scratch folder; only ``--results`` is meant to be kept)::

    work/cohorts/<scenario>/<cohort>/      copies of the prepared cohorts (results/, truth)
    work/runs/<scenario>/<cohort>/halves.npz      labels, halves, carriers, the floor
    work/runs/<scenario>/<cohort>/<method>/<i>.npz  configuration i: every round's probabilities

and ``--results``: ``choices.tsv`` (every choice and its held-out metrics), ``deltas.tsv``,
``agreement.tsv``, ``summary.md``, ``deltas.png``.

Usage (from the repository root, PYTHONPATH=$PWD, after the map prepared its cohorts)::

    python simulations/stopping_rule/run.py --cohorts-from /tmp/map_full/work/cohorts \\
        --out /tmp/stopping_rule --results simulations/stopping_rule/results/2026-11-27
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[2]
CRITERIA = ("auc", "log_loss")
GLMS = ("fedglm", "fedce_glm")
BEST = "best_federated"
METRICS = ("auc", "carrier_auc", "log_loss", "below_floor")

log = logging.getLogger("stopping_rule")


def _map_module():
    """``simulations/scenario_map/run.py``: its cohorts, split and base configurations."""
    path = REPO / "simulations" / "scenario_map" / "run.py"
    spec = importlib.util.spec_from_file_location("scenario_map_run", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("scenario_map_run", module)
    spec.loader.exec_module(module)
    return module


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="scratch folder (cohorts, runs)")
    p.add_argument("--results", type=Path, required=True, help="where the summaries go")
    p.add_argument("--cohorts-from", type=Path, required=True,
                   help="the map's prepared cohorts (<DIR>/<scenario>/c<i>-<key>/), read only: "
                        "the ones needed are copied under --out")  # fmt: skip
    p.add_argument("--scenarios", default="portability,sign_conflict,shared_rho1")
    p.add_argument("--cohorts", type=int, default=5, help="inference cohorts per scenario")
    p.add_argument("--methods", default="fedavg,fedce,fedglm,fedce_glm")
    p.add_argument("--budget", type=int, default=3, help="configurations per method")
    p.add_argument("--rounds", type=int, default=30, help="rounds trained (no early stopping)")
    p.add_argument("--patience", type=int, default=5, help="early stopping emulated on a half")
    p.add_argument("--validation-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=20261123,
                   help="the map's master seed (its split and training seeds)")  # fmt: skip
    p.add_argument("--glm-window-bp", type=int, default=0)  # as the map's: top-k only
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--analyse-only", action="store_true")
    return p.parse_args(argv)


# --- stage 1: train every configuration once, keeping every round's validation probabilities --
def prepared_cohorts(source: Path, scenario: str, n: int) -> list[Path]:
    """The first ``n`` prepared inference cohorts of ``scenario`` under ``source``."""
    found = sorted(p for p in (source / scenario).glob("c[0-9][0-9]-*")
                   if (p / "results" / "clients.tsv").is_file())  # fmt: skip
    if len(found) < n:
        log.warning("%s: %d prepared cohorts, %d asked", scenario, len(found), n)
    return found[:n]


def copy_cohort(source: Path, folder: Path) -> Path:
    """Copy what the protocol and the scoring read (not the genotypes) to ``folder``."""
    if (folder / "results" / "clients.tsv").is_file():
        return folder
    skip = shutil.ignore_patterns("genotypes", "prepare", "logs")
    shutil.copytree(source / "results", folder / "results", ignore=skip, dirs_exist_ok=True)
    for part in ("truth", "regions"):
        if (source / "cohort" / part).is_dir():
            shutil.copytree(source / "cohort" / part, folder / "cohort" / part,
                            dirs_exist_ok=True)  # fmt: skip
    for name in ("samples.tsv", "provenance.json"):
        shutil.copy2(source / "cohort" / name, folder / "cohort" / name)
    return folder


def cohort_task(args, scenario: str, source: Path) -> Path:
    """Train every method's configurations on one cohort; write its ``.npz`` files."""
    from rvfedprs.evaluation import carrier_masks, load_truth
    from rvfedprs.evaluation.selection import split_validation
    from rvfedprs.federation.seeds import derive_seed
    from rvfedprs.protocol import configurations, run_trial
    from rvfedprs.protocol.references import prs_only_scores

    smap = _map_module()
    folder = copy_cohort(source, args.out / "work" / "cohorts" / scenario / source.name)
    index = int(source.name[1:3])
    seed = int(json.loads((folder / "cohort" / "provenance.json").read_text())["seed"])
    cohort = smap.Cohort(scenario, "c", index, seed, folder)
    loaded = smap.Loaded(cohort, args.validation_fraction, args.seed, truth=False)
    data = loaded.data
    clients = sorted(data.validation)
    out = args.out / "work" / "runs" / scenario / cohort.name
    out.mkdir(parents=True, exist_ok=True)
    halves = out / "halves.npz"
    if not halves.is_file():
        # half A: a stratified, seeded half of every client's validation samples
        as_train = replace(data.fit, train=data.validation)
        _, half_a = split_validation(as_train, 0.5, random_seed=derive_seed(
            args.seed, "stopping_rule", scenario, cohort.name))  # fmt: skip
        in_a = np.concatenate([np.isin(data.validation[c].sample_ids, half_a[c].sample_ids)
                               for c in clients])  # fmt: skip
        truth = load_truth(folder / "cohort" / "truth" / "causal_variants.tsv",
                           folder / "cohort" / "samples.tsv")  # fmt: skip
        samples = truth.samples
        group = "architecture" if "architecture" in samples.columns else "cluster"
        grouped = type(truth)(truth.causal, samples.assign(cluster=samples[group]))
        carriers = carrier_masks(data.validation, data.fit.variant_keys, grouped)
        floor = prs_only_scores(data.fit.train, data.validation)
        np.savez_compressed(
            halves,
            y=np.concatenate([data.validation[c].y for c in clients]).astype(np.int8),
            in_a=in_a,
            carrier=np.concatenate([carriers[c] for c in clients]),
            floor=np.concatenate([floor[c] for c in clients]).astype(np.float64),
        )
    for method in args.methods.split(","):
        base = smap._base_config(method, cohort, args.glm_window_bp)
        for i, configuration in enumerate(configurations(method, args.budget,
                                                         random_seed=args.seed)):  # fmt: skip
            path = out / method / f"{i}.npz"
            if path.is_file():
                continue
            t0 = time.time()
            trial, fitted = run_trial(
                data, method, configuration, base_config=base, max_rounds=args.rounds,
                patience=None, random_seed=loaded.train_seed, keep_predictions=True,
            )  # fmt: skip
            rounds = sorted(fitted.validation_predictions)
            p = np.stack([np.concatenate([fitted.validation_predictions[r][c] for c in clients])
                          for r in rounds])  # fmt: skip
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(path, p=p.astype(np.float64), rounds=np.asarray(rounds),
                                configuration=json.dumps(configuration))  # fmt: skip
            log.info("%s/%s %s %s: %d rounds (%.0f s)", scenario, cohort.name, method,
                     configuration, trial.rounds_run, time.time() - t0)  # fmt: skip
    return out


# --- stage 2: choose on one half, measure on the other ------------------------------------------
def _scores(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """AUC and log-loss of probabilities ``p`` (rows: candidates) against ``y``."""
    from scipy.stats import rankdata

    p = np.atleast_2d(p)
    ranks = rankdata(p, axis=1)
    n1 = int(y.sum())
    n0 = y.size - n1
    auc = (ranks[:, y == 1].sum(axis=1) - n1 * (n1 + 1) / 2) / (n1 * n0)
    q = np.clip(p, 1e-12, 1 - 1e-12)
    loss = -np.mean(y * np.log(q) + (1 - y) * np.log1p(-q), axis=1)
    return {"auc": auc, "log_loss": loss}


def _higher_is_better(criterion: str, values: np.ndarray) -> np.ndarray:
    return -values if criterion == "log_loss" else values


def early_stopped_round(scores: np.ndarray, patience: int | None) -> int:
    """Index of the round :class:`~rvfedprs.protocol.tuning.EarlyStopping` keeps.

    ``scores`` (higher is better) are round 0 (the start) then rounds 1, 2, ...; the run stops
    once the best round is ``patience`` rounds old (None: never), the earliest best kept.
    """
    best = 0
    for r in range(1, scores.size):
        if scores[r] > scores[best]:
            best = r
        if patience is not None and r - best >= patience:
            break
    return best


def _measure(y, carrier, floor, p) -> dict[str, float]:
    from rvfedprs.evaluation.metrics import roc_auc

    scores = _scores(y, p)
    auc = float(scores["auc"][0])
    floor_auc = roc_auc(y, floor)
    return {
        "auc": auc,
        "carrier_auc": roc_auc(y[carrier], p[carrier]),
        "log_loss": float(scores["log_loss"][0]),
        "floor_auc": floor_auc,
        # round 0 is the floor fit: equal AUCs up to rounding are not below it
        "below_floor": float(auc < floor_auc - 1e-9),
    }


def _trained(run: Path, method: str) -> list[Path]:
    """``method``'s configuration files in a cohort's run folder, in grid order."""
    return sorted((run / method).glob("*.npz"), key=lambda p: int(p.stem))


def cohort_choices(
    args, run: Path, scenario: str, budgets: dict[str, int]
) -> tuple[list[dict], list[dict]]:
    """Every criterion's choice on each half, measured on the other; split-half agreement.

    A method takes part only with all of its ``budgets[method]`` configurations trained.
    """
    from scipy.stats import spearmanr

    halves = np.load(run / "halves.npz")
    y, in_a, carrier, floor = (halves[k] for k in ("y", "in_a", "carrier", "floor"))
    candidates = []  # (method, configuration index, configuration, rounds × samples)
    for method in args.methods.split(","):
        paths = _trained(run, method)
        if len(paths) < budgets.get(method, 0) or not paths:
            continue
        for path in paths:
            z = np.load(path)
            candidates.append((method, int(path.stem), str(z["configuration"]), z["p"]))
    rows, agreement = [], []
    for selected_on, chooser in (("A", in_a), ("B", ~in_a)):
        held = ~chooser
        # per candidate trial: every round's score on the choosing half
        scored = [_scores(y[chooser], p[:, chooser]) for *_, p in candidates]
        for criterion in CRITERIA:
            picks = []  # per trial: (method, i, configuration, round, score)
            for (method, i, configuration, _), s in zip(candidates, scored, strict=True):
                values = _higher_is_better(criterion, s[criterion])
                patience = None if method in GLMS else args.patience
                r = early_stopped_round(values, patience)
                picks.append((method, i, configuration, r, values[r]))
            trained = {pick[0] for pick in picks}
            # the best of the methods only where every method was trained on this cohort
            complete = trained == set(args.methods.split(","))
            for name in [*args.methods.split(","), *([BEST] if complete else [])]:
                pool = [k for k, pick in enumerate(picks) if name in (BEST, pick[0])]
                if not pool:
                    continue
                k = max(pool, key=lambda j: picks[j][4])  # the earliest of equal scores
                method, i, configuration, r, _ = picks[k]
                p = candidates[k][3][r]
                rows.append({
                    "scenario": scenario, "cohort": run.name, "method": name,
                    "selected_on": selected_on, "criterion": criterion, "picked": method,
                    "configuration": configuration, "round": r,
                    "rounds_run": candidates[k][3].shape[0] - 1, "n_candidates": len(pool),
                    **_measure(y[held], carrier[held], floor[held], p[held]),
                })  # fmt: skip
    for method, _, configuration, p in candidates:
        if p.shape[0] < 3:
            continue
        a, b = _scores(y[in_a], p[:, in_a]), _scores(y[~in_a], p[:, ~in_a])
        agreement.append({"scenario": scenario, "cohort": run.name, "method": method,
                          "configuration": configuration, "rounds": p.shape[0] - 1,
                          **{f"spearman_{c}": float(spearmanr(a[c], b[c]).statistic)
                             for c in CRITERIA}})  # fmt: skip
    return rows, agreement


# --- stage 3: compare the criteria -----------------------------------------------------------
def paired_deltas(choices: pd.DataFrame, random_seed: int) -> pd.DataFrame:
    """Log-loss choice − AUC choice per metric: per cohort (both directions averaged), then a
    t-interval over cohorts per scenario × method, and a bootstrap over every cohort pooled."""
    from rvfedprs.evaluation.report.tables import mean_ci

    per_cohort = (choices.groupby(["scenario", "cohort", "method", "criterion"])[list(METRICS)]
                  .mean().reset_index())  # fmt: skip
    wide = per_cohort.pivot_table(index=["scenario", "cohort", "method"], columns="criterion",
                                  values=list(METRICS))  # fmt: skip
    rows = []
    rng = np.random.default_rng(random_seed)
    for metric in METRICS:
        delta = (wide[(metric, "log_loss")] - wide[(metric, "auc")]).rename("delta").reset_index()
        level = {**{s: part for s, part in delta.groupby("scenario")}, "all": delta}
        for scenario, part in level.items():
            for method, cells in part.groupby("method"):
                values = cells["delta"].to_numpy()
                mean, half, n = mean_ci(values)
                low, high = mean - half, mean + half
                interval = "t over cohorts"
                if scenario == "all":  # cohorts of several scenarios: bootstrap over cohorts
                    finite = values[np.isfinite(values)]
                    if finite.size > 1:
                        boots = rng.choice(finite, size=(4000, finite.size)).mean(axis=1)
                        low, high = np.quantile(boots, [0.025, 0.975])
                    interval = "bootstrap over cohorts"
                rows.append({"scenario": scenario, "method": method, "metric": metric,
                             "delta": mean, "ci_low": low, "ci_high": high, "n_cohorts": n,
                             "n_positive": int((values > 0).sum()),
                             "n_negative": int((values < 0).sum()),
                             "interval": interval})  # fmt: skip
    return pd.DataFrame(rows)


def _fmt(row) -> str:
    if not np.isfinite(row.delta):
        return "–"
    if not np.isfinite(row.ci_low):
        return f"{row.delta:+.4f}"
    return f"{row.delta:+.4f} [{row.ci_low:+.4f}, {row.ci_high:+.4f}]"


def _budgets(choices: pd.DataFrame) -> str:
    """``method n`` for the most configurations a method had in any cohort."""
    counts = choices[choices["method"] != BEST].groupby("method", sort=False)["n_candidates"]
    return ", ".join(f"{m} {n}" for m, n in counts.max().items())


def write_summary(args, choices, deltas, agreement) -> Path:
    """``summary.md``: the deltas, how often each choice is below the floor, rounds chosen,
    and the split-half agreement of each criterion."""
    scenarios = [*args.scenarios.split(","), "all"]
    methods = [*args.methods.split(","), BEST]
    n = choices.groupby(["method", "scenario"], sort=False)["cohort"].nunique()
    cohorts = "; ".join(f"{m}: " + ", ".join(f"{s} {k}" for s, k in part.droplevel(0).items())
                        for m, part in n.groupby(level=0, sort=False))  # fmt: skip
    lines = ["# Stopping rule: validation log-loss vs validation AUC", "",
             f"Cohorts per method — {cohorts}. "
             f"Methods {', '.join(args.methods.split(','))} ({BEST}: the best of them on the "
             f"choosing half); configurations per method: {_budgets(choices)}; rounds "
             f"≤ {int(choices['rounds_run'].max())}, "
             f"early stopping emulated with patience {args.patience} (GLMs: none). Choices on "
             "one half of the validation split, measured on the other, both directions; "
             "Δ = (log-loss choice) − (AUC choice), per cohort averaged over the two directions; "
             "95% t-interval over cohorts per scenario, bootstrap over cohorts for 'all'. "
             "Positive Δ AUC / carrier AUC favours log-loss; negative Δ log-loss favours "
             "log-loss.", ""]  # fmt: skip
    for metric, title in (("auc", "Δ AUC on the held-out half"),
                          ("carrier_auc", "Δ carrier AUC on the held-out half"),
                          ("log_loss", "Δ log-loss on the held-out half"),
                          ("below_floor", "Δ share of choices below the floor (AUC on the "
                                          "held-out half < the PRS-only floor's)")):  # fmt: skip
        lines += [f"## {title}", "", "| method | " + " | ".join(scenarios) + " |",
                  "|---|" + "---|" * len(scenarios)]  # fmt: skip
        for method in methods:
            cells = []
            for s in scenarios:
                r = deltas[(deltas.scenario == s) & (deltas.method == method)
                           & (deltas.metric == metric)]  # fmt: skip
                cells.append(_fmt(r.iloc[0]) if len(r) else "–")
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Absolute values on the held-out half (mean over cohorts and directions)", "",
              "| scenario | method | criterion | AUC | carrier AUC | log-loss | below floor "
              "| round (median) |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    table = (choices.groupby(["scenario", "method", "criterion"], sort=False)
             .agg(auc=("auc", "mean"), carrier_auc=("carrier_auc", "mean"),
                  log_loss=("log_loss", "mean"), below=("below_floor", "sum"),
                  k=("below_floor", "size"), round=("round", "median")).reset_index())  # fmt: skip
    for r in table.itertuples():
        lines.append(f"| {r.scenario} | {r.method} | {r.criterion} | {r.auc:.4f} | "
                     f"{r.carrier_auc:.4f} | {r.log_loss:.4f} | {int(r.below)}/{r.k} | "
                     f"{r.round:.0f} |")  # fmt: skip
    floor = choices.groupby("scenario")["floor_auc"].mean()
    lines += ["", "Floor (PRS-only) AUC on a half, mean: "
              + ", ".join(f"{s} {v:.4f}" for s, v in floor.items()) + ".", ""]  # fmt: skip
    lines += ["## Split-half agreement of each criterion", "",
              "Per trial (method × configuration × cohort), the Spearman correlation over its "
              "rounds between the score on half A and on half B: how well one half's ranking "
              "of rounds predicts the other's (1: no noise). Mean [min, max] over trials.", "",
              "| scenario | method | trials | AUC | log-loss |",
              "|---|---|---|---|---|"]  # fmt: skip
    for (s, method), part in agreement.groupby(["scenario", "method"], sort=False):
        cells = [f"{part[f'spearman_{c}'].mean():.2f} [{part[f'spearman_{c}'].min():.2f}, "
                 f"{part[f'spearman_{c}'].max():.2f}]" for c in CRITERIA]  # fmt: skip
        lines.append(f"| {s} | {method} | {len(part)} | {cells[0]} | {cells[1]} |")
    path = args.results / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def forest(args, deltas: pd.DataFrame) -> Path:
    """Δ AUC and Δ carrier AUC (log-loss choice − AUC choice) per scenario and method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = [*args.scenarios.split(","), "all"]
    methods = [*args.methods.split(","), BEST]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.35 * len(scenarios) * len(methods) + 1.5),
                             sharey=True)  # fmt: skip
    labels = [f"{s} · {m}" for s in scenarios for m in methods]
    for ax, metric in zip(axes, ("auc", "carrier_auc"), strict=True):
        for k, (s, m) in enumerate((s, m) for s in scenarios for m in methods):
            r = deltas[(deltas.scenario == s) & (deltas.method == m) & (deltas.metric == metric)]
            if r.empty or not np.isfinite(r.delta.iloc[0]):
                continue
            r = r.iloc[0]
            y = len(labels) - 1 - k
            ax.plot([r.ci_low, r.ci_high], [y, y], color="0.3")
            ax.plot(r.delta, y, "o", color="C3" if s == "all" else "C0")
        ax.axvline(0, color="0.6", lw=0.8, ls="--")
        ax.set_title(f"Δ {metric.replace('_', ' ')}: log-loss choice − AUC choice")
        ax.set_yticks(range(len(labels)), labels[::-1], fontsize=7)
    fig.tight_layout()
    path = args.results / "deltas.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def analyse(args) -> list[Path]:
    runs = args.out / "work" / "runs"
    folders = {s: sorted(p for p in (runs / s).glob("c[0-9][0-9]") if (p / "halves.npz").is_file())
               for s in args.scenarios.split(",")}  # fmt: skip
    # a method's budget: the most configurations it has in any cohort (a cohort stopped
    # mid-way through a method's configurations leaves that method out)
    budgets = {m: max((len(_trained(p, m)) for f in folders.values() for p in f), default=0)
               for m in args.methods.split(",")}  # fmt: skip
    rows, agreement = [], []
    for scenario, runs_of in folders.items():
        for run in runs_of:
            r, a = cohort_choices(args, run, scenario, budgets)
            rows += r
            agreement += a
    args.results.mkdir(parents=True, exist_ok=True)
    choices, agreement = pd.DataFrame(rows), pd.DataFrame(agreement)
    deltas = paired_deltas(choices, args.seed)
    paths = []
    for name, frame in (("choices", choices), ("deltas", deltas), ("agreement", agreement)):
        paths.append(args.results / f"{name}.tsv")
        frame.to_csv(paths[-1], sep="\t", index=False, float_format="%.6g")
    return [*paths, write_summary(args, choices, deltas, agreement), forest(args, deltas)]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out, args.results = args.out.resolve(), args.results.resolve()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")
    if not args.analyse_only:
        _write_provenance(args)
        found = {s: prepared_cohorts(args.cohorts_from, s, args.cohorts)
                 for s in args.scenarios.split(",")}  # fmt: skip
        # cohort-major: a study stopped early has about as many cohorts in every scenario
        jobs = [(s, found[s][i]) for i in range(args.cohorts) for s in found
                if i < len(found[s])]  # fmt: skip
        with ProcessPoolExecutor(args.jobs, initializer=_one_thread) as pool:
            futures = [pool.submit(cohort_task, args, s, c) for s, c in jobs]
            for future in futures:
                log.info("done %s", future.result())
    for path in analyse(args):
        log.info("wrote %s", path)
    return 0


def _write_provenance(args) -> None:
    """``--results/provenance.json``: the arguments, the cohorts used, the code's commit."""
    from rvfedprs.provenance import write_provenance

    args.results.mkdir(parents=True, exist_ok=True)
    parameters = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    cohorts = {s: [p.name for p in prepared_cohorts(args.cohorts_from, s, args.cohorts)]
               for s in args.scenarios.split(",")}  # fmt: skip
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip()  # fmt: skip
    write_provenance(args.results, command="simulations/stopping_rule/run.py",
                     parameters={"arguments": parameters, "cohorts": cohorts},
                     seed=args.seed, extra={"commit": commit})  # fmt: skip


def _one_thread() -> None:
    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")


if __name__ == "__main__":
    sys.exit(main())
