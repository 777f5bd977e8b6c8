"""The paper's report from run folders: Tables II–V, privacy–utility, channel audits, figures.

:func:`build_report` reads every run folder under a root (:mod:`.runs`) and writes Markdown + CSV
tables (mean ± CI over seeds, :mod:`.tables`) and PNG figures (:mod:`.plots`):

- ``table2_performance`` (with the headline and the share of the learnable signal in its note),
  ``table3_carriers``, ``table4_fairness`` (spread corrected for sampling noise),
  ``table5_mia`` (advantage ≥ 0; TPR at low FPR pooled over clients and seeds, "not
  resolvable" where too few non-members), ``signal_share``, ``clusters`` (per true cluster,
  with calibration), ``headline.json``, paired comparisons against FedAvg;
- ``privacy_utility``, ``bloom_attack``, ``channels`` (what the server infers of carried
  variants per channel), ``sensitivity`` — when such runs exist.

Where a run predates a metric, it is recomputed from the files the run left: MIA metrics from
``mia_scores.npz`` (so Table V uses ``max (TPR − FPR)`` even for older runs), each client's AUC
standard error and per-cluster calibration from ``predictions.parquet`` (clusters from its
``cluster`` column or the truth's samples sheet).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation import Truth, cluster_metrics
from rvfedprs.evaluation.attacks import pool_audits, score_rows
from rvfedprs.evaluation.paired import auc_standard_error, load_predictions, paired_table
from rvfedprs.evaluation.report import plots as P
from rvfedprs.evaluation.report import tables as T
from rvfedprs.evaluation.report.runs import (
    load_audits,
    load_bloom,
    load_channels,
    load_mia,
    load_runs,
)
from rvfedprs.exceptions import InputDataError

__all__ = ["build_report"]


def build_report(
    runs_dir: str | Path,
    out_dir: str | Path,
    config: Mapping[str, Any],
    *,
    truth: Truth | None = None,
) -> list[Path]:
    """Write every table (``.md`` + ``.csv``) and figure; returns the written paths.

    Parameters
    ----------
    runs_dir : str or Path
        Folder searched recursively for run folders (:mod:`.runs`).
    out_dir : str or Path
        Output folder.
    config : mapping
        Validated configuration (sections ``report`` and ``mia``).
    truth : Truth, optional
        True clusters: of clients (Jaccard heat map, per-cluster MIA rows) and of samples
        (per-cluster calibration of runs whose predictions lack a ``cluster`` column).

    Raises
    ------
    InputDataError
        When ``runs_dir`` holds no ``metrics.json``.
    """
    runs_dir, out_dir = Path(runs_dir), Path(out_dir)
    section = config["report"]
    level, digits, method = section["confidence"], section["digits"], section["method"]
    fpr_levels = tuple(config["mia"]["fpr_levels"])
    runs = _complete_from_predictions(load_runs(runs_dir), truth)
    audits = load_audits(runs_dir)
    mia_rows, pooled, stale = _mia_tables(runs_dir, audits, truth, fpr_levels)
    runs = _refresh_loss_advantage(runs, mia_rows)
    written: list[Path] = []

    head = T.headline(runs, method, level)
    signal = T.table_signal(runs)
    note = _headline_note(head, method) + " " + _signal_note(signal, method, digits)
    table5 = T.table_v(mia_rows, pooled, fpr_levels=fpr_levels, confidence=level, digits=digits)
    for df, name, title, extra in (
        (T.table_ii(runs), "table2_performance", "Table II — pooled AUC and AUPRC", note),
        (T.table_iii(runs), "table3_carriers", "Table III — AUC on causal rare-variant carriers",
         ""),
        (T.table_iv(runs), "table4_fairness", "Table IV — per-client AUC (mean, sd)",
         _TABLE4_NOTE),
    ):  # fmt: skip
        written += T.write_table(df, out_dir, name, title=title, note=extra, digits=digits)
    written += T.write_table(
        table5, out_dir, "table5_mia", title="Table V — membership inference (balanced sets)",
        note=_table5_note(fpr_levels, stale), digits=digits, shown=_table5_columns(fpr_levels),
    )  # fmt: skip
    if not signal.empty:
        written += T.write_table(
            signal, out_dir, "signal_share", title="Share of the learnable signal",
            note=_SIGNAL_NOTE, digits=digits)  # fmt: skip
    clusters = T.table_clusters(runs)
    if not clusters.empty:
        written += T.write_table(
            clusters, out_dir, "clusters",
            title="Per true cluster: AUC, share of the signal, calibration",
            note=_CLUSTERS_NOTE, digits=digits)  # fmt: skip
    written += _selected(runs, runs_dir, out_dir, head, method, level, digits)
    (out_dir / "headline.json").write_text(json.dumps(head, indent=2, default=float) + "\n")
    written.append(out_dir / "headline.json")
    written += _paired_tables(runs_dir, out_dir, method, level, digits)
    privacy_table = _privacy_table(runs, method, level)
    if not privacy_table.empty:
        written += T.write_table(privacy_table, out_dir, "privacy_utility",
                                 title=f"Privacy–utility ({method}: filters, secure "
                                 "aggregation, DP-SGD; ε cumulative)",
                                 note=_PRIVACY_NOTE, digits=digits)  # fmt: skip
    written += _bloom_tables(runs_dir, out_dir, level, digits)
    written += _sensitivity_tables(runs, out_dir, method, level, digits)
    if section["plots"]:
        written += _plots(runs, audits, out_dir / "figures", privacy_table, truth)
    return written


# ---- completing older runs ------------------------------------------------------------------


def _sample_clusters(predictions: pd.DataFrame, truth: Truth | None) -> np.ndarray | None:
    if "cluster" in predictions:
        return predictions["cluster"].to_numpy()
    if truth is None:
        return None
    return truth.sample_clusters(predictions["sample_id"].astype(str).tolist())


def _complete_from_predictions(runs: pd.DataFrame, truth: Truth | None) -> pd.DataFrame:
    """Fill ``client_auc_se`` and ``cluster_metrics`` from ``predictions.parquet`` where absent."""
    runs = runs.copy()
    for column in ("client_auc_se", "cluster_metrics"):
        if column not in runs:
            runs[column] = None
    for i, r in runs.iterrows():
        path = Path(r["run"]) / "predictions.parquet"
        has_se = isinstance(r["client_auc_se"], dict)
        has_clusters = isinstance(r["cluster_metrics"], dict)
        if (has_se and has_clusters) or not path.is_file():
            continue
        predictions = pd.read_parquet(path)
        if not has_se:
            runs.at[i, "client_auc_se"] = {
                str(c): _se(g["y"].to_numpy(), g["p"].to_numpy())
                for c, g in predictions.groupby("client")
            }
        labels = None if has_clusters else _sample_clusters(predictions, truth)
        if labels is not None:
            carriers = predictions["carrier"].to_numpy(bool) if "carrier" in predictions else None
            runs.at[i, "cluster_metrics"] = cluster_metrics(
                labels, predictions["y"].to_numpy(), predictions["p"].to_numpy(), carriers=carriers
            )
    return runs


def _se(y: np.ndarray, p: np.ndarray) -> float:
    return auc_standard_error(y, p) if 0 < y.sum() < y.size else float("nan")


# ---- membership inference -------------------------------------------------------------------


def _client_clusters(audit: Mapping[str, Any], truth: Truth | None) -> dict[str, str] | None:
    if audit.get("clusters"):
        return {str(c): str(k) for c, k in audit["clusters"].items()}
    return truth.client_clusters() if truth is not None else None


def _mia_tables(
    runs_dir: Path, audits: list[dict[str, Any]], truth: Truth | None, fpr_levels: Sequence[float]
) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Per-client MIA rows (recomputed from scores where saved), pooled rows, stale runs."""
    recomputed, pooled = [], []
    for audit in audits:
        clusters = _client_clusters(audit, truth) or {}
        fields = {k: audit[k] for k in ("strategy", "seed", "experiment", "label", "run")}
        for client, scores in audit["scores"].items():
            for row in score_rows(scores, fpr_levels=fpr_levels):
                cluster = clusters.get(client, "all")
                recomputed.append({**fields, "client": client, "cluster": cluster, **row})
    main = [a for a in audits if a["experiment"] == "main"]
    for strategy in sorted({a["strategy"] for a in main}):
        chosen = [a for a in main if a["strategy"] == strategy]
        clusters = _client_clusters(chosen[0], truth)
        rows = pool_audits([a["scores"] for a in chosen], clusters=clusters, fpr_levels=fpr_levels)
        pooled += [{"strategy": strategy, **row} for row in rows]
    saved = load_mia(runs_dir)
    stale = 0
    if not saved.empty:
        saved = saved[~saved["run"].isin({a["run"] for a in audits})]
        stale = int(saved.loc[~saved["corrected"].astype(bool), "run"].nunique())
    rows = pd.concat([pd.DataFrame(recomputed), saved], ignore_index=True)
    return rows, pd.DataFrame(pooled), stale


