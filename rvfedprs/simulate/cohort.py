"""Simulate a federated cohort in the CINECA layout (SPEC §2).

The stages, each streaming genotypes in chunks so memory never grows with the number of variants:

1. genotypes of the target and the discovery individuals (msprime or Balding–Nichols);
2. pass 1: write the target cohort's VCF/PLINK files and collect allele counts per client and
   cluster (variants monomorphic in the target cohort are left out and counted);
3. causal variants: shared common ones and, per cluster, rare ones carried only in that cluster;
   liability = scaled common part + scaled rare part + noise, cases = top liabilities per client;
4. pass 2: marginal GWAS on the discovery cohort, p-value threshold and distance clumping → the
   PGS Catalog scoring file;
5. the PGS's AUC on the target cohort, a carrier check, Fst, and the provenance record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.exceptions import ConfigError
from rvfedprs.genotypes.writers import BedWriter, VcfWriter
from rvfedprs.provenance import draw_seed, write_provenance
from rvfedprs.simulate.demography import all_pairs, hudson_fst, population_layout, summarise_fst
from rvfedprs.simulate.gwas import clump_by_distance, marginal_regression, write_pgs_catalog
from rvfedprs.simulate.phenotype import threshold_by_group

__all__ = ["SimulatedCohort", "run_simulation", "simulate_cohort"]

log = logging.getLogger(__name__)

_CHUNK_BYTES = 64 << 20


@dataclass
class SimulatedCohort:
    """What :func:`simulate_cohort` wrote, with the small tables loaded.

    Attributes
    ----------
    out : Path
        The output folder (layout in SPEC §2).
    samples : DataFrame
        ``sample_id, population, cluster, client``.
    phenotypes : DataFrame
        ``eid, Subject id, <name>, <name>_liability``.
    causal_variants : DataFrame
        The truth table (``truth/causal_variants.tsv``).
    scores : DataFrame
        The PGS weights (``scores/PGS_sim.txt.gz``).
    summary : dict
        Measured statistics (Fst, case counts, AUCs), as in ``provenance.json``.
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
            "genetic_values": out / "truth" / "genetic_values.tsv",
            "provenance": out / "provenance.json",
        }
        if (out / "genotypes" / "cohort.bed").exists():
            found["plink"] = out / "genotypes" / "cohort"
        for vcf in sorted((out / "genotypes").glob("chr*.vcf.gz")):
            found[vcf.name.split(".")[0]] = vcf
        return found


def _progress(enabled: bool, total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="variant", disable=not enabled, leave=False)


def _check_params(params: Mapping[str, Any]) -> None:
    pheno = params["phenotype"]
    if pheno["h2_common"] + pheno["h2_rare"] >= 1:
        raise ConfigError(
            f"'simulate.phenotype': h2_common + h2_rare must be < 1, got "
            f"{pheno['h2_common']} + {pheno['h2_rare']}"
        )
    if params["n_clusters"] > params["n_clients"]:
        raise ConfigError(
            f"'simulate.n_clusters': {params['n_clusters']} exceeds n_clients {params['n_clients']}"
        )
    if params["client_split_generations"] >= params["cluster_split_generations"]:
        raise ConfigError(
            f"'simulate.client_split_generations': {params['client_split_generations']} must be "
            f"smaller than cluster_split_generations {params['cluster_split_generations']}"
        )
    if params["discovery_samples"] < 2 * params["n_clients"]:
        raise ConfigError(
            f"'simulate.discovery_samples': {params['discovery_samples']} is fewer than 2 per "
            f"client ({params['n_clients']} clients)"
        )
    bn = params["balding_nichols"]
    if bn["rare_freq_min"] > bn["rare_freq_max"]:
        raise ConfigError(
            f"'simulate.balding_nichols.rare_freq_min': {bn['rare_freq_min']} exceeds "
            f"rare_freq_max {bn['rare_freq_max']}"
        )
    if not (params["output"]["write_vcf"] or params["output"]["write_plink"]):
        raise ConfigError("'simulate.output': write_vcf and write_plink are both false")


