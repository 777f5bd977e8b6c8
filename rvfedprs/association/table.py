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

The units' variant sets that keep as many variants and test as many columns are tested
together, one call of each test (:mod:`~rvfedprs.association.gene_tests`) on their stacked
scores and covariances: most units keep one variant, and their mixtures are all scaled χ².
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

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
    batched: bool = True,
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
    batched : bool
        Test the units' variant sets of one size (after collapsing) together, as one batch of
        each test; False tests each alone, with the same functions: the same table, slower.
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
    units = [_unit_subsets(scores, unit, name, maf, mac, carriers, masks, maf_cutoffs,
                           collapse_mac)
             for unit, name in enumerate(scores.layout.names)]  # fmt: skip
    subsets = _weighted([s for unit in units for s in unit], maf, beta)
    tested = iter(_tested(scores, subsets, list(group_names), batched))
    for unit, name in enumerate(scores.layout.names):
        pooled_p: list[float] = []
        het_p: list[float] = []
        for _ in units[unit]:
            new, pooled, het = next(tested)
            rows += new
            pooled_p += pooled
            het_p += het
        cols = scores.unit_columns(unit)
        total = (cols.size, carriers[cols].sum(), mac[cols].sum())
        for test, group, p_values in (("acat_o", POOLED, pooled_p),
                                      ("acat_o_het", HETEROGENEOUS, het_p)):  # fmt: skip
            if p_values:
                rows.append((name, test, np.nan, "", group, *total, np.nan, pd.NA,
                             cauchy_combination(p_values)))  # fmt: skip
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


def _unit_subsets(scores, unit, name, maf, mac, carriers, masks, cutoffs,
                  collapse_mac) -> list[_Subset]:  # fmt: skip
    """One unit's variant sets, one per mask × cut-off that keeps a carried variant."""
    cols = scores.unit_columns(unit)
    out = []
    for mask_name, mask in masks.items():
        for cutoff in cutoffs:
            keep = mask[cols] & (maf[cols] <= cutoff) & (mac[cols] > 0)
            if not keep.any():
                continue
            kept = cols[keep]
            ultra = mac[kept] <= collapse_mac if collapse_mac > 0 else np.zeros(kept.size, bool)
            out.append(_Subset(
                unit=unit, keep=keep, columns=kept, collapse=collapse_matrix(ultra),
                head=(name, float(cutoff), mask_name),
                counts=(kept.size, carriers[kept].sum(), mac[kept].sum()),
            ))  # fmt: skip
    return out


@dataclass(frozen=True)
class _Subset:
    """A unit's variants at one mask × cut-off: which, collapsed how, and the row's labels."""

    unit: int
    keep: np.ndarray  # over the unit's variants
    columns: np.ndarray  # the kept variants' columns
    collapse: np.ndarray  # T: kept variants → tested columns (collapse_matrix)
    head: tuple  # unit name, maf_max, mask
    counts: tuple  # n_variants, n_carriers, mac
    weights: np.ndarray | None = None  # the tested columns' Beta weights
    acat_weights: np.ndarray | None = None  # and their ACAT-V weights

    def row(self, test: str, group: str, statistic, df, p, counts=None) -> tuple:
        """A table row of this subset (``counts``: a group's, default the pooled ones)."""
        unit, maf_max, mask = self.head
        return (unit, test, maf_max, mask, group, *(counts or self.counts), statistic, df, p)


def _weighted(subsets: list[_Subset], maf: np.ndarray, beta) -> list[_Subset]:
    """The subsets with their columns' Beta and ACAT-V weights (one density call for all).

    A collapsed pseudo-variant's Beta weight is its summed MAF's (at most 0.5); its ACAT-V
    weight the mean of its variants' own.
    """
    if not subsets:
        return []
    kept = [maf[s.columns] for s in subsets]
    collapsed = [np.minimum(s.collapse.T @ m, 0.5) for s, m in zip(subsets, kept, strict=True)]
    sizes = np.cumsum([c.size for c in collapsed] + [m.size for m in kept])[:-1]
    pieces = np.split(beta_weights(np.concatenate(collapsed + kept), *beta), sizes)
    n, out = len(subsets), []
    for s, m, w, own in zip(subsets, kept, pieces[:n], pieces[n:], strict=True):
        acat = (s.collapse.T @ acat_v_weights(own, m)) / s.collapse.sum(axis=0)
        out.append(replace(s, weights=w, acat_weights=acat))
    return out


def _tested(scores, subsets, group_names, batched) -> list[tuple[list, list, list]]:
    """Each subset's rows and the p-values its unit's ACAT-O takes (pooled, heterogeneous).

    The subsets that keep as many variants and test as many columns are one batch of each
    test (each subset its own batch when not ``batched``).
    """
    batches: dict[object, list[int]] = {}
    for i, subset in enumerate(subsets):
        batches.setdefault(subset.collapse.shape if batched else i, []).append(i)
    out: list = [None] * len(subsets)
    for indices in batches.values():
        batch = [subsets[i] for i in indices]
        pooled = _pooled_tests(scores, batch)
        het = (_heterogeneous_tests(scores, batch, group_names) if scores.n_groups > 1
               else [([], [])] * len(batch))  # fmt: skip
        for i, (rows, p), (het_rows, het_p) in zip(indices, pooled, het, strict=True):
            out[i] = (rows + het_rows, p, het_p)
    return out


