"""The paper's Tables II–V from run folders: mean ± 95% CI over seeds, Markdown and CSV.

A run folder holds ``metrics.json`` (SPEC §11 keys; the protocol driver adds ``experiment`` and
``label``) and optionally ``mia.json`` (a list of rows from
:func:`rvfedprs.evaluation.mia.audit_model`, each with ``client``). :func:`load_runs` and
:func:`load_mia` collect them recursively; the ``table_*`` functions summarise one row per
model with a Student-t interval over seeds (per-seed values first averaged over clients).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from rvfedprs.evaluation.metrics import headline_gain_recovered
from rvfedprs.exceptions import InputDataError

__all__ = [
    "STRATEGY_LABELS",
    "mean_ci",
    "format_ci",
    "load_runs",
    "load_mia",
    "summarise",
    "headline",
    "table_ii",
    "table_iii",
    "table_iv",
    "table_v",
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


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per ``metrics.json`` under ``root`` (recursively).

    Columns: ``strategy``, ``seed``, ``experiment`` (default ``"main"``), ``label`` (default the
    strategy), every scalar metric, ``client_auc`` (dict) and ``run`` (the folder).

    Raises
    ------
    InputDataError
        When no metrics.json is found or one lacks ``strategy``/``seed``.
    """
    root = Path(root)
    paths = sorted(root.rglob("metrics.json"))
    if not paths:
        raise InputDataError(f"no metrics.json found under {root}")
    rows = []
    for path in paths:
        record = json.loads(path.read_text())
        missing = [k for k in ("strategy", "seed") if k not in record]
        if missing:
            raise InputDataError(f"{path} lacks keys {missing}")
        row: dict[str, Any] = {
            k: v for k, v in record.items() if not isinstance(v, (dict, list)) or k == "client_auc"
        }
        row.setdefault("experiment", "main")
        row.setdefault("label", record["strategy"])
        row["run"] = str(path.parent)
        rows.append(row)
    df = pd.DataFrame(rows)
    for column in df.columns:
        if column not in ("client_auc", "run", "strategy", "label", "experiment"):
            converted = pd.to_numeric(df[column], errors="coerce")
            if converted.notna().sum() == df[column].notna().sum():
                df[column] = converted
    return df


def load_mia(root: str | Path) -> pd.DataFrame:
    """Every ``mia.json`` row under ``root``, with the run's strategy/seed/experiment/label."""
    rows = []
    for path in sorted(Path(root).rglob("mia.json")):
        record = json.loads(path.read_text())
        for row in record["rows"]:
            rows.append(
                {
                    "strategy": record["strategy"],
                    "seed": record["seed"],
                    "experiment": record.get("experiment", "main"),
                    "label": record.get("label", record["strategy"]),
                    **row,
                }
            )
    return pd.DataFrame(rows)


def summarise(
    df: pd.DataFrame, columns: Sequence[str], *, by: str = "strategy", confidence: float = 0.95
) -> pd.DataFrame:
    """Per ``by`` value: ``<col>_mean``, ``<col>_ci`` (half-width) and ``n_seeds``.

    ``df`` has one row per seed (or several, averaged per seed first).
    """
    out = []
    for key, group in df.groupby(by, sort=False):
        per_seed = group.groupby("seed")[list(columns)].mean(numeric_only=True)
        row: dict[str, Any] = {by: key}
        for column in columns:
            mean, half, n = mean_ci(per_seed[column].tolist(), confidence)
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
    """Share of the centralised AUC gain over FedAvg that ``method`` recovers.

    Computed per seed (paired runs), then mean ± CI; also the ratio of the seed-mean AUCs.
    ``experiment`` picks the runs (``"selected"``: every model at its validation-chosen round).

    Returns
    -------
    dict
        ``share_mean``, ``share_ci``, ``n_seeds``, ``share_of_means``, per-seed ``shares``.
    """
    main = _main(runs, experiment)
    pivot = main.pivot_table(index="seed", columns="strategy", values="auc", aggfunc="mean")
    needed = {method, "fedavg", "centralized"}
    if not needed <= set(pivot.columns):
        return {"share_mean": float("nan"), "share_ci": float("nan"), "n_seeds": 0,
                "share_of_means": float("nan"), "shares": {}}  # fmt: skip
    pivot = pivot.dropna(subset=list(needed))
    shares = {
        int(s): headline_gain_recovered(r[method], r["fedavg"], r["centralized"])
        for s, r in pivot.iterrows()
    }
    mean, half, n = mean_ci(list(shares.values()), confidence)
    means = pivot.mean()
    return {
        "share_mean": mean,
        "share_ci": half,
        "n_seeds": n,
        "share_of_means": headline_gain_recovered(
            means[method], means["fedavg"], means["centralized"]
        ),
        "shares": shares,
    }


