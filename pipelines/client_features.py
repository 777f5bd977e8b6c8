"""Rule ``client_features``: one client's PRS, rare dosages and train/test split.

Writes ``results/clients/{client}/samples.parquet`` (``sample_id, prs, phenotype, split``, then
one float64 column per ``pipeline.covariates`` entry, named as in the config) and
``rare_dosages.npz`` (CSR float32, rows aligned with the parquet, columns =
``results/rare_variants.tsv``), the per-client contract of docs/ARCHITECTURE.md.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rvfedprs.cohort import assign_splits, impute_covariates, load_covariates
from rvfedprs.genotypes.rare import rare_dosages
from rvfedprs.genotypes.readers import open_with_options
from rvfedprs.genotypes.scoring import score
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("client_features")


def main(
    *,
    genotypes: Sequence[str | Path],
    qc: str | Path,
    variants: str | Path,
    rare: str | Path,
    weights: str | Path,
    pipeline: Mapping[str, Any],
    out_samples: str | Path,
    out_rare: str | Path,
    phenotypes: str | Path | None = None,
) -> pd.DataFrame:
    """Build one client's feature set.

    Parameters
    ----------
    genotypes : sequence of paths
        The genotype files.
    qc : path
        The client's sample-QC table (``sample_id, client, phenotype, excluded``).
    variants : path
        Global variant table (``variant_key``, ``alt_freq``): missing dosages → 2·p.
    rare : path
        ``results/rare_variants.tsv``.
    weights : path
        The usable scoring rows (from ``match_scores``).
    pipeline : mapping
        The ``pipeline`` section (``test_fraction``, ``random_seed``, ``min_overlap``,
        ``chunk_size``, ``on_multiallelic``, ``covariates``, ``covariate_missing``,
        ``phenotype.id_column``).
    out_samples, out_rare : paths
        ``samples.parquet`` and ``rare_dosages.npz``.
    phenotypes : path, optional
        The phenotype table holding the covariates (needed when ``pipeline.covariates`` is not
        empty).

    Returns
    -------
    pandas.DataFrame
        The samples table written.
    """
    table = pd.read_csv(qc, sep="\t", dtype={"sample_id": str, "client": str})
    kept = table[~table["excluded"].astype(bool)].reset_index(drop=True)
    ids = kept["sample_id"].tolist()
    source = open_with_options(genotypes, pipeline)
    frequencies = pd.read_csv(variants, sep="\t", usecols=["variant_key", "alt_freq"])
    scores, _ = score(
        source,
        weights,
        frequencies=frequencies,
        min_overlap=pipeline["min_overlap"],
        samples=ids,
        chunk_size=pipeline["chunk_size"],
    )
    if scores["sample_id"].tolist() != ids:
        raise ValueError("scores are not in the requested sample order")
    rare_table = pd.read_csv(rare, sep="\t", dtype={"variant_key": str, "chrom": str})
    dosages = rare_dosages(source, rare_table, samples=ids, chunk_size=pipeline["chunk_size"])
    split = assign_splits(
        kept, test_fraction=pipeline["test_fraction"], random_seed=pipeline["random_seed"]
    )
    samples = pd.DataFrame(
        {
            "sample_id": pd.Series(ids, dtype=str),
            "prs": scores["SUM"].to_numpy(dtype=np.float64),
            "phenotype": kept["phenotype"].to_numpy(dtype=np.int8),
            "split": split.to_numpy(dtype=str),
        }
    )
    columns = list(pipeline.get("covariates") or [])
    if columns:
        samples = _with_covariates(samples, phenotypes, pipeline, columns)
    Path(out_samples).parent.mkdir(parents=True, exist_ok=True)
    samples.to_parquet(out_samples, index=False)
    sp.save_npz(out_rare, sp.csr_matrix(dosages, dtype=np.float32))
    logger.info(
        "%d samples (%d cases, %d test), %d rare columns, %d non-zero dosages",
        len(samples),
        int(samples["phenotype"].sum()),
        int((samples["split"] == "test").sum()),
        dosages.shape[1],
        dosages.nnz,
    )
    return samples


def _with_covariates(
    samples: pd.DataFrame, phenotypes: str | Path | None, pipeline: Mapping[str, Any], columns: list
) -> pd.DataFrame:
    """``samples`` plus the covariate columns (float64), imputed per the configured rule."""
    if phenotypes is None:
        raise ValueError("pipeline.covariates is set but no phenotype table was given")
    table, _ = load_covariates(
        phenotypes,
        columns=columns,
        id_column=pipeline["phenotype"]["id_column"],
        on_missing="impute_mean",  # validation already excluded samples under "exclude"
    )
    table = table.set_index("sample_id").reindex(samples["sample_id"]).reset_index()
    if pipeline["covariate_missing"] == "impute_mean":
        table, imputed = impute_covariates(table, columns)
        for column, ids in imputed.items():
            logger.info("covariate %s imputed with the client mean for %s", column, ids)
    elif table[columns].isna().any().any():
        raise ValueError("a covariate is missing although validation excluded such samples")
    out = samples.copy()
    for column in columns:
        out[column] = table[column].to_numpy(dtype=np.float64)
    return out


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            genotypes=snakemake.params.genotypes,
            qc=snakemake.input.qc,
            variants=snakemake.input.variants,
            rare=snakemake.input.rare,
            weights=snakemake.input.weights,
            pipeline=snakemake.params.pipeline,
            out_samples=snakemake.output.samples,
            out_rare=snakemake.output.rare,
            phenotypes=snakemake.input.get("phenotypes"),
        )
