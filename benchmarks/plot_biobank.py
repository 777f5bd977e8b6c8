"""The biobank preset's cost against cohort size: a log-log plot and the slope of each curve.

Reads ``results/biobank_simulate.json`` (``bench_biobank_simulate.py``) and
``results/biobank_prepare.json`` (``bench_biobank_prepare.py``) and draws, against the number
of people, each stage's wall seconds (left; a per-site stage is its median site, plink2's pass
on the same site dashed) and peak memory (right; a per-site stage's largest job). The slope of
each curve is the least-squares slope of log(cost) on log(size) over the sizes measured: 1 is
linear growth. Writes ``results/biobank_cost.png`` and prints the slopes as a Markdown table.

    python benchmarks/plot_biobank.py
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

RESULTS = Path(__file__).parent / "results"
#: the per-site stages plink2 runs beside, and the labels of the stages drawn
PER_SITE = {"sample_qc": "sample QC", "client_counts": "allele counts",
            "client_features": "PRS + rare dosages"}  # fmt: skip
SERVER = {"combine_counts": "combine counts (server)"}


def slope(sizes: list[float], values: list[float]) -> float:
    """The least-squares slope of log(values) on log(sizes); NaN under two points."""
    x, y = np.log(np.asarray(sizes, float)), np.log(np.asarray(values, float))
    return float(np.polyfit(x, y, 1)[0]) if len(x) >= 2 else float("nan")


def curves(simulate: list[dict], prepare: list[dict]) -> dict[str, dict[str, list]]:
    """{label: {"n": sizes, "s": wall seconds, "mib": peak MiB, "dashed": plink2's}}."""
    out: dict[str, dict[str, list]] = {}

    def add(label, n, s, mib, dashed=False):
        curve = out.setdefault(label, {"n": [], "s": [], "mib": [], "dashed": dashed})
        curve["n"].append(n)
        curve["s"].append(s)
        curve["mib"].append(mib)

    for r in simulate:
        add("simulate (whole cohort)", r["n_samples"], r["wall_s"], r["peak_rss_mib"])
    for r in prepare:
        stages = {s["stage"]: s for s in r["stages"]}
        for rule, label in {**PER_SITE, **SERVER}.items():
            if rule in stages:
                s = stages[rule]
                add(label, r["n_samples"], s["median_s"], s["max_rss_mib"])
                if "plink2_median_s" in s:
                    add(f"plink2, {label}", r["n_samples"], s["plink2_median_s"],
                        s["plink2_max_rss_mib"], dashed=True)  # fmt: skip
        add("whole preparation (2 cores)", r["n_samples"], r["workflow"]["wall_s"], np.nan)
    return out


def main() -> None:
    simulate = json.loads((RESULTS / "biobank_simulate.json").read_text())
    prepare = json.loads((RESULTS / "biobank_prepare.json").read_text())
    lines = curves(simulate, prepare)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    rows = ["| stage | sizes | time slope | memory slope |", "|---|---|---:|---:|"]
    for i, (label, c) in enumerate(lines.items()):
        style = {"linestyle": "--" if c["dashed"] else "-", "marker": "o", "markersize": 3,
                 "color": f"C{i % 10}"}  # fmt: skip
        t_slope = slope(c["n"], c["s"])
        left.plot(c["n"], c["s"], label=f"{label} (slope {t_slope:.2f})", **style)
        memory = [(n, m) for n, m in zip(c["n"], c["mib"], strict=True) if np.isfinite(m)]
        m_slope = slope(*zip(*memory, strict=True)) if len(memory) >= 2 else float("nan")
        if memory:
            right.plot(*zip(*memory, strict=True), label=f"{label} (slope {m_slope:.2f})", **style)
        sizes = f"{min(c['n']):,}–{max(c['n']):,} ({len(c['n'])})"
        rows.append(f"| {label} | {sizes} | {t_slope:.2f} | {m_slope:.2f} |")
    for ax, ylabel in ((left, "wall seconds (a per-site stage: its median site)"),
                       (right, "peak RSS, MiB (a per-site stage: its largest job)")):  # fmt: skip
        ax.set(xscale="log", yscale="log", xlabel="people in the consortium (10 sites)",
               ylabel=ylabel)  # fmt: skip
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper left")
    fig.suptitle("The biobank preset: cost against size (2-core machine; slope 1 = linear)")
    fig.tight_layout()
    out = RESULTS / "biobank_cost.png"
    fig.savefig(out, dpi=120)
    print("\n".join(rows))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
