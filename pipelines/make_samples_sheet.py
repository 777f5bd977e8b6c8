"""Rule ``make_samples_sheet``: a samples sheet with one client per population of a ``.psam``."""

import logging
from pathlib import Path

from rvfedprs.cohort import samples_sheet_from_psam

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
    logging.basicConfig(
        filename=snakemake.log[0], level=logging.INFO, format="%(asctime)s %(message)s", force=True
    )
    try:
        main(snakemake.input.psam, snakemake.output[0], column=snakemake.params.column)
    except Exception:
        logging.exception("make_samples_sheet failed")
        raise
