"""The simulated PGS: marginal regressions, LD clumping, a threshold chosen on validation data.

Clumping + thresholding as done for real scores (PRSice, ``plink --clump``): the discovery
GWAS gives marginal effects and p-values, LD clumping keeps one index variant per LD block, and
the p-value threshold is the one whose score predicts best in held-out discovery individuals
(AUC for a binary trait, R² for a quantitative one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy import stats

from rvfedprs.exceptions import ConfigError

__all__ = [
    "marginal_regression",
    "summary_statistics",
    "ld_pairs",
    "clump",
    "passes_threshold",
    "clumping_thresholding",
    "validation_r2",
]


def marginal_regression(
    genotypes: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-variant simple linear regression of ``y`` on allele count.

    Parameters
    ----------
    genotypes : ndarray, shape (n_samples, n_variants)
        ALT-allele counts (no missing values).
    y : ndarray, shape (n_samples,)

    Returns
    -------
    beta, se, p : ndarray, shape (n_variants,)
        Slope, its standard error and the two-sided t-test p-value (NaN for monomorphic
        variants).
    """
    x = np.asarray(genotypes, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.shape[0]
    xc = x - x.mean(axis=0)
    yc = y - y.mean()
    sxx = np.einsum("ij,ij->j", xc, xc)
    sxy = xc.T @ yc
    syy = yc @ yc
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = sxy / sxx
        resid = np.maximum(syy - beta * sxy, 0.0)
        se = np.sqrt(resid / (n - 2) / sxx)
        t = beta / se
    p = 2 * stats.t.sf(np.abs(t), df=n - 2)
    return beta, se, p


def summary_statistics(
    rng: np.random.Generator,
    reference: np.ndarray,
    chrom: np.ndarray,
    pos: np.ndarray,
    causal_reference: np.ndarray,
    causal_effects: np.ndarray,
    causal_chrom: np.ndarray,
    causal_pos: np.ndarray,
    *,
    sample_size: int,
    window_bp: int,
    block: int = 512,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GWAS summary statistics of ``sample_size`` individuals, drawn from their distribution.

    For a trait of unit variance, the marginal effects of standardised genotypes estimated by a
    GWAS of N individuals are ``b_hat ~ N(R beta, R / N)`` (R: LD correlations, beta: joint
    standardised effects), the model behind LD score regression and summary-statistic PGS
    methods. Here R comes from the LD reference panel: ``R beta`` sums, for each variant, the
    effects of the causal variants within ``window_bp`` on its chromosome times their
    correlation with it; the noise is ``Z' u / sqrt(n_ref N)`` with ``u ~ N(0, I)``, whose
    covariance is the panel's R / N.

    Parameters
    ----------
    rng : numpy Generator
    reference : ndarray, shape (n_ref, n_variants)
        ALT counts of the tested variants in the reference panel.
    chrom, pos : ndarray, shape (n_variants,)
    causal_reference : ndarray, shape (n_ref, n_causal)
        ALT counts of the causal variants in the same individuals.
    causal_effects : ndarray, shape (n_causal,)
        Per-allele effects on the trait (liability units) in the discovery population.
    causal_chrom, causal_pos : ndarray, shape (n_causal,)
    sample_size : int
    window_bp : int
    block : int
        Tested variants per block of the product (memory).

    Returns
    -------
    beta : ndarray, shape (n_variants,)
        Estimated per-allele marginal effects (liability units).
    se : ndarray, shape (n_variants,)
    p : ndarray, shape (n_variants,)
        Two-sided p-values.
    """
    z_ref = _standardised(np.asarray(reference))
    n_ref = z_ref.shape[0]
    per_sd = np.asarray(causal_effects, dtype=np.float64) * _column_sd(causal_reference)
    z_causal = _standardised(np.asarray(causal_reference))
    chrom = np.asarray(chrom).astype(str)
    pos = np.asarray(pos, dtype=np.int64)
    causal_chrom = np.asarray(causal_chrom).astype(str)
    causal_pos = np.asarray(causal_pos, dtype=np.int64)
    marginal = np.zeros(len(pos))
    for c in dict.fromkeys(chrom.tolist()):
        members = np.flatnonzero(chrom == c)
        near_c = np.flatnonzero(causal_chrom == c)
        near_c = near_c[np.argsort(causal_pos[near_c], kind="stable")]
        for lo in range(0, len(members), block):
            rows = members[lo : lo + block]
            a = np.searchsorted(causal_pos[near_c], pos[rows].min() - window_bp, side="left")
            b = np.searchsorted(causal_pos[near_c], pos[rows].max() + window_bp, side="right")
            cols = near_c[a:b]
            if not len(cols):
                continue
            r = z_ref[:, rows].T @ z_causal[:, cols] / n_ref  # (len(rows), len(cols))
            r *= np.abs(pos[rows][:, None] - causal_pos[cols][None, :]) <= window_bp
            marginal[rows] = r @ per_sd[cols]
    noise = z_ref.T @ rng.standard_normal(n_ref).astype(np.float32) / np.sqrt(n_ref * sample_size)
    b_std = marginal + noise
    sd = _column_sd(reference)
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = np.where(sd > 0, b_std / sd, 0.0)
        se = np.where(sd > 0, 1.0 / (np.sqrt(sample_size) * sd), np.inf)
    p = 2 * stats.norm.sf(np.abs(b_std) * np.sqrt(sample_size))
    return beta, se, p


def ld_pairs(
    reference: np.ndarray,
    chrom: np.ndarray,
    pos: np.ndarray,
    *,
    window_bp: int,
    r2_min: float,
    block: int = 512,
) -> sp.csr_matrix:
    """Squared genotype correlations of variant pairs within ``window_bp`` above ``r2_min``.

    Parameters
    ----------
    reference : ndarray, shape (n_reference, n_variants)
        ALT-allele counts of the LD reference panel.
    chrom, pos : ndarray, shape (n_variants,)
        Positions must increase within each chromosome.
    window_bp : int
    r2_min : float
    block : int
        Variants per block of the banded matrix product.

    Returns
    -------
    scipy.sparse.csr_matrix, shape (n_variants, n_variants)
        Symmetric, zero diagonal; entry (i, j) = r² of i and j when on one chromosome, at most
        ``window_bp`` apart and above ``r2_min``.
    """
    chrom = np.asarray(chrom).astype(str)
    pos = np.asarray(pos, dtype=np.int64)
    n_variants = len(pos)
    rows, cols, values = [], [], []
    for c in dict.fromkeys(chrom.tolist()):
        members = np.flatnonzero(chrom == c)
        local = pos[members]
        if np.any(np.diff(local) < 0):
            raise ValueError(f"positions on chromosome {c} are not sorted")
        z = _standardised(np.asarray(reference)[:, members])
        n_ref = max(z.shape[0], 1)
        for lo in range(0, len(members), block):
            hi = min(lo + block, len(members))
            end = int(np.searchsorted(local, local[hi - 1] + window_bp, side="right"))
            r = (z[:, lo:hi].T @ z[:, lo:end]) / n_ref  # (hi - lo, end - lo)
            i, j = np.nonzero(r * r > r2_min)
            j_abs = j + lo
            i_abs = i + lo
            near = (j_abs > i_abs) & (local[j_abs] - local[i_abs] <= window_bp)
            rows.append(members[i_abs[near]])
            cols.append(members[j_abs[near]])
            values.append((r[i[near], j[near]] ** 2).astype(np.float32))
    row = np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)
    col = np.concatenate(cols) if cols else np.empty(0, dtype=np.int64)
    val = np.concatenate(values) if values else np.empty(0, dtype=np.float32)
    upper = sp.coo_matrix((val, (row, col)), shape=(n_variants, n_variants))
    return (upper + upper.T).tocsr()


def clump(p: np.ndarray, pairs: sp.csr_matrix, r2_max: float) -> np.ndarray:
    """Greedy LD clumping (as ``plink --clump``) over precomputed pairs (:func:`ld_pairs`).

    Going through the variants from the smallest p-value (ties: input order; NaN last), a
    variant not yet clumped becomes an index variant and clumps every variant whose r² with it
    exceeds ``r2_max``.

    Returns
    -------
    ndarray of bool, shape (n_variants,)
        True for the index variants.
    """
    p = np.nan_to_num(np.asarray(p, dtype=np.float64), nan=np.inf)
    strong = pairs.multiply(pairs > r2_max).tocsr()
    indptr, indices = strong.indptr, strong.indices
    clumped = np.zeros(len(p), dtype=bool)
    keep = np.zeros(len(p), dtype=bool)
    for i in np.argsort(p, kind="stable"):
        if clumped[i]:
            continue
        keep[i] = True
        clumped[indices[indptr[i] : indptr[i + 1]]] = True
    return keep


def _column_sd(genotypes: np.ndarray) -> np.ndarray:
    """Population standard deviation of each column of small integer genotypes, float64."""
    g = np.asarray(genotypes)
    n = g.shape[0]
    mean = g.sum(axis=0, dtype=np.int64) / n
    square = (g.astype(np.int16) ** 2).sum(axis=0, dtype=np.int64) / n
    return np.sqrt(np.maximum(square - mean**2, 0.0))


def _standardised(genotypes: np.ndarray) -> np.ndarray:
    """Columns centred and scaled to unit variance (constant columns: all zero), float32."""
    x = genotypes.astype(np.float32)
    x -= x.mean(axis=0)
    sd = x.std(axis=0)
    x /= np.where(sd > 0, sd, 1.0)
    return x


def _score(genotypes: np.ndarray, weights: np.ndarray, use: np.ndarray) -> np.ndarray:
    """``genotypes[:, use] @ weights[use]`` in blocks of columns (no full float copy)."""
    columns = np.flatnonzero(use)
    total = np.zeros(genotypes.shape[0])
    for lo in range(0, len(columns), 2048):
        block = columns[lo : lo + 2048]
        total += genotypes[:, block].astype(np.float32) @ weights[block].astype(np.float32)
    return total


def passes_threshold(p: np.ndarray, threshold: float) -> np.ndarray:
    """Variants kept at a p-value threshold: ``p < threshold``; 1 keeps every variant (NaN too)."""
    p = np.asarray(p, dtype=np.float64)
    return p < threshold if threshold < 1 else np.ones(len(p), dtype=bool)


def validation_r2(y: np.ndarray, score: np.ndarray) -> float:
    """Squared Pearson correlation of a score and a quantitative trait (NaN for a constant one)."""
    y = np.asarray(y, dtype=np.float64)
    score = np.asarray(score, dtype=np.float64)
    if np.std(score) == 0 or np.std(y) == 0:
        return float("nan")
    return float(np.corrcoef(score, y)[0, 1] ** 2)


_METRICS = ("auc", "r2")


def clumping_thresholding(
    p: np.ndarray,
    weights: np.ndarray,
    pairs: sp.csr_matrix | None,
    validation: np.ndarray,
    y: np.ndarray,
    *,
    r2_values: Sequence[float],
    p_thresholds: Sequence[float],
    metric: str = "auc",
) -> tuple[np.ndarray, pd.DataFrame]:
    """Clumping + thresholding with (r², p-threshold) chosen on validation individuals.

    Every pair of an r² in ``r2_values`` and a threshold in ``p_thresholds`` gives a score (the
    index variants of clumping at that r², with p below the threshold, weighted by
    ``weights``); the one with the best AUC (a binary trait) or R² (a quantitative one) on
    ``validation`` wins, ties going to the score with fewer variants (the Privé et al. 2019 C+T
    grid, on held-out discovery individuals: neither the target cohort nor the truth is read).

    Parameters
    ----------
    p, weights : ndarray, shape (n_variants,)
    pairs : csr_matrix or None
        From :func:`ld_pairs` with ``r2_min <= min(r2_values)``; None: no clumping.
    validation : ndarray, shape (n_validation, n_variants)
        ALT-allele counts of the validation individuals.
    y : ndarray, shape (n_validation,)
        Case status in {0, 1} (``metric="auc"``) or the trait (``metric="r2"``).
    r2_values, p_thresholds : sequence of float
    metric : {"auc", "r2"}
        ROC AUC of the score for the case status, or the squared correlation of score and
        trait (:func:`validation_r2`).

    Returns
    -------
    chosen : ndarray of bool, shape (n_variants,)
        The variants of the winning score.
    table : DataFrame
        ``clump_r2, p_threshold, n_variants, validation_<metric>`` for every pair (NaN when no
        variant passes), and ``chosen`` (bool).
    """
    from sklearn.metrics import roc_auc_score

    if metric not in _METRICS:
        raise ConfigError(f"validation metric {metric!r} unknown; choose from {list(_METRICS)}")
    y = np.asarray(y)
    if metric == "auc" and len(np.unique(y)) < 2:
        raise ConfigError(
            "the discovery cohort's validation part holds only one phenotype class; raise "
            "'simulate.discovery_samples' or 'simulate.gwas.validation_fraction'"
        )
    if metric == "r2" and not (len(y) > 2 and np.std(y) > 0):
        raise ConfigError(
            f"the discovery cohort's validation part ({len(y)} individuals) has no trait "
            "variance to choose the score by; raise 'simulate.discovery_samples' or "
            "'simulate.gwas.validation_fraction'"
        )
    column = f"validation_{metric}"
    rows, masks = [], []
    for r2 in sorted(float(v) for v in (r2_values if pairs is not None else [1.0])):
        index = clump(p, pairs, r2) if pairs is not None else np.ones(len(p), dtype=bool)
        for t in sorted(float(t) for t in p_thresholds):
            use = index & passes_threshold(p, t)
            value = np.nan
            if use.any():
                score = _score(validation, weights, use)
                value = (
                    float(roc_auc_score(y, score)) if metric == "auc" else validation_r2(y, score)
                )
            rows.append({"clump_r2": r2 if pairs is not None else None, "p_threshold": t,
                         "n_variants": int(use.sum()), column: value})  # fmt: skip
            masks.append(use)
    table = pd.DataFrame(rows)
    if table[column].isna().all():
        raise ConfigError("no variant passes any of 'simulate.gwas.p_thresholds'")
    ranked = table.assign(_neg=-table[column].fillna(-np.inf)).sort_values(
        ["_neg", "n_variants"], kind="stable"
    )
    best = int(ranked.index[0])
    table["chosen"] = table.index == best
    return masks[best], table
