"""Which variants are causal, where: common, shared rare, private rare, founder-enriched.

Everything here works on allele counts per population (one population per site) and returns
column indices into those counts, so it is the same for every genotype model. Two partitions of
the sites are involved: ancestry clusters (which variants a site carries) and architecture
groups (which variants act on the trait there; by default the same partition).

- Common causal variants: target-cohort MAF >= ``causal_common_maf``; causal everywhere.
- Shared rare causal variants: causal in every group (or in the groups of
  ``rare_shared_causal_groups`` only: effect 0 elsewhere); ALT frequency over the whole cohort
  in [rare_freq_min, rare_freq_max] and at least ``rare_min_count`` target copies in each of two
  groups or more (one of them a group where they are causal).
- Private rare causal variants of group m: causal in m only; frequency over m's populations in
  the band, at least ``rare_min_count`` target copies in m, and no target copy outside the
  ancestry clusters of m's sites (a recent mutation of those clusters; with the default
  partition, carried in group m only).
- Founder enrichment: some shared variants get, in one ancestry cluster, ``fold`` times the
  frequency they have elsewhere.
- Genes: with gene regions, a share of each kind of rare causal variant is drawn among the
  candidates inside genes and the rest among those outside (:mod:`rvfedprs.simulate.genes`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["SiteLayout", "RareChoice", "choose_common", "choose_rare", "choose_founders"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SiteLayout:
    """Per population (= site) counts and partitions.

    Attributes
    ----------
    target_ac, all_ac : ndarray of int, shape (n_populations, n_variants)
        ALT-allele counts in the target cohort, and over target + discovery individuals.
    n_target, n_all : ndarray of int, shape (n_populations,)
        Individuals per population in the target cohort, and over both cohorts.
    cluster : ndarray of int, shape (n_populations,)
        Ancestry cluster of each population (0..n_clusters-1).
    group : ndarray of int, shape (n_populations,)
        Architecture group of each population (0..n_groups-1).
    """

    target_ac: np.ndarray
    all_ac: np.ndarray
    n_target: np.ndarray
    n_all: np.ndarray
    cluster: np.ndarray
    group: np.ndarray

    @property
    def n_groups(self) -> int:
        """Architecture groups."""
        return int(self.group.max()) + 1

    @property
    def n_clusters(self) -> int:
        """Ancestry clusters."""
        return int(self.cluster.max()) + 1

    def frequency(self, label: np.ndarray, k: int, *, target: bool = False) -> np.ndarray:
        """ALT frequency over the populations with ``label == k``, shape (n_variants,)."""
        members = np.asarray(label) == k
        ac, n = (self.target_ac, self.n_target) if target else (self.all_ac, self.n_all)
        return ac[members].sum(0) / (2.0 * n[members].sum())

    def pooled_frequency(self, *, target: bool = False) -> np.ndarray:
        """ALT frequency over every population, shape (n_variants,)."""
        ac, n = (self.target_ac, self.n_target) if target else (self.all_ac, self.n_all)
        return ac.sum(0) / (2.0 * n.sum())

    def frequencies(self, label: np.ndarray, n_labels: int) -> np.ndarray:
        """ALT frequency per label (all individuals), shape (n_variants, n_labels)."""
        return np.stack([self.frequency(label, k) for k in range(n_labels)], axis=1)


@dataclass
class RareChoice:
    """Rare causal variants and where they act.

    Attributes
    ----------
    index : ndarray of int, shape (n_rare,)
        Columns of the counts, sorted.
    causal : ndarray of bool, shape (n_rare, n_groups)
        Groups in which each variant has an effect.
    shared : ndarray of bool, shape (n_rare,)
    frequency : ndarray, shape (n_rare,)
        The frequency its effect variance is scaled by: over its group's populations for a
        private variant, over the whole cohort for a shared one.
    candidates : dict
        ``{"shared": n, "private": {group: n}}`` variants that qualified.
    """

    index: np.ndarray
    causal: np.ndarray
    shared: np.ndarray
    frequency: np.ndarray
    candidates: dict[str, Any] = field(default_factory=dict)


def choose_common(
    rng: np.random.Generator,
    sites: SiteLayout,
    n_causal: int,
    maf_min: float,
    eligible: np.ndarray | None = None,
) -> np.ndarray:
    """Columns of ``n_causal`` common causal variants (target MAF >= ``maf_min``), sorted.

    ``eligible`` (bool, shape (n_variants,)) restricts the candidates to observed variants.
    """
    af = sites.pooled_frequency(target=True)
    ok = np.minimum(af, 1 - af) >= maf_min
    candidates = np.flatnonzero(ok if eligible is None else ok & eligible)
    n = min(int(n_causal), len(candidates))
    if n < n_causal:
        log.warning("only %d variants qualify as common causal (asked for %d)", n, n_causal)
    return np.sort(rng.choice(candidates, size=n, replace=False))


def choose_rare(
    rng: np.random.Generator,
    sites: SiteLayout,
    *,
    n_per_group: int,
    shared_fraction: float,
    freq_min: float,
    freq_max: float,
    min_count: int,
    group_names: Sequence[str],
    eligible: np.ndarray | None = None,
    shared_causal: np.ndarray | None = None,
    gene: np.ndarray | None = None,
    gene_fraction: float = 1.0,
) -> RareChoice:
    """Draw shared, then each group's private rare causal variants (module docstring).

    Each group gets ``n_per_group`` causal variants, ``round(shared_fraction * n_per_group)`` of
    them the shared ones; fewer when fewer qualify (logged, counted in ``candidates``).
    ``eligible`` (bool, shape (n_variants,)) restricts the candidates to observed variants.
    ``shared_causal`` (bool, shape (n_groups,)) names the groups where shared variants act (all
    when absent). With ``gene`` (int, shape (n_variants,): each variant's gene, -1 outside
    genes), ``round(gene_fraction * n)`` of each draw of ``n`` come from inside genes and the
    rest from outside.
    """
    n_groups = sites.n_groups
    observed = np.ones(sites.target_ac.shape[1], dtype=bool) if eligible is None else eligible

    def in_band(f: np.ndarray) -> np.ndarray:
        return (f >= freq_min) & (f <= freq_max) & observed

    def draw(ok: np.ndarray, n: int, what: str) -> np.ndarray:
        if gene is None:
            return _draw(rng, np.flatnonzero(ok), n, what)
        n_in = int(round(gene_fraction * n))
        inside = _draw(rng, np.flatnonzero(ok & (gene >= 0)), n_in, f"{what} (in genes)")
        outside = _draw(rng, np.flatnonzero(ok & (gene < 0)), n - n_in, f"{what} (outside genes)")
        return np.concatenate([inside, outside])

    group_target_ac = np.stack(
        [sites.target_ac[sites.group == m].sum(0) for m in range(n_groups)]
    )  # (n_groups, n_variants)
    well_carried = group_target_ac >= min_count
    pooled = sites.pooled_frequency()
    shared_ok = in_band(pooled) & (well_carried.sum(0) >= min(2, n_groups))
    shared_row = np.ones(n_groups, dtype=bool)
    if shared_causal is not None:
        shared_row = np.asarray(shared_causal, dtype=bool)
        shared_ok &= well_carried[shared_row].any(0)
    n_shared_wanted = int(round(shared_fraction * n_per_group))
    shared_idx = draw(shared_ok, n_shared_wanted, "shared")
    chosen = set(shared_idx.tolist())
    index = list(shared_idx)
    causal_rows = [shared_row] * len(shared_idx)
    frequency = list(pooled[shared_idx])
    private_candidates = {}
    for m in range(n_groups):
        clusters_of_m = np.unique(sites.cluster[sites.group == m])
        outside = sites.target_ac[~np.isin(sites.cluster, clusters_of_m)].sum(0)
        f_m = sites.frequency(sites.group, m)
        ok = in_band(f_m) & well_carried[m] & (outside == 0)
        ok[list(chosen)] = False
        private_candidates[group_names[m]] = int(ok.sum())
        picked = draw(ok, n_per_group - len(shared_idx), f"private to {group_names[m]}")
        chosen.update(picked.tolist())
        index.extend(picked)
        row = np.zeros(n_groups, dtype=bool)
        row[m] = True
        causal_rows.extend([row] * len(picked))
        frequency.extend(f_m[picked])
    order = np.argsort(np.asarray(index, dtype=np.int64), kind="stable")
    index_arr = np.asarray(index, dtype=np.int64)[order]
    causal = np.array(causal_rows, dtype=bool).reshape(-1, n_groups)[order]
    shared = np.zeros(len(index), dtype=bool)
    shared[: len(shared_idx)] = True
    candidates: dict[str, Any] = {"shared": int(shared_ok.sum()), "private": private_candidates}
    if gene is not None:
        candidates["shared_in_genes"] = int((shared_ok & (gene >= 0)).sum())
    return RareChoice(
        index=index_arr,
        causal=causal,
        shared=shared[order],
        frequency=np.asarray(frequency, dtype=np.float64)[order],
        candidates=candidates,
    )


def _draw(rng: np.random.Generator, candidates: np.ndarray, n: int, what: str) -> np.ndarray:
    if n <= 0:
        return np.empty(0, dtype=np.int64)
    if len(candidates) < n:
        log.warning("only %d variants qualify as %s rare causal (asked for %d)",
                    len(candidates), what, n)  # fmt: skip
    return rng.choice(candidates, size=min(n, len(candidates)), replace=False).astype(np.int64)


def choose_founders(
    rng: np.random.Generator,
    sites: SiteLayout,
    columns: np.ndarray,
    *,
    fraction: float,
    enrichment: Sequence[float],
) -> dict[int, Mapping[str, float]]:
    """Pick founder-enriched variants among ``columns`` and their cluster and target frequency.

    ``round(fraction * len(columns))`` of them; for each, a cluster drawn among those with
    copies outside them, a fold log-uniform in ``enrichment`` and the frequency in that cluster
    ``min(fold * f_out, 0.5)`` with ``f_out`` the variant's frequency elsewhere (all
    individuals).

    Returns
    -------
    dict
        ``column -> {"cluster": k, "fold": fold, "frequency_outside": f_out,
        "frequency": target frequency in cluster k}``.
    """
    n = int(round(fraction * len(columns)))
    if n == 0:
        return {}
    low, high = np.log(min(enrichment)), np.log(max(enrichment))
    picked = np.sort(rng.choice(np.asarray(columns), size=n, replace=False))
    out: dict[int, Mapping[str, float]] = {}
    for column in picked:
        outside_freq = np.array(
            [
                sites.all_ac[sites.cluster != k, column].sum()
                / (2.0 * sites.n_all[sites.cluster != k].sum())
                if (sites.cluster != k).any()
                else 0.0
                for k in range(sites.n_clusters)
            ]
        )
        eligible = np.flatnonzero(outside_freq > 0)
        if not len(eligible):
            continue
        k = int(rng.choice(eligible))
        fold = float(np.exp(rng.uniform(low, high)))
        out[int(column)] = {
            "cluster": k,
            "fold": fold,
            "frequency_outside": float(outside_freq[k]),
            "frequency": float(min(fold * outside_freq[k], 0.5)),
        }
    return out
