"""Figures of the evaluation (design §10).

ROC curves, per-client AUC, Jaccard heat map, MIA ROC, privacy–utility curve. Each function
writes one PNG and returns its path (matplotlib, Agg).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy.cluster.hierarchy import dendrogram, linkage  # noqa: E402
from scipy.spatial.distance import squareform  # noqa: E402
from sklearn.metrics import roc_curve  # noqa: E402

from rvfedprs.evaluation.report.tables import STRATEGY_LABELS, mean_ci  # noqa: E402

__all__ = [
    "plot_roc_curves",
    "plot_client_auc",
    "plot_jaccard_heatmap",
    "plot_mia_roc",
    "plot_privacy_utility",
    "save_figure",
]


def _label(name: str) -> str:
    return STRATEGY_LABELS.get(name, name)


def save_figure(fig, path: str | Path, dpi: int = 130) -> Path:
    """Write ``fig`` to ``path`` (folders made, tight bounding box) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_roc_curves(
    predictions: Mapping[str, tuple[np.ndarray, np.ndarray]], path: str | Path, *, title: str = ""
) -> Path:
    """Pooled test-set ROC curve per strategy.

    Parameters
    ----------
    predictions : mapping of strategy to (y, p)
        Labels and predicted probabilities, shape (n,) each (pooled over clients).
    """
    fig, ax = plt.subplots(figsize=(5, 5))
    for name, (y, p) in predictions.items():
        fpr, tpr, _ = roc_curve(np.asarray(y).astype(int), np.asarray(p))
        ax.plot(fpr, tpr, label=_label(name))
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    ax.set(xlabel="False positive rate", ylabel="True positive rate", title=title or "ROC")
    ax.legend(fontsize=7, loc="lower right")
    return save_figure(fig, path)


def plot_client_auc(runs: pd.DataFrame, path: str | Path) -> Path:
    """Per-client AUC per strategy: bars are means over seeds, error bars 95% t-intervals.

    ``runs`` has columns ``strategy``, ``seed`` and ``client_auc`` ({client: auc}).
    """
    records = [
        {"strategy": r.strategy, "seed": r.seed, "client": c, "auc": a}
        for r in runs.itertuples()
        for c, a in (r.client_auc or {}).items()
    ]
    long = pd.DataFrame(records)
    strategies = [s for s in STRATEGY_LABELS if s in set(long["strategy"])]
    strategies += sorted(set(long["strategy"]) - set(strategies))
    clients = sorted(long["client"].unique())
    width = 0.8 / max(len(strategies), 1)
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(clients) * max(1, len(strategies)) / 3), 4))
    x = np.arange(len(clients))
    for i, s in enumerate(strategies):
        stats = [
            mean_ci(long[(long.strategy == s) & (long.client == c)]["auc"].tolist())
            for c in clients
        ]
        means = [m for m, _, _ in stats]
        errors = [0.0 if not np.isfinite(h) else h for _, h, _ in stats]
        ax.bar(x + i * width - 0.4 + width / 2, means, width, yerr=errors, label=_label(s),
               capsize=2)  # fmt: skip
    ax.set_xticks(x, clients, rotation=45, ha="right")
    ax.set(ylabel="Test AUC", title="Per-client AUC (mean ± 95% CI over seeds)")
    ax.set_ylim(0.4, 1.0)
    ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)


