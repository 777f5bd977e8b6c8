"""The paper's Tables II–V and the headline: mean ± 95% CI over seeds, Markdown and CSV.

Every ``table_*`` function summarises one row per model (and attack, subset or cluster) with a
Student-t interval over seeds, per-seed values first averaged over clients. Inputs come from
:mod:`.runs`.

Beyond the paper:

- the headline share of the centralised gain is reported as undefined when the confidence
  interval of its denominator, AUC_Central − AUC_FedAvg, reaches 0 (:func:`headline`);
- the share of the learnable signal, (AUC − AUC_PRS-only)/(AUC_oracle − AUC_PRS-only)
  (:func:`table_signal`, per cluster in :func:`table_clusters`, with calibration);
- Table IV's between-client spread with the sampling noise of each client's AUC removed
  (:func:`table_iv`);
- Table V with the advantage ``max (TPR − FPR)``, and TPR at low FPR pooled over clients and seeds,
  "not resolvable" where the pooled non-members are too few (:func:`table_v`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from rvfedprs.evaluation.attacks.mia import RESOLUTION_FACTOR
from rvfedprs.evaluation.metrics import between_client_sd, headline_gain_recovered, signal_share

__all__ = [
    "STRATEGY_LABELS",
    "MIA_METRICS",
    "mean_ci",
    "format_ci",
    "summarise",
    "headline",
    "table_ii",
    "table_iii",
    "table_iv",
    "table_v",
    "table_signal",
    "table_clusters",
    "table_channels",
    "protected_channels",
    "table_selected",
    "write_table",
]

#: Display names, in table order.
STRATEGY_LABELS: dict[str, str] = {
    "centralized": "Centralised (upper bound)",
    "local": "Local only",
    "fedavg": "FedAvg",
    "fedprox": "FedProx",
    "fedadam": "FedAdam",
    "clustered": "Clustered FL",
    "fedce": "RV-FedPRS (FedCE)",
}
#: Per-audit metrics averaged over clients and seeds in Table V.
MIA_METRICS = ("advantage", "accuracy_advantage", "auc")


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, int]:
    """Mean and half-width of the Student-t confidence interval, ignoring NaN.

    Returns
    -------
    (mean, half_width, n)
        ``half_width`` is NaN with fewer than 2 finite values; ``mean`` is NaN with none.
    """
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return float("nan"), float("nan"), 0
    if n == 1:
        return float(x[0]), float("nan"), 1
    half = stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n)
    return float(x.mean()), float(half), n


def format_ci(mean: float, half: float, digits: int = 3) -> str:
    """``"0.712 ± 0.013"``; ``"0.712"`` without an interval, ``"—"`` without a value."""
    if not math.isfinite(mean):
        return "—"
    if not math.isfinite(half):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {half:.{digits}f}"


def summarise(
    df: pd.DataFrame,
    columns: Sequence[str],
    *,
    by: str | Sequence[str] = "strategy",
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Per ``by`` value(s): ``<col>_mean``, ``<col>_ci`` (half-width) and ``n_seeds``.

    ``df`` has one row per seed (or several, averaged per seed first); a column it lacks
    gives NaN.
    """
    keys = [by] if isinstance(by, str) else list(by)
    out = []
    for key, group in df.groupby(keys, sort=False):
        present = [c for c in columns if c in group]
        per_seed = group.groupby("seed")[present].mean(numeric_only=True)
        row: dict[str, Any] = dict(zip(keys, key, strict=True))
        for column in columns:
            values = per_seed[column].tolist() if column in per_seed else []
            mean, half, _ = mean_ci(values, confidence)
            row[f"{column}_mean"], row[f"{column}_ci"] = mean, half
        row["n_seeds"] = int(per_seed.shape[0])
        out.append(row)
    return pd.DataFrame(out)


def _ordered(df: pd.DataFrame, by: str = "strategy") -> pd.DataFrame:
    order = {name: i for i, name in enumerate(STRATEGY_LABELS)}
    return (
        df.assign(_o=df[by].map(lambda s: order.get(s, len(order))))
        .sort_values(["_o", by], kind="stable")
        .drop(columns="_o")
    )