def _refresh_loss_advantage(runs: pd.DataFrame, mia_rows: pd.DataFrame) -> pd.DataFrame:
    """``mia_loss_advantage`` of each audited run from its (recomputed) LOSS rows."""
    if mia_rows.empty or "run" not in mia_rows:
        return runs
    loss = mia_rows[(mia_rows["attack"] == "loss") & (mia_rows["subset"] == "general")]
    by_run = loss.groupby("run")["advantage"].mean()
    runs = runs.copy()
    fresh = runs["run"].map(by_run)
    if "mia_loss_advantage" in runs:
        runs["mia_loss_advantage"] = fresh.fillna(runs["mia_loss_advantage"])
    elif fresh.notna().any():
        runs["mia_loss_advantage"] = fresh
    return runs


def _table5_columns(fpr_levels: Sequence[float]) -> list[str]:
    return ["model", "attack", "subset", "cluster", "n_seeds", *T.MIA_METRICS,
            "pooled_advantage", "pooled_auc", "pooled_nonmembers",
            *[f"TPR@{lv:g} (pooled)" for lv in fpr_levels]]  # fmt: skip


def _table5_note(fpr_levels: Sequence[float], stale: int) -> str:
    levels = ", ".join(f"{lv:g} (≥ {10 / lv:,.0f})" for lv in fpr_levels)
    note = (
        "advantage = max over thresholds of (TPR − FPR), ≥ 0 (an attack worse than chance has "
        "none); accuracy_advantage = accuracy − 0.5 of a threshold chosen on one half of the "
        "audit set and applied to the other; both averaged over audited clients within a seed, "
        "then mean ± CI over seeds. pooled_*: scores pooled over clients and seeds (one "
        "threshold for all). TPR at an FPR level is reported only when the pooled non-members "
        f"resolve it — levels (non-members needed): {levels}; otherwise 'not resolvable'. "
        "cluster: the audited clients' true cluster ('all' = every client). Attacks: loss "
        "(Yeom et al.), lira_offline (OUT reference models trained centrally on the other "
        "clients), lira_online (shadow federations, IN/OUT; Carlini et al.), rmia (Zarifzadeh "
        "et al.)."
    )
    if stale:
        note += (
            f" {stale} audited run(s) kept no scores and predate the corrected definition: "
            "their advantage may be max |TPR − FPR|."
        )
    return note


