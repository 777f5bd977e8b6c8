"""The association's QQ and Manhattan plots (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.association.sums import UnitLayout
from rvfedprs.association.table import HETEROGENEOUS, POOLED, lambda_gc

__all__ = ["qq_plot", "manhattan_plot"]

_SERIES = (
    ("score", POOLED, "variants, pooled score test", "tab:blue"),
    ("score_het", HETEROGENEOUS, "variants, heterogeneous across groups", "tab:orange"),
    ("acat_o", POOLED, "units, ACAT-O", "tab:green"),
    ("acat_o_het", HETEROGENEOUS, "units, ACAT-O heterogeneous", "tab:red"),
)


def _figure(size: tuple[float, float], **margins: float):
    """A matplotlib figure with fixed margins, drawn by Agg.

    Without pyplot (whose import costs more than a plot) and without ``tight_layout`` (which
    draws the figure once more to measure it: a third of a plot's time).
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    fig.subplots_adjust(**margins)
    return fig


def qq_plot(table: pd.DataFrame, path: str | Path) -> Path:
    """Observed vs expected −log10 p per series, with λ_GC and a 95% band of the uniform."""
    from scipy import special

    fig = _figure((6, 6), left=0.11, right=0.97, bottom=0.09, top=0.94)
    ax = fig.subplots()
    top = 1.0  # the longest expected axis: the diagonal spans it
    for test, group, label, colour in _SERIES:
        p = table.loc[(table["test"] == test) & (table["group"] == group), "p"].to_numpy(float)
        p = np.sort(p[np.isfinite(p)])
        if p.size == 0:
            continue
        n = p.size
        expected = -np.log10((np.arange(1, n + 1) - 0.5) / n)
        observed = -np.log10(np.clip(p, 1e-300, 1))
        if test == "score":
            ranks = np.arange(1, n + 1)
            # the quantiles of the k-th of n uniform order statistics, Beta(k, n − k + 1)
            lo = -np.log10(special.betaincinv(ranks, n - ranks + 1, 0.975))
            hi = -np.log10(special.betaincinv(ranks, n - ranks + 1, 0.025))
            ax.fill_between(expected, lo, hi, color="0.85", label="95% band (uniform)")
        ax.scatter(expected, observed, s=8, color=colour,
                   label=f"{label} (n = {n}, λ_GC = {lambda_gc(p):.2f})")  # fmt: skip
        top = max(top, float(expected.max()))
    ax.plot([0, top], [0, top], color="0.3", lw=1)
    ax.set_xlabel("expected −log10 p")
    ax.set_ylabel("observed −log10 p")
    ax.set_title("Federated rare-variant association: QQ plot")
    ax.legend(fontsize=7, loc="upper left")
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path


def manhattan_plot(
    table: pd.DataFrame, variants: pd.DataFrame, layout: UnitLayout, path: str | Path
) -> Path:
    """Single-variant (pooled and heterogeneous) and unit ACAT-O −log10 p along the genome."""
    chrom = variants["chrom"].astype(str)
    order = sorted(chrom.unique(), key=lambda c: (len(c), c))
    span = variants.groupby(chrom)["pos"].agg(["min", "max"]).loc[order]
    offsets = np.concatenate([[0], np.cumsum((span["max"] - span["min"] + 1).to_numpy())])[:-1]
    start = dict(zip(order, offsets - span["min"].to_numpy(), strict=True))
    where = dict(zip(variants["variant_key"].astype(str),
                     chrom.map(start) + variants["pos"].to_numpy(), strict=True))  # fmt: skip
    keys = variants["variant_key"].astype(str).to_numpy()
    members = zip(layout.names, layout.members, strict=True)
    first_variant = {name: keys[cols[0]] for name, cols in members if cols.size}
    fig = _figure((10, 6), left=0.07, right=0.99, bottom=0.07, top=0.94, hspace=0.08)
    axes = fig.subplots(2, 1, sharex=True)
    for ax, tests, title in (
        (axes[0], (("score", POOLED, "pooled", "tab:blue"),
                   ("score_het", HETEROGENEOUS, "heterogeneous", "tab:orange")), "variants"),
        (axes[1], (("acat_o", POOLED, "pooled", "tab:green"),
                   ("acat_o_het", HETEROGENEOUS, "heterogeneous", "tab:red")), "units (ACAT-O)"),
    ):  # fmt: skip
        n_tests = 1
        for test, group, label, colour in tests:
            rows = table[(table["test"] == test) & (table["group"] == group)].dropna(subset=["p"])
            if rows.empty:
                continue
            units = rows["unit"] if title == "variants" else rows["unit"].map(first_variant)
            x = units.map(where).to_numpy(float)
            ax.scatter(x, -np.log10(np.clip(rows["p"].to_numpy(float), 1e-300, 1)), s=8,
                       color=colour, label=f"{label} ({len(rows)})")  # fmt: skip
            n_tests = max(n_tests, len(rows))
        ax.axhline(-np.log10(0.05 / n_tests), color="0.4", ls="--", lw=1,
                   label=f"Bonferroni 0.05 / {n_tests}")  # fmt: skip
        ax.set_ylabel(f"−log10 p, {title}")
        ax.legend(fontsize=7, loc="upper right")
    mids = offsets + (span["max"] - span["min"]).to_numpy() / 2
    axes[1].set_xticks(mids, [f"chr{c}" for c in order])
    axes[0].set_title("Federated rare-variant association along the genome")
    path = Path(path)
    fig.savefig(path, dpi=120)
    return path
