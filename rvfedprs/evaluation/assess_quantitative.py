"""``rvfedprs assess`` for a quantitative trait: PRSice-2's R²s, β per SD, the top decile.

For every score, site and the pooled samples (:func:`exact_row`, from
:func:`rvfedprs.evaluation.quantitative.score_metrics`):

- ``null_r2``: R² of trait ~ covariates; ``full_r2``: of trait ~ covariates + score;
  ``incremental_r2`` = full − null (PRSice-2's PRS.R2) with the interval of the partial
  correlation's Fisher z scaled by 1 − null;
- ``r2``: trait ~ score alone (the squared correlation) with its Fisher interval;
- ``partial_r``: the partial correlation of score and trait given the covariates;
- ``beta_per_sd``: the trait's change (in its own units) per sample SD (ddof 1) of the score,
  given the covariates, with the 95% interval of its OLS standard error (Student's t);
- ``top_decile_difference``: the mean trait of the 10% highest scores minus that of the other
  90%, Welch's 95% interval (not covariate-adjusted).

The federated pooled row (:func:`federated_row`) is least squares from what each site sends
(:func:`site_sums`: X'X, X'y, y'y and n over X = [1, covariates, score]; X'X holds Σs and Σs²
for the score's pooled SD): equal to the exact pooled fit up to rounding. The top decile needs
the pooled ranking of the scores, which sums do not give: it is left NaN there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation.quantitative import design_sums, score_metrics, sums_metrics
from rvfedprs.exceptions import InputDataError

__all__ = [
    "STATISTICS",
    "READABLE",
    "HOW_TO_READ",
    "FEDERATED",
    "trait_values",
    "exact_row",
    "site_sums",
    "federated_row",
    "trait_figures",
]

#: The statistics of a row, in the table's order.
STATISTICS = tuple(
    f"{key}{suffix}"
    for key, suffixes in (
        ("incremental_r2", ("", "_lo", "_hi")),
        ("null_r2", ("",)),
        ("full_r2", ("",)),
        ("r2", ("", "_lo", "_hi")),
        ("partial_r", ("",)),
        ("beta_per_sd", ("", "_lo", "_hi")),
        ("top_decile_difference", ("", "_lo", "_hi")),
    )
    for suffix in suffixes
)
#: The readable table's columns: (header, statistic, digits, with its interval).
READABLE = (
    ("Incremental R² (95% CI)", "incremental_r2", 4, True),
    ("Null R²", "null_r2", 4, False),
    ("Full R²", "full_r2", 4, False),
    ("R² score alone (95% CI)", "r2", 4, True),
    ("Partial r", "partial_r", 3, False),
    ("β per SD (95% CI)", "beta_per_sd", 3, True),
    ("Top 10% − rest (95% CI)", "top_decile_difference", 3, True),
)
HOW_TO_READ = (
    "How to read this table. Incremental R²: what the score adds to a linear model of the trait "
    "on the covariates (full R², trait ~ covariates + score, minus null R², trait ~ covariates: "
    "PRSice-2's PRS.R2), with the 95% interval of the partial correlation (Fisher's z) scaled "
    "by 1 − null R². R² score alone: the squared correlation of score and trait (Fisher's "
    "interval). Partial r: the correlation of score and trait given the covariates. β per SD: "
    "the trait's change, in its own units, for one standard deviation more score, given the "
    "covariates (OLS 95% interval). Top 10% − rest: the mean trait of the 10% highest scores "
    "minus that of the other 90% (Welch's interval; not covariate-adjusted). Each site's row "
    "uses its own samples (its score standardised within it); the pooled row uses all of them."
)
#: What the report says of a federated pooled row.
FEDERATED = (
    "Pooled rows are federated: least squares from each site's X'X, X'y and y'y over "
    "[1, covariates, score] (equal to the pooled fit); the top decile needs the pooled ranking "
    "of the scores and is left blank."
)
_MIN_SAMPLES = 10


def trait_values(values: pd.Series, name: str, path) -> pd.Series:
    """A quantitative phenotype column as floats (blank = missing).

    Raises
    ------
    InputDataError
        At the first value that is not a finite number, naming the column, the value and the
        sample.
    """
    numeric = pd.to_numeric(values, errors="coerce").astype(np.float64)
    bad = values.notna() & ~np.isfinite(numeric)
    if bad.any():
        sample = bad.idxmax()
        raise InputDataError(
            f"phenotype '{name}' in {path} is quantitative but sample {sample} has the "
            f"non-numeric value {values[sample]!r} ({int(bad.sum())} such values; blank = "
            "missing)"
        )
    return numeric.rename("phenotype")


def _empty(n: int, note: str) -> dict[str, Any]:
    return {"n": n, **dict.fromkeys(STATISTICS, float("nan")), "note": note}


def exact_row(y: np.ndarray, score: np.ndarray, covariates: np.ndarray) -> dict[str, Any]:
    """Every statistic of the module docstring on one set of samples (exact).

    Parameters
    ----------
    y : array, shape (n,)
    score : array, shape (n,)
    covariates : array, shape (n, k)
        Covariates that vary (a constant one is the intercept again).

    Returns
    -------
    dict
        ``n``, :data:`STATISTICS` and ``note`` (why statistics are NaN, else empty).
    """
    n = int(y.size)
    if n < max(_MIN_SAMPLES, covariates.shape[1] + 4) or np.ptp(y) == 0 or np.ptp(score) == 0:
        few = n < max(_MIN_SAMPLES, covariates.shape[1] + 4)
        return _empty(n, "too few samples" if few else "constant trait" if np.ptp(y) == 0
                      else "constant score")  # fmt: skip
    metrics = score_metrics(y, score, covariates, ddof=1)
    return {"n": n, **{key: metrics[key] for key in STATISTICS}, "note": ""}


def site_sums(y: np.ndarray, score: np.ndarray, covariates: np.ndarray) -> dict[str, Any]:
    """What a site sends for the federated pooled row (:func:`~.quantitative.design_sums`)."""
    return design_sums(y, score, covariates)


def federated_row(sums: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pooled row from the sites' :func:`site_sums` (no top decile: it needs ranks).

    Returns
    -------
    dict
        As :func:`exact_row` (:func:`~.quantitative.sums_metrics`); ``top_decile_difference``
        and its interval NaN.
    """
    note = "federated: from per-site sums; the top decile needs the pooled ranking"
    out = sums_metrics(sums, min_samples=_MIN_SAMPLES)
    if out is None:
        n = sum(int(s["n"]) for s in sums)
        return _empty(n, f"{note}; too few samples, a constant trait or a constant score")
    return _empty(out["n"], note) | out