def table_ii(runs: pd.DataFrame) -> pd.DataFrame:
    """Table II: pooled AUC and AUPRC per model."""
    return _with_model(summarise(_main(runs), ["auc", "auprc"]))


def table_iii(runs: pd.DataFrame) -> pd.DataFrame:
    """Table III: AUC on carriers of their cluster's causal rare variants."""
    return _with_model(summarise(_main(runs), ["carrier_auc"]))


def table_iv(runs: pd.DataFrame) -> pd.DataFrame:
    """Table IV: mean and standard deviation of the per-client AUC."""
    return _with_model(summarise(_main(runs), ["client_auc_mean", "client_auc_std"]))


def table_selected(runs: pd.DataFrame) -> pd.DataFrame:
    """Models evaluated at the round chosen on held-out training samples (early stopping)."""
    selected = _main(runs, "selected")
    if selected.empty:
        return pd.DataFrame()
    columns = [c for c in ("auc", "auprc", "carrier_auc", "best_round") if c in selected]
    return _with_model(summarise(selected, columns))


MIA_METRICS = ("advantage", "accuracy_advantage", "auc", "tpr_at_0.01", "tpr_at_0.001")


def table_v(mia: pd.DataFrame) -> pd.DataFrame:
    """Table V: MIA metrics per model, attack and subset (clients averaged within a seed)."""
    if mia.empty:
        return pd.DataFrame()
    mia = _main(mia)
    if mia.empty:  # audits of the privacy / sensitivity runs only
        return pd.DataFrame()
    metrics = [m for m in MIA_METRICS if m in mia.columns]
    out = []
    for (attack, subset), group in mia.groupby(["attack", "subset"], sort=True):
        s = summarise(group, metrics)
        s.insert(1, "attack", attack)
        s.insert(2, "subset", subset)
        out.append(s)
    table = _with_model(pd.concat(out, ignore_index=True))
    return table.sort_values(["attack", "subset"], kind="stable").reset_index(drop=True)


def _markdown(df: pd.DataFrame, digits: int) -> str:
    columns, cells = [], []
    metric_names = [c[:-5] for c in df.columns if c.endswith("_mean")]
    plain = [c for c in df.columns if not c.endswith(("_mean", "_ci")) and c != "strategy"]
    columns = plain + metric_names
    for _, row in df.iterrows():
        line = [str(row[c]) for c in plain]
        line += [format_ci(float(row[f"{m}_mean"]), float(row[f"{m}_ci"]), digits)
                 for m in metric_names]  # fmt: skip
        cells.append(line)
    head = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    return "\n".join([head, rule] + ["| " + " | ".join(r) + " |" for r in cells])


def write_table(
    df: pd.DataFrame,
    out_dir: str | Path,
    name: str,
    *,
    title: str,
    note: str = "",
    digits: int = 3,
) -> tuple[Path, Path]:
    """Write ``name.md`` (formatted mean ± CI) and ``name.csv`` (numbers) in ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / f"{name}.csv", out_dir / f"{name}.md"
    df.to_csv(csv_path, index=False)
    body = _markdown(df, digits) if not df.empty else "_no runs_"
    text = f"## {title}\n\n{body}\n"
    if note:
        text += f"\n{note}\n"
    md_path.write_text(text)
    return md_path, csv_path