def _make_source(params: Mapping[str, Any], layout: pd.DataFrame, seed: int, chunk: int):
    from rvfedprs.simulate.sources import BaldingNicholsSource, MsprimeSource

    n_clients = len(layout)
    n_disc = [
        params["discovery_samples"] // n_clients + (k < params["discovery_samples"] % n_clients)
        for k in range(n_clients)
    ]
    common = {
        "n_target": params["samples_per_client"],
        "n_discovery": n_disc,
        "chromosomes": [str(c) for c in params["chromosomes"]],
        "region_start": params["region_start"],
        "region_length": params["region_length"],
        "random_seed": seed,
    }
    if params["model"] == "msprime":
        return MsprimeSource(
            layout,
            population_size=params["population_size"],
            client_split_generations=params["client_split_generations"],
            cluster_split_generations=params["cluster_split_generations"],
            recombination_rate=params["recombination_rate"],
            mutation_rate=params["mutation_rate"],
            **common,
        )
    return BaldingNicholsSource(layout, chunk_variants=chunk, **params["balding_nichols"], **common)


def _rare_effects(rng: np.random.Generator, n: int, risk_fraction: float) -> np.ndarray:
    magnitude = 0.5 + np.abs(rng.normal(size=n))
    sign = np.where(rng.random(n) < risk_fraction, 1.0, -1.0)
    return magnitude * sign


def _scale_to(value: np.ndarray, target_rows: np.ndarray, h2: float) -> float:
    sd = value[target_rows].std()
    return float(np.sqrt(h2) / sd) if sd > 0 and h2 > 0 else 0.0


def _auc(y: np.ndarray, score: np.ndarray) -> float | None:
    from sklearn.metrics import roc_auc_score

    if len(np.unique(y)) < 2:
        return None
    return float(roc_auc_score(y, score))


