"""Rule ``combine_counts`` (the server side): global frequencies, variant QC, common/rare split.

Reads the sites' count tables and calls :func:`~rvfedprs.genotypes.sitecounts.
combine_site_counts` (summed call rates and frequencies, HWE within each site, the common/rare
split); writes the variant table, the rare-variant columns every client uses, and this step's
exclusions (including the records the genotype reader skipped).
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.genotypes.frequencies import read_frequency_file
from rvfedprs.prepare.coordinator import combine_counts
from rvfedprs.rulelog import logged_rule
from rvfedprs.tsv import write_tsv

logger = logging.getLogger("combine_counts")

STEP = "combine_counts"


def main(
    *,
    counts: Sequence[str | Path],
    skipped: Sequence[str | Path] = (),
    pipeline: Mapping[str, Any],
    frequencies: str | Path | None = None,
    out_variants: str | Path,
    out_rare: str | Path,
    out_exclusions: str | Path,
) -> pd.DataFrame:
    """Combine per-client counts into the global variant table.

    Parameters
    ----------
    counts : sequence of paths
        Per-client count tables (from ``client_counts``), named ``{client}.parquet``.
    skipped : sequence of paths
        Per-client tables of variants the reader skipped (multi-allelic records).
    pipeline : mapping
        The ``pipeline`` section (``qc``, ``rare_maf_max``, ``on_multiallelic``).
    frequencies : path, optional
        External frequency file replacing the summed frequencies.
    out_variants : path
        Every variant: counts, ``call_rate``, ``hwe_p`` (smallest within-site p-value),
        frequencies, ``qc_pass`` (bool), ``class`` (``common``/``rare``/``excluded``) and
        ``reason``.
    out_rare : path
        ``results/rare_variants.tsv``: :data:`RARE_COLUMNS` for the rare variants, in order.
    out_exclusions : path
        Variant exclusions of this step (``kind, id, reason, step``).

    Returns
    -------
    pandas.DataFrame
        The variant table.
    """
    tables = {Path(p).name.split(".")[0]: pd.read_parquet(p) for p in counts}
    freqs, rare, excluded = combine_counts(
        tables,
        pipeline,
        skipped=[pd.read_csv(p, sep="\t", dtype=str) for p in skipped],
        frequencies=read_frequency_file(frequencies) if frequencies else None,
        frequency_source=f"frequency file {frequencies}",
        step=STEP,
    )
    n_samples = int(sum(int(t["n_samples"].iloc[0]) for t in tables.values() if len(t)))
    Path(out_variants).parent.mkdir(parents=True, exist_ok=True)
    write_tsv(freqs, out_variants)
    write_tsv(rare, out_rare)
    write_tsv(excluded, out_exclusions)
    logger.info(
        "%d variants over %d samples in %d clients: %d fail QC, %d common, %d rare",
        len(freqs),
        n_samples,
        len(tables),
        int((~freqs["qc_pass"]).sum()),
        int((freqs["class"] == "common").sum()),
        int((freqs["class"] == "rare").sum()),
    )
    return freqs


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            counts=snakemake.input.counts,
            skipped=snakemake.input.skipped,
            pipeline=snakemake.params.pipeline,
            frequencies=snakemake.input.frequencies or None,
            out_variants=snakemake.output.variants,
            out_rare=snakemake.output.rare,
            out_exclusions=snakemake.output.exclusions,
        )
