"""Per-variant effects: the α-model, effects correlated across groups, implied odds ratios.

The α-model (Speed et al. 2012; Zeng et al. 2018) draws a causal variant's effect per copy of
its ALT allele as ``beta_j ~ N(0, sigma2 * h_j**alpha)`` with ``h_j = 2 p_j (1 - p_j)`` its
heterozygosity. With unlinked causal variants in Hardy–Weinberg equilibrium the expected
variance they explain in a population where they have frequencies ``q_j`` is

    E[h2] = sigma2 * sum_j h_j**alpha * 2 q_j (1 - q_j),

so :func:`alpha_sigma2` solves it for ``sigma2`` given the *expected* h²: the effects are drawn
once, never rescaled to hit a realised total, and a variant's effect distribution depends on its
frequency only, not on how many people were simulated.

Across groups a variant's effects are ``beta_j ~ N(0, sd_j**2 * Sigma)`` with ``Sigma`` a group ×
group correlation matrix (:func:`correlation_matrix`; a scalar ρ stands for the equicorrelation
matrix), so opposite effects (ρ = −1) can be drawn as well as shared or independent ones.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from rvfedprs.exceptions import ConfigError

__all__ = [
    "heterozygosity",
    "alpha_variance",
    "alpha_sigma2",
    "expected_h2",
    "correlation_matrix",
    "correlated_effects",
    "liability_odds_ratio",
]


def heterozygosity(frequency: np.ndarray) -> np.ndarray:
    """``2 p (1 - p)``, elementwise."""
    p = np.asarray(frequency, dtype=np.float64)
    return 2.0 * p * (1.0 - p)


def alpha_variance(frequency: np.ndarray, alpha: float) -> np.ndarray:
    """The α-model's relative effect variance ``[2 p (1 - p)]**alpha`` (``sigma2`` = 1).

    Raises
    ------
    ConfigError
        For a frequency of 0 or 1 with alpha < 0 (an infinite variance).
    """
    h = heterozygosity(frequency)
    if alpha < 0 and np.any(h <= 0):
        bad = np.asarray(frequency, dtype=np.float64).ravel()[np.ravel(h <= 0)][0]
        raise ConfigError(f"the α-model needs 0 < p < 1 for alpha < 0; got frequency {bad}")
    return h**alpha


def expected_h2(
    sigma2: float,
    frequency: np.ndarray,
    group_frequency: np.ndarray,
    causal: np.ndarray,
    alpha: float,
) -> np.ndarray:
    """Expected variance explained per group by α-model effects (unlinked variants, HWE).

    Parameters
    ----------
    sigma2 : float
    frequency : ndarray, shape (n_variants,)
        The frequency the effect variance is scaled by (``p_j``).
    group_frequency : ndarray, shape (n_variants, n_groups)
        ALT frequency of each variant in each group (``q_jm``).
    causal : ndarray of bool, shape (n_variants, n_groups)
        Whether the variant has an effect in the group.
    alpha : float

    Returns
    -------
    ndarray, shape (n_groups,)
    """
    weight = alpha_variance(frequency, alpha)[:, None] * heterozygosity(group_frequency)
    return sigma2 * (weight * np.asarray(causal, dtype=bool)).sum(axis=0)


def alpha_sigma2(
    h2: float,
    frequency: np.ndarray,
    group_frequency: np.ndarray,
    causal: np.ndarray,
    alpha: float,
) -> float:
    """``sigma2`` such that the expected h² (:func:`expected_h2`), averaged over groups, is ``h2``.

    Returns 0 when ``h2`` is 0 or there is no causal variant.
    """
    per_unit = expected_h2(1.0, frequency, group_frequency, causal, alpha)
    total = float(per_unit.mean()) if per_unit.size else 0.0
    return float(h2) / total if h2 > 0 and total > 0 else 0.0


def correlation_matrix(value, n_groups: int, *, name: str = "effect correlation") -> np.ndarray:
    """The group × group correlation matrix that a scalar ρ or a matrix stands for, checked.

    A scalar gives the equicorrelation matrix (1 on the diagonal, ρ elsewhere). It is positive
    semi-definite only for ``rho >= -1 / (n_groups - 1)``: G groups cannot all be pairwise
    more opposed than that (−1 for 2 groups, −½ for 3), so stronger opposition needs a matrix.

    Parameters
    ----------
    value : float or array_like, shape (n_groups, n_groups)
    n_groups : int
    name : str
        What the value is called in error messages (e.g. the configuration key).

    Returns
    -------
    ndarray, shape (n_groups, n_groups)

    Raises
    ------
    ConfigError
        Naming the problem and the value: ρ outside [−1, 1] or below −1/(G−1); a matrix of the
        wrong shape, not symmetric, without a unit diagonal, with entries outside [−1, 1], or
        not positive semi-definite.
    """
    if _is_scalar(value):
        rho = float(value)
        if not -1 <= rho <= 1:
            raise ConfigError(f"{name}: a correlation must be in [-1, 1], got {value!r}")
        if n_groups > 1 and rho < -1 / (n_groups - 1) - 1e-12:
            raise ConfigError(
                f"{name}: {value!r} is below -1/(G-1) = {-1 / (n_groups - 1):.4g} for G = "
                f"{n_groups} groups: {n_groups} groups' effects cannot all be pairwise "
                "correlated below that (the equicorrelation matrix is not positive "
                "semi-definite); give a group x group matrix or per-group signs for opposite "
                "effects between some groups"
            )
        matrix = np.full((n_groups, n_groups), rho)
        np.fill_diagonal(matrix, 1.0)
        return matrix
    try:
        matrix = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}: {value!r} is not a matrix of numbers") from None
    if matrix.shape != (n_groups, n_groups):
        raise ConfigError(
            f"{name}: needs a {n_groups} x {n_groups} matrix (one row and column per group), "
            f"got shape {matrix.shape}: {value!r}"
        )
    if not np.all(np.isfinite(matrix)) or np.any(np.abs(matrix) > 1):
        raise ConfigError(f"{name}: entries must be in [-1, 1], got {value!r}")
    if not np.allclose(np.diag(matrix), 1.0, rtol=0, atol=1e-9):
        raise ConfigError(
            f"{name}: the diagonal must be 1 (a group's effects correlate 1 with themselves), "
            f"got {np.diag(matrix).tolist()} in {value!r}"
        )
    asymmetric = np.argwhere(~np.isclose(matrix, matrix.T, rtol=0, atol=1e-9))
    if len(asymmetric):
        i, j = asymmetric[0]
        raise ConfigError(
            f"{name}: the matrix must be symmetric; entry [{i}, {j}] = {matrix[i, j]:g} but "
            f"[{j}, {i}] = {matrix[j, i]:g} in {value!r}"
        )
    smallest = float(np.linalg.eigvalsh(matrix).min())
    if smallest < -1e-9:
        raise ConfigError(
            f"{name}: the matrix is not positive semi-definite (smallest eigenvalue "
            f"{smallest:.4g}), so no effects can have these correlations: {value!r}"
        )
    return matrix


def _is_scalar(value) -> bool:
    return np.isscalar(value) or (isinstance(value, np.ndarray) and value.ndim == 0)


def _factor(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``A`` with ``A A^T = matrix``, and the principal axis of ``matrix``.

    An eigen decomposition, so singular PSD matrices work too; the axis is oriented to a
    positive sum (or, when that is 0, a positive first non-zero entry).
    """
    values, vectors = np.linalg.eigh(matrix)
    factor = vectors * np.sqrt(np.clip(values, 0.0, None))
    axis = vectors[:, np.argmax(values)]
    total = axis.sum()
    lead = total if abs(total) > 1e-9 else axis[np.flatnonzero(np.abs(axis) > 1e-9)[0]]
    return factor, axis * np.sign(lead)