def _main(runs: pd.DataFrame, experiment: str = "main") -> pd.DataFrame:
    return runs[runs["experiment"] == experiment] if "experiment" in runs else runs


def _with_model(summary: pd.DataFrame) -> pd.DataFrame:
    if summary.empty:  # e.g. a folder with sensitivity runs only
        return summary
    summary = _ordered(summary)
    summary.insert(0, "model", summary["strategy"].map(lambda s: STRATEGY_LABELS.get(s, s)))
    return summary.reset_index(drop=True)


def headline(
    runs: pd.DataFrame, method: str = "fedce", confidence: float = 0.95, experiment: str = "main"
) -> dict:
    """Share of the centralised AUC gain over FedAvg that ``method`` recovers — when defined.

    Computed per seed (paired runs), then mean ± CI; also the ratio of the seed-mean AUCs.
    ``experiment`` picks the runs (``"selected"``: every model at its validation-chosen round).
    The share is *undefined* (NaN, with ``reason``) unless the ``confidence`` interval of its
    denominator, AUC_Central − AUC_FedAvg over seeds, lies above 0: a denominator that may be 0
    (or is negative: a centralised reference below FedAvg is a bug in the reference, design §12)
    turns any ratio into noise.

    Returns
    -------
    dict
        ``share_mean``, ``share_ci``, ``share_of_means``, ``n_seeds``, per-seed ``shares``,
        ``gain_mean``, ``gain_ci`` (the denominator), ``defined`` and ``reason`` (empty when
        defined).
    """
    main = _main(runs, experiment)
    pivot = main.pivot_table(index="seed", columns="strategy", values="auc", aggfunc="mean")
    needed = {method, "fedavg", "centralized"}
    nan = float("nan")
    out = {"share_mean": nan, "share_ci": nan, "n_seeds": 0, "share_of_means": nan,
           "shares": {}, "gain_mean": nan, "gain_ci": nan, "defined": False}  # fmt: skip
    if not needed <= set(pivot.columns):
        return {**out, "reason": f"needs runs of {sorted(needed)}"}
    pivot = pivot.dropna(subset=list(needed))
    shares = {
        int(s): headline_gain_recovered(r[method], r["fedavg"], r["centralized"])
        for s, r in pivot.iterrows()
    }
    gain_mean, gain_ci, n = mean_ci((pivot["centralized"] - pivot["fedavg"]).tolist(), confidence)
    out |= {"shares": shares, "n_seeds": n, "gain_mean": gain_mean, "gain_ci": gain_ci}
    if n < 2:
        return {**out, "reason": "fewer than 2 seeds: no interval for the denominator"}
    if gain_mean + gain_ci < 0:
        return {**out, "reason": "the centralised reference is below FedAvg over the whole "
                "interval (a bug in the reference, design §12)"}  # fmt: skip
    if gain_mean - gain_ci <= 0:
        return {**out, "reason": "the denominator's confidence interval reaches 0"}
    mean, half, _ = mean_ci(list(shares.values()), confidence)
    means = pivot.mean()
    return {
        **out,
        "share_mean": mean,
        "share_ci": half,
        "share_of_means": headline_gain_recovered(
            means[method], means["fedavg"], means["centralized"]
        ),
        "defined": True,
        "reason": "",
    }


def table_ii(runs: pd.DataFrame) -> pd.DataFrame:
    """Table II: pooled AUC and AUPRC per model."""
    return _with_model(summarise(_main(runs), ["auc", "auprc"]))


def table_iii(runs: pd.DataFrame) -> pd.DataFrame:
    """Table III: AUC on carriers of their cluster's causal rare variants."""
    return _with_model(summarise(_main(runs), ["carrier_auc"]))


