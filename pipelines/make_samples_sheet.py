"""Rule ``make_samples_sheet``: a samples sheet with one client per population of a ``.psam``."""

import logging
from pathlib import Path

from rvfedprs.cohort import samples_sheet_from_psam
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("make_samples_sheet")


def main(psam: str | Path, out: str | Path, *, column: str = "Population") -> Path:
    """Write ``out`` (``sample_id, client, population``) from the ``column`` of ``psam``."""
    sheet = samples_sheet_from_psam(psam, column=column)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.to_csv(out, sep="\t", index=False)
    logger.info(
        "%d samples in %d clients (%s) from %s",
        len(sheet),
        sheet["client"].nunique(),
        column,
        psam,
    )
    return out


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(snakemake.input.psam, snakemake.output[0], column=snakemake.params.column)
