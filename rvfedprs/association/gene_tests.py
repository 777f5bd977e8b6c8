"""The association tests, each a function of efficient scores U and their null covariance Φ.

Every test here reads only (U, Φ) and the variant weights — the sums a federation adds up — so
a federated test equals the pooled one exactly. Weights are SKAT's: w_j = Beta(MAF_j; 1, 25)
density by default.

- :func:`score_test`: U² / V, χ²_1 (one variant).
- :func:`quadratic_test`: Uᵀ Φ⁺ U, χ² with rank(Φ) degrees of freedom — the heterogeneous
  single-variant test over groups (U stacked by group: a flipped effect does not cancel).
- :func:`burden_test`: (wᵀU)² / wᵀΦw, χ²_1; its heterogeneous form is :func:`quadratic_test`
  on the per-group burden scores.
- :func:`skat_test`: Q = Σ_j w_j² U_j², a mixture Σ λ_k χ²_1 with λ = eig(W Φ W) (Wu et al.
  2011); on the scores stacked by group it is MetaSKAT's heterogeneous SKAT (Lee et al. 2013).
- :func:`skato_acat_test`: Q_ρ = (1 − ρ) Q_SKAT + ρ Q_burden over SKAT-O's grid of ρ, each with
  its exact null mixture, combined by the Cauchy method. **Not** Lee et al.'s (2012) SKAT-O
  p-value (the minimum over ρ with its joint null): the ρ-wise p-values are combined as ACAT does
  across tests, which is valid under any dependence and avoids the one-dimensional integral.
- :func:`acat_v_test`: the Cauchy combination of the single-variant p-values with weights
  w_j² MAF_j (1 − MAF_j) (Liu et al. 2019).
"""

from __future__ import annotations

import numpy as np
from scipy import special

from rvfedprs.association.pvalues import cauchy_combination, chi2_mixture_sf

__all__ = [
    "RHO_GRID",
    "beta_weights",
    "score_test",
    "quadratic_test",
    "burden_test",
    "skat_test",
    "skato_acat_test",
    "acat_v_test",
    "acat_v_weights",
    "collapse_matrix",
]

#: SKAT-O's grid of ρ (the SKAT package's ``optimal.adj``).
RHO_GRID: tuple[float, ...] = (0.0, 0.01, 0.04, 0.09, 0.25, 0.5, 1.0)
#: A variance (or eigenvalue) below this share of the largest is taken as 0.
_RELATIVE_TOL = 1e-10


def beta_weights(maf: np.ndarray, a: float = 1.0, b: float = 25.0) -> np.ndarray:
    """SKAT's weights w_j = Beta(MAF_j; a, b) density."""
    from scipy.stats import beta as beta_distribution

    return beta_distribution.pdf(np.clip(np.asarray(maf, np.float64), 1e-12, 0.5), a, b)