def _corrected_spread(row: pd.Series) -> pd.Series:
    auc, se = row.get("client_auc"), row.get("client_auc_se")
    if not isinstance(auc, dict) or not isinstance(se, dict):
        return pd.Series({"client_auc_mean_se": np.nan, "client_auc_sd_corrected": np.nan})
    spread = between_client_sd(
        {c: np.nan if v is None else v for c, v in auc.items()},
        {c: np.nan if v is None else v for c, v in se.items()},
    )
    return pd.Series(
        {
            "client_auc_mean_se": spread["mean_se"],
            "client_auc_sd_corrected": spread["sd_corrected"],
        }  # fmt: skip
    )


def table_iv(runs: pd.DataFrame) -> pd.DataFrame:
    """Table IV: per-client AUC mean and sd, and the sd corrected for sampling noise.

    ``client_auc_std`` is the spread as observed (population sd over clients);
    ``client_auc_mean_se`` the root mean squared standard error of one client's AUC (DeLong,
    from ``client_auc_se``); ``client_auc_sd_corrected`` = √max(0, s² − mean SE²) with ``s²``
    the sample variance over clients (:func:`~rvfedprs.evaluation.metrics.between_client_sd`),
    NaN for runs without standard errors.
    """
    main = _main(runs)
    if main.empty:
        return pd.DataFrame()
    main = pd.concat([main, main.apply(_corrected_spread, axis=1)], axis=1)
    columns = ["client_auc_mean", "client_auc_std", "client_auc_mean_se",
               "client_auc_sd_corrected"]  # fmt: skip
    return _with_model(summarise(main, columns))


def _with_signal_share(runs: pd.DataFrame) -> pd.DataFrame:
    out = runs.copy()
    for prefix in ("", "carrier_"):
        columns = [f"{prefix}auc", f"{prefix}prs_only_auc", f"{prefix}oracle_auc"]
        if all(c in out for c in columns):
            out[f"{prefix}signal_share"] = [
                signal_share(a, f, c)
                for a, f, c in zip(*(out[c].astype(float) for c in columns), strict=True)
            ]
    return out


_SIGNAL_COLUMNS = (
    "auc",
    "prs_only_auc",
    "oracle_auc",
    "signal_share",
    "carrier_auc",
    "carrier_prs_only_auc",
    "carrier_oracle_auc",
    "carrier_signal_share",
)


def table_signal(runs: pd.DataFrame) -> pd.DataFrame:
    """Share of the learnable signal captured, pooled and on carriers.

    Per run ``(AUC − AUC_PRS-only)/(AUC_oracle − AUC_PRS-only)`` from the ``metrics.json`` keys
    ``prs_only_auc`` and ``oracle_auc`` (and their ``carrier_`` versions), then mean ± CI.
    Empty when the runs lack those keys.
    """
    main = _with_signal_share(_main(runs))
    if "signal_share" not in main:
        return pd.DataFrame()
    return _with_model(summarise(main, [c for c in _SIGNAL_COLUMNS if c in main]))


_CLUSTER_COLUMNS = ("auc", "carrier_auc", "prs_only_auc", "oracle_auc", "signal_share",
                    "carrier_signal_share", "calibration_slope", "calibration_intercept",
                    "ece")  # fmt: skip


def table_clusters(runs: pd.DataFrame) -> pd.DataFrame:
    """Per true cluster: AUC, carrier AUC, share of the signal and calibration.

    From ``cluster_metrics`` of each run (:func:`rvfedprs.evaluation.cluster_metrics`); empty
    when no run has it.
    """
    main = _main(runs)
    if "cluster_metrics" not in main:
        return pd.DataFrame()
    long = [
        {"strategy": r.strategy, "seed": r.seed, "cluster": str(k), **v}
        for r in main.itertuples()
        if isinstance(r.cluster_metrics, dict)
        for k, v in r.cluster_metrics.items()
    ]
    if not long:
        return pd.DataFrame()
    df = _with_signal_share(pd.DataFrame(long))
    for column in df.columns:
        if column not in ("strategy", "cluster"):
            df[column] = pd.to_numeric(df[column], errors="coerce")
    table = summarise(df, [c for c in _CLUSTER_COLUMNS if c in df], by=["strategy", "cluster"])
    table = _with_model(table)
    return table.sort_values(["cluster"], kind="stable").reset_index(drop=True)


