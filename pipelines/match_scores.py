"""Rule ``match_scores``: match the scoring file to the variants, once for everyone.

Matches the scoring file against the global variant table (:func:`~rvfedprs.prepare.coordinator.
match_scores`: plink2 ``--score`` rules, the matcher of ``rvfedprs prepare score``, a status per
scoring-file row), marks rows whose variant fails the variant QC (which drops them from the PRS
only under ``pipeline.qc.apply_to_score``), checks ``min_overlap`` on the usable rows and writes
them as a scoring file (:func:`~rvfedprs.genotypes.scorefile.write_scorefile`) that every client
then scores with, and the matched variants left out of the PRS with their reasons; beside the
match log, ``score_match_candidates.tsv`` is pgsc_calc's candidate-level log (one row per
scoring-file row × variant, ``not_best`` included). No genotype is read: the variant table is what
the sites' counts were summed over.
"""

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.prepare.coordinator import match_scores, score_exclusions, write_weights
from rvfedprs.rulelog import logged_rule
from rvfedprs.tsv import write_tsv

logger = logging.getLogger("match_scores")

STEP = "match_scores"


def main(
    *,
    variants: str | Path,
    scoring_file: str | Path,
    pipeline: Mapping[str, Any],
    out_weights: str | Path,
    out_match: str | Path,
    out_exclusions: str | Path | None = None,
    out_candidates: str | Path | None = None,
) -> pd.DataFrame:
    """Write the match log, the scoring file of the usable rows and the PRS's exclusions.

    Parameters
    ----------
    variants : path
        The global variant table (``chrom, pos, id, ref, alt, variant_key, alt_freq, qc_pass,
        reason``).
    scoring_file : path
        PGS Catalog scoring file.
    pipeline : mapping
        The ``pipeline`` section (``min_overlap``, ``genome_build``, ``keep_ambiguous``,
        ``qc.apply_to_score``).
    out_weights : path
        The usable rows, gzip-compressed, in PGS Catalog format with the original header.
    out_match : path
        The match log: one row per scoring-file row with ``status``, ``qc_pass``,
        ``qc_reason``, ``used`` and ``drop_reason``.
    out_exclusions : path, optional
        The matched variants left out of the PRS (``kind, id, reason, step``; kind
        ``score_variant``).
    out_candidates : path, optional
        pgsc_calc's candidate-level log: one row per (scoring-file row, variant) pair, the pair
        a row kept with the row's outcome, the others ``not_best``.

    Returns
    -------
    pandas.DataFrame
        The match log.

    Raises
    ------
    InputDataError
        Fewer than ``min_overlap`` of the rows usable, or a build mismatch.
    """
    table = pd.read_csv(
        variants,
        sep="\t",
        dtype={"variant_key": str, "chrom": str, "id": str},
        keep_default_na=False,  # an empty reason stays "", an empty frequency is missing
        na_values={"alt_freq": [""]},
    )
    match, scorefile, candidates = match_scores(
        table, scoring_file, pipeline, variants_name=str(variants), return_candidates=True
    )
    Path(out_match).parent.mkdir(parents=True, exist_ok=True)
    write_tsv(match, out_match)
    if out_candidates is not None:
        write_tsv(candidates, out_candidates)
    write_weights(out_weights, match, scorefile)
    dropped = score_exclusions(match, STEP)
    if out_exclusions is not None:
        write_tsv(dropped, out_exclusions)
    failing = int((match["qc_reason"] != "").sum())
    if failing and pipeline["qc"].get("apply_to_score", False):
        logger.warning(
            "%d matched scoring rows fail the variant QC and are left out of the PRS "
            "(pipeline.qc.apply_to_score: true)",
            failing,
        )
    elif failing:
        logger.info(
            "%d matched scoring rows fail the variant QC of the rare-variant features and are "
            "scored anyway, as plink2 and pgsc_calc score them (pipeline.qc.apply_to_score: "
            "false); the match log's qc_reason says why",
            failing,
        )
    for key, reason in zip(dropped["id"], dropped["reason"], strict=True):
        logger.info("scoring variant %s left out of the PRS: %s", key, reason)
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
            out_exclusions=snakemake.output.exclusions,
            out_candidates=Path(snakemake.output.match).with_name("score_match_candidates.tsv"),
        )