def _carrier_check(prs, dosages, y, seed) -> dict[str, Any]:
    """Among carriers: cross-validated AUC of PRS alone vs PRS + rare causal dosages."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    result: dict[str, Any] = {"n_carriers": int(len(y)), "n_carrier_cases": int(y.sum())}
    if len(y) < 20 or y.sum() < 5 or (len(y) - y.sum()) < 5:
        return result
    folds = StratifiedKFold(5, shuffle=True, random_state=seed % (2**31))
    features = np.column_stack([prs, dosages])
    model = LogisticRegression(C=1.0, max_iter=2000)
    p_prs = cross_val_predict(model, prs[:, None], y, cv=folds, method="predict_proba")[:, 1]
    p_all = cross_val_predict(model, features, y, cv=folds, method="predict_proba")[:, 1]
    result["auc_prs_only"] = _auc(y, p_prs)
    result["auc_prs_plus_rare"] = _auc(y, p_all)
    return result


def run_simulation(
    params: Mapping[str, Any], out: str | Path, *, random_seed: int | None = None
) -> SimulatedCohort:
    """Simulate a cohort from a validated ``simulate`` configuration section.

    Parameters
    ----------
    params : mapping
        The ``simulate`` section after :func:`rvfedprs.config.validate_config`.
    out : str or Path
        Output folder (created).
    random_seed : int, optional
        Overrides ``params["seed"]``; a seed is drawn and recorded when both are absent.

    Returns
    -------
    SimulatedCohort
    """
    started = time.perf_counter()
    _check_params(params)
    seed = draw_seed(random_seed if random_seed is not None else params["seed"])
    params = {**params, "seed": seed}
    out = Path(out)
    (out / "genotypes").mkdir(parents=True, exist_ok=True)
    (out / "scores").mkdir(exist_ok=True)
    (out / "truth").mkdir(exist_ok=True)
    outputs = params["output"]
    pheno = params["phenotype"]
    show = bool(outputs["progress"])
    seeds = np.random.SeedSequence(seed).generate_state(4)
    timings: dict[str, float] = {}

    layout = population_layout(params["n_clients"], params["n_clusters"])
    n_individuals = params["n_clients"] * params["samples_per_client"] + params["discovery_samples"]
    chunk = max(1, min(outputs["chunk_variants"], _CHUNK_BYTES // (2 * n_individuals)))
    log.info("simulating %s genotypes of %d individuals", params["model"], n_individuals)
    t0 = time.perf_counter()
    source = _make_source(params, layout, int(seeds[0]), chunk)
    timings["genotype_model_s"] = time.perf_counter() - t0

    inds = source.individuals
    target_rows = np.flatnonzero(inds["role"].to_numpy() == "target")
    disc_rows = np.flatnonzero(inds["role"].to_numpy() == "discovery")
    n_target = len(target_rows)
    width = max(6, len(str(n_target)))
    sample_ids = np.array([f"SIM{i + 1:0{width}d}" for i in range(n_target)])
    target = inds.iloc[target_rows].reset_index(drop=True)
    client_of_target = target["pop_index"].to_numpy()
    client_starts = np.flatnonzero(np.r_[True, np.diff(client_of_target) != 0])
    clusters = list(dict.fromkeys(layout["cluster"]))

    # ---- pass 1: write genotypes, count alleles -------------------------------------------
    t0 = time.perf_counter()
    tables, client_counts = [], []
    n_mono = 0
    bounds = list(zip(client_starts, np.r_[client_starts[1:], n_target], strict=True))
    bed = BedWriter(out / "genotypes" / "cohort", sample_ids) if outputs["write_plink"] else None
    vcf: VcfWriter | None = None
    vcf_chrom = None
    kept_of_sidx = np.full(source.n_variants, -1, dtype=np.int64)
    n_kept = 0
    try:
        if bed is not None:
            bed.__enter__()
        with _progress(show, source.n_variants, "genotypes") as bar:
            for variants, g in source.iter_chunks(target_rows, chunk):
                bar.update(len(variants))
                gv = g.T  # (n_variants, n_target), variant-major
                per_client = np.stack([gv[:, a:b].sum(1, dtype=np.int64) for a, b in bounds])
                total = per_client.sum(0)
                keep = (total > 0) & (total < 2 * n_target)
                n_mono += int((~keep).sum())
                if not keep.any():
                    continue
                variants = variants.loc[keep].reset_index(drop=True)
                gt = gv[keep].T
                chrom = variants["chrom"].iat[0]
                if outputs["write_vcf"] and chrom != vcf_chrom:
                    if vcf is not None:
                        vcf.close()
                    vcf = VcfWriter(
                        out / "genotypes" / f"chr{chrom}.vcf.gz", sample_ids,
                        threads=outputs["threads"], compress_level=outputs["compress_level"],
                    ).__enter__()  # fmt: skip
                    vcf_chrom = chrom
                if vcf is not None:
                    vcf.write(variants, gt)
                if bed is not None:
                    bed.write(variants, gt)
                kept_of_sidx[variants["sidx"].to_numpy()] = n_kept + np.arange(len(variants))
                n_kept += len(variants)
                tables.append(variants)
                client_counts.append(per_client[:, keep])
    finally:
        if vcf is not None:
            vcf.close()
        if bed is not None:
            bed.close()
    timings["write_genotypes_s"] = time.perf_counter() - t0
    if n_kept == 0:
        raise ConfigError("the simulation produced no polymorphic variant; enlarge region_length")
    variants = pd.concat(tables, ignore_index=True)
    client_ac = np.concatenate(client_counts, axis=1)  # (n_clients, n_variants)
    n_per_client = np.bincount(client_of_target)
    target_af = client_ac.sum(0) / (2 * n_target)
    target_maf = np.minimum(target_af, 1 - target_af)

    # ---- Fst ---------------------------------------------------------------------------------
    pairs = all_pairs(params["n_clients"])
    fst: dict[str, Any] = {}
    if pairs:
        numpy_fst = hudson_fst(client_ac, 2 * n_per_client, pairs)
        fst["hudson_counts"] = summarise_fst(layout, dict(zip(pairs, numpy_fst, strict=True)))
        if params["model"] == "msprime":
            rows = [target_rows[client_of_target == k] for k in range(params["n_clients"])]
            values = source.tskit_fst(rows, pairs)
            fst["tskit"] = summarise_fst(layout, dict(zip(pairs, values, strict=True)))

    # ---- causal variants and phenotype ----------------------------------------------------------
    rng = np.random.default_rng(seeds[1])
    common_candidates = np.flatnonzero(target_maf >= pheno["causal_common_maf"])
    n_common = min(pheno["n_causal_common"], len(common_candidates))
    common_idx = np.sort(rng.choice(common_candidates, size=n_common, replace=False))
    cluster_of_client = layout["cluster"].map({c: k for k, c in enumerate(clusters)}).to_numpy()
    target_cluster_ac = np.stack(
        [client_ac[cluster_of_client == k].sum(0) for k in range(len(clusters))]
    )
    rare_idx, rare_cluster, rare_available = [], [], {}
    for k, name in enumerate(clusters):
        outside = target_cluster_ac.sum(0) - target_cluster_ac[k]
        candidates = np.flatnonzero(
            (target_af < pheno["rare_maf_max"])
            & (target_cluster_ac[k] >= pheno["rare_min_count"])
            & (outside == 0)
        )
        rare_available[name] = int(len(candidates))
        chosen = rng.choice(
            candidates, size=min(pheno["n_causal_rare_per_cluster"], len(candidates)), replace=False
        )
        rare_idx.extend(chosen.tolist())
        rare_cluster.extend([name] * len(chosen))
        if len(chosen) < pheno["n_causal_rare_per_cluster"]:
            log.warning(
                "%s: only %d variants qualify as rare causal (asked for %d)",
                name, len(chosen), pheno["n_causal_rare_per_cluster"],
            )  # fmt: skip
    rare_idx_arr = np.array(rare_idx, dtype=np.int64)
    order = np.argsort(rare_idx_arr, kind="stable")
    rare_idx_arr = rare_idx_arr[order]
    rare_cluster_arr = np.array(rare_cluster, dtype=object)[order]

    all_rows = np.arange(len(inds))
    x_common = source.fetch(variants["sidx"].to_numpy()[common_idx], all_rows)
    x_rare = source.fetch(variants["sidx"].to_numpy()[rare_idx_arr], all_rows)
    beta_common = rng.normal(size=n_common)
    beta_rare = _rare_effects(rng, len(rare_idx_arr), pheno["rare_risk_fraction"])
    beta_common *= _scale_to(x_common @ beta_common, target_rows, pheno["h2_common"])
    beta_rare *= _scale_to(x_rare @ beta_rare, target_rows, pheno["h2_rare"])
    g_common = x_common @ beta_common
    g_rare = x_rare @ beta_rare
    noise_sd = np.sqrt(1 - pheno["h2_common"] - pheno["h2_rare"])
    noise = np.random.default_rng(seeds[2]).normal(0.0, noise_sd, size=len(inds))
    liability = (
        g_common - g_common[target_rows].mean() + g_rare - g_rare[target_rows].mean() + noise
    )
    y_target, thresholds = threshold_by_group(
        liability[target_rows], pheno["prevalence"], target["client"].to_numpy()
    )
    y_disc, _ = threshold_by_group(
        liability[disc_rows], pheno["prevalence"], inds["population"].to_numpy()[disc_rows]
    )

    # ---- pass 2: discovery GWAS ---------------------------------------------------------------
    t0 = time.perf_counter()
    maf_min = params["gwas"]["maf_min"]
    tested, betas, pvalues = [], [], []
    with _progress(show, source.n_variants, "discovery GWAS") as bar:
        for chunk_variants, g in source.iter_chunks(disc_rows, chunk):
            bar.update(len(chunk_variants))
            kept = kept_of_sidx[chunk_variants["sidx"].to_numpy()]
            af = g.T.sum(1, dtype=np.int64) / (2 * len(disc_rows))
            use = (kept >= 0) & (np.minimum(af, 1 - af) >= maf_min)
            if not use.any():
                continue
            beta, _, p = marginal_regression(g[:, use], y_disc)
            tested.append(kept[use])
            betas.append(beta)
            pvalues.append(p)
    timings["gwas_s"] = time.perf_counter() - t0
    tested_idx = np.concatenate(tested) if tested else np.empty(0, dtype=np.int64)
    beta_all = np.concatenate(betas) if betas else np.empty(0)
    p_all = np.nan_to_num(np.concatenate(pvalues), nan=1.0) if pvalues else np.empty(0)
    if not len(tested_idx):
        raise ConfigError(
            "no variant reaches 'simulate.gwas.maf_min' "
            f"{params['gwas']['maf_min']} in the discovery cohort"
        )
    window = int(params["gwas"]["clump_window_kb"] * 1000)
    chroms = variants["chrom"].to_numpy()[tested_idx]
    positions = variants["pos"].to_numpy()[tested_idx]
    passing = p_all < params["gwas"]["p_threshold"]
    keep = np.zeros(len(tested_idx), dtype=bool)
    keep[passing] = clump_by_distance(chroms[passing], positions[passing], p_all[passing], window)
    if keep.sum() < params["gwas"]["min_variants"]:
        clumped = np.flatnonzero(clump_by_distance(chroms, positions, p_all, window))
        best = clumped[np.argsort(p_all[clumped], kind="stable")][: params["gwas"]["min_variants"]]
        keep[:] = False
        keep[best] = True
    case_fraction = y_disc.mean()
    score_idx = tested_idx[keep]
    order = np.argsort(score_idx)
    score_idx = score_idx[order]
    # linear effects on a 0/1 outcome, put on the log-odds scale: beta / (K (1 - K))
    weights = beta_all[keep][order] / (case_fraction * (1 - case_fraction))
    score_table = pd.DataFrame(
        {
            "rsID": variants["id"].to_numpy()[score_idx],
            "chr_name": variants["chrom"].to_numpy()[score_idx],
            "chr_position": variants["pos"].to_numpy()[score_idx],
            "effect_allele": variants["alt"].to_numpy()[score_idx],
            "other_allele": variants["ref"].to_numpy()[score_idx],
            "effect_weight": weights,
        }
    )
    write_pgs_catalog(
        out / "scores" / "PGS_sim.txt.gz",
        score_table,
        pgs_id=params["gwas"]["pgs_id"],
        pgs_name=f"simulated_{pheno['name']}",
        trait=pheno["name"],
    )
    # round-trip through the printed precision so the PRS below is what a reader recomputes
    x_score = source.fetch(variants["sidx"].to_numpy()[score_idx], target_rows)
    prs = x_score @ score_table["effect_weight"].astype(float).map(lambda w: float(f"{w:.6g}"))

    # ---- tables ------------------------------------------------------------------------------
    samples = pd.DataFrame(
        {
            "sample_id": sample_ids,
            "population": target["population"],
            "cluster": target["cluster"],
            "client": target["client"],
        }
    )
    samples.to_csv(out / "samples.tsv", sep="\t", index=False)
    name = pheno["name"]
    phenotypes = pd.DataFrame(
        {
            "eid": 1_000_001 + np.arange(n_target),
            "Subject id": sample_ids,
            name: y_target.astype(np.int8),
            f"{name}_liability": np.round(liability[target_rows], 6),
        }
    )
    phenotypes.to_csv(out / "phenotypes.tsv", sep="\t", index=False)
    causal_idx = np.concatenate([common_idx, rare_idx_arr])
    causal = variants.iloc[causal_idx][["id", "chrom", "pos", "ref", "alt"]].reset_index(drop=True)
    causal.insert(0, "variant_key", causal["chrom"] + ":" + causal["pos"].astype(str) + ":"
                  + causal["ref"] + ":" + causal["alt"])  # fmt: skip
    causal["effect_allele"] = causal["alt"]
    causal["effect"] = np.concatenate([beta_common, beta_rare])
    causal["kind"] = ["common"] * n_common + ["rare"] * len(rare_idx_arr)
    causal["cluster"] = [""] * n_common + list(rare_cluster_arr)
    causal.to_csv(
        out / "truth" / "causal_variants.tsv", sep="\t", index=False, float_format="%.10g"
    )
    pd.DataFrame(
        {
            "sample_id": sample_ids,
            "genetic_common": g_common[target_rows],
            "genetic_rare": g_rare[target_rows],
        }
    ).to_csv(out / "truth" / "genetic_values.tsv", sep="\t", index=False, float_format="%.10g")

    # ---- checks and provenance -----------------------------------------------------------------
    own_cluster = rare_cluster_arr[None, :] == target["cluster"].to_numpy()[:, None]
    carrier_matrix = (x_rare[target_rows] > 0) & own_cluster
    carriers = carrier_matrix.any(axis=1)
    per_client = (
        pd.DataFrame({"client": target["client"], "case": y_target, "carrier": carriers})
        .groupby("client")
        .agg(n=("case", "size"), cases=("case", "sum"), carriers=("carrier", "sum"))
    )
    summary: dict[str, Any] = {
        "n_samples": n_target,
        "n_discovery_samples": int(len(disc_rows)),
        "n_variants": int(n_kept),
        "n_rare_variants_maf_below_0.001": int((target_maf < 0.001).sum()),
        "dropped": {
            "multiallelic_sites": int(source.n_multiallelic),
            "monomorphic_in_target": int(n_mono),
            "duplicate_positions": 0,
        },
        "fst": fst,
        "clients": {
            client: {
                "n": int(r.n),
                "cases": int(r.cases),
                "controls": int(r.n - r.cases),
                "rare_causal_carriers": int(r.carriers),
            }
            for client, r in per_client.iterrows()
        },  # fmt: skip
        "thresholds": {str(k): float(v) for k, v in thresholds.items()},
        "causal": {
            "n_common": int(n_common),
            "n_rare": int(len(rare_idx_arr)),
            "rare_candidates_per_cluster": rare_available,
            "rare_carriers": int(carriers.sum()),
            "realised_h2_common": float(
                np.var(g_common[target_rows]) / np.var(liability[target_rows])
            ),
            "realised_h2_rare": float(np.var(g_rare[target_rows]) / np.var(liability[target_rows])),
        },
        "gwas": {
            "n_tested": int(len(tested_idx)),
            "n_passing_p_threshold": int(passing.sum()),
            "n_in_score": int(len(score_idx)),
            "n_causal_in_score": int(np.isin(score_idx, common_idx).sum()),
            "discovery_case_fraction": float(case_fraction),
        },
        "auc": {
            "prs": _auc(y_target, np.asarray(prs)),
            "true_genetic_value": _auc(y_target, (g_common + g_rare)[target_rows]),
            "true_common_value": _auc(y_target, g_common[target_rows]),
        },
        "carrier_check": _carrier_check(
            np.asarray(prs)[carriers],
            (x_rare[target_rows][carriers] * own_cluster[carriers]),
            y_target[carriers],
            seed,
        ),  # fmt: skip
    }
    timings["total_s"] = time.perf_counter() - started
    summary["timings"] = {k: round(v, 2) for k, v in timings.items()}
    write_provenance(out, command="rvfedprs simulate", parameters=params, seed=seed, extra=summary)
    log.info(
        "simulated %d samples, %d variants; PRS AUC %.3f; wrote %s",
        n_target, n_kept, summary["auc"]["prs"] or float("nan"), out,
    )  # fmt: skip
    return SimulatedCohort(out, samples, phenotypes, causal, score_table, summary)


def simulate_cohort(
    n_clients: int = 10,
    *,
    samples_per_client: int = 1000,
    n_clusters: int = 3,
    out: str | Path | None = None,
    random_seed: int | None = None,
    model: str = "msprime",
    **options: Any,
) -> SimulatedCohort:
    """Simulate a federated case-control cohort and write it in the CINECA layout.

    Parameters
    ----------
    n_clients : int
        Federated sites (one sub-population each).
    samples_per_client : int
        Target individuals per site.
    n_clusters : int
        Ancestry clusters the sites are grouped into.
    out : str or Path, optional
        Output folder; a new temporary folder when absent (see ``.out`` of the result).
    random_seed : int, optional
        Master seed; drawn and recorded in ``provenance.json`` when absent.
    model : {"msprime", "balding_nichols"}
        Genotype model.
    **options
        Any other key of the ``simulate`` configuration section (``discovery_samples``,
        ``region_length``, ``phenotype={...}``, ``gwas={...}``, ``output={...}``, ...).

    Returns
    -------
    SimulatedCohort
    """
    import tempfile

    from rvfedprs.config import validate_config

    section = {
        "n_clients": n_clients,
        "samples_per_client": samples_per_client,
        "n_clusters": n_clusters,
        "model": model,
        **options,
    }
    params = validate_config({"simulate": section})["simulate"]
    target = Path(tempfile.mkdtemp(prefix="rvfedprs-sim-")) if out is None else Path(out)
    return run_simulation(params, target, random_seed=random_seed)
