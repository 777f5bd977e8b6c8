"""The assessment's statistics: AUC, odds ratios and incremental R², per site and pooled.

Given a score table (``rvfedprs prepare score`` output or any table with a sample id and score
columns), a 0/1 phenotype, optional covariates and an optional site (or ancestry group) column,
:func:`assess_scores` reports for every score, every site and the pooled samples the statistics
below. A quantitative phenotype (``phenotype_kind="quantitative"``) gets PRSice-2's R²s, β per
SD and the top decile's mean difference instead (:mod:`.assess_quantitative`).

- **AUC** with DeLong's 95% interval;
- **OR per SD**: exp(β) of the standardised score in ``logit P(y) = α + C·γ + β·z``, with its
  Wald 95% interval (z standardised over the rows assessed: within a site for a site's row,
  over all sites for the pooled row; sample SD, ddof 1);
- **top-decile OR**: the odds among the 10% highest scores against the other 90%, Woolf's
  interval (Haldane's ½ added when a cell is empty), as :func:`.prs_metrics.top_decile_or`;
- **incremental R²** over the covariates-only model: Nagelkerke's (logistic likelihoods), the
  observed-scale one of linear regressions and, given the population prevalence K, Lee et al.'s
  (2012) liability-scale transformation of the latter (:func:`.prs_metrics.liability_factor`).

Every statistic is computed from per-site *blocks*: the logistic fits sum each site's score
vector, Hessian and log-likelihood, the linear fit each site's X'X, X'y, y'y, the
standardisation each site's n, Σs, Σs². Pooled exact metrics use one block of all samples; with
``federated=True`` the pooled row is built from what each site would send (those sums, and
:func:`.summaries.site_summary` histograms of the standardised score for the AUC, its DeLong
interval and the top decile) — equal to the exact pooled values up to scores that share a
histogram bin (``auc_tie_bound`` bounds the AUC's difference).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation import assess_quantitative as quantitative
from rvfedprs.evaluation.assess_inputs import AssessData
from rvfedprs.evaluation.paired import delong_ci
from rvfedprs.evaluation.prs_metrics import (
    Z95,
    liability_factor,
    logistic_fit,
    nagelkerke_r2,
    top_decile_table,
    woolf_or,
)
from rvfedprs.evaluation.summaries import (
    histogram_auc,
    histogram_delong_se,
    merge_histograms,
    site_summary,
    tie_bound,
)
from rvfedprs.exceptions import InputDataError
from rvfedprs.outcomes import BINARY, QUANTITATIVE

__all__ = ["POOLED", "score_metrics", "assess_scores", "histogram_delong_se"]

#: The label of the pooled rows.
POOLED = "pooled"


@dataclass
class _Block:
    """One site's rows: phenotype, raw score and covariates."""

    y: np.ndarray
    score: np.ndarray
    covariates: np.ndarray  # shape (n, c), c may be 0


def _moments(blocks: Sequence[_Block]) -> tuple[float, float]:
    """Mean and sample SD (ddof 1) of the score from each block's n, Σs, Σs²."""
    n = sum(b.score.size for b in blocks)
    total = sum(float(b.score.sum()) for b in blocks)
    mean = total / n
    # Σ(s − mean)² per block, summed: a numerically safe form of Σs² − n·mean².
    squares = sum(float(((b.score - mean) ** 2).sum()) for b in blocks)
    return mean, math.sqrt(squares / (n - 1)) if n > 1 else float("nan")


def _kept_covariates(blocks: Sequence[_Block]) -> np.ndarray:
    """Covariate columns that vary over the blocks (a constant one is the intercept again)."""
    c = blocks[0].covariates.shape[1]
    if c == 0:
        return np.zeros(0, dtype=int)
    lo = np.min([b.covariates.min(axis=0) for b in blocks], axis=0)
    hi = np.max([b.covariates.max(axis=0) for b in blocks], axis=0)
    return np.flatnonzero(hi > lo)


def _designs(blocks, mean, sd, kept, with_score):
    out = []
    for b in blocks:
        parts = [np.ones((b.y.size, 1)), b.covariates[:, kept]]
        if with_score:
            parts.append(((b.score - mean) / sd)[:, None])
        out.append((np.hstack(parts), b.y.astype(np.float64)))
    return out


def _linear_r2(designs) -> float:
    """Observed-scale R² of least squares from summed X'X, X'y, y'y, Σy and n."""
    xtx = sum(X.T @ X for X, _ in designs)
    xty = sum(X.T @ y for X, y in designs)
    yty = sum(float(y @ y) for _, y in designs)
    n = sum(y.size for _, y in designs)
    total = yty - sum(float(y.sum()) for _, y in designs) ** 2 / n
    beta = np.linalg.lstsq(xtx, xty, rcond=None)[0]
    return float(1.0 - (yty - beta @ xty) / total)


