"""Rule ``compare_strategies``: one table and one figure comparing the trained strategies."""

import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from rvfedprs.exceptions import InputDataError  # noqa: E402
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("compare_strategies")

COLUMNS = (
    "strategy",
    "auc",
    "auprc",
    "carrier_auc",
    "n_carriers",
    "client_auc_mean",
    "client_auc_std",
    "ari",
    "n_clusters",
    "wall_s",
)
REQUIRED = ("strategy", "auc", "auprc", "carrier_auc", "client_auc", "clusters", "ari")


def read_metrics(path: str | Path) -> dict:
    """A ``metrics.json`` written by ``rvfedprs train``/``evaluate``, checked for its keys."""
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputDataError(f"{path}: cannot read metrics ({exc})") from None
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        raise InputDataError(f"{path} lacks metrics {missing}")
    return record


def read_wall_time(path: str | Path) -> float:
    """Seconds of a Snakemake ``benchmark:`` file (its ``s`` column, first row)."""
    table = pd.read_csv(path, sep="\t")
    if "s" not in table.columns or table.empty:
        raise InputDataError(f"{path} is not a Snakemake benchmark file (no 's' column)")
    return float(table["s"].iloc[0])


def _number(value: object) -> float:
    return float("nan") if value is None else float(value)


def comparison_table(
    metrics: Sequence[dict], wall_s: Sequence[float] | None = None
) -> pd.DataFrame:
    """One row per strategy with the headline metrics (design §11).

    Parameters
    ----------
    metrics : sequence of dict
        Each strategy's ``metrics.json`` content.
    wall_s : sequence of float, optional
        Training wall time of each strategy (same order); NaN when not given.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`COLUMNS`; ``client_auc_mean``/``client_auc_std`` over the clients with a
        finite AUC (population standard deviation); ``n_clusters`` = distinct cluster labels.
    """
    if wall_s is not None and len(wall_s) != len(metrics):
        raise ValueError(f"{len(metrics)} metrics but {len(wall_s)} wall times")
    rows = []
    for i, record in enumerate(metrics):
        aucs = np.array([_number(v) for v in record["client_auc"].values()], dtype=np.float64)
        aucs = aucs[np.isfinite(aucs)]
        rows.append(
            {
                "strategy": record["strategy"],
                "auc": _number(record["auc"]),
                "auprc": _number(record["auprc"]),
                "carrier_auc": _number(record["carrier_auc"]),
                "n_carriers": record.get("n_carriers"),
                "client_auc_mean": float(aucs.mean()) if aucs.size else float("nan"),
                "client_auc_std": float(aucs.std()) if aucs.size else float("nan"),
                "ari": _number(record["ari"]),
                "n_clusters": len(set(map(str, record["clusters"].values()))),
                "wall_s": float("nan") if wall_s is None else float(wall_s[i]),
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _fmt(value: object, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(table: pd.DataFrame) -> str:
    """The comparison as a Markdown table (client AUC as mean ± std, wall time in seconds)."""
    header = (
        "| strategy | AUC | AUPRC | carrier AUC (n carriers) | client AUC mean ± std "
        "| ARI | clusters | wall time (s) |"
    )
    lines = [header, "|" + "---|" * 8]
    for row in table.itertuples(index=False):
        lines.append(
            f"| {row.strategy} | {_fmt(row.auc)} | {_fmt(row.auprc)} "
            f"| {_fmt(row.carrier_auc)} ({_fmt(row.n_carriers)}) "
            f"| {_fmt(row.client_auc_mean)} ± {_fmt(row.client_auc_std)} "
            f"| {_fmt(row.ari, 2)} | {row.n_clusters} | {_fmt(row.wall_s, 0)} |"
        )
    return "\n".join(lines) + "\n"


def client_auc_figure(metrics: Sequence[dict], out: str | Path) -> Path:
    """Grouped bars: each client's test AUC under each strategy (PNG)."""
    clients = sorted({c for record in metrics for c in record["client_auc"]})
    width = 0.8 / max(len(metrics), 1)
    x = np.arange(len(clients))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(clients)), 3.6))
    for i, record in enumerate(metrics):
        values = [_number(record["client_auc"].get(c)) for c in clients]
        ax.bar(x + (i - (len(metrics) - 1) / 2) * width, values, width, label=record["strategy"])
    ax.axhline(0.5, color="grey", linewidth=0.8, linestyle=":")
    ax.set_xticks(x, clients, rotation=45, ha="right")
    ax.set_ylabel("test AUC")
    ax.set_ylim(0.0, 1.0)
    ax.set_title("Per-client test AUC by strategy")
    ax.legend(ncol=min(len(metrics), 4), fontsize="small", loc="lower right")
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(
    metrics: Sequence[str | Path],
    benchmarks: Sequence[str | Path] | None,
    out_csv: str | Path,
    out_md: str | Path,
    out_png: str | Path,
) -> pd.DataFrame:
    """Write the comparison table (CSV, Markdown) and the per-client AUC figure.

    Parameters
    ----------
    metrics : sequence of paths
        Each strategy's ``metrics.json``.
    benchmarks : sequence of paths, optional
        Each strategy's training benchmark TSV (same order), for the wall time.
    out_csv, out_md, out_png : paths
        Outputs.

    Returns
    -------
    pandas.DataFrame
        The table written.
    """
    records = [read_metrics(p) for p in metrics]
    wall = None
    if benchmarks:
        wall = [read_wall_time(p) for p in benchmarks]
    table = comparison_table(records, wall)
    table.to_csv(out_csv, index=False)
    Path(out_md).write_text(markdown_table(table))
    client_auc_figure(records, out_png)
    for row in table.itertuples(index=False):
        logger.info(
            "%s: auc=%.4f carrier_auc=%.4f ari=%.2f",
            row.strategy,
            row.auc,
            row.carrier_auc,
            row.ari,
        )
    return table


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            snakemake.input.metrics,
            snakemake.input.benchmarks,
            snakemake.output.csv,
            snakemake.output.md,
            snakemake.output.png,
        )