# ---- notes ----------------------------------------------------------------------------------

_TABLE4_NOTE = (
    "client_auc_std: spread of the per-client AUCs as observed (population sd). A client's AUC "
    "on its test split has a sampling standard error (client_auc_mean_se: root mean squared "
    "DeLong SE), so clients with one true AUC still differ; client_auc_sd_corrected = "
    "√max(0, s² − mean SE²), s² the sample variance over clients, floored at 0 — the spread "
    "beyond sampling noise."
)
_SIGNAL_NOTE = (
    "signal_share = (AUC − AUC_PRS-only)/(AUC_oracle − AUC_PRS-only) per run, then mean ± CI: "
    "the floor ranks the test samples by their standardised PRS alone, the oracle by their true "
    "genetic value (simulator truth) — both on the same test split; carrier_*: on carriers of "
    "their cluster's causal rare variants."
)
_CLUSTERS_NOTE = (
    "Test samples grouped by their true cluster. calibration_slope: b of logit P(y) = a + "
    "b·logit p (1 ideal; < 1 over-confident); calibration_intercept: a with b = 1 "
    "(calibration-in-the-large; 0 ideal, > 0 risk under-estimated); ece: expected calibration "
    "error over 10 equal-frequency bins."
)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _headline_note(head: dict, method: str) -> str:
    ratio = f"(AUC_{method} − AUC_FedAvg)/(AUC_Central − AUC_FedAvg)"
    if head["defined"]:
        return (
            f"Headline: {method} recovers {_pct(head['share_mean'])} (95% CI ± "
            f"{100 * head['share_ci']:.0f} points, {head['n_seeds']} seeds; "
            f"{_pct(head['share_of_means'])} from the seed-mean AUCs) of the centralised AUC "
            f"gain over FedAvg, {ratio}. The paper reports 96%."
        )
    if not np.isfinite(head["gain_mean"]):
        return f"Headline not computable ({head['reason']})."
    gain = T.format_ci(head["gain_mean"], head["gain_ci"])
    return (
        f"Headline undefined: AUC_Central − AUC_FedAvg = {gain} over {head['n_seeds']} "
        f"seed(s) — {head['reason']} — so {ratio} has no meaning. The paper reports 96%."
    )


