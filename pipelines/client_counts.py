"""Rule ``client_counts``: one client's contribution to the global allele frequencies and QC.

What leaves the client is summary statistics only (:func:`~rvfedprs.genotypes.sitecounts.
site_counts`): per variant the ALT-allele count and number of called alleles over its QC-passing
samples, and hard-call genotype counts over its controls (every sample of a quantitative trait)
for the within-site HWE test; the server (``combine_counts``) combines them.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.genotypes.readers import open_with_options
from rvfedprs.prepare.site import count_alleles, hwe_samples, phenotype_kind
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("client_counts")


def main(
    *,
    genotypes: Sequence[str | Path],
    qc: str | Path,
    pipeline: Mapping[str, Any],
    out_counts: str | Path,
    out_skipped: str | Path,
) -> pd.DataFrame:
    """Count alleles over the client's QC-passing samples and genotypes over its controls.

    Parameters
    ----------
    genotypes : sequence of paths
        The genotype files.
    qc : path
        The client's sample-QC table (from ``sample_qc``).
    pipeline : mapping
        The ``pipeline`` section (``chunk_size``, ``on_multiallelic``, ``phenotype.kind``).
    out_counts : path
        Parquet: :data:`~rvfedprs.genotypes.sitecounts.SITE_COUNT_COLUMNS`.
    out_skipped : path
        Variants the reader skipped (``chrom, pos, id, ref, alt, reason``).

    Returns
    -------
    pandas.DataFrame
        The counts table.
    """
    table = pd.read_csv(qc, sep="\t", dtype={"sample_id": str})
    source = open_with_options(genotypes, pipeline)
    result, skipped = count_alleles(source, table, pipeline)
    kept = table[~table["excluded"].astype(bool)]
    tested = hwe_samples(table, phenotype_kind(pipeline))
    Path(out_counts).parent.mkdir(parents=True, exist_ok=True)
    result.to_parquet(out_counts, index=False)
    skipped.to_csv(out_skipped, sep="\t", index=False)
    logger.info(
        "%d variants counted over %d samples (HWE over %d); %d skipped by the reader",
        len(result),
        len(kept),
        len(tested),
        len(skipped),
    )
    return result


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            genotypes=snakemake.params.genotypes,
            qc=snakemake.input.qc,
            pipeline=snakemake.params.pipeline,
            out_counts=snakemake.output.counts,
            out_skipped=snakemake.output.skipped,
        )