def correlated_effects(
    rng: np.random.Generator,
    sd: np.ndarray,
    n_groups: int,
    rho,
    *,
    risk_fraction: float = 0.5,
    sign: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Effects of variants in several groups, ``beta_j ~ N(0, sd_j**2 * Sigma)``.

    With a scalar ``rho`` in [0, 1]: ``beta_jm = sqrt(rho) * b_j + sqrt(1 - rho) * e_jm`` with
    ``b_j`` and ``e_jm`` independent, both of standard deviation ``sd_j``: every ``beta_jm`` has
    variance ``sd_j**2`` and two groups' effects have correlation ``rho``. The base effect
    ``b_j`` is ``sd_j * |z|`` with a positive sign with probability ``risk_fraction`` (0.5:
    ``b_j ~ N(0, sd_j**2)``).

    Otherwise (a matrix, or a negative scalar: :func:`correlation_matrix`) each row is
    ``sd_j * A z_j`` with ``A A^T = Sigma`` and ``z_j`` standard normal, the whole row's sign
    flipped so that its projection on Sigma's principal axis (for equicorrelation, the mean
    effect) is positive with probability ``risk_fraction``; the flip leaves the covariance
    ``sd_j**2 * Sigma`` unchanged, and at 0.5 the rows are exactly N(0, sd_j**2 Sigma). The
    base effect is then ``sd_j`` times that signed projection.

    Parameters
    ----------
    rng : numpy Generator
    sd : ndarray, shape (n_variants,)
    n_groups : int
    rho : float in [-1, 1], or array_like of shape (n_groups, n_groups)
    risk_fraction : float in [0, 1]
    sign : ndarray of ±1, shape (n_variants,), optional
        The base effects' signs (e.g. one per gene), instead of drawing them with
        ``risk_fraction``.

    Returns
    -------
    effects : ndarray, shape (n_variants, n_groups)
    base : ndarray, shape (n_variants,)
        ``b_j``.
    """
    sd = np.asarray(sd, dtype=np.float64)
    n = len(sd)
    if sign is None:
        sign = np.where(rng.random(n) < risk_fraction, 1.0, -1.0)
    else:
        sign = np.asarray(sign, dtype=np.float64)
        if sign.shape != (n,):
            raise ValueError(f"sign has shape {sign.shape}, expected ({n},)")
    if _is_scalar(rho) and 0 <= rho <= 1:
        base = sd * np.abs(rng.standard_normal(n)) * sign
        deviation = sd[:, None] * rng.standard_normal((n, n_groups))
        effects = np.sqrt(rho) * base[:, None] + np.sqrt(1.0 - rho) * deviation
        return effects, base
    factor, axis = _factor(correlation_matrix(rho, n_groups))
    rows = rng.standard_normal((n, n_groups)) @ factor.T  # each row ~ N(0, Sigma)
    along = rows @ axis
    flip = sign * np.where(along < 0, -1.0, 1.0)
    return sd[:, None] * rows * flip[:, None], sd * np.abs(along) * sign


def liability_odds_ratio(effect: np.ndarray, prevalence: np.ndarray | float) -> np.ndarray:
    """Odds ratio of one ALT copy against none implied by the liability-threshold model.

    With the rest of the liability N(0, 1) and the threshold ``t = Phi^-1(1 - K)`` at prevalence
    ``K``, a carrier's risk is ``1 - Phi(t - beta)``; the odds ratio is its odds over ``K``'s.
    """
    k = np.asarray(prevalence, dtype=np.float64)
    t = stats.norm.isf(k)
    risk = stats.norm.sf(t - np.asarray(effect, dtype=np.float64))
    return (risk / (1.0 - risk)) / (k / (1.0 - k))