def _signal_note(signal: pd.DataFrame, method: str, digits: int) -> str:
    if signal.empty:
        return (
            "Share of the learnable signal not computable: the runs lack prs_only_auc / oracle_auc."
        )
    parts = [
        f"{r.model} {T.format_ci(r.signal_share_mean, r.signal_share_ci, digits)}"
        for r in signal.itertuples()
        if r.strategy in (method, "fedavg", "centralized")
    ]
    return (
        "Share of the learnable signal, (AUC − AUC_PRS-only)/(AUC_oracle − AUC_PRS-only): "
        + "; ".join(parts)
        + " (table signal_share)."
    )


# ---- other tables ---------------------------------------------------------------------------


def _selected(runs, runs_dir, out_dir, head, method, level, digits) -> list[Path]:
    selected = T.table_selected(runs)
    if selected.empty:
        return []
    head["selected"] = share = T.headline(runs, method, level, experiment="selected")
    fraction = float(runs.loc[runs["experiment"] == "selected", "validation_fraction"].iloc[0])
    note = (
        f"Each client's training split loses a stratified {fraction:.0%} (seeded per seed) that "
        "picks the round with the best pooled validation AUC; test metrics are that round's. "
        "On these runs: " + _headline_note(share, method)
    )
    written = T.write_table(
        selected, out_dir, "table2_selected_round",
        title="Models at the round chosen on validation data (early stopping)",
        note=note, digits=digits,
    )  # fmt: skip
    return [*written, *_paired_tables(runs_dir, out_dir, method, level, digits, "selected")]


def _privacy_table(runs: pd.DataFrame, method: str, level: float) -> pd.DataFrame:
    privacy = runs[runs["experiment"] == "privacy"].copy()
    if privacy.empty:
        return privacy
    if "plain" not in set(privacy["label"]):  # older drivers: the main runs are the plain row
        main = runs[(runs["experiment"] == "main") & (runs["strategy"] == method)].copy()
        main["label"], main["hashing"], main["epsilon"] = "plain", "plain", np.inf
        privacy = pd.concat([main, privacy], ignore_index=True)
    for column, default in (("hashing", "plain"), ("secure_aggregation", False),
                            ("epsilon", np.inf)):  # fmt: skip
        if column not in privacy:
            privacy[column] = default
        privacy[column] = privacy[column].fillna(default)
    privacy["epsilon"] = privacy["epsilon"].astype(float)
    privacy["secure_aggregation"] = privacy["secure_aggregation"].astype(bool)
    cols = [c for c in ("epsilon", "auc", "carrier_auc", "mia_loss_advantage",
                        "update_channel_tpr", "update_channel_fpr", "update_channel_advantage")
            if c in privacy]  # fmt: skip
    table = T.summarise(privacy, cols, by="label", confidence=level)
    first = privacy.groupby("label")[["hashing", "secure_aggregation"]].first()
    table.insert(1, "hashing", table["label"].map(first["hashing"]))
    table.insert(2, "secure_aggregation", table["label"].map(first["secure_aggregation"]))
    table.insert(3, "channels", [
        T.protected_channels(h, s, e) for h, s, e in
        zip(table["hashing"], table["secure_aggregation"], table["epsilon_mean"], strict=True)
    ])  # fmt: skip
    keys = {
        "_s": table["secure_aggregation"].astype(int),
        "_d": np.isfinite(table["epsilon_mean"]).astype(int),
        "_h": (table["hashing"] != "plain").astype(int),
        "_e": -table["epsilon_mean"],
    }
    ordered = table.assign(**keys).sort_values(list(keys))
    return ordered.drop(columns=list(keys)).reset_index(drop=True)