# ---------------------------------------------------------------------------------------------
# Figures


def _decile_means(y: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean trait and its 95% half interval in each score decile (1 = lowest)."""
    decile = pd.qcut(pd.Series(score).rank(method="first"), 10, labels=False).to_numpy()
    grouped = pd.Series(y).groupby(decile)
    half = 1.959963984540054 * grouped.std(ddof=1) / np.sqrt(grouped.size())
    return grouped.mean().to_numpy(), half.to_numpy()


def trait_figures(
    frame: pd.DataFrame, scores: Sequence[str], grouped: bool, pooled: pd.DataFrame
) -> list[tuple[str, str, Any]]:
    """(title, caption, matplotlib figure) of the trait by score decile and score vs trait.

    Parameters
    ----------
    frame : DataFrame
        :class:`~rvfedprs.evaluation.assess_inputs.AssessData`'s frame (``phenotype``, the scores,
        ``group`` when ``grouped``).
    scores : sequence of str
    grouped : bool
    pooled : DataFrame
        The pooled rows of the assessment, indexed by score.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = frame["phenotype"].to_numpy(np.float64)
    sites = sorted(frame["group"].unique()) if grouped else []
    figures = []
    width = min(4.6 * len(scores), 14)
    fig, axes = plt.subplots(1, len(scores), squeeze=False, figsize=(width, 4.2), sharey=True)
    for ax, name in zip(axes[0], scores, strict=True):
        for site in sites:
            rows = (frame["group"] == site).to_numpy()
            if rows.sum() >= 20:
                mean, _ = _decile_means(y[rows], frame.loc[rows, name].to_numpy(np.float64))
                ax.plot(range(1, 11), mean, marker=".", lw=1, alpha=0.8, label=str(site))
        mean, half = _decile_means(y, frame[name].to_numpy(np.float64))
        ax.errorbar(range(1, 11), mean, yerr=half, color="black", marker="o", capsize=3, lw=1.8,
                    label="pooled")  # fmt: skip
        ax.axhline(y.mean(), color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(1, 11))
        ax.set(xlabel="Score decile (1 = lowest)", title=name)
    axes[0, 0].set_ylabel("Mean trait")
    axes[0, -1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    figures.append((
        "Mean trait by score decile",
        "The mean trait in each tenth of the score distribution: pooled (black, 95% intervals) "
        "and, thin, each site's own deciles (sites of 20 samples or more). A useful score "
        "rises from left to right; the dashed line is the overall mean.",
        fig,
    ))  # fmt: skip

    fig, axes = plt.subplots(1, len(scores), squeeze=False, figsize=(width, 4.4), sharey=True)
    shown = np.random.default_rng(0).permutation(len(frame))[:5000]  # a readable cloud
    for ax, name in zip(axes[0], scores, strict=True):
        s = frame[name].to_numpy(np.float64)
        z = (s - s.mean()) / s.std(ddof=1)
        for site in sites or [None]:
            rows = shown if site is None else shown[(frame["group"].to_numpy()[shown] == site)]
            ax.scatter(z[rows], y[rows], s=6, alpha=0.35, label=None if site is None else site)
        slope, intercept = np.polyfit(z, y, 1)
        line = np.array([z.min(), z.max()])
        ax.plot(line, intercept + slope * line, color="black", lw=1.5)
        r2 = pooled.loc[name, "r2"]
        ax.set(xlabel=f"{name}, standardised", title=f"{name} (R² {r2:.3f})")
    axes[0, 0].set_ylabel("Trait")
    if sites:
        axes[0, -1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                           markerscale=2)  # fmt: skip
    fig.tight_layout()
    figures.append((
        "Score against trait",
        "Each sample's trait against its score standardised over all samples (coloured by "
        "site; at most 5,000 samples drawn), with the least-squares line of the trait on the "
        "score alone (no covariates).",
        fig,
    ))  # fmt: skip
    return figures
