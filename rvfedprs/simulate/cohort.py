"""Simulate a federated cohort in the CINECA layout (design §2).

The stages of :func:`run_simulation`, each streaming genotypes in chunks so memory never grows
with the number of variants:

1. genotypes of the target and the discovery individuals (:mod:`~rvfedprs.simulate.sources`:
   msprime or Balding–Nichols);
2. a counting pass (:func:`~rvfedprs.simulate.passes.count_alleles`): ALT-allele counts per
   population over target and discovery individuals;
3. the architecture (:func:`~rvfedprs.simulate.architecture.draw_architecture`): common causal
   variants with per-cluster effects, shared and private rare causal variants with per-group
   effects (α-model; a group × group correlation, signs and nulls for shared ones; optionally
   concentrated in genes, :mod:`~rvfedprs.simulate.genes`), founder enrichment (genotypes of a
   few variants redrawn in one cluster);
4. the phenotype: liability = common part + rare part + noise; cases = top liabilities per site
   (binary), or the liability itself as the trait (quantitative);
5. a writing pass (:func:`~rvfedprs.simulate.passes.write_and_test`): the target cohort's
   VCF/PLINK files (unobserved variants left out and counted) and the discovery GWAS;
6. the PGS (:mod:`~rvfedprs.simulate.gwas`): summary statistics, LD clumping and the p-value
   threshold chosen on the discovery cohort's validation part, the PGS Catalog scoring file;
7. truth tables (:mod:`~rvfedprs.simulate.truth`), the gene region files when there are genes,
   the variant annotations when asked for (:mod:`~rvfedprs.simulate.annotations`), checks (PGS
   AUC or R², carriers, Fst, carrier risk by PRS quintile) and the provenance record with the
   resolved parameters and the outputs' checksums.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.exceptions import ConfigError
from rvfedprs.genotypes.scorefile import write_scorefile
from rvfedprs.genotypes.writers import GRCH37_LENGTHS
from rvfedprs.provenance import draw_seed, file_sha256, write_provenance
from rvfedprs.simulate.alleles import is_strand_ambiguous, is_transition, substitution_matrix
from rvfedprs.simulate.annotations import (
    draw_consequences,
    summarise_annotations,
    write_annotations,
)
from rvfedprs.simulate.architecture import (
    draw_architecture,
    founder_genotypes,
    group_signs,
    shared_causal_groups,
)
from rvfedprs.simulate.causal import SiteLayout
from rvfedprs.simulate.demography import all_pairs, hudson_fst, population_layout, summarise_fst
from rvfedprs.simulate.effects import correlation_matrix
from rvfedprs.simulate.genes import draw_genes, gene_index, write_regions
from rvfedprs.simulate.gwas import (
    clumping_thresholding,
    ld_pairs,
    summary_statistics,
)
from rvfedprs.simulate.passes import GwasPass, count_alleles, write_and_test
from rvfedprs.simulate.phenotype import (
    CausalArchitecture,
    genetic_value,
    polygenic_modifier,
    threshold_by_group,
)
from rvfedprs.simulate.sources import OverlaySource
from rvfedprs.simulate.truth import summarise, write_tables

__all__ = [
    "SimulatedCohort",
    "cohort_genotypes",
    "as_pipeline_cohort",
    "run_simulation",
    "simulate_cohort",
]

log = logging.getLogger(__name__)

_CHUNK_BYTES = 64 << 20
#: A float64 block of variants x individuals (the PRS, the genetic values) stays below this.
_FLOAT_BLOCK_BYTES = 256 << 20

#: Variants at least this common (target MAF) are observed everywhere, as on an imputed
#: genome-wide array; rarer ones only inside sequenced blocks (``sequenced_fraction``).
_ARRAY_MAF_MIN = 0.01
_SEQUENCED_BLOCK_BP = 100_000


@dataclass
class SimulatedCohort:
    """What :func:`simulate_cohort` wrote, with the small tables loaded.

    Attributes
    ----------
    out : Path
        The output folder (layout in design §2).
    samples : DataFrame
        ``sample_id, population, cluster, client, architecture``.
    phenotypes : DataFrame
        ``eid, Subject id, <name>, <name>_liability`` (binary) or ``eid, Subject id, <name>``
        (quantitative: ``<name>`` holds the trait).
    causal_variants : DataFrame
        The truth table (``truth/causal_variants.tsv``): one row per causal variant and group
        in which it acts.
    scores : DataFrame
        The PGS weights (``scores/PGS_sim.txt.gz``).
    summary : dict
        Measured statistics (realised h², odds ratios, Fst, case counts, AUCs), as in
        ``provenance.json``.
    """

    out: Path
    samples: pd.DataFrame
    phenotypes: pd.DataFrame
    causal_variants: pd.DataFrame
    scores: pd.DataFrame
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def paths(self) -> dict[str, Path]:
        """Paths of the files written."""
        out = self.out
        found = {
            "samples": out / "samples.tsv",
            "phenotypes": out / "phenotypes.tsv",
            "scores": out / "scores" / "PGS_sim.txt.gz",
            "causal_variants": out / "truth" / "causal_variants.tsv",
            "causal_sites": out / "truth" / "causal_sites.tsv",
            "sites": out / "truth" / "sites.tsv",
            "genetic_values": out / "truth" / "genetic_values.tsv",
            "provenance": out / "provenance.json",
        }
        if (out / "regions" / "genes.tsv").exists():
            found["genes"] = out / "regions" / "genes.tsv"
            found["genes_bed"] = out / "regions" / "genes.bed"
        if (out / "annotations" / "variants.tsv").exists():
            found["annotations"] = out / "annotations" / "variants.tsv"
        if (out / "genotypes" / "cohort.bed").exists():
            found["plink"] = out / "genotypes" / "cohort"
        if (out / "genotypes" / "cohort.pgen").exists():  # the path: unambiguous beside a .bed
            found["pgen"] = out / "genotypes" / "cohort.pgen"
        for vcf in sorted((out / "genotypes").glob("chr*.vcf.gz")):
            found[vcf.name.split(".")[0]] = vcf
        return found


def as_pipeline_cohort(out: str | Path) -> dict[str, Any]:
    """A simulated cohort's folder as the ``pipeline.cohort`` section reading it as one's own.

    ``simulate: false`` and the files the simulator wrote: the genotypes (the PLINK1 prefix
    where a ``.bed`` was written, else the ``.pgen``, :func:`cohort_genotypes`' rule), the
    samples sheet, the phenotypes and the PGS scoring file, as absolute paths.
    """
    out = Path(out).resolve()
    bed = (out / "genotypes" / "cohort.bed").exists()
    genotypes = out / "genotypes" / ("cohort" if bed else "cohort.pgen")
    return {
        "simulate": False,
        "genotypes": [str(genotypes)],
        "samples": str(out / "samples.tsv"),
        "phenotypes": str(out / "phenotypes.tsv"),
        "scoring_file": str(out / "scores" / "PGS_sim.txt.gz"),
    }


def cohort_genotypes(output: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The genotype path a pipeline reads from a simulated cohort, and the files behind it.

    Paths are relative to the cohort's folder: the PLINK1 prefix ``genotypes/cohort`` when the
    ``.bed`` is written, else ``genotypes/cohort.pgen`` (its suffix names the format, so a prefix
    holding both filesets is not ambiguous).

    Parameters
    ----------
    output : mapping
        The validated ``simulate.output`` section.

    Raises
    ------
    ConfigError
        When only VCFs are written.
    """
    if output["write_plink"]:
        return "genotypes/cohort", tuple(f"genotypes/cohort.{e}" for e in ("bed", "bim", "fam"))
    if output["write_pgen"]:
        return "genotypes/cohort.pgen", tuple(
            f"genotypes/cohort.{e}" for e in ("pgen", "pvar", "psam")
        )
    raise ConfigError(
        "'simulate.output': a pipeline reads the simulated cohort from PLINK files; set "
        "write_plink or write_pgen"
    )


def _per_client(value: Any, n_clients: int, key: str) -> list:
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n_clients
    if len(values) != n_clients:
        raise ConfigError(
            f"'simulate.{key}': {len(values)} values for {n_clients} clients (give one number "
            "or one per client)"
        )
    return values


def _check_params(params: Mapping[str, Any]) -> None:
    pheno = params["phenotype"]
    n_clients = params["n_clients"]
    if pheno["h2_common"] + pheno["h2_rare"] >= 1:
        raise ConfigError(
            f"'simulate.phenotype': h2_common + h2_rare must be < 1, got "
            f"{pheno['h2_common']} + {pheno['h2_rare']}"
        )
    if params["n_clusters"] > n_clients:
        raise ConfigError(
            f"'simulate.n_clusters': {params['n_clusters']} exceeds n_clients {n_clients}"
        )
    sizes = params["cluster_sizes"]
    if sizes is not None and (len(sizes) != params["n_clusters"] or sum(sizes) != n_clients):
        raise ConfigError(
            f"'simulate.cluster_sizes': {sizes} must hold n_clusters = {params['n_clusters']} "
            f"numbers summing to n_clients = {n_clients}"
        )
    _per_client(params["samples_per_client"], n_clients, "samples_per_client")
    _per_client(pheno["prevalence"], n_clients, "phenotype.prevalence")
    groups = pheno["architecture_groups"]
    if groups is not None and len(groups) != n_clients:
        raise ConfigError(
            f"'simulate.phenotype.architecture_groups': {len(groups)} labels for {n_clients} "
            "clients (give one per client)"
        )
    if params["client_split_generations"] >= params["cluster_split_generations"]:
        raise ConfigError(
            f"'simulate.client_split_generations': {params['client_split_generations']} must be "
            f"smaller than cluster_split_generations {params['cluster_split_generations']}"
        )
    for section, low, high in (("balding_nichols", "rare_freq_min", "rare_freq_max"),
                               ("phenotype", "rare_freq_min", "rare_freq_max")):  # fmt: skip
        if params[section][low] > params[section][high]:
            raise ConfigError(
                f"'simulate.{section}.{low}': {params[section][low]} exceeds {high} "
                f"{params[section][high]}"
            )
    alleles = params["alleles"]
    if alleles["transition_fraction"] + alleles["strand_ambiguous_fraction"] > 1:
        raise ConfigError(
            "'simulate.alleles': transition_fraction + strand_ambiguous_fraction must not exceed "
            f"1, got {alleles['transition_fraction']} + {alleles['strand_ambiguous_fraction']}"
        )
    end = params["region_start"] + params["region_length"]
    short = [c for c in params["chromosomes"] if end > GRCH37_LENGTHS[str(c)]]
    if short:
        raise ConfigError(
            f"'simulate.region_length': region_start + region_length = {end} runs past the end "
            f"of chromosome(s) {short} (GRCh37)"
        )
    if not any(params["output"][key] for key in ("write_vcf", "write_plink", "write_pgen")):
        raise ConfigError("'simulate.output': write_vcf, write_plink and write_pgen are all false")
    genes = pheno["rare_genes"]
    if genes["n_genes"] * genes["gene_length_bp"] > params["region_length"]:
        raise ConfigError(
            f"'simulate.phenotype.rare_genes': {genes['n_genes']} genes of "
            f"{genes['gene_length_bp']} bp must fit in one chromosome's region (region_length "
            f"{params['region_length']})"
        )
    per_gene = params["balding_nichols"]["rare_loci_per_gene"]
    if (
        genes["n_genes"]
        and params["model"] == "balding_nichols"
        and per_gene > genes["gene_length_bp"]
    ):
        raise ConfigError(
            f"'simulate.balding_nichols.rare_loci_per_gene': {per_gene} loci do not fit in a "
            f"gene of {genes['gene_length_bp']} bp"
        )


def _check_groups(pheno: Mapping[str, Any], groups: Sequence[str]) -> None:
    """The shared rare variants' cross-group knobs against the architecture groups."""
    correlation_matrix(
        pheno["rare_effect_correlation"], len(groups),
        name="'simulate.phenotype.rare_effect_correlation'",
    )  # fmt: skip
    group_signs(pheno, groups)
    shared_causal_groups(pheno, groups)


def _layout(params: Mapping[str, Any]) -> pd.DataFrame:
    """Sites with their cluster, architecture group, size and prevalence."""
    n = params["n_clients"]
    layout = population_layout(n, params["n_clusters"], params["cluster_sizes"])
    groups = params["phenotype"]["architecture_groups"]
    layout["architecture"] = list(layout["cluster"]) if groups is None else [str(g) for g in groups]
    layout["n_target"] = _per_client(params["samples_per_client"], n, "samples_per_client")
    layout["prevalence"] = _per_client(params["phenotype"]["prevalence"], n, "phenotype.prevalence")
    clusters = list(dict.fromkeys(layout["cluster"]))
    wanted = params["gwas"]["discovery_clusters"]
    if wanted is not None:
        unknown = sorted(set(wanted) - set(clusters))
        if unknown:
            raise ConfigError(
                f"'simulate.gwas.discovery_clusters': {unknown} not among the clusters {clusters}"
            )
    eligible = np.flatnonzero(layout["cluster"].isin(clusters if wanted is None else wanted))
    total = params["discovery_samples"]
    if total < 2 * len(eligible):
        raise ConfigError(
            f"'simulate.discovery_samples': {total} is fewer than 2 per discovery population "
            f"({len(eligible)} populations)"
        )
    n_disc = np.zeros(n, dtype=int)
    n_disc[eligible] = [total // len(eligible) + (k < total % len(eligible))
                        for k in range(len(eligible))]  # fmt: skip
    layout["n_discovery"] = n_disc
    return layout


def _make_source(
    params: Mapping[str, Any], layout: pd.DataFrame, seed: int, genes: pd.DataFrame | None
):
    from rvfedprs.simulate.sources import BaldingNicholsSource, MsprimeSource

    common = {
        "n_target": layout["n_target"].tolist(),
        "n_discovery": layout["n_discovery"].tolist(),
        "chromosomes": [str(c) for c in params["chromosomes"]],
        "region_start": params["region_start"],
        "region_length": params["region_length"],
        "substitutions": substitution_matrix(**params["alleles"]),
        "random_seed": seed,
    }
    frame = layout[["population", "client", "cluster"]]
    if params["model"] == "msprime":
        return MsprimeSource(
            frame,
            population_size=params["population_size"],
            client_split_generations=params["client_split_generations"],
            cluster_split_generations=params["cluster_split_generations"],
            recombination_rate=params["recombination_rate"],
            mutation_rate=params["mutation_rate"],
            **common,
        )
    return BaldingNicholsSource(frame, **params["balding_nichols"], genes=genes, **common)


def _sequenced(variants: pd.DataFrame, params: Mapping[str, Any], rng) -> np.ndarray:
    """Which variants lie in a sequenced block (``sequenced_fraction`` of 100-kb blocks)."""
    fraction = params["sequenced_fraction"]
    if fraction >= 1:
        return np.ones(len(variants), dtype=bool)
    n_blocks = -(-params["region_length"] // _SEQUENCED_BLOCK_BP)
    block = (variants["pos"].to_numpy() - params["region_start"]) // _SEQUENCED_BLOCK_BP
    chrom = variants["chrom"].astype(str).to_numpy()
    out = np.zeros(len(variants), dtype=bool)
    for c in params["chromosomes"]:
        chosen = rng.choice(n_blocks, size=max(1, round(fraction * n_blocks)), replace=False)
        out |= (chrom == str(c)) & np.isin(block, chosen)
    return out


def run_simulation(
    params: Mapping[str, Any],
    out: str | Path,
    *,
    random_seed: int | None = None,
    origin: Mapping[str, Any] | None = None,
) -> SimulatedCohort:
    """Simulate a cohort from a validated ``simulate`` configuration section.

    Parameters
    ----------
    params : mapping
        The ``simulate`` section after :func:`rvfedprs.config.validate_config` (a preset merged
        in already); recorded in full in ``provenance.json``.
    out : str or Path
        Output folder (created).
    random_seed : int, optional
        Overrides ``params["seed"]``; a seed is drawn and recorded when both are absent.
    origin : mapping, optional
        Where the parameters came from (``{"preset": "demo", "config": "path.yaml"}``): recorded
        in provenance, with the SHA-256 of a config file.

    Returns
    -------
    SimulatedCohort
    """
    started = time.perf_counter()
    _check_params(params)
    seed = draw_seed(random_seed if random_seed is not None else params["seed"])
    params = {**params, "seed": seed}
    out = Path(out)
    for folder in ("genotypes", "scores", "truth"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    outputs = params["output"]
    pheno = params["phenotype"]
    show = bool(outputs["progress"])
    seeds = np.random.SeedSequence(seed).generate_state(9)  # a prefix of it does not change
    timings: dict[str, float] = {}

    # ---- 1. genotype model ------------------------------------------------------------------
    layout = _layout(params)
    clusters = list(dict.fromkeys(layout["cluster"]))
    groups = list(dict.fromkeys(layout["architecture"]))
    _check_groups(pheno, groups)
    genes = None
    if pheno["rare_genes"]["n_genes"] > 0:
        genes = draw_genes(
            np.random.default_rng(seeds[7]),
            params["chromosomes"],
            region_start=params["region_start"],
            region_length=params["region_length"],
            n_genes=pheno["rare_genes"]["n_genes"],
            gene_length=pheno["rare_genes"]["gene_length_bp"],
        )
    n_individuals = int(layout["n_target"].sum() + layout["n_discovery"].sum())
    chunk = max(1, min(outputs["chunk_variants"], _CHUNK_BYTES // (2 * n_individuals)))
    log.info("simulating %s genotypes of %d individuals", params["model"], n_individuals)
    t0 = time.perf_counter()
    source = _make_source(params, layout, int(seeds[0]), genes)
    timings["genotype_model_s"] = time.perf_counter() - t0
    inds = source.individuals
    pop = inds["pop_index"].to_numpy()
    is_target = inds["role"].to_numpy() == "target"
    cluster_of_pop = np.array([clusters.index(c) for c in layout["cluster"]])
    group_of_pop = np.array([groups.index(g) for g in layout["architecture"]])

    # ---- 2. counting pass ---------------------------------------------------------------------
    t0 = time.perf_counter()
    variants, target_ac, all_ac = count_alleles(source, pop, is_target, chunk, show)
    timings["count_s"] = time.perf_counter() - t0
    sites = SiteLayout(
        target_ac=target_ac,
        all_ac=all_ac,
        n_target=layout["n_target"].to_numpy(),
        n_all=(layout["n_target"] + layout["n_discovery"]).to_numpy(),
        cluster=cluster_of_pop,
        group=group_of_pop,
    )

    # ---- 3. architecture ----------------------------------------------------------------------
    total_target = target_ac.sum(0)
    n_target_total = int(is_target.sum())
    observed = (_maf(total_target, n_target_total) >= _ARRAY_MAF_MIN) | _sequenced(
        variants, params, np.random.default_rng(seeds[5])
    )
    gene_of = None
    if genes is not None:  # genes are sequenced, as an exome capture targets them
        gene_of = gene_index(genes, variants["chrom"], variants["pos"])
        observed |= gene_of >= 0
    rng = np.random.default_rng(seeds[1])
    arch = draw_architecture(
        rng, sites, pheno, group_names=groups, eligible=observed, gene=gene_of,
        gene_names=[] if genes is None else genes["gene"].tolist(),
    )  # fmt: skip
    replacements = founder_genotypes(
        np.random.default_rng(seeds[4]), source, arch.founders, cluster_of_pop[pop]
    )
    source = OverlaySource(source, replacements)
    for column, genotypes in replacements.items():
        for k in range(len(layout)):
            target_ac[k, column] = genotypes[(pop == k) & is_target].sum()
            all_ac[k, column] = genotypes[pop == k].sum()
    total_target = target_ac.sum(0)
    polymorphic = (total_target > 0) & (total_target < 2 * n_target_total)
    kept = polymorphic & observed
    n_mono = int((~polymorphic).sum())
    if not kept.any():
        raise ConfigError("the simulation produced no polymorphic variant; enlarge region_length")

    # ---- 4. phenotype -------------------------------------------------------------------------
    everyone = np.arange(len(inds))
    sidx = variants["sidx"].to_numpy()
    n_common = len(arch.common.indices)
    x_causal = source.fetch(sidx[np.r_[arch.common.indices, arch.rare.indices]], everyone)
    x_common, x_rare = x_causal[:, :n_common], x_causal[:, n_common:]
    columns = CausalArchitecture(np.arange(len(arch.common.indices)), arch.common.effects)
    g_common = genetic_value(x_common, columns, cluster_of_pop[pop])
    columns = CausalArchitecture(np.arange(len(arch.rare.indices)), arch.rare.effects)
    g_rare = genetic_value(x_rare, columns, group_of_pop[pop])
    g_rare *= polygenic_modifier(g_common, pheno["rare_prs_interaction"], is_target)
    noise_sd = np.sqrt(1 - pheno["h2_common"] - pheno["h2_rare"])
    noise = np.random.default_rng(seeds[2]).normal(0.0, noise_sd, size=len(inds))
    liability = g_common - g_common[is_target].mean() + g_rare - g_rare[is_target].mean() + noise
    thresholds: dict[Any, float] = {}
    if pheno["kind"] == "quantitative":  # the trait is the liability itself: no threshold
        y = liability.copy()
    else:
        prevalence_of_pop = dict(enumerate(layout["prevalence"]))
        y = np.zeros(len(inds), dtype=np.int8)
        for role in ("target", "discovery"):
            rows = np.flatnonzero(inds["role"].to_numpy() == role)
            y[rows], found = threshold_by_group(liability[rows], prevalence_of_pop, pop[rows])
            if role == "target":
                thresholds = {layout["client"].iat[k]: v for k, v in found.items()}

    # ---- 5. writing pass and discovery GWAS ------------------------------------------------------
    disc_rows = np.flatnonzero(~is_target)
    split_rng = np.random.default_rng(seeds[3])
    shuffled = split_rng.permutation(disc_rows)
    n_val = int(round(params["gwas"]["validation_fraction"] * len(disc_rows)))
    val_rows = np.sort(shuffled[:n_val])
    gwas_rows = np.sort(shuffled[n_val:])
    ref_rows = np.sort(shuffled[n_val:][: params["gwas"]["ld_reference_samples"]])
    if len(gwas_rows) < 10:
        raise ConfigError(
            f"'simulate.discovery_samples': {len(disc_rows)} leave {len(gwas_rows)} individuals "
            "for the GWAS after the validation part"
        )
    target_rows = np.flatnonzero(is_target)
    width = max(6, len(str(n_target_total)))
    sample_ids = np.array([f"SIM{i + 1:0{width}d}" for i in range(n_target_total)])
    t0 = time.perf_counter()
    gwas = write_and_test(
        source, variants, kept, y, target_rows, gwas_rows, ref_rows, val_rows, sample_ids,
        out, params, chunk, show,
    )  # fmt: skip
    timings["write_and_gwas_s"] = time.perf_counter() - t0

    # ---- 6. PGS: clumping + threshold chosen on validation ---------------------------------------
    t0 = time.perf_counter()
    # the discovery population's effects: per cluster (common) and group (rare), averaged over
    # the discovery individuals
    n_disc = layout["n_discovery"].to_numpy()
    by_cluster = np.bincount(cluster_of_pop, weights=n_disc, minlength=len(clusters))
    by_group = np.bincount(group_of_pop, weights=n_disc, minlength=len(groups))
    discovery = {
        "rng": np.random.default_rng(seeds[6]),
        "columns": np.r_[arch.common.indices, arch.rare.indices],
        "genotypes": x_causal[ref_rows],
        "effects": np.r_[
            arch.common.effects @ (by_cluster / by_cluster.sum()),
            arch.rare.effects @ (by_group / by_group.sum()),
        ],
    }
    score_table, pgs = _build_pgs(gwas, variants, y, gwas_rows, val_rows, params, discovery)
    write_scorefile(
        out / "scores" / "PGS_sim.txt.gz",
        score_table,
        header={
            "pgs_id": params["gwas"]["pgs_id"],
            "pgs_name": f"simulated_{pheno['name']}",
            "trait_reported": pheno["name"],
            "weight_type": "beta",
            "genome_build": "GRCh37",
            "variants_number": len(score_table),
        },
        float_format="%.6g",
    )
    # round-trip through the printed precision so the PRS below is what a reader recomputes
    weights = score_table["effect_weight"].astype(float).map(lambda w: float(f"{w:.6g}"))
    prs = np.zeros(len(target_rows))
    step = max(16, min(512, _FLOAT_BLOCK_BYTES // (8 * len(target_rows))))
    for lo in range(0, len(weights), step):  # blocks of variants: memory stays bounded
        block = sidx[pgs["index"][lo : lo + step]]
        prs += source.fetch(block, target_rows) @ weights.to_numpy()[lo : lo + step]
    timings["pgs_s"] = time.perf_counter() - t0

    # ---- 7. tables, truth, summary, provenance ---------------------------------------------------
    written = variants.loc[kept].reset_index(drop=True)
    tables = write_tables(
        out,
        layout=layout,
        inds=inds,
        sample_ids=sample_ids,
        y=y,
        liability=liability,
        g_common=g_common,
        g_rare=g_rare,
        x_common=x_common,
        x_rare=x_rare,
        arch=arch,
        variants=variants,
        pheno=pheno,
        thresholds=thresholds,
        clusters=clusters,
        groups=groups,
    )
    summary = summarise(
        layout=layout,
        inds=inds,
        y=y,
        liability=liability,
        g_common=g_common,
        g_rare=g_rare,
        x_rare=x_rare,
        prs=prs,
        arch=arch,
        tables=tables,
        pheno=pheno,
        clusters=clusters,
        groups=groups,
        seed=seed,
    )
    if genes is not None:
        regions = write_regions(out, genes)
        in_genes = arch.rare_gene[arch.rare_gene != ""]
        summary["genes"] = {
            "n_genes": int(len(genes)),
            "gene_length_bp": int(pheno["rare_genes"]["gene_length_bp"]),
            "files": {key: str(path.relative_to(out)) for key, path in regions.items()},
            "n_rare_causal_in_genes": int(len(in_genes)),
            "n_genes_with_causal": int(len(set(in_genes))),
            "n_variants_in_genes": int((kept & (gene_of >= 0)).sum()),
        }
    maf = _maf(total_target, n_target_total)
    if pheno["annotations"]["write"]:
        summary["annotations"] = _annotate(
            np.random.default_rng(seeds[8]), out, written, maf[kept], arch, kept, gene_of, genes,
            pheno["annotations"],
        )  # fmt: skip
    summary.update(
        n_discovery_samples=int(len(disc_rows)),
        n_variants=int(kept.sum()),
        n_rare_variants_maf_below_0_001=int((maf[kept] < 0.001).sum()),
        n_rare_variants_maf_below_0_01=int((maf[kept] < 0.01).sum()),
        alleles={
            "strand_ambiguous_fraction": float(
                is_strand_ambiguous(written["ref"], written["alt"]).mean()
            ),
            "transition_fraction": float(is_transition(written["ref"], written["alt"]).mean()),
        },
        dropped={
            "multiallelic_sites": int(source.n_multiallelic),
            "monomorphic_in_target": n_mono,
            "rare_outside_sequenced_blocks": int((polymorphic & ~observed).sum()),
            "duplicate_positions": 0,
        },
        fst=_fst(source, params, layout, target_ac[:, kept], is_target, pop),
        gwas={
            **pgs["summary"],
            "n_causal_common_in_score": int(np.isin(pgs["index"], arch.common.indices).sum()),
            "n_strand_ambiguous_in_score": int(
                is_strand_ambiguous(score_table["effect_allele"], score_table["other_allele"]).sum()
            ),
        },
    )
    if pheno["kind"] == "binary" and summary["causal"]["n_rare"]:
        _log_calibration(summary)
    timings["total_s"] = time.perf_counter() - started
    summary["timings"] = {k: round(v, 2) for k, v in timings.items()}
    _write_provenance(out, params, seed, summary, origin)
    metric = "r2" if pheno["kind"] == "quantitative" else "auc"
    log.info(
        "simulated %d samples, %d variants; PGS of %d variants, %s %.3f; wrote %s",
        n_target_total, summary["n_variants"], len(score_table), metric.upper(),
        summary[metric]["prs"] or float("nan"), out,
    )  # fmt: skip
    return SimulatedCohort(
        out, tables["samples"], tables["phenotypes"], tables["causal"], score_table, summary
    )


def _annotate(rng, out, written, maf, arch, kept, gene_of, genes, settings) -> dict[str, Any]:
    """Write ``annotations/variants.tsv`` for the written variants; what provenance says of it."""
    causal = np.zeros(len(kept), dtype=bool)
    causal[arch.rare.indices] = True
    names = np.empty(0, dtype=object) if genes is None else genes["gene"].to_numpy(dtype=object)
    gene = np.full(int(kept.sum()), "", dtype=object)
    if gene_of is not None:
        inside = gene_of[kept] >= 0
        gene[inside] = names[gene_of[kept][inside]]
    consequence = draw_consequences(rng, maf, causal[kept], settings)
    path = write_annotations(out, written, consequence, gene)
    return {
        "file": str(path.relative_to(out)),
        **summarise_annotations(consequence, maf, causal[kept]),
    }


def _log_calibration(summary: Mapping[str, Any]) -> None:
    """Log the realised rare-variant figures that SPEC §2 calibrates against."""
    causal = summary["causal"]
    odds = causal["odds_ratio"] or {}
    bands = causal["odds_ratio_bands"] or {}
    pgs = causal["penetrance_by_prs_quintile"]["true_common_value"] or {}
    lof = summary.get("annotations", {}).get("causal_lof_fraction")
    log.info(
        "rare architecture: realised h2_rare %.4f, %.2f%% carry a causal variant, per-variant OR "
        "median %.2f (p05 %.2f, p95 %.2f; %.0f%% in 1.5-10, %.0f%% > 20), LoF share %s, "
        "carrier risk top/bottom common-value quintile %.2f",
        causal["realised_h2_rare"], 100 * causal["carrier_fraction"], odds.get("median", np.nan),
        odds.get("p05", np.nan), odds.get("p95", np.nan), 100 * bands.get("1_5_to_10", np.nan),
        100 * bands.get("above_20", np.nan), "n/a" if lof is None else f"{lof:.2f}",
        pgs.get("top_over_bottom", np.nan),
    )  # fmt: skip


def _maf(ac: np.ndarray, n: int) -> np.ndarray:
    af = ac / (2.0 * n)
    return np.minimum(af, 1 - af)


def _build_pgs(gwas: GwasPass, variants, y, gwas_rows, val_rows, params, discovery):
    """LD clumping + thresholding chosen on validation.

    Weights are on the log-odds scale for a binary trait, in trait SD units for a quantitative
    one (whose score is chosen by validation R² instead of AUC).

    ``discovery`` holds what drawn summary statistics need (``gwas.sample_size``): ``rng``, the
    causal genotypes of the reference panel, their columns and their effects in the discovery
    population.
    """
    settings = params["gwas"]
    window = int(settings["clump_window_kb"] * 1000)
    chroms = variants["chrom"].to_numpy()[gwas.tested]
    positions = variants["pos"].to_numpy()[gwas.tested]
    pairs = None
    if window > 0:
        pairs = ld_pairs(
            gwas.reference, chroms, positions, window_bp=window, r2_min=min(settings["clump_r2"])
        )
    quantitative = params["phenotype"]["kind"] == "quantitative"
    metric = "r2" if quantitative else "auc"
    if settings["sample_size"] is None and quantitative:
        case_fraction = None
        weights = gwas.beta  # a linear regression of the trait: already per SD of the trait
        p = gwas.p
    elif settings["sample_size"] is None:
        case_fraction = float(y[gwas_rows].mean())
        # linear effects on a 0/1 outcome, put on the log-odds scale: beta / (K (1 - K))
        weights = gwas.beta / (case_fraction * (1 - case_fraction))
        p = gwas.p
    else:
        case_fraction = None
        columns = discovery["columns"]
        weights, _, p = summary_statistics(
            discovery["rng"], gwas.reference, chroms, positions,
            discovery["genotypes"], discovery["effects"],
            variants["chrom"].to_numpy()[columns], variants["pos"].to_numpy()[columns],
            sample_size=settings["sample_size"], window_bp=window,
        )  # fmt: skip
    chosen, table = clumping_thresholding(
        p, weights, pairs, gwas.validation, y[val_rows],
        r2_values=settings["clump_r2"], p_thresholds=settings["p_thresholds"], metric=metric,
    )  # fmt: skip
    columns = gwas.tested[chosen]
    score_table = pd.DataFrame(
        {
            "rsID": variants["id"].to_numpy()[columns],
            "chr_name": variants["chrom"].to_numpy()[columns],
            "chr_position": variants["pos"].to_numpy()[columns],
            "effect_allele": variants["alt"].to_numpy()[columns],
            "other_allele": variants["ref"].to_numpy()[columns],
            "effect_weight": weights[chosen],
        }
    )
    best = table.loc[table["chosen"]].iloc[0]
    summary = {
        "discovery_clusters": settings["discovery_clusters"],
        "n_gwas": int(len(gwas_rows)) if settings["sample_size"] is None else None,
        "sample_size": settings["sample_size"],
        "n_validation": int(len(val_rows)),
        "n_ld_reference": int(gwas.reference.shape[0]),
        "n_tested": int(len(gwas.tested)),
        "clump_r2": None if pd.isna(best["clump_r2"]) else float(best["clump_r2"]),
        "p_threshold": float(best["p_threshold"]),
        f"validation_{metric}": float(best[f"validation_{metric}"]),
        "grid": table.drop(columns="chosen").to_dict(orient="records"),
        "n_in_score": int(len(columns)),
        "gwas_case_fraction": case_fraction,
    }
    return score_table, {"index": columns, "summary": summary}


def _fst(source, params, layout, target_ac, is_target, pop) -> dict[str, Any]:
    pairs = all_pairs(len(layout))
    if not pairs:
        return {}
    n_per_client = layout["n_target"].to_numpy()
    fst = {
        "hudson_counts": summarise_fst(
            layout, dict(zip(pairs, hudson_fst(target_ac, 2 * n_per_client, pairs), strict=True))
        )
    }
    base = getattr(source, "base", source)
    if params["model"] == "msprime":
        rows = [np.flatnonzero(is_target & (pop == k)) for k in range(len(layout))]
        values = base.tskit_fst(rows, pairs)
        fst["tskit"] = summarise_fst(layout, dict(zip(pairs, values, strict=True)))
    return fst


def _write_provenance(out: Path, params, seed, summary, origin) -> None:
    origin = dict(origin or {})
    inputs = [origin["config"]] if origin.get("config") else []
    checksums = {
        str(path.relative_to(out)): file_sha256(path)
        for path in sorted(out.rglob("*"))
        if path.is_file() and path.name != "provenance.json"
    }
    write_provenance(
        out,
        command="rvfedprs simulate",
        parameters=params,
        seed=seed,
        inputs=inputs,
        extra={"origin": origin, **summary, "outputs": checksums},
    )


def simulate_cohort(
    n_clients: int | None = None,
    *,
    samples_per_client: int | Sequence[int] | None = None,
    n_clusters: int | None = None,
    out: str | Path | None = None,
    random_seed: int | None = None,
    model: str | None = None,
    preset: str | None = None,
    **options: Any,
) -> SimulatedCohort:
    """Simulate a federated cohort (case-control or quantitative trait) in the CINECA layout.

    Arguments left out (None) take the preset's value, else the schema default
    (``rvfedprs/schemas/simulate.schema.json``: 10 sites of 1,000 in 3 clusters, msprime).

    Parameters
    ----------
    n_clients : int, optional
        Federated sites (one sub-population each).
    samples_per_client : int or sequence of int, optional
        Target individuals per site (one number, or one per site).
    n_clusters : int, optional
        Ancestry clusters the sites are grouped into.
    out : str or Path, optional
        Output folder; a new temporary folder when absent (see ``.out`` of the result).
    random_seed : int, optional
        Master seed; drawn and recorded in ``provenance.json`` when absent.
    model : {"msprime", "balding_nichols"}, optional
        Genotype model.
    preset : str, optional
        A built-in preset (:func:`rvfedprs.config.preset_names`: ``demo``, ``scenario_*``, ...)
        whose ``simulate`` section the other arguments are merged over.
    **options
        Any other key of the ``simulate`` configuration section (``discovery_samples``,
        ``cluster_sizes``, ``phenotype={"h2_rare": 0.02, "rare_shared_fraction": 0.5, ...}``,
        ``gwas={...}``, ``output={...}``, ...); the schema documents each.

    Returns
    -------
    SimulatedCohort

    Examples
    --------
    Half of the rare causal variants shared across clusters with effect correlation 0.3, a
    one-site minority cluster, and the discovery GWAS drawn from the first cluster:

    >>> from rvfedprs.simulate import simulate_cohort
    >>> cohort = simulate_cohort(                                    # doctest: +SKIP
    ...     10, samples_per_client=1000, n_clusters=3, cluster_sizes=[5, 4, 1],
    ...     model="balding_nichols", random_seed=1,
    ...     phenotype={"rare_shared_fraction": 0.5, "rare_effect_correlation": 0.3},
    ...     gwas={"discovery_clusters": ["cluster1"]})
    """
    import tempfile

    from rvfedprs.config import deep_merge, load_preset, validate_config

    given = {
        "n_clients": n_clients,
        "samples_per_client": samples_per_client,
        "n_clusters": n_clusters,
        "model": model,
    }
    section = {key: value for key, value in given.items() if value is not None}
    if isinstance(section.get("samples_per_client"), Sequence):
        section["samples_per_client"] = list(section["samples_per_client"])
    section.update(options)
    if preset is not None:
        section = deep_merge(load_preset(preset).get("simulate", {}), section)
    params = validate_config({"simulate": section})["simulate"]
    target = Path(tempfile.mkdtemp(prefix="rvfedprs-sim-")) if out is None else Path(out)
    return run_simulation(params, target, random_seed=random_seed, origin={"preset": preset})