_PRIVACY_NOTE = (
    "ε: each client's cumulative DP-SGD ε (δ fixed; —: no DP). mia_loss_advantage: LOSS "
    "attack on every audited client's final model, max (TPR − FPR) ≥ 0, mean over clients. "
    "update_channel_tpr/fpr: the server's recovery of each client's carried rare variants from "
    "the first specialist layer of one more round as this setting's server receives it (each "
    "client's own update, or with secure aggregation only the cluster sums), mean over "
    "clients; update_channel_advantage: max over thresholds of (TPR − FPR) of the same score "
    "(0: the channel tells the server nothing). channels: what each setting protects — "
    "updates (in the clear, or only sums of at least secagg.min_clients clients), Bloom "
    "filters (plain: every known variant key can be tested; keyed: HMAC with the clients' "
    "secret; the filters are outside the DP ε) and the released models (covered by the DP "
    "ε, as post-processing). Mean ± CI over seeds."
)


def _bloom_tables(runs_dir: Path, out_dir: Path, level: float, digits: int) -> list[Path]:
    written: list[Path] = []
    bloom = load_bloom(runs_dir)
    if not bloom.empty:
        bt = T.summarise(bloom, ["tpr", "fpr", "advantage", "chance_rate", "carried_tpr",
                                 "carried_fpr"], by="hashing", confidence=level)  # fmt: skip
        written += T.write_table(bt, out_dir, "bloom_attack",
                                 title="Server membership test on Bloom filters",
                                 note="tpr/fpr against the reported influential set; carried_* "
                                 "against every variant the client carries.",
                                 digits=digits)  # fmt: skip
    channels = load_channels(runs_dir)
    if not channels.empty:
        ct = T.table_channels(channels, confidence=level)
        written += T.write_table(ct, out_dir, "channels",
                                 title="What the server infers of each client's carried variants",
                                 note=_CHANNELS_NOTE, digits=digits)  # fmt: skip
    return written


_CHANNELS_NOTE = (
    "Positives: the rare variants a client's training samples carry; tpr/fpr of the server's "
    "rule, advantage = max over thresholds of (TPR − FPR) of its score, averaged over clients, "
    "mean ± CI over seeds. seen_by: 'own updates' = the server received every client's own "
    "update, 'secure sums' = only n_k-weighted sums over the clients sent the same model "
    "(secure aggregation; the Bloom filters travel in the clear in both). channel: update "
    "(columns of rare.input.weight that moved beyond the data-free prediction), bloom (known "
    "variant keys tested against the client's filter; keyed hashing defeats it), "
    "update&bloom / update|bloom (both / either)."
)


def _sensitivity_tables(runs, out_dir, method, level, digits) -> list[Path]:
    sens = runs[runs["experiment"] == "sensitivity"] if "experiment" in runs else runs.iloc[:0]
    if sens.empty:
        return []
    cols = [c for c in ("auc", "carrier_auc", "ari") if c in sens]
    st = T.summarise(sens, cols, by="label", confidence=level)
    note = ("The rare-signal strength h2_rare needs a re-simulated cohort per value: "
            "simulations/rvfedprs_paper/h2_rare.py.")  # fmt: skip
    written = T.write_table(st, out_dir, "sensitivity", title=f"Sensitivity ({method})",
                            note=note, digits=digits)  # fmt: skip
    written = list(written)
    factors = sens["factor"] if "factor" in sens else sens["label"].str.split("=").str[0]
    for factor, group in sens.groupby(factors, sort=True):
        ft = T.summarise(group, cols, by="label", confidence=level)
        written += T.write_table(ft, out_dir / "sensitivity", str(factor),
                                 title=f"Sensitivity to {factor} ({method})",
                                 digits=digits)  # fmt: skip
    return written


