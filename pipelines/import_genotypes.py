"""Rule ``import_genotypes``: one VCF/BGEN input converted once to ``.pgen`` with plink2.

Every later step (sample QC, counts, scoring, rare dosages) then reads the binary copy through
pgenlib instead of parsing the text VCF again (:mod:`rvfedprs.genotypes.convert`).
"""

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rvfedprs.genotypes.convert import to_pgen
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("import_genotypes")


def main(*, genotypes: str | Path, pipeline: Mapping[str, Any], out_pgen: str | Path) -> Path:
    """Convert ``genotypes`` into ``out_pgen`` (and its ``.pvar``/``.psam``)."""
    prefix = str(out_pgen)[: -len(".pgen")]
    written = to_pgen(
        genotypes,
        prefix,
        field=pipeline["vcf_genotype_field"],
        bgen_ref_allele=pipeline["bgen_ref_allele"],
        half_call=pipeline["vcf_half_call"],
    )
    logger.info("converted %s to %s", genotypes, written)
    return written


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            genotypes=snakemake.params.genotypes,
            pipeline=snakemake.params.pipeline,
            out_pgen=snakemake.output.pgen,
        )
