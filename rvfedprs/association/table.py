"""The association table: every test of every variant and unit, from the summed statistics.

One row per variant or unit × test × MAF cut-off × mask × group, REGENIE-like:

``unit, test, maf_max, mask, group, n_variants, n_carriers, mac, statistic, df, p``

- single variants: ``score`` (pooled, ``group`` = ``all``; and within each group, ``group`` = its
  name) and ``score_het`` (``group`` = ``by_group``: Uᵀ Φ⁺ U over the groups' scores);
- units (genes/regions), for each mask and MAF cut-off, on the variants carried in the training
  data: ``burden``, ``skat``, ``skato_acat`` and ``acat_v`` pooled; ``burden_het``, ``skat_het``
  and ``acat_v_het`` over the groups; ``burden`` within each group; then per unit ``acat_o``
  (the Cauchy combination of its pooled burden, SKAT and ACAT-V p-values over every cut-off and
  mask, as STAAR-O and SAIGE-GENE+ do) and ``acat_o_het`` (of the heterogeneous ones).

Ultra-rare variants (pooled MAC ≤ ``collapse_mac``) of a unit are collapsed into one
pseudo-variant before the unit's tests (SAIGE-GENE+): its score is their summed score, its MAF
the sum of theirs (at most 0.5), its Beta weight that MAF's; ACAT-V gives it the mean of their
ACAT weights (STAAR). ``n_carriers`` of a unit row is the carrier count summed over its
variants (a person carrying two of them counts twice); ``mac`` is exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from rvfedprs.association.gene_tests import (
    acat_v_test,
    acat_v_weights,
    beta_weights,
    burden_test,
    collapse_matrix,
    quadratic_test,
    score_test,
    skat_test,
    skato_acat_test,
)
from rvfedprs.association.pvalues import cauchy_combination
from rvfedprs.association.scores import EfficientScores

__all__ = ["COLUMNS", "POOLED", "HETEROGENEOUS", "association_table", "lambda_gc"]

COLUMNS = ("unit", "test", "maf_max", "mask", "group", "n_variants", "n_carriers", "mac",
           "statistic", "df", "p")  # fmt: skip
#: The ``group`` of a pooled test and of a heterogeneous (across groups) one.
POOLED, HETEROGENEOUS = "all", "by_group"
_ACAT_O_TESTS = ("burden", "skat", "acat_v")


def lambda_gc(p_values: np.ndarray) -> float:
    """Genomic inflation: median χ²_1 quantile of the p-values / the χ²_1 median (NaN if none)."""
    p = np.asarray(p_values, np.float64)
    p = p[np.isfinite(p)]
    if p.size == 0:
        return float("nan")
    # χ²_1's isf and median, by the kernels scipy.stats.chi2 calls (importing it costs more)
    return float(np.median(special.chdtri(1, p)) / (2 * special.gammaincinv(0.5, 0.5)))


def association_table(
    scores: EfficientScores,
    variants: pd.DataFrame,
    *,
    group_names: Sequence[str],
    maf_cutoffs: Sequence[float] = (0.01, 0.001),
    masks: Mapping[str, np.ndarray] | None = None,
    collapse_mac: float = 10,
    beta: tuple[float, float] = (1.0, 25.0),
) -> pd.DataFrame:
    """Every test's row (module docstring) from the summed statistics.

    Parameters
    ----------
    scores : EfficientScores
        The summed statistics of the federation (or of pooled data: the same).
    variants : DataFrame
        ``rare_variants.tsv``: ``variant_key`` and ``maf`` (the federated MAF the weights and
        cut-offs read), in the dosage columns' order.
    group_names : sequence of str
        One name per group (M of them).
    maf_cutoffs : sequence of float
        A unit is tested on its variants with MAF ≤ each.
    masks : mapping of str to bool array, shape (p,), optional
        Functional masks (e.g. predicted loss of function); default ``{"all": every variant}``.
    collapse_mac : float
        Variants with pooled MAC at most this are collapsed per unit (0 collapses nothing).
    beta : (float, float)
        The Beta weights' (a, b).
    """
    p = scores.n_rare
    if len(variants) != p:
        raise ValueError(f"the variant table has {len(variants)} rows for {p} rare columns")
    if len(group_names) != scores.n_groups:
        raise ValueError(f"{len(group_names)} group names for {scores.n_groups} groups")
    keys = variants["variant_key"].astype(str).to_numpy()
    maf = variants["maf"].to_numpy(np.float64)
    masks = (
        {"all": np.ones(p, bool)}
        if not masks
        else {k: np.asarray(v, bool) for k, v in masks.items()}
    )
    mac, carriers = scores.mac.sum(axis=0), scores.carriers.sum(axis=0)
    rows: list[tuple] = []
    rows += _variant_rows(scores, keys, mac, carriers, list(group_names))
    for unit, name in enumerate(scores.layout.names):
        rows += _unit_rows(scores, unit, name, maf, mac, carriers, masks, maf_cutoffs,
                           collapse_mac, beta, list(group_names))  # fmt: skip
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["df"] = frame["df"].astype("Int64")
    return frame


def _variant_rows(scores, keys, mac, carriers, group_names) -> list[tuple]:
    rows = []
    tested = np.flatnonzero(mac > 0)
    statistic, p = score_test(scores.score.sum(axis=0)[tested], scores.pooled_variance()[tested])
    for i, j in enumerate(tested):
        rows.append((keys[j], "score", np.nan, "", POOLED, 1, carriers[j], mac[j],
                     statistic[i], 1, p[i]))  # fmt: skip
    if scores.n_groups < 2:
        return rows
    covariances = scores.group_covariances(tested)  # (k, M, M)
    for i, j in enumerate(tested):
        stat, pval, df = quadratic_test(scores.score[:, j], covariances[i])
        rows.append((keys[j], "score_het", np.nan, "", HETEROGENEOUS, 1, carriers[j], mac[j],
                     stat, df, pval))  # fmt: skip
        for m, group in enumerate(group_names):
            if scores.mac[m, j] <= 0:
                continue
            s, pv = score_test(scores.score[m, j : j + 1], covariances[i, m, m : m + 1])
            rows.append((keys[j], "score", np.nan, "", group, 1, scores.carriers[m, j],
                         scores.mac[m, j], s[0], 1, pv[0]))  # fmt: skip
    return rows


def _unit_rows(scores, unit, name, maf, mac, carriers, masks, cutoffs, collapse_mac, beta,
               group_names) -> list[tuple]:  # fmt: skip
    """Every test of one unit at each mask × cut-off, then its ACAT-O rows."""
    cols = scores.unit_columns(unit)
    rows: list[tuple] = []
    pooled_p: list[float] = []
    het_p: list[float] = []
    for mask_name, mask in masks.items():
        for cutoff in cutoffs:
            keep = mask[cols] & (maf[cols] <= cutoff) & (mac[cols] > 0)
            if not keep.any():
                continue
            kept = cols[keep]
            ultra = mac[kept] <= collapse_mac if collapse_mac > 0 else np.zeros(kept.size, bool)
            subset = _Subset(
                unit=unit, keep=keep, collapse=collapse_matrix(ultra),
                head=(name, float(cutoff), mask_name),
                counts=(kept.size, carriers[kept].sum(), mac[kept].sum()),
            )  # fmt: skip
            weights = beta_weights(_collapsed_maf(maf[kept], subset.collapse), *beta)
            acat_weights = _acat_weights(maf[kept], subset.collapse, beta)
            new, p_values = _pooled_tests(scores, subset, weights, acat_weights)
            rows += new
            pooled_p += p_values
            if scores.n_groups > 1:
                new, p_values = _heterogeneous_tests(scores, subset, weights, acat_weights,
                                                     group_names)  # fmt: skip
                rows += new
                het_p += p_values
    total = (cols.size, carriers[cols].sum(), mac[cols].sum())
    for test, group, p_values in (("acat_o", POOLED, pooled_p),
                                  ("acat_o_het", HETEROGENEOUS, het_p)):  # fmt: skip
        if p_values:
            rows.append((name, test, np.nan, "", group, *total, np.nan, pd.NA,
                         cauchy_combination(p_values)))  # fmt: skip
    return rows


@dataclass(frozen=True)
class _Subset:
    """A unit's variants at one mask × cut-off: which, collapsed how, and the row's labels."""

    unit: int
    keep: np.ndarray  # over the unit's variants
    collapse: np.ndarray  # T: kept variants → tested columns (collapse_matrix)
    head: tuple  # unit name, maf_max, mask
    counts: tuple  # n_variants, n_carriers, mac

    def row(self, test: str, group: str, statistic, df, p, counts=None) -> tuple:
        """A table row of this subset (``counts``: a group's, default the pooled ones)."""
        unit, maf_max, mask = self.head
        return (unit, test, maf_max, mask, group, *(counts or self.counts), statistic, df, p)


def _pooled_tests(scores, subset, weights, acat_weights) -> tuple[list[tuple], list[float]]:
    """Burden, SKAT, SKAT-O (Cauchy) and ACAT-V on the pooled scores; the p-values ACAT-O takes."""
    t = subset.collapse
    kept = scores.unit_columns(subset.unit)[subset.keep]
    score = t.T @ scores.score[:, kept].sum(axis=0)
    covariance = t.T @ scores.unit_covariance(subset.unit, subset.keep) @ t
    stat_b, p_b = burden_test(score, covariance, weights)
    stat_s, p_s = skat_test(score, covariance, weights)
    stat_o, p_o = skato_acat_test(score, covariance, weights)
    p_v = acat_v_test(score_test(score, np.diag(covariance))[1], acat_weights)
    rows = [
        subset.row("burden", POOLED, stat_b, 1, p_b),
        subset.row("skat", POOLED, stat_s, pd.NA, p_s),
        subset.row("skato_acat", POOLED, stat_o, pd.NA, p_o),
        subset.row("acat_v", POOLED, np.nan, pd.NA, p_v),
    ]
    return rows, [p_b, p_s, p_v]


def _heterogeneous_tests(scores, subset, weights, acat_weights,
                         group_names) -> tuple[list[tuple], list[float]]:  # fmt: skip
    """The tests on the groups' stacked scores, and burden within each group."""
    m_groups, k = scores.n_groups, subset.collapse.shape[1]
    stacked_t = np.kron(np.eye(m_groups), subset.collapse)
    score = stacked_t.T @ scores.stacked_score(subset.unit, subset.keep)
    covariance = stacked_t.T @ scores.stacked_covariance(subset.unit, subset.keep) @ stacked_t
    by_group = np.kron(np.eye(m_groups), weights[:, None])  # (M k, M): each group's burden
    stat_b, p_b, df_b = quadratic_test(by_group.T @ score, by_group.T @ covariance @ by_group)
    stat_s, p_s = skat_test(score, covariance, np.tile(weights, m_groups))
    single = []
    for j in range(k):
        idx = np.arange(m_groups) * k + j
        single.append(quadratic_test(score[idx], covariance[np.ix_(idx, idx)])[1])
    p_v = acat_v_test(np.array(single), acat_weights)
    rows = [
        subset.row("burden_het", HETEROGENEOUS, stat_b, df_b, p_b),
        subset.row("skat_het", HETEROGENEOUS, stat_s, pd.NA, p_s),
        subset.row("acat_v_het", HETEROGENEOUS, np.nan, pd.NA, p_v),
    ]
    kept = scores.unit_columns(subset.unit)[subset.keep]
    for m, group in enumerate(group_names):
        group_mac = scores.mac[m, kept].sum()
        if group_mac <= 0:
            continue
        block = slice(m * k, (m + 1) * k)
        stat_g, p_g = burden_test(score[block], covariance[block, block], weights)
        counts = (kept.size, scores.carriers[m, kept].sum(), group_mac)
        rows.append(subset.row("burden", group, stat_g, 1, p_g, counts=counts))
    return rows, [p_b, p_s, p_v]


def _collapsed_maf(maf: np.ndarray, collapse: np.ndarray) -> np.ndarray:
    """The MAF of each collapsed column: a variant's own, the pseudo-variant's summed (≤ 0.5)."""
    return np.minimum(collapse.T @ maf, 0.5)


def _acat_weights(maf: np.ndarray, collapse: np.ndarray, beta: tuple[float, float]) -> np.ndarray:
    """ACAT-V's weight of each collapsed column (the pseudo-variant's: the mean of its own)."""
    own = acat_v_weights(beta_weights(maf, *beta), maf)
    return (collapse.T @ own) / collapse.sum(axis=0)
