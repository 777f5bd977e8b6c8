"""Rule ``client_features``: one client's PRS, rare dosages and train/test split.

Writes ``results/clients/{client}/samples.parquet`` (``sample_id, prs, phenotype, split``:
``phenotype`` int8 0/1, or float64 for a quantitative trait; then one float64 column per
``pipeline.covariates`` entry, named as in the config) and ``rare_dosages.npz`` (CSR float32,
rows aligned with the parquet, columns = ``results/rare_variants.tsv``), the per-client contract
of docs/ARCHITECTURE.md.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import scipy.sparse as sp

from rvfedprs.genotypes.readers import open_with_options
from rvfedprs.prepare.site import client_features, phenotype_kind
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
    samples, dosages = client_features(
        open_with_options(genotypes, pipeline),
        table,
        frequencies=pd.read_csv(variants, sep="\t", usecols=["variant_key", "alt_freq"]),
        rare=pd.read_csv(rare, sep="\t", dtype={"variant_key": str, "chrom": str}),
        weights=weights,
        pipeline=pipeline,
        phenotypes=phenotypes,
    )
    Path(out_samples).parent.mkdir(parents=True, exist_ok=True)
    samples.to_parquet(out_samples, index=False)
    sp.save_npz(out_rare, dosages)
    counts = phenotype_kind(pipeline).counts(samples["phenotype"].to_numpy())
    logger.info(
        "%d samples (%s, %d test), %d rare columns, %d non-zero dosages",
        len(samples),
        f"{int(counts['n_cases'])} cases" if "n_cases" in counts else "quantitative",
        int((samples["split"] == "test").sum()),
        dosages.shape[1],
        dosages.nnz,
    )
    return samples


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