def table_channels(channels: pd.DataFrame, *, confidence: float = 0.95) -> pd.DataFrame:
    """What the server infers of carried variants, per model (run label), view and channel.

    ``channels`` holds :func:`~.runs.load_channels` rows; clients are averaged within a seed,
    then mean ± CI over seeds of ``tpr``, ``fpr``, ``advantage`` and ``auc``.
    """
    if channels.empty:
        return pd.DataFrame()
    order = {c: i for i, c in enumerate(("update", "bloom", "update&bloom", "update|bloom"))}
    table = summarise(
        channels,
        ["tpr", "fpr", "advantage", "auc"],
        by=["strategy", "label", "seen_by", "channel", "hashing"],
        confidence=confidence,
    )
    table = table.assign(_c=table["channel"].map(order)).sort_values(["seen_by", "_c"])
    return _with_model(table.drop(columns="_c"))


def protected_channels(hashing: str, secure_aggregation: bool, epsilon: float) -> str:
    """What a privacy setting protects, channel by channel (the privacy table's ``channels``).

    Parameters
    ----------
    hashing : str
        ``plain`` or ``keyed`` Bloom-filter hashing.
    secure_aggregation : bool
        Whether the server receives only secure sums of the updates.
    epsilon : float
        Each client's cumulative DP-SGD ε (inf: no DP).

    Returns
    -------
    str
        ``"updates: …; filters: …; model: …"``.
    """
    dp = np.isfinite(epsilon)
    updates = "sums of ≥ min_clients only" if secure_aggregation else "each client's, in clear"
    if dp:
        updates += f", DP ε≈{epsilon:.3g}"
    filters = "keyed (outside ε)" if hashing == "keyed" else "plain, server-testable"
    if dp and hashing != "keyed":
        filters = "plain, server-testable (outside ε)"
    model = f"DP ε≈{epsilon:.3g}" if dp else "unprotected"
    return f"updates: {updates}; filters: {filters}; model: {model}"


def table_selected(runs: pd.DataFrame) -> pd.DataFrame:
    """Models evaluated at the round chosen on held-out training samples (early stopping)."""
    selected = _main(runs, "selected")
    if selected.empty:
        return pd.DataFrame()
    columns = [c for c in ("auc", "auprc", "carrier_auc", "best_round") if c in selected]
    return _with_model(summarise(selected, columns))


def _resolved(value: float, n_nonmembers: float, level: float, digits: int) -> str:
    if n_nonmembers * level < RESOLUTION_FACTOR * (1 - 1e-9):
        return (
            f"not resolvable ({int(n_nonmembers):,} non-members < {RESOLUTION_FACTOR / level:,.0f})"
        )
    return "—" if not np.isfinite(value) else f"{value:.{digits}f}"


