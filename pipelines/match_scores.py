"""Rule ``match_scores``: match the scoring file to the QC-passing variants, once for everyone.

Matches the scoring file against the global variant table (:func:`~rvfedprs.genotypes.matching.
match_scorefile`: plink2 ``--score`` rules, a status per scoring-file row), marks rows whose
matched variant failed QC, checks ``min_overlap`` on what is left, and writes the usable rows as
a scoring file (:func:`~rvfedprs.genotypes.scorefile.write_scorefile`) that every client then
scores with. No genotype is read: the variant table is what the sites' counts were summed over.
"""

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.prepare.coordinator import match_scores, write_weights
from rvfedprs.rulelog import logged_rule
from rvfedprs.tsv import write_tsv

logger = logging.getLogger("match_scores")


def main(
    *,
    variants: str | Path,
    scoring_file: str | Path,
    pipeline: Mapping[str, Any],
    out_weights: str | Path,
    out_match: str | Path,
) -> pd.DataFrame:
    """Write the match log and the scoring file restricted to usable, QC-passing variants.

    Parameters
    ----------
    variants : path
        The global variant table (``chrom, pos, id, ref, alt, variant_key, qc_pass, reason``).
    scoring_file : path
        PGS Catalog scoring file.
    pipeline : mapping
        The ``pipeline`` section (``min_overlap``, ``genome_build``, ``keep_ambiguous``).
    out_weights : path
        The usable rows, gzip-compressed, in PGS Catalog format with the original header.
    out_match : path
        The match log: one row per scoring-file row with ``status``, ``qc_pass`` and ``used``.

    Returns
    -------
    pandas.DataFrame
        The match log.

    Raises
    ------
    InputDataError
        Fewer than ``min_overlap`` of the rows usable after QC, or a build mismatch.
    """
    table = pd.read_csv(
        variants,
        sep="\t",
        dtype={"variant_key": str, "chrom": str, "id": str},
        keep_default_na=False,
    )
    match, scorefile = match_scores(table, scoring_file, pipeline, variants_name=str(variants))
    Path(out_match).parent.mkdir(parents=True, exist_ok=True)
    write_tsv(match, out_match)
    write_weights(out_weights, match, scorefile)
    share = float(match["used"].mean()) if len(match) else 0.0
    logger.info(
        "%d of %d scoring rows used (%.1f%%); statuses %s",
        int(match["used"].sum()),
        len(match),
        100 * share,
        match["status"].value_counts().to_dict(),
    )
    return match


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            variants=snakemake.input.variants,
            scoring_file=snakemake.input.scoring_file,
            pipeline=snakemake.params.pipeline,
            out_weights=snakemake.output.weights,
            out_match=snakemake.output.match,
        )
