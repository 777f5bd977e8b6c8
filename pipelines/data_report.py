"""Rule ``data_report``: the HTML data report with per-client counts, matching, MAF and PRS."""

import logging
from collections.abc import Sequence
from pathlib import Path

from rvfedprs.genomic.data import read_outcome
from rvfedprs.reporting import write_data_report
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("data_report")


def main(
    *,
    clients: str | Path,
    variants: str | Path,
    score_match: str | Path,
    exclusions: str | Path,
    client_samples: Sequence[str | Path],
    out_html: str | Path,
    rare_maf_max: float = 0.01,
    outcome: str | Path | None = None,
) -> Path:
    """Write the report; ``client_samples`` are ``results/clients/{client}/samples.parquet``.

    ``outcome`` is the federation's ``outcome.json`` (default: beside ``clients``; absent:
    binary), which says whether the phenotype is reported by cases or by its mean and sd.
    """
    folder = Path(clients).parent if outcome is None else Path(outcome).parent
    path = write_data_report(
        clients=clients,
        variants=variants,
        score_match=score_match,
        exclusions=exclusions,
        client_samples={Path(p).parent.name: p for p in client_samples},
        out_html=out_html,
        rare_maf_max=rare_maf_max,
        kind=read_outcome(folder),
    )
    logger.info("report written to %s", path)
    return path


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            clients=snakemake.input.clients,
            variants=snakemake.input.variants,
            score_match=snakemake.input.match,
            exclusions=snakemake.input.exclusions,
            client_samples=snakemake.input.samples,
            out_html=snakemake.output.html,
            rare_maf_max=snakemake.params.rare_maf_max,
            outcome=snakemake.input.outcome,
        )
