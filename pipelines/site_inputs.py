"""Rule ``site_inputs`` (one-machine form of a study): give one client its own site folder.

Writes ``{sites_dir}/{client}/``: the client's genotypes (its samples only, every variant), its
phenotype and samples-sheet rows, a copy of the truth table (simulated cohorts), and
``inputs.json`` describing them (a row of the site sheet).
"""

import json
import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from rvfedprs.rulelog import logged_rule
from rvfedprs.study.split import split_site

logger = logging.getLogger("site_inputs")


def main(
    *,
    client: str,
    genotypes: Sequence[str],
    samples: str | Path,
    phenotypes: str | Path,
    id_column: str,
    folder: str | Path,
    truth: str | Path | None,
    out: str | Path,
) -> dict:
    """Split the client's files into ``folder`` and write its ``inputs.json`` to ``out``."""
    sheet = pd.read_csv(samples, sep="\t", dtype=str, keep_default_na=False)
    table = pd.read_csv(phenotypes, sep="\t", dtype=str, keep_default_na=False)
    ids = sheet.loc[sheet["client"] == client, "sample_id"].tolist()
    inputs = split_site(
        client,
        ids,
        genotypes=genotypes,
        phenotypes=table,
        id_column=id_column,
        sheet=sheet,
        out=folder,
        truth=truth,
    )
    Path(out).write_text(json.dumps(inputs.as_dict(), indent=2) + "\n")
    logger.info("site %s: %d samples in %s", client, len(ids), folder)
    return inputs.as_dict()


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            client=snakemake.wildcards.client,
            genotypes=snakemake.params.genotypes,
            samples=snakemake.input.samples,
            phenotypes=snakemake.input.phenotypes,
            id_column=snakemake.params.id_column,
            folder=snakemake.params.folder,
            truth=snakemake.input.truth[0] if snakemake.input.truth else None,
            out=snakemake.output[0],
        )
