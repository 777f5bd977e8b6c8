"""The drawn genetic architecture: causal variants, their α-model effects, founder genotypes.

:func:`draw_architecture` chooses the causal variants from allele counts
(:mod:`rvfedprs.simulate.causal`) and draws their effects (:mod:`rvfedprs.simulate.effects`):
common variants with one effect per ancestry cluster (correlation r_g), rare variants with one
effect per architecture group (shared ones correlated ρ across groups, private ones acting in one
group). :func:`founder_genotypes` redraws founder-enriched variants in their cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rvfedprs.simulate.causal import SiteLayout, choose_common, choose_founders, choose_rare
from rvfedprs.simulate.effects import alpha_sigma2, alpha_variance, correlated_effects, expected_h2
from rvfedprs.simulate.phenotype import CausalArchitecture

__all__ = ["Architecture", "draw_architecture", "founder_genotypes"]


@dataclass
class Architecture:
    """The drawn genetic architecture, in columns of the source's variants.

    Attributes
    ----------
    common : CausalArchitecture
        Effects of shape (n_common, n_clusters): one column per ancestry cluster.
    rare : CausalArchitecture
        Effects of shape (n_rare, n_groups): one column per architecture group, 0 where the
        variant is not causal.
    rare_causal : ndarray of bool, shape (n_rare, n_groups)
    rare_shared : ndarray of bool, shape (n_rare,)
    common_frequency, rare_frequency : ndarray
        The frequencies the α-model scaled each variant's effect variance by.
    founders : dict
        Column -> founder record (:func:`rvfedprs.simulate.causal.choose_founders`).
    sigma2 : dict
        ``{"common": ..., "rare": ...}``.
    expected_h2 : dict
        ``{"common": [per cluster], "rare": [per group]}`` (before founder enrichment).
    candidates : dict
        How many variants qualified (rare: shared and private per group).
    """

    common: CausalArchitecture
    rare: CausalArchitecture
    rare_causal: np.ndarray
    rare_shared: np.ndarray
    common_frequency: np.ndarray
    rare_frequency: np.ndarray
    founders: dict[int, Mapping[str, float]]
    sigma2: dict[str, float]
    expected_h2: dict[str, list[float]]
    candidates: dict[str, Any]


def draw_architecture(
    rng: np.random.Generator,
    sites: SiteLayout,
    pheno: Mapping[str, Any],
    *,
    group_names: Sequence[str],
    eligible: np.ndarray | None = None,
) -> Architecture:
    """Choose the causal variants and draw their α-model effects (module docstring).

    Parameters
    ----------
    rng : numpy Generator
    sites : SiteLayout
        Allele counts per population, ancestry clusters and architecture groups.
    pheno : mapping
        The validated ``simulate.phenotype`` section.
    group_names : sequence of str
        Names of the architecture groups (for messages and truth tables).
    eligible : ndarray of bool, shape (n_variants,), optional
        Variants that may be causal (those observed in the output).

    Returns
    -------
    Architecture
    """
    alpha = float(pheno["alpha"])
    # common: one effect column per ancestry cluster, correlated r_g
    common_idx = choose_common(
        rng, sites, pheno["n_causal_common"], pheno["causal_common_maf"], eligible
    )
    common_freq = sites.pooled_frequency()[common_idx]
    cluster_freq = sites.frequencies(sites.cluster, sites.n_clusters)[common_idx]
    all_causal = np.ones_like(cluster_freq, dtype=bool)
    sigma2_common = alpha_sigma2(pheno["h2_common"], common_freq, cluster_freq, all_causal, alpha)
    common_sd = np.sqrt(sigma2_common * alpha_variance(common_freq, alpha))
    common_effects, _ = correlated_effects(
        rng, common_sd, sites.n_clusters, pheno["common_effect_correlation"]
    )
    # rare: one effect column per architecture group
    choice = choose_rare(
        rng,
        sites,
        n_per_group=pheno["n_causal_rare_per_cluster"] if pheno["h2_rare"] > 0 else 0,
        shared_fraction=pheno["rare_shared_fraction"],
        freq_min=pheno["rare_freq_min"],
        freq_max=pheno["rare_freq_max"],
        min_count=pheno["rare_min_count"],
        group_names=group_names,
        eligible=eligible,
    )
    group_freq = sites.frequencies(sites.group, sites.n_groups)[choice.index]
    sigma2_rare = alpha_sigma2(pheno["h2_rare"], choice.frequency, group_freq, choice.causal, alpha)
    rare_sd = np.sqrt(sigma2_rare * alpha_variance(choice.frequency, alpha))
    rare_effects = np.zeros((len(choice.index), sites.n_groups))
    shared = choice.shared
    if shared.any():
        rare_effects[shared], _ = correlated_effects(
            rng, rare_sd[shared], sites.n_groups, pheno["rare_effect_correlation"],
            risk_fraction=pheno["rare_risk_fraction"],
        )  # fmt: skip
    if (~shared).any():
        private, _ = correlated_effects(
            rng, rare_sd[~shared], 1, 1.0, risk_fraction=pheno["rare_risk_fraction"]
        )
        rare_effects[~shared] = private * choice.causal[~shared]
    founders = choose_founders(
        rng,
        sites,
        choice.index[shared],
        fraction=pheno["founder_fraction"],
        enrichment=pheno["founder_enrichment"],
    )
    return Architecture(
        common=CausalArchitecture(common_idx, common_effects),
        rare=CausalArchitecture(choice.index, rare_effects),
        rare_causal=choice.causal,
        rare_shared=shared,
        common_frequency=common_freq,
        rare_frequency=choice.frequency,
        founders=founders,
        sigma2={"common": sigma2_common, "rare": sigma2_rare},
        expected_h2={
            "common": expected_h2(
                sigma2_common, common_freq, cluster_freq, all_causal, alpha
            ).tolist(),
            "rare": expected_h2(
                sigma2_rare, choice.frequency, group_freq, choice.causal, alpha
            ).tolist(),
        },
        candidates=choice.candidates,
    )


def founder_genotypes(
    rng: np.random.Generator, source, founders: Mapping[int, Mapping[str, float]], cluster_of_row
) -> dict[int, np.ndarray]:
    """Redraw founder variants' genotypes in their cluster: Binomial(2, enriched frequency)."""
    if not founders:
        return {}
    columns = np.array(sorted(founders), dtype=np.int64)
    everyone = np.arange(len(cluster_of_row))
    original = source.fetch(columns, everyone)
    out = {}
    for j, column in enumerate(columns):
        record = founders[int(column)]
        genotypes = original[:, j].copy()
        members = cluster_of_row == record["cluster"]
        genotypes[members] = rng.binomial(2, record["frequency"], size=int(members.sum()))
        out[int(column)] = genotypes.astype(np.int8)
    return out
