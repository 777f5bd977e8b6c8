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

Each test takes a batch: U of shape (..., k), Φ (..., k, k) and weights (..., k) give one
result per leading index (a float for a single unit), by numpy's stacked linear algebra, so the
units of one size are tested together; a mixture whose λ are one distinct value (every
one-variant unit) is a scaled χ² taken for the whole batch at once
(:func:`~rvfedprs.association.pvalues.chi2_mixture_sf_rows`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from scipy import special

from rvfedprs.association.pvalues import cauchy_combination, chi2_mixture_sf_rows

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


def _value(x: np.ndarray):
    """A 0-d result as a Python number (one unit's test), a batch's as its array."""
    return x.item() if np.ndim(x) == 0 else x


def beta_weights(maf: np.ndarray, a: float = 1.0, b: float = 25.0) -> np.ndarray:
    """SKAT's weights w_j = Beta(MAF_j; a, b) density."""
    from scipy.stats import beta as beta_distribution

    return beta_distribution.pdf(np.clip(np.asarray(maf, np.float64), 1e-12, 0.5), a, b)


def score_test(score: np.ndarray, variance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(U² / V, its χ²_1 p-value) per variant; NaN where V is 0 (nobody carries it).

    A V below 1e-10 of the largest along the last axis counts as 0 (rows of a batch apart).
    """
    score, variance = np.asarray(score, np.float64), np.asarray(variance, np.float64)
    top = np.max(variance, axis=-1, keepdims=True, initial=0.0)
    usable = variance > _RELATIVE_TOL * np.maximum(top, 1e-300)
    statistic = np.where(usable, np.square(score) / np.where(usable, variance, 1.0), np.nan)
    return statistic, special.chdtrc(1, statistic)


def quadratic_test(score: np.ndarray, covariance: np.ndarray) -> tuple[float, float, int]:
    """(Uᵀ Φ⁺ U, its χ² p-value, the degrees of freedom rank(Φ)); NaNs for rank 0."""
    score = np.asarray(score, np.float64)
    values, vectors = np.linalg.eigh(np.asarray(covariance, np.float64))
    top = np.max(values, axis=-1, keepdims=True, initial=0.0)
    keep = values > _RELATIVE_TOL * np.maximum(top, 1e-300)
    projected = (np.swapaxes(vectors, -1, -2) @ score[..., None])[..., 0]
    terms = np.where(keep, np.square(projected) / np.where(keep, values, 1.0), 0.0)
    df = keep.sum(axis=-1)
    statistic = np.where(df > 0, terms.sum(axis=-1), np.nan)
    return _value(statistic), _value(special.chdtrc(df, statistic)), _value(df)


def burden_test(
    score: np.ndarray, covariance: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """((wᵀU)² / wᵀΦw, its χ²_1 p-value); NaNs when wᵀΦw is 0."""
    w = np.asarray(weights, np.float64)[..., None, :]
    variance = (w @ np.asarray(covariance, np.float64) @ np.swapaxes(w, -1, -2))[..., 0, 0]
    burden = (w @ np.asarray(score, np.float64)[..., :, None])[..., 0, 0]
    carried = variance > 0
    statistic = np.where(carried, np.square(burden) / np.where(carried, variance, 1.0), np.nan)
    return _value(statistic), _value(special.chdtrc(1, statistic))


def _weighted_covariance(covariance: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """W Φ W."""
    w = np.asarray(weights, np.float64)
    return w[..., :, None] * np.asarray(covariance, np.float64) * w[..., None, :]


def _carried(weighted: np.ndarray) -> np.ndarray:
    """Whether W Φ W is not 0 (some variant carried)."""
    return np.any(np.diagonal(weighted, axis1=-2, axis2=-1) > 0, axis=-1)


def _mixture(q: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    values = np.linalg.eigvalsh((kernel + np.swapaxes(kernel, -1, -2)) / 2)
    return chi2_mixture_sf_rows(q, values)


def skat_test(
    score: np.ndarray, covariance: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """(Q = Σ w_j² U_j², P(Σ λ_k χ²_1 > Q)) with λ = eig(W Φ W); NaNs when W Φ W is 0."""
    w = np.asarray(weights, np.float64)
    weighted = _weighted_covariance(covariance, w)
    carried = _carried(weighted)
    statistic = np.sum(np.square(w * np.asarray(score, np.float64)), axis=-1)
    p = _mixture(statistic, weighted)
    return _value(np.where(carried, statistic, np.nan)), _value(np.where(carried, p, np.nan))


def skato_acat_test(
    score: np.ndarray, covariance: np.ndarray, weights: np.ndarray
) -> tuple[float, float]:
    """(min_ρ p_ρ, the Cauchy combination of the p_ρ over :data:`RHO_GRID`)."""
    w = np.asarray(weights, np.float64)
    weighted = _weighted_covariance(covariance, w)
    carried = _carried(weighted)
    ws = w * np.asarray(score, np.float64)
    rho = np.asarray(RHO_GRID)
    q = ((1.0 - rho) * np.sum(np.square(ws), axis=-1)[..., None]
         + rho * np.square(np.sum(ws, axis=-1))[..., None])  # fmt: skip
    roots = _rho_roots(ws.shape[-1])
    p = _mixture(q, roots @ weighted[..., None, :, :] @ roots)  # (..., ρ)
    statistic, combined = np.min(p, axis=-1), cauchy_combination(p)
    return (_value(np.where(carried, statistic, np.nan)),
            _value(np.where(carried, combined, np.nan)))  # fmt: skip


@lru_cache(maxsize=64)
def _rho_roots(k: int) -> np.ndarray:
    """R_ρ^½ of SKAT-O's correlation R_ρ = (1 − ρ) I + ρ 11ᵀ for each ρ: shape (ρ, k, k)."""
    roots = np.stack([_sqrt_psd((1.0 - rho) * np.eye(k) + rho * np.ones((k, k)))
                      for rho in RHO_GRID])  # fmt: skip
    roots.setflags(write=False)
    return roots


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