def _paired_tables(
    runs_dir: Path, out_dir: Path, method: str, level: float, digits: int, experiment: str = "main"
):
    """AUC differences against FedAvg, paired by seed and test individual (DeLong, bootstrap)."""
    try:
        predictions = load_predictions(runs_dir, experiment)
    except InputDataError:
        return []
    if "fedavg" not in predictions or len(predictions) < 2:
        return []
    parts, skipped = [], []
    for subset in ("carrier", "all"):
        try:
            parts.append(paired_table(predictions, reference="fedavg", subset=subset,
                                      confidence=level))  # fmt: skip
        except InputDataError as exc:  # e.g. no carrier among the test cases
            skipped.append(str(exc))
    if not parts:
        return []
    table = pd.concat(parts, ignore_index=True)
    note = (
        "difference = mean over seeds of AUC(strategy) − AUC(FedAvg) on the same test "
        f"individuals; {100 * level:.0f}% interval from resampling the test cases and controls "
        "(2,000 resamples, every seed's predictions kept); p_not_greater = share of resamples "
        "with difference ≤ 0; DeLong's test per seed: largest p-value, and in how many seeds "
        f"the strategy is ahead. Carrier rows: Table III's subset. Method of interest: {method}."
        + "".join(f" Not compared: {reason}." for reason in skipped)
    )
    f = f"{{:.{digits}f}}".format
    shown = pd.DataFrame(
        {
            "model": table["strategy"],
            "subset": table["subset"],
            "n (cases)": [
                f"{n} ({c})" for n, c in zip(table["n_samples"], table["n_cases"], strict=True)
            ],
            "seeds": table["n_seeds"],
            "Δ AUC vs FedAvg [CI]": [
                f"{f(d)} [{f(lo)}, {f(hi)}]"
                for d, lo, hi in zip(
                    table["difference"], table["ci_low"], table["ci_high"], strict=True
                )
            ],
            "P(Δ ≤ 0)": table["p_not_greater"].map("{:.3f}".format),
            "DeLong p (max)": table["delong_p_max"].map("{:.2g}".format),
            "seeds ahead": table["seeds_better"],
        }
    )
    name = "paired_vs_fedavg" + ("" if experiment == "main" else f"_{experiment}")
    title = "Paired AUC differences against FedAvg" + (
        "" if experiment == "main" else f" ({experiment} runs)"
    )
    md, csv = T.write_table(shown, out_dir, name, title=title, note=note)
    table.to_csv(csv, index=False)  # the CSV keeps the numbers
    return [md, csv]


def _plots(runs, audits, out: Path, privacy_table, truth) -> list[Path]:
    paths: list[Path] = []
    if not privacy_table.empty:
        paths.append(_privacy_plot(privacy_table, out / "privacy_utility.png"))
    main = runs[runs["experiment"] == "main"]
    if main.empty:
        return paths
    seed = int(main["seed"].min())
    first = main[main["seed"] == seed]
    preds = {}
    for r in first.itertuples():
        f = Path(r.run) / "predictions.parquet"
        if f.is_file():
            d = pd.read_parquet(f)
            preds[r.strategy] = (d["y"].to_numpy(), d["p"].to_numpy())
    if preds:
        paths.append(P.plot_roc_curves(preds, out / "roc.png", title=f"Pooled ROC (seed {seed})"))
    paths.append(P.plot_client_auc(main, out / "client_auc.png"))
    for r in first.itertuples():
        f = Path(r.run) / "jaccard.npz"
        if r.strategy == "fedce" and f.is_file():
            z = np.load(f)
            clusters = truth.client_clusters() if truth is not None else None
            paths.append(P.plot_jaccard_heatmap(z["similarity"], list(z["clients"]),
                                                out / "jaccard.png",
                                                true_clusters=clusters))  # fmt: skip
    curves = _mia_curves([a for a in audits if a["experiment"] == "main"])
    if curves:
        paths.append(P.plot_mia_roc(curves, out / "mia_roc.png",
                                    title="MIA ROC (general population; clients and seeds "
                                    "pooled)"))  # fmt: skip
    return paths


def _privacy_plot(privacy_table: pd.DataFrame, path: Path) -> Path:
    """One series per (filters, secure aggregation), ε on the x axis."""
    t = privacy_table.rename(columns={"epsilon_mean": "epsilon"})
    if "mia_loss_advantage_mean" in t:
        t = t.rename(columns={"mia_loss_advantage_mean": "advantage_mean",
                              "mia_loss_advantage_ci": "advantage_ci"})  # fmt: skip
    pairs = zip(t["hashing"], t["secure_aggregation"], strict=True)
    t["series"] = [
        ("SecAgg, " if secure else "") + f"{hashing} filters" for hashing, secure in pairs
    ]
    return P.plot_privacy_utility(t, path)


def _mia_curves(audits: list[dict[str, Any]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(scores, is_member) per "strategy attack", general population, pooled."""
    parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for audit in audits:
        for scores in audit["scores"].values():
            general = np.asarray(scores["general"], bool)
            for attack in [k for k in scores if k not in ("is_member", "is_carrier", "general")]:
                parts.setdefault(f"{audit['strategy']} {attack}", []).append(
                    (scores[attack][general], np.asarray(scores["is_member"], bool)[general])
                )
    return {
        name: (np.concatenate([s for s, _ in p]), np.concatenate([m for _, m in p]))
        for name, p in sorted(parts.items())
    }
