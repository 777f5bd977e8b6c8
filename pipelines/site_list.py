"""Rule ``site_list`` (a checkpoint): the sites of the one-machine split, one per client."""

from pathlib import Path

import pandas as pd

from rvfedprs.rulelog import logged_rule


def main(samples: str | Path, out: str | Path) -> list[str]:
    """Write the clients of the samples sheet, sorted, one per line."""
    sheet = pd.read_csv(samples, sep="\t", dtype=str)
    sites = sorted(sheet["client"].unique())
    Path(out).write_text("".join(f"{c}\n" for c in sites))
    return sites


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(snakemake.input.samples, snakemake.output[0])
