"""Rule ``match_scores``: match the scoring file to the QC-passing variants, once for everyone.

Runs :func:`rvfedprs.genotypes.scoring.score` on no samples to get the match log (status per
scoring-file row, plink2 ``--score`` semantics), marks rows whose matched variant failed QC,
checks ``min_overlap`` on what is left, and writes the usable rows as a scoring file that every
client then scores with.
"""

import gzip
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.scoring import read_scorefile, score
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("match_scores")

USABLE = ("matched", "flipped")


def main(
    *,
    genotypes: Sequence[str | Path],
    variants: str | Path,
    scoring_file: str | Path,
    pipeline: Mapping[str, Any],
    out_weights: str | Path,
    out_match: str | Path,
) -> pd.DataFrame:
    """Write the match log and the scoring file restricted to usable, QC-passing variants.

    Parameters
    ----------
    genotypes : sequence of paths
        The genotype files (only their variants are read).
    variants : path
        The global variant table (``variant_key``, ``alt_freq``, ``qc_pass``, ``reason``).
    scoring_file : path
        PGS Catalog scoring file.
    pipeline : mapping
        The ``pipeline`` section (``min_overlap``, ``genome_build``, ``chunk_size``).
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
    table = pd.read_csv(variants, sep="\t", dtype={"variant_key": str, "chrom": str})
    scorefile = read_scorefile(scoring_file)
    source = open_genotypes([str(p) for p in genotypes], multiallelic=pipeline["on_multiallelic"])
    _, match = score(
        source,
        scorefile,
        frequencies=table[["variant_key", "alt_freq"]],
        min_overlap=0.0,
        samples=[],
        chunk_size=pipeline["chunk_size"],
        genome_build=pipeline["genome_build"],
    )
    qc = table.set_index("variant_key")
    matched = match["status"].isin(USABLE)
    keys = match["variant_key"].where(matched)
    match["qc_pass"] = keys.map(qc["qc_pass"]).eq(True).to_numpy()
    match["qc_reason"] = keys.map(qc["reason"]).where(matched & ~match["qc_pass"], "").fillna("")
    match["used"] = matched & match["qc_pass"]
    share = float(match["used"].mean()) if len(match) else 0.0
    if share < pipeline["min_overlap"]:
        statuses = match["status"].value_counts().to_dict()
        raise InputDataError(
            f"only {int(match['used'].sum())} of {len(match)} rows of {scoring_file} "
            f"({100 * share:.1f}%) match QC-passing variants of the genotypes, below "
            f"min_overlap={pipeline['min_overlap']}; statuses: {statuses}, "
            f"matched but failing QC: {int((matched & ~match['qc_pass']).sum())}"
        )
    Path(out_match).parent.mkdir(parents=True, exist_ok=True)
    match.to_csv(out_match, sep="\t", index=False)

    rows = scorefile.table.set_index("row").loc[match.loc[match["used"], "row"]]
    weights = pd.DataFrame(
        {
            "rsID": rows["rsid"].to_numpy(),
            "chr_name": rows["chrom"].to_numpy(),
            "chr_position": rows["pos"].to_numpy(),
            "effect_allele": rows["effect_allele"].to_numpy(),
            "other_allele": rows["other_allele"].to_numpy(),
            "effect_weight": rows["effect_weight"].to_numpy(),
        }
    )
    header = "".join(f"#{k}={v}\n" for k, v in scorefile.header.items())
    with gzip.open(out_weights, "wt") as handle:
        handle.write(header)
        weights.to_csv(handle, sep="\t", index=False, float_format="%.10g")
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
            genotypes=snakemake.params.genotypes,
            variants=snakemake.input.variants,
            scoring_file=snakemake.input.scoring_file,
            pipeline=snakemake.params.pipeline,
            out_weights=snakemake.output.weights,
            out_match=snakemake.output.match,
        )
