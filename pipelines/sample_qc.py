"""Rule ``sample_qc``: per-sample call rates within one client (plink ``--mind``)."""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.genotypes.readers import open_with_options
from rvfedprs.prepare.site import sample_qc
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("sample_qc")

STEP = "sample_qc"


def main(
    *,
    genotypes: Sequence[str | Path],
    cohort: str | Path,
    client: str,
    pipeline: Mapping[str, Any],
    out_qc: str | Path,
    out_exclusions: str | Path,
) -> pd.DataFrame:
    """Compute the call rate of each of ``client``'s samples and flag those below the minimum.

    Parameters
    ----------
    genotypes : sequence of paths
        The genotype files.
    cohort : path
        The validated cohort table (``sample_id, client, phenotype, ...``).
    client : str
        The client whose samples are checked.
    pipeline : mapping
        The ``pipeline`` section (``qc.sample_call_rate_min``, ``chunk_size``, ``on_multiallelic``).
    out_qc : path
        ``sample_id, client, phenotype, call_rate, excluded, reason`` for the client's samples.
    out_exclusions : path
        The excluded samples (``kind, id, reason, step``).

    Returns
    -------
    pandas.DataFrame
        The QC table written to ``out_qc``.
    """
    table = pd.read_csv(cohort, sep="\t", dtype={"sample_id": str, "client": str})
    members = table[table["client"] == client]
    if members.empty:
        raise ValueError(f"client {client!r} is not in {cohort}")
    qc, excluded = sample_qc(open_with_options(genotypes, pipeline), members, pipeline, step=STEP)
    qc.to_csv(out_qc, sep="\t", index=False)
    Path(out_exclusions).parent.mkdir(parents=True, exist_ok=True)
    excluded.to_csv(out_exclusions, sep="\t", index=False)
    dropped = qc[qc["excluded"]]
    logger.info("client %s: %d of %d samples fail the call rate", client, len(dropped), len(qc))
    return qc


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            genotypes=snakemake.params.genotypes,
            cohort=snakemake.input.cohort,
            client=snakemake.wildcards.client,
            pipeline=snakemake.params.pipeline,
            out_qc=snakemake.output.qc,
            out_exclusions=snakemake.output.exclusions,
        )
