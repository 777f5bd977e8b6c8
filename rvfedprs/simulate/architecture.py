"""The drawn genetic architecture: causal variants, their α-model effects, founder genotypes.

:func:`draw_architecture` chooses the causal variants from allele counts
(:mod:`rvfedprs.simulate.causal`) and draws their effects (:mod:`rvfedprs.simulate.effects`):
common variants with one effect per ancestry cluster (correlation r_g), rare variants with one
effect per architecture group (private ones acting in one group; shared ones with a group × group
correlation ρ or matrix, optional per-group signs, and optionally causal in some groups only).
Rare causal variants in genes share their gene's effect direction. :func:`founder_genotypes`
redraws founder-enriched variants in their cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.simulate.causal import SiteLayout, choose_common, choose_founders, choose_rare
from rvfedprs.simulate.effects import alpha_sigma2, alpha_variance, correlated_effects, expected_h2
from rvfedprs.simulate.phenotype import CausalArchitecture

__all__ = [
    "Architecture",
    "draw_architecture",
    "founder_genotypes",
    "shared_causal_groups",
    "group_signs",
]


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
    rare_gene : ndarray of str, shape (n_rare,)
        The gene each rare causal variant was drawn in, "" for one outside genes.
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
    rare_gene: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=object))


def shared_causal_groups(pheno: Mapping[str, Any], group_names: Sequence[str]) -> np.ndarray | None:
    """Which groups shared rare variants act in (``rare_shared_causal_groups``); None: all.

    Raises
    ------
    ConfigError
        Naming the groups that are not architecture groups, and the choices.
    """
    wanted = pheno.get("rare_shared_causal_groups")
    if wanted is None:
        return None
    unknown = [g for g in wanted if g not in group_names]
    if unknown:
        raise ConfigError(
            f"'simulate.phenotype.rare_shared_causal_groups': {unknown} not among the "
            f"architecture groups {list(group_names)}"
        )
    return np.isin(np.asarray(group_names), wanted)


def group_signs(pheno: Mapping[str, Any], group_names: Sequence[str]) -> np.ndarray | None:
    """The per-group signs of shared rare effects (``rare_effect_signs``); None: all 1.

    Raises
    ------
    ConfigError
        When there is not one sign per architecture group.
    """
    signs = pheno.get("rare_effect_signs")
    if signs is None:
        return None
    if len(signs) != len(group_names):
        raise ConfigError(
            f"'simulate.phenotype.rare_effect_signs': {len(signs)} signs {list(signs)} for "
            f"{len(group_names)} architecture groups {list(group_names)} (give one per group)"
        )
    return np.asarray(signs, dtype=np.float64)


def draw_architecture(
    rng: np.random.Generator,
    sites: SiteLayout,
    pheno: Mapping[str, Any],
    *,
    group_names: Sequence[str],
    eligible: np.ndarray | None = None,
    gene: np.ndarray | None = None,
    gene_names: Sequence[str] = (),
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
    gene : ndarray of int, shape (n_variants,), optional
        Each variant's gene (a position in ``gene_names``), -1 outside genes; with it,
        ``pheno["rare_genes"]["fraction_in_genes"]`` of the rare causal variants come from
        genes, and each gene draws one sign (risk with probability ``rare_risk_fraction``) that
        all its causal variants' base effects take.
    gene_names : sequence of str

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
    mask = shared_causal_groups(pheno, group_names)
    signs = group_signs(pheno, group_names)
    risk = pheno["rare_risk_fraction"]
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
        shared_causal=mask,
        gene=gene,
        gene_fraction=pheno["rare_genes"]["fraction_in_genes"] if gene is not None else 1.0,
    )
    group_freq = sites.frequencies(sites.group, sites.n_groups)[choice.index]
    sigma2_rare = alpha_sigma2(pheno["h2_rare"], choice.frequency, group_freq, choice.causal, alpha)
    rare_sd = np.sqrt(sigma2_rare * alpha_variance(choice.frequency, alpha))
    rare_effects = np.zeros((len(choice.index), sites.n_groups))
    shared = choice.shared
    in_gene = np.full(len(choice.index), -1) if gene is None else gene[choice.index]
    sign = None
    if gene is not None:  # one direction per gene; variants outside genes draw their own
        per_gene = np.where(rng.random(len(gene_names)) < risk, 1.0, -1.0)
        own = np.where(rng.random(len(choice.index)) < risk, 1.0, -1.0)
        sign = np.where(in_gene >= 0, per_gene[in_gene], own)
    if shared.any():
        rare_effects[shared], _ = correlated_effects(
            rng, rare_sd[shared], sites.n_groups, pheno["rare_effect_correlation"],
            risk_fraction=risk, sign=None if sign is None else sign[shared],
        )  # fmt: skip
        if signs is not None:
            rare_effects[shared] *= signs
        if mask is not None:
            rare_effects[shared] = np.where(mask, rare_effects[shared], 0.0)
    if (~shared).any():
        private, _ = correlated_effects(
            rng, rare_sd[~shared], 1, 1.0, risk_fraction=risk,
            sign=None if sign is None else sign[~shared],
        )  # fmt: skip
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
        rare_gene=np.array([gene_names[g] if g >= 0 else "" for g in in_gene], dtype=object),
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
