"""Homer-style membership test on summed allele counts (design §3 "where the data lives", §10).

A coordinator that receives a pool's summed allele counts knows its allele frequencies ``M_j``.
Homer et al. (2008), "Resolving individuals contributing trace amounts of DNA to highly complex
mixtures using high-density SNP genotyping microarrays", showed that this identifies members:
for an individual with allele frequency ``Y_j ∈ {0, ½, 1}`` (dosage / 2) at variant ``j`` and a
reference population's frequency ``Pop_j``,

    D_j = |Y_j − Pop_j| − |Y_j − M_j|

is on average positive when the individual is in the pool (its genotype pulls ``M`` towards
itself) and zero when pool and reference are samples of the same population. The test statistic
is the one-sample t statistic of the ``D_j`` over the ``s`` variants the individual has called,
``T = mean(D) / (sd(D) / √s)``, compared with Student's t on ``s − 1`` degrees of freedom
(one-sided: large T = member).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from rvfedprs.evaluation.attacks.mia import decision_metrics
from rvfedprs.exceptions import InputDataError

__all__ = ["pool_frequencies", "homer_statistic", "homer_p_values", "homer_test"]


def pool_frequencies(allele_counts: np.ndarray, allele_totals: np.ndarray) -> np.ndarray:
    """Allele frequencies from summed counts: ``counts / totals`` (totals = 2 × called samples).

    Parameters
    ----------
    allele_counts, allele_totals : arrays, shape (s,)

    Raises
    ------
    InputDataError
        On a shape mismatch, a total ≤ 0, or a count outside [0, total] (variant index named).
    """
    counts = np.asarray(allele_counts, dtype=np.float64)
    totals = np.asarray(allele_totals, dtype=np.float64)
    if counts.shape != totals.shape or counts.ndim != 1:
        raise InputDataError(f"{counts.shape} allele counts but {totals.shape} allele totals")
    bad = np.flatnonzero((totals <= 0) | (counts < 0) | (counts > totals))
    if bad.size:
        j = int(bad[0])
        raise InputDataError(
            f"{bad.size} variants have impossible summed counts, e.g. variant {j}: "
            f"count {counts[j]:g} of {totals[j]:g} alleles"
        )
    return counts / totals


def _checked_frequency(values: np.ndarray, s: int, what: str) -> np.ndarray:
    f = np.asarray(values, dtype=np.float64)
    if f.shape != (s,):
        raise InputDataError(f"{what} has shape {f.shape}, expected ({s},)")
    bad = np.flatnonzero(~np.isfinite(f) | (f < 0) | (f > 1))
    if bad.size:
        raise InputDataError(
            f"{what}: {bad.size} values outside [0, 1], e.g. variant {int(bad[0])}: {f[bad[0]]}"
        )
    return f


def homer_statistic(
    genotypes: np.ndarray, pool_frequency: np.ndarray, reference_frequency: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Homer's T for each individual, and the number of variants it rests on.

    Parameters
    ----------
    genotypes : array, shape (n, s)
        Dosages in [0, 2] of the allele the pool counted; NaN = missing (that variant is left
        out for that individual).
    pool_frequency : array, shape (s,)
        The pool's frequency of that allele (:func:`pool_frequencies`).
    reference_frequency : array, shape (s,)
        A reference population's frequency of the same allele.

    Returns
    -------
    t : ndarray, shape (n,)
        ``mean(D) / (sd(D) / √s_i)``; ±inf when sd is 0 and the mean is not, 0 when both are.
    n_variants : ndarray of int, shape (n,)
        Variants called for each individual.

    Raises
    ------
    InputDataError
        On a dosage outside [0, 2], or an individual with fewer than 2 called variants.
    """
    g = np.atleast_2d(np.asarray(genotypes, dtype=np.float64))
    s = g.shape[1]
    m = _checked_frequency(pool_frequency, s, "pool frequency")
    pop = _checked_frequency(reference_frequency, s, "reference frequency")
    called = np.isfinite(g)
    if ((g[called] < 0) | (g[called] > 2)).any():
        raise InputDataError("genotype dosages must lie in [0, 2]")
    y = g / 2.0
    d = np.where(called, np.abs(y - pop) - np.abs(y - m), 0.0)
    k = called.sum(axis=1)
    if (k < 2).any():
        i = int(np.flatnonzero(k < 2)[0])
        raise InputDataError(
            f"individual {i} has {int(k[i])} called variants; Homer's test needs 2"
        )
    mean = d.sum(axis=1) / k
    var = (np.where(called, (d - mean[:, None]) ** 2, 0.0)).sum(axis=1) / (k - 1)
    se = np.sqrt(var / k)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(se > 0, mean / se, np.where(mean == 0, 0.0, np.sign(mean) * np.inf))
    return t, k


def homer_p_values(t: np.ndarray, n_variants: np.ndarray) -> np.ndarray:
    """One-sided p-values ``Pr[T_{s−1} ≥ t]`` (small = evidence of membership)."""
    return stats.t.sf(np.asarray(t, dtype=np.float64), np.asarray(n_variants) - 1)


def homer_test(
    members: np.ndarray,
    nonmembers: np.ndarray,
    pool_frequency: np.ndarray,
    reference_frequency: np.ndarray,
    *,
    alpha: float = 0.05,
) -> dict[str, float]:
    """Power and false-positive rate of Homer's test on known members and non-members.

    Parameters
    ----------
    members : array, shape (n_members, s)
        Dosages of individuals in the pool.
    nonmembers : array, shape (n_nonmembers, s)
        Dosages of individuals not in the pool (from the reference's population).
    pool_frequency, reference_frequency : arrays, shape (s,)
    alpha : float
        One-sided significance level of the per-individual test.

    Returns
    -------
    dict
        :func:`~.mia.decision_metrics` with positives = members and the rule ``p < alpha``
        (``tpr`` is the power, ``fpr`` ≈ ``alpha`` when the test is calibrated), ranked by T
        for ``advantage``/``auc``; plus ``alpha`` and ``n_variants`` (median called).
    """
    if not 0 < alpha < 1:
        raise InputDataError(f"alpha must be in (0, 1), got {alpha}")
    t_in, k_in = homer_statistic(members, pool_frequency, reference_frequency)
    t_out, k_out = homer_statistic(nonmembers, pool_frequency, reference_frequency)
    t = np.concatenate([t_in, t_out])
    k = np.concatenate([k_in, k_out])
    truth = np.concatenate([np.ones(t_in.size, bool), np.zeros(t_out.size, bool)])
    finite = np.clip(t, -1e300, 1e300)
    out = decision_metrics(homer_p_values(t, k) < alpha, truth, scores=finite)
    out["alpha"] = alpha
    out["n_variants"] = int(np.median(k))
    return out