def _histogram_top_decile(cases: np.ndarray, controls: np.ndarray) -> tuple[int, int, int, int]:
    """:func:`.prs_metrics.top_decile_table` from pooled histograms (bins in increasing score).

    ``np.quantile(s, 0.9) <= s`` holds from the order statistic ``ceil(0.9 (n − 1))`` on; the
    top decile is that statistic's bin and every bin above it.
    """
    counts = cases + controls
    n = int(counts.sum())
    first = math.ceil(0.9 * (n - 1) - 1e-9)
    start = int(np.searchsorted(np.cumsum(counts), first + 1))
    a, b = int(cases[start:].sum()), int(controls[start:].sum())
    return a, b, int(cases.sum()) - a, int(controls.sum()) - b


def _regression_metrics(blocks, prevalence):
    mean, sd = _moments(blocks)
    kept = _kept_covariates(blocks)
    full = _designs(blocks, mean, sd, kept, with_score=True)
    null = _designs(blocks, mean, sd, kept, with_score=False)
    beta, cov, ll_full = logistic_fit(full)
    _, _, ll_null = logistic_fit(null)
    n = sum(b.y.size for b in blocks)
    m = sum(int(b.y.sum()) for b in blocks)
    p = m / n
    ll0 = m * math.log(p) + (n - m) * math.log(1 - p)
    se = math.sqrt(cov[-1, -1])
    observed = _linear_r2(full) - _linear_r2(null)
    out = {
        "or_per_sd": math.exp(beta[-1]),
        "or_per_sd_lo": math.exp(beta[-1] - Z95 * se),
        "or_per_sd_hi": math.exp(beta[-1] + Z95 * se),
        "r2_nagelkerke": nagelkerke_r2(ll_full, ll0, n) - nagelkerke_r2(ll_null, ll0, n),
        "r2_observed": observed,
    }
    if prevalence is not None:
        out["r2_liability"] = observed * liability_factor(prevalence, p)
    return out


def _empty(prevalence: float | None) -> dict[str, float]:
    keys = (
        "auc auc_lo auc_hi or_per_sd or_per_sd_lo or_per_sd_hi or_top_decile "
        "or_top_decile_lo or_top_decile_hi r2_nagelkerke r2_observed"
    ).split()
    if prevalence is not None:
        keys.append("r2_liability")
    return dict.fromkeys(keys, float("nan"))


def score_metrics(
    y: np.ndarray,
    score: np.ndarray,
    covariates: np.ndarray | None = None,
    *,
    prevalence: float | None = None,
) -> dict[str, Any]:
    """Every assessment statistic of one score on one set of samples (exact).

    Parameters
    ----------
    y : array of {0, 1}, shape (n,)
    score : array, shape (n,)
    covariates : array, shape (n, c), optional
    prevalence : float, optional
        Population prevalence K: adds ``r2_liability``.

    Returns
    -------
    dict
        ``n``, ``n_cases``, ``auc``, ``auc_lo``, ``auc_hi``, ``or_per_sd`` (+ ``_lo``, ``_hi``),
        ``or_top_decile`` (+ ``_lo``, ``_hi``), ``r2_nagelkerke``, ``r2_observed`` and with
        ``prevalence`` ``r2_liability``; ``note`` says why statistics are NaN.
    """
    y = np.asarray(y).astype(np.int64).ravel()
    s = np.asarray(score, dtype=np.float64).ravel()
    c = np.zeros((y.size, 0)) if covariates is None else np.asarray(covariates, np.float64)
    return _exact_metrics(_Block(y, s, c.reshape(y.size, -1)), prevalence)


def _exact_metrics(block: _Block, prevalence: float | None) -> dict[str, Any]:
    y, s = block.y, block.score
    out: dict[str, Any] = {"n": int(y.size), "n_cases": int(y.sum()), **_empty(prevalence)}
    if y.size < 10 or y.min() == y.max() or np.ptp(s) == 0:
        out["note"] = (
            "fewer than 10 samples"
            if y.size < 10
            else "one phenotype class"
            if y.min() == y.max()
            else "constant score"
        )
        return out
    out["auc"], out["auc_lo"], out["auc_hi"] = delong_ci(y, s)
    out["or_top_decile"], out["or_top_decile_lo"], out["or_top_decile_hi"] = woolf_or(
        *top_decile_table(y, s)
    )
    out.update(_regression_metrics([block], prevalence))
    out["note"] = ""
    return out