def plot_jaccard_heatmap(
    similarity: np.ndarray,
    clients: Sequence[str],
    path: str | Path,
    *,
    true_clusters: Mapping[str, object] | None = None,
) -> Path:
    """Estimated Jaccard similarity of the clients' filters, with dendrogram and true clusters.

    Clients are ordered by the average-linkage dendrogram of 1 − S (drawn on top); the true
    clusters are a colour strip.
    """
    s = np.asarray(similarity, dtype=np.float64)
    d = 1.0 - s
    np.fill_diagonal(d, 0.0)
    d = (d + d.T) / 2
    fig = plt.figure(figsize=(6, 6.5))
    ax_dend = fig.add_axes([0.15, 0.78, 0.65, 0.15])
    ax_strip = fig.add_axes([0.15, 0.745, 0.65, 0.03])
    ax_heat = fig.add_axes([0.15, 0.1, 0.65, 0.64])
    ax_bar = fig.add_axes([0.83, 0.1, 0.03, 0.64])
    z = linkage(squareform(np.clip(d, 0, None), checks=False), method="average")
    order = dendrogram(z, ax=ax_dend, no_labels=True, color_threshold=0)["leaves"]
    ax_dend.axis("off")
    ordered = [clients[i] for i in order]
    image = ax_heat.imshow(s[np.ix_(order, order)], vmin=0, vmax=1, cmap="viridis")
    ax_heat.set_xticks(range(len(ordered)), ordered, rotation=90, fontsize=7)
    ax_heat.set_yticks(range(len(ordered)), ordered, fontsize=7)
    fig.colorbar(image, cax=ax_bar, label="Estimated Jaccard")
    if true_clusters is not None:
        labels = [str(true_clusters.get(c, "?")) for c in ordered]
        codes = {v: i for i, v in enumerate(sorted(set(labels)))}
        ax_strip.imshow([[codes[v] for v in labels]], aspect="auto", cmap="tab10",
                        vmin=0, vmax=9)  # fmt: skip
        for i, v in enumerate(labels):
            ax_strip.text(i, 0, v, ha="center", va="center", fontsize=5)
    ax_strip.axis("off")
    ax_dend.set_title("Bloom-filter Jaccard (strip: true clusters)")
    return save_figure(fig, path)


def plot_mia_roc(
    curves: Mapping[str, tuple[np.ndarray, np.ndarray]], path: str | Path, *, title: str = ""
) -> Path:
    """Membership-inference ROC curves on log–log axes.

    Parameters
    ----------
    curves : mapping of label to (scores, is_member)
    """
    fig, ax = plt.subplots(figsize=(5, 5))
    floor = 1e-4
    for name, (scores, member) in curves.items():
        fpr, tpr, _ = roc_curve(np.asarray(member).astype(int), np.asarray(scores))
        ax.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), label=name)
    grid = np.logspace(-4, 0, 50)
    ax.plot(grid, grid, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set(xlabel="False positive rate", ylabel="True positive rate", title=title or "MIA ROC")
    ax.set_xlim(floor, 1)
    ax.set_ylim(floor, 1)
    ax.legend(fontsize=6, loc="lower right")
    return save_figure(fig, path)


def plot_privacy_utility(table: pd.DataFrame, path: str | Path) -> Path:
    """Carrier AUC, MIA advantage and (if given) update-channel advantage against ε.

    Log axis; ε = ∞ (no DP) is drawn at the right edge. ``table`` has ``epsilon``,
    ``carrier_auc_mean``, ``carrier_auc_ci`` and optionally ``advantage_mean``,
    ``advantage_ci`` (membership inference), ``update_channel_advantage_mean``/``_ci`` (carried
    variants read off the updates the server receives) and ``series`` (one line each, e.g.
    "SecAgg, keyed filters") or ``hashing``. Series are offset slightly along ε so that
    coinciding points stay visible.
    """
    t = table.copy()
    finite = t["epsilon"][np.isfinite(t["epsilon"])]
    right = (finite.max() * 10) if len(finite) else 10.0
    t["x"] = np.where(np.isfinite(t["epsilon"]), t["epsilon"], right)
    panels = [("carrier_auc", "Carrier AUC"), ("advantage", "MIA advantage (LOSS)")]
    if "update_channel_advantage_mean" in t:
        panels.append(("update_channel_advantage", "Update channel: carried-variant advantage"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.8))
    if "series" in t:
        groups = list(t.groupby("series", sort=False))
    elif "hashing" in t:
        groups = [(f"{name} hashing", g) for name, g in t.groupby("hashing")]
    else:
        groups = [("", t)]
    for i, ((name, g), marker) in enumerate(zip(groups, "os^vDP", strict=False)):
        g = g.sort_values("x")
        x = g["x"] * 1.08 ** (i - (len(groups) - 1) / 2)
        for ax, (metric, _) in zip(axes, panels, strict=True):
            if f"{metric}_mean" not in g:
                continue
            err = np.nan_to_num(g[f"{metric}_ci"].to_numpy(dtype=float))
            ax.errorbar(x, g[f"{metric}_mean"], yerr=err, marker=marker, capsize=3,
                        label=name or None)  # fmt: skip
    for ax, (_, ylabel) in zip(axes, panels, strict=True):
        ax.set_xscale("log")
        ax.set(xlabel="ε (cumulative, δ fixed; rightmost = no DP)", ylabel=ylabel)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.suptitle("FedCE privacy–utility trade-off")
    fig.tight_layout()
    return save_figure(fig, path)