def score_test(score: np.ndarray, variance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U² / V, its χ²_1 p-value) per variant; NaN where V is 0 (nobody carries it)."""
    score, variance = np.asarray(score, np.float64), np.asarray(variance, np.float64)
    top = float(np.max(variance, initial=0.0))
    usable = variance > _RELATIVE_TOL * max(top, 1e-300)
    statistic = np.full(score.shape, np.nan)
    statistic[usable] = score[usable] ** 2 / variance[usable]
    p = np.full(score.shape, np.nan)
    p[usable] = special.chdtrc(1, statistic[usable])
    return statistic, p


def quadratic_test(score: np.ndarray, covariance: np.ndarray) -> tuple[float, float, int]:
    """(Uᵀ Φ⁺ U, its χ² p-value, the degrees of freedom rank(Φ)); NaNs for rank 0."""
    score = np.asarray(score, np.float64).reshape(-1)
    values, vectors = np.linalg.eigh(np.asarray(covariance, np.float64))
    top = float(np.max(values, initial=0.0))
    keep = values > _RELATIVE_TOL * max(top, 1e-300)
    if not keep.any():
        return float("nan"), float("nan"), 0
    projected = vectors[:, keep].T @ score
    statistic = float(np.sum(projected**2 / values[keep]))
    df = int(keep.sum())
    return statistic, float(special.chdtrc(df, statistic)), df


def burden_test(
    score: np.ndarray, covariance: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """((wᵀU)² / wᵀΦw, its χ²_1 p-value); NaNs when wᵀΦw is 0."""
    w = np.asarray(weights, np.float64)
    variance = float(w @ covariance @ w)
    if not variance > 0:
        return float("nan"), float("nan")
    statistic = float(w @ score) ** 2 / variance
    return statistic, float(special.chdtrc(1, statistic))


def _mixture(q: float, kernel: np.ndarray) -> float:
    values = np.linalg.eigvalsh((kernel + kernel.T) / 2)
    return chi2_mixture_sf(q, values)[0]


def _weighted_covariance(covariance: np.ndarray, weights: np.ndarray) -> np.ndarray | None:
    """W Φ W, or None when it is 0 (no variant carried)."""
    w = np.asarray(weights, np.float64)
    weighted = w[:, None] * np.asarray(covariance, np.float64) * w[None, :]
    return weighted if np.any(np.diag(weighted) > 0) else None


def skat_test(
    score: np.ndarray, covariance: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """(Q = Σ w_j² U_j², P(Σ λ_k χ²_1 > Q)) with λ = eig(W Φ W); NaNs when W Φ W is 0."""
    weighted = _weighted_covariance(covariance, weights)
    if weighted is None:
        return float("nan"), float("nan")
    statistic = float(np.sum((np.asarray(weights, np.float64) * score) ** 2))
    return statistic, _mixture(statistic, weighted)


def skato_acat_test(
    score: np.ndarray, covariance: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """(min_ρ p_ρ, the Cauchy combination of the p_ρ over :data:`RHO_GRID`)."""
    weighted = _weighted_covariance(covariance, weights)
    if weighted is None:
        return float("nan"), float("nan")
    ws = np.asarray(weights, np.float64) * np.asarray(score, np.float64)
    k = ws.size
    p_values = []
    for rho in RHO_GRID:
        q = (1.0 - rho) * float(ws @ ws) + rho * float(ws.sum()) ** 2
        root = _sqrt_psd((1.0 - rho) * np.eye(k) + rho * np.ones((k, k)))
        p_values.append(_mixture(q, root @ weighted @ root))
    return float(np.min(p_values)), cauchy_combination(p_values)


def _sqrt_psd(matrix: np.ndarray) -> np.ndarray:
    values, vectors = np.linalg.eigh(matrix)
    return (vectors * np.sqrt(np.clip(values, 0.0, None))) @ vectors.T


def acat_v_weights(weights: np.ndarray, maf: np.ndarray) -> np.ndarray:
    """ACAT-V's weight of each variant, w_j² MAF_j (1 − MAF_j)."""
    maf = np.asarray(maf, np.float64)
    return np.asarray(weights, np.float64) ** 2 * maf * (1.0 - maf)


def acat_v_test(p_values: np.ndarray, acat_weights: np.ndarray) -> float:
    """ACAT-V: the Cauchy combination of single-variant p-values (:func:`acat_v_weights`)."""
    return cauchy_combination(p_values, acat_weights)


def collapse_matrix(ultra_rare: np.ndarray) -> np.ndarray:
    """T such that Tᵀ U replaces the ultra-rare variants by one pseudo-variant (their sum).

    Columns: the variants that are not ultra-rare, in order, then (when two or more are) one
    column summing the ultra-rare ones. With a single ultra-rare variant nothing is collapsed.
    """
    ultra = np.asarray(ultra_rare, bool)
    k = ultra.size
    if ultra.sum() < 2:
        return np.eye(k)
    kept = np.flatnonzero(~ultra)
    out = np.zeros((k, kept.size + 1))
    out[kept, np.arange(kept.size)] = 1.0
    out[ultra, -1] = 1.0
    return out