def table_v(
    rows: pd.DataFrame,
    pooled: pd.DataFrame | None = None,
    *,
    fpr_levels: Sequence[float] = (0.01, 0.001),
    confidence: float = 0.95,
    digits: int = 3,
) -> pd.DataFrame:
    """Table V: membership inference per model, attack, subset and cluster.

    Parameters
    ----------
    rows : DataFrame
        Per-audit rows (``strategy``, ``seed``, ``client``, ``attack``, ``subset``, optional
        ``cluster`` and :data:`MIA_METRICS`): averaged over clients within a seed, then
        mean ± CI over seeds.
    pooled : DataFrame, optional
        :func:`~rvfedprs.evaluation.attacks.pool_audits` rows with ``strategy``: scores pooled
        over clients and seeds; adds ``pooled_advantage``, ``pooled_auc``,
        ``pooled_nonmembers`` and ``tpr_at_<level>`` (numbers, NaN when not resolvable) with a
        display column ``TPR@<level>`` ("not resolvable" where the pooled non-members are fewer
        than 10/level).
    fpr_levels, confidence, digits

    Returns
    -------
    DataFrame
    """
    if rows.empty:
        return pd.DataFrame()
    rows = _main(rows)
    if rows.empty:  # audits of the privacy / sensitivity runs only
        return pd.DataFrame()
    cluster = rows["cluster"].fillna("all").astype(str) if "cluster" in rows else "all"
    rows = rows.assign(cluster=cluster)
    parts = [rows.assign(cluster="all")]
    if (rows["cluster"] != "all").any():
        parts.append(rows[rows["cluster"] != "all"])
    metrics = [m for m in MIA_METRICS if m in rows.columns]
    table = summarise(
        pd.concat(parts, ignore_index=True),
        metrics,
        by=["strategy", "attack", "subset", "cluster"],
        confidence=confidence,
    )
    if pooled is not None and not pooled.empty:
        keep = ["strategy", "attack", "subset", "cluster", "advantage", "auc", "n_nonmembers"]
        keep += [f"tpr_at_{lv:g}" for lv in fpr_levels]
        p = pooled[[c for c in keep if c in pooled]].rename(
            columns={
                "advantage": "pooled_advantage",
                "auc": "pooled_auc",
                "n_nonmembers": "pooled_nonmembers",
            }  # fmt: skip
        )
        p["cluster"] = p["cluster"].astype(str)
        table = table.merge(p, on=["strategy", "attack", "subset", "cluster"], how="left")
        for lv in fpr_levels:
            table[f"TPR@{lv:g} (pooled)"] = [
                _resolved(v, n, lv, digits) if np.isfinite(n) else "—"
                for v, n in zip(table[f"tpr_at_{lv:g}"], table["pooled_nonmembers"], strict=True)
            ]
    table = _with_model(table)
    order = {a: i for i, a in enumerate(("loss", "lira_offline", "lira_online", "rmia"))}
    table = table.assign(
        _a=table["attack"].map(lambda a: order.get(a, len(order))),
        _c=table["cluster"].map(lambda c: (c != "all", c)),
    )
    table = table.sort_values(["_a", "subset", "_c"], kind="stable")
    return table.drop(columns=["_a", "_c"]).reset_index(drop=True)


def _markdown(df: pd.DataFrame, digits: int) -> str:
    metric_names = [c[:-5] for c in df.columns if c.endswith("_mean")]
    plain = [c for c in df.columns if not c.endswith(("_mean", "_ci")) and c != "strategy"]
    columns = plain + metric_names
    cells = []
    for _, row in df.iterrows():
        line = [_cell(row[c], digits, count=c.startswith("n_") or "nonmembers" in c)
                for c in plain]  # fmt: skip
        line += [format_ci(float(row[f"{m}_mean"]), float(row[f"{m}_ci"]), digits)
                 for m in metric_names]  # fmt: skip
        cells.append(line)
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    return "\n".join([head, rule] + ["| " + " | ".join(r) + " |" for r in cells])


def _cell(value: Any, digits: int, *, count: bool = False) -> str:
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            return "—"
        return f"{int(value):,}" if count else f"{value:.{digits}f}"
    return str(value).replace("|", "\\|")  # a literal pipe would split the Markdown cell


def write_table(
    df: pd.DataFrame,
    out_dir: str | Path,
    name: str,
    *,
    title: str,
    note: str = "",
    digits: int = 3,
    shown: Sequence[str] | None = None,
) -> tuple[Path, Path]:
    """Write ``name.md`` (formatted mean ± CI) and ``name.csv`` (numbers) in ``out_dir``.

    ``shown`` limits the Markdown to these columns (``<metric>`` for a ``_mean``/``_ci`` pair);
    the CSV keeps every column.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    df.to_csv(csv_path, index=False)
    visible = df
    if shown is not None and not df.empty:
        pairs = {f"{m}_mean" for m in shown} | {f"{m}_ci" for m in shown}
        visible = df[[c for c in df.columns if c in shown or c in pairs]]
    body = _markdown(visible, digits) if not df.empty else "_no runs_"
    text = f"## {title}\n\n{body}\n"
    if note:
        text += f"\n{note}\n"
    md_path.write_text(text)
    return md_path, csv_path
