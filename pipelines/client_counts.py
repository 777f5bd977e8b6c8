"""Rule ``client_counts``: one client's contribution to the global allele frequencies and QC.

What leaves the client is summary statistics only: per variant the ALT-allele count and number
of called alleles over its QC-passing samples, and hard-call genotype counts over its controls
(for the HWE test); the server (``combine_counts``) sums them.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.frequencies import COUNT_COLUMNS, allele_counts
from rvfedprs.genotypes.qc import genotype_counts
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("client_counts")

GENOTYPE_COUNT_COLUMNS = ("n_hom_ref", "n_het", "n_hom_alt")


def reader_exclusions(source: Any) -> pd.DataFrame:
    """Variants a genotype reader skipped (multi-allelic records), as a variant table + reason."""
    parts = []
    for one in getattr(source, "sources", [source]):
        excluded = getattr(one, "excluded", None)
        if excluded is None or len(excluded) == 0:
            continue
        parts.append(
            pd.DataFrame(excluded, columns=["chrom", "pos", "id", "ref", "alt", "reason"])
            if not isinstance(excluded, pd.DataFrame)
            else excluded
        )
    columns = ["chrom", "pos", "id", "ref", "alt", "reason"]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


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
        The ``pipeline`` section (``chunk_size``, ``on_multiallelic``).
    out_counts : path
        Parquet: :data:`~rvfedprs.genotypes.frequencies.COUNT_COLUMNS`, then ``n_hom_ref,
        n_het, n_hom_alt`` among controls and ``n_samples`` (the client's QC-passing samples).
    out_skipped : path
        Variants the reader skipped (``chrom, pos, id, ref, alt, reason``).

    Returns
    -------
    pandas.DataFrame
        The counts table.
    """
    table = pd.read_csv(qc, sep="\t", dtype={"sample_id": str})
    kept = table[~table["excluded"].astype(bool)]
    controls = kept.loc[kept["phenotype"] == 0, "sample_id"].tolist()
    source = open_genotypes([str(p) for p in genotypes], multiallelic=pipeline["on_multiallelic"])
    chunk_size = pipeline["chunk_size"]
    counts = allele_counts(source, samples=kept["sample_id"].tolist(), chunk_size=chunk_size)
    skipped = reader_exclusions(source)
    hardcalls = genotype_counts(source, samples=controls, chunk_size=chunk_size)
    if len(hardcalls) != len(counts):
        raise ValueError("allele and genotype counts list different variants")
    result = counts[list(COUNT_COLUMNS)].copy()
    for column in GENOTYPE_COUNT_COLUMNS:
        result[column] = hardcalls[column].to_numpy()
    result["n_samples"] = len(kept)
    Path(out_counts).parent.mkdir(parents=True, exist_ok=True)
    result.to_parquet(out_counts, index=False)
    skipped.to_csv(out_skipped, sep="\t", index=False)
    logger.info(
        "%d variants counted over %d samples (%d controls); %d skipped by the reader",
        len(result),
        len(kept),
        len(controls),
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
