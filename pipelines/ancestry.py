"""Rule ``ancestry``: the cohort's samples projected onto a reference panel and assigned.

Writes into ``results/ancestry/`` what ``rvfedprs ancestry`` writes (``pcs.tsv``,
``ancestry.tsv``, ``variants.tsv``, ``pca.png``, ``provenance.json``) for every genotyped
sample, and ``reference_prs.tsv``: the workflow's matched scoring file applied to the reference
panel, which the report regresses on the reference PCs to normalise each site's PRS. A sample's
projection and assignment depend on the reference panel and on that sample alone, so this one
pass gives every site what it would compute alone on its own samples.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rvfedprs.ancestry import run_ancestry
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.scoring import score
from rvfedprs.rulelog import logged_rule
from rvfedprs.tsv import write_tsv

logger = logging.getLogger("ancestry")


def main(
    *,
    reference: str,
    genotypes: Sequence[str],
    weights: str | Path,
    settings: Mapping[str, Any],
    out: str | Path,
    out_reference_prs: str | Path,
) -> dict:
    """Project, assign and score the reference panel.

    Parameters
    ----------
    reference : str
        The reference panel (PLINK1 prefix or .bed, or .pgen).
    genotypes : sequence of str
        The cohort's genotype paths.
    weights : path
        The scoring rows the workflow matched (``results/prepare/score_weights.txt.gz``).
    settings : mapping
        The ``ancestry`` section.
    out : path
        The output folder.
    out_reference_prs : path
        The reference panel's scores (``sample_id, SUM, n_matched``).

    Returns
    -------
    dict
        :func:`~rvfedprs.ancestry.run_ancestry`'s summary.
    """
    summary = run_ancestry(
        reference,
        list(genotypes),
        out,
        reference_labels=settings["labels"],
        label_column=settings["label_column"],
        n_components=settings["n_pcs"],
        n_assignment=settings["n_assignment_pcs"],
        n_normalisation=settings["n_normalisation_pcs"],
        maf=settings["maf"],
        max_missing=settings["max_missing"],
        ld_thin=settings["ld_thin"],
        ld_r2=settings["ld_r2"],
        threshold=settings["threshold"],
        random_seed=settings["seed"],
    )
    logger.info(
        "%d samples projected on %d variants (%s); assigned %s",
        summary["n_target"], summary["n_variants_pca"], summary["thinning"], summary["assigned"],
    )  # fmt: skip
    scores, match = score(open_genotypes(reference), weights, min_overlap=0.0)
    matched, rows = int(scores["n_matched"].iloc[0]), len(match)
    if matched < rows:
        logger.warning(
            "the reference panel %s matches %d of the %d scoring rows the cohort uses: the "
            "normalisation fits a reference score without the other %d",
            reference, matched, rows, rows - matched,
        )  # fmt: skip
    write_tsv(scores, out_reference_prs, float_format="%.8g")
    logger.info("reference panel scored on %d of %d rows", matched, rows)
    return summary


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            reference=snakemake.params.reference,
            genotypes=snakemake.params.genotypes,
            weights=snakemake.input.weights,
            settings=snakemake.params.settings,
            out=snakemake.params.out,
            out_reference_prs=snakemake.output.reference_prs,
        )