def _pooled_tests(scores, batch) -> list[tuple[list[tuple], list[float]]]:
    """Burden, SKAT, SKAT-O (Cauchy) and ACAT-V on the pooled scores of subsets of one size.

    Each subset's rows, and the p-values ACAT-O takes.
    """
    units, keeps = [s.unit for s in batch], [s.keep for s in batch]
    t = np.stack([s.collapse for s in batch])
    score = (np.swapaxes(t, 1, 2) @ scores.unit_scores(units, keeps)[..., None])[..., 0]
    covariance = np.swapaxes(t, 1, 2) @ scores.unit_covariances(units, keeps) @ t
    weights = np.stack([s.weights for s in batch])
    acat_weights = np.stack([s.acat_weights for s in batch])
    stat_b, p_b = burden_test(score, covariance, weights)
    stat_s, p_s = skat_test(score, covariance, weights)
    stat_o, p_o = skato_acat_test(score, covariance, weights)
    single = score_test(score, np.diagonal(covariance, axis1=1, axis2=2))[1]
    p_v = acat_v_test(single, acat_weights)
    stat_b, p_b, stat_s, p_s, stat_o, p_o, p_v = (a.tolist() for a in (stat_b, p_b, stat_s, p_s,
                                                                     stat_o, p_o, p_v))  # fmt: skip
    out = []
    for i, s in enumerate(batch):
        rows = [
            s.row("burden", POOLED, stat_b[i], 1, p_b[i]),
            s.row("skat", POOLED, stat_s[i], pd.NA, p_s[i]),
            s.row("skato_acat", POOLED, stat_o[i], pd.NA, p_o[i]),
            s.row("acat_v", POOLED, np.nan, pd.NA, p_v[i]),
        ]
        out.append((rows, [p_b[i], p_s[i], p_v[i]]))
    return out


def _heterogeneous_tests(scores, batch, group_names) -> list[tuple[list[tuple], list[float]]]:
    """The tests on the groups' stacked scores, and burden within each group, of one size."""
    m_groups, k, n = scores.n_groups, batch[0].collapse.shape[1], len(batch)
    units, keeps = [s.unit for s in batch], [s.keep for s in batch]
    t = np.stack([np.kron(np.eye(m_groups), s.collapse) for s in batch])
    score = (np.swapaxes(t, 1, 2) @ scores.stacked_scores(units, keeps)[..., None])[..., 0]
    covariance = np.swapaxes(t, 1, 2) @ scores.stacked_covariances(units, keeps) @ t
    weights = np.stack([s.weights for s in batch])
    by_group = np.zeros((n, m_groups * k, m_groups))  # each group's burden
    for m in range(m_groups):
        by_group[:, m * k : (m + 1) * k, m] = weights
    across = np.swapaxes(by_group, 1, 2)
    stat_b, p_b, df_b = quadratic_test((across @ score[..., None])[..., 0],
                                       across @ covariance @ by_group)  # fmt: skip
    stat_s, p_s = skat_test(score, covariance, np.tile(weights, m_groups))
    # variant j over the groups: its scores (n, k, M) and their covariance (n, k, M, M)
    j = np.arange(k)
    blocks = covariance.reshape(n, m_groups, k, m_groups, k)[:, :, j, :, j]
    single = quadratic_test(np.swapaxes(score.reshape(n, m_groups, k), 1, 2),
                            np.moveaxis(blocks, 0, 1))[1]  # fmt: skip
    p_v = acat_v_test(single, np.stack([s.acat_weights for s in batch]))
    within = [[a.tolist() for a in burden_test(score[:, m * k : (m + 1) * k],
                                               covariance[:, m * k : (m + 1) * k,
                                                          m * k : (m + 1) * k], weights)]
              for m in range(m_groups)]  # fmt: skip
    stat_b, p_b, df_b, stat_s, p_s, p_v = (a.tolist() for a in (stat_b, p_b, df_b, stat_s, p_s,
                                                                p_v))  # fmt: skip
    out = []
    for i, s in enumerate(batch):
        rows = [
            s.row("burden_het", HETEROGENEOUS, stat_b[i], df_b[i], p_b[i]),
            s.row("skat_het", HETEROGENEOUS, stat_s[i], pd.NA, p_s[i]),
            s.row("acat_v_het", HETEROGENEOUS, np.nan, pd.NA, p_v[i]),
        ]
        for m, group in enumerate(group_names):
            group_mac = scores.mac[m, s.columns].sum()
            if group_mac <= 0:
                continue
            counts = (s.columns.size, scores.carriers[m, s.columns].sum(), group_mac)
            rows.append(s.row("burden", group, within[m][0][i], 1, within[m][1][i],
                              counts=counts))  # fmt: skip
        out.append((rows, [p_b[i], p_s[i], p_v[i]]))
    return out