def _federated_metrics(blocks: Sequence[_Block], prevalence: float | None) -> dict[str, Any]:
    """The pooled row from what each site sends: sums, and histograms of the pooled z-score."""
    n = sum(b.y.size for b in blocks)
    m = sum(int(b.y.sum()) for b in blocks)
    out: dict[str, Any] = {"n": n, "n_cases": m, **_empty(prevalence)}
    mean, sd = _moments(blocks)
    # Each site sends site_summary() of sigmoid(z): bins on the logit scale = bins of z.
    summaries = [site_summary(b.y, 1.0 / (1.0 + np.exp(-(b.score - mean) / sd))) for b in blocks]
    cases, controls = merge_histograms([s["histogram"] for s in summaries])
    auc, se = histogram_auc(cases, controls), histogram_delong_se(cases, controls)
    out.update(auc=auc, auc_lo=max(0.0, auc - Z95 * se), auc_hi=min(1.0, auc + Z95 * se))
    out["auc_tie_bound"] = tie_bound(cases, controls)
    out["or_top_decile"], out["or_top_decile_lo"], out["or_top_decile_hi"] = woolf_or(
        *_histogram_top_decile(cases, controls)
    )
    out.update(_regression_metrics(blocks, prevalence))
    out["note"] = "federated: from per-site sums and histograms"
    return out


def _quantitative_exact(block: _Block) -> dict[str, Any]:
    kept = _kept_covariates([block])
    return quantitative.exact_row(block.y, block.score, block.covariates[:, kept])


def _quantitative_federated(blocks: Sequence[_Block]) -> dict[str, Any]:
    """The pooled quantitative row from each site's X'X, X'y, y'y and n."""
    kept = _kept_covariates(blocks)
    sums = [quantitative.site_sums(b.y, b.score, b.covariates[:, kept]) for b in blocks]
    return quantitative.federated_row(sums)


def assess_scores(
    data: AssessData, *, prevalence: float | None = None, federated: bool = False
) -> pd.DataFrame:
    """One row per score × site, and per score the pooled row (site ``pooled``).

    Parameters
    ----------
    data : AssessData
    prevalence : float, optional
        Population prevalence K in (0, 1) for the liability-scale R².
    federated : bool
        Build the pooled rows from the sites' summaries (sums and score histograms) instead of
        the pooled samples; needs a group column.

    Returns
    -------
    DataFrame
        Columns ``score, site, n, n_cases, auc, auc_lo, auc_hi, or_per_sd, ...`` as
        :func:`score_metrics`, plus ``method`` (``exact`` / ``federated``) and, federated,
        ``auc_tie_bound``. A quantitative phenotype: ``score, site, n`` and
        :data:`.assess_quantitative.STATISTICS` (its federated pooled row from the sites' sums).
    """
    if prevalence is not None and not 0 < prevalence < 1:
        raise InputDataError(f"prevalence must lie in (0, 1); got {prevalence}")
    if prevalence is not None and data.outcome == QUANTITATIVE:
        raise InputDataError(
            f"prevalence {prevalence} is for a binary phenotype's liability-scale R²; the "
            "phenotype is quantitative"
        )
    if federated and not data.grouped:
        raise InputDataError("--federated needs sites: give --samples with a site column")
    frame = data.frame
    sites = sorted(frame["group"].unique()) if data.grouped else []
    binary = data.outcome == BINARY
    if binary:
        exact = partial(_exact_metrics, prevalence=prevalence)
        pool = partial(_federated_metrics, prevalence=prevalence)
    else:
        exact, pool = _quantitative_exact, _quantitative_federated
    rows = []
    for name in data.scores:

        def block(rows_: pd.DataFrame, name=name) -> _Block:
            return _Block(
                rows_["phenotype"].to_numpy(np.int64 if binary else np.float64),
                rows_[name].to_numpy(np.float64),
                rows_[data.covariates].to_numpy(np.float64),
            )

        blocks = {site: block(frame[frame["group"] == site]) for site in sites}
        for site in sites:
            rows.append(
                {
                    "score": name,
                    "site": site,
                    "method": "exact",
                    **exact(blocks[site]),
                }
            )
        if federated:
            usable = [b for b in blocks.values() if b.y.size]
            pooled = {"method": "federated", **pool(usable)}
        else:
            pooled = {"method": "exact", **exact(block(frame))}
        rows.append({"score": name, "site": POOLED, **pooled})
    table = pd.DataFrame(rows)
    first = ["score", "site", "n", "n_cases"] if binary else ["score", "site", "n"]
    last = ["method", "note"]
    return table[first + [c for c in table.columns if c not in first + last] + last]
