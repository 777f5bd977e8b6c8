"""Rule ``samplesheet`` (one-machine form of a study): the site sheet of the split sites."""

import json
from collections.abc import Sequence
from pathlib import Path

from rvfedprs.rulelog import logged_rule
from rvfedprs.study.samplesheet import SiteInputs, write_samplesheet


def main(inputs: Sequence[str | Path], out: str | Path) -> Path:
    """Write the site sheet ``out`` from the sites' ``inputs.json`` files."""
    sites = [SiteInputs.from_dict(json.loads(Path(p).read_text())) for p in inputs]
    return write_samplesheet({s.site: s for s in sites}, out)


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(snakemake.input, snakemake.output[0])
