"""Per-variant effects: the α-model, effects correlated across groups, implied odds ratios.

The α-model (Speed et al. 2012; Zeng et al. 2018) draws a causal variant's effect per copy of
its ALT allele as ``beta_j ~ N(0, sigma2 * h_j**alpha)`` with ``h_j = 2 p_j (1 - p_j)`` its
heterozygosity. With unlinked causal variants in Hardy–Weinberg equilibrium the expected
variance they explain in a population where they have frequencies ``q_j`` is

    E[h2] = sigma2 * sum_j h_j**alpha * 2 q_j (1 - q_j),

so :func:`alpha_sigma2` solves it for ``sigma2`` given the *expected* h²: the effects are drawn
once, never rescaled to hit a realised total, and a variant's effect distribution depends on its
frequency only, not on how many people were simulated.
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


def correlated_effects(
    rng: np.random.Generator,
    sd: np.ndarray,
    n_groups: int,
    rho: float,
    *,
    risk_fraction: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """Effects of variants in several groups with cross-group correlation ``rho``.

    ``beta_jm = sqrt(rho) * b_j + sqrt(1 - rho) * e_jm`` with ``b_j`` and ``e_jm`` independent,
    both of standard deviation ``sd_j``: every ``beta_jm`` has variance ``sd_j**2`` and two
    groups' effects have correlation ``rho``. The base effect ``b_j`` is ``sd_j * |z|`` with a
    positive sign with probability ``risk_fraction`` (0.5: ``b_j ~ N(0, sd_j**2)``).

    Parameters
    ----------
    rng : numpy Generator
    sd : ndarray, shape (n_variants,)
    n_groups : int
    rho : float in [0, 1]
    risk_fraction : float in [0, 1]

    Returns
    -------
    effects : ndarray, shape (n_variants, n_groups)
    base : ndarray, shape (n_variants,)
        ``b_j``.
    """
    if not 0 <= rho <= 1:
        raise ConfigError(f"an effect correlation must be in [0, 1], got {rho!r}")
    sd = np.asarray(sd, dtype=np.float64)
    n = len(sd)
    sign = np.where(rng.random(n) < risk_fraction, 1.0, -1.0)
    base = sd * np.abs(rng.standard_normal(n)) * sign
    deviation = sd[:, None] * rng.standard_normal((n, n_groups))
    effects = np.sqrt(rho) * base[:, None] + np.sqrt(1.0 - rho) * deviation
    return effects, base


def liability_odds_ratio(effect: np.ndarray, prevalence: np.ndarray | float) -> np.ndarray:
    """Odds ratio of one ALT copy against none implied by the liability-threshold model.

    With the rest of the liability N(0, 1) and the threshold ``t = Phi^-1(1 - K)`` at prevalence
    ``K``, a carrier's risk is ``1 - Phi(t - beta)``; the odds ratio is its odds over ``K``'s.
    """
    k = np.asarray(prevalence, dtype=np.float64)
    t = stats.norm.isf(k)
    risk = stats.norm.sf(t - np.asarray(effect, dtype=np.float64))
    return (risk / (1.0 - risk)) / (k / (1.0 - k))
