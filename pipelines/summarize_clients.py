"""Rule ``summarize_clients``: ``results/clients.tsv`` and ``results/outcome.json``.

``clients.tsv`` summarises the per-client feature sets; ``outcome.json`` records the phenotype's
kind and column (:func:`~rvfedprs.genomic.data.write_outcome`), which training reads.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import scipy.sparse as sp

from rvfedprs.config import section_defaults
from rvfedprs.genomic.data import OUTCOME_FILE, write_outcome
from rvfedprs.prepare.site import SUMMARY_COLUMNS, client_summary
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("summarize_clients")


def main(
    samples: Sequence[str | Path],
    rare: Sequence[str | Path],
    out: str | Path,
    *,
    phenotype: Mapping[str, Any] | None = None,
    out_outcome: str | Path | None = None,
) -> pd.DataFrame:
    """Summarise each client folder ``results/clients/{client}/`` and record the outcome.

    Parameters
    ----------
    samples, rare : sequences of paths
        Each client's ``samples.parquet`` and ``rare_dosages.npz`` (same order); the client is
        the name of the folder holding them.
    out : path
        ``clients.tsv``: ``client, n_samples, n_cases, n_train, n_test`` then ``n_carriers``
        (samples carrying at least one rare allele) and ``n_rare_carried`` (rare variants with
        at least one carrier in the client); ``n_cases`` is empty for a quantitative phenotype.
    phenotype : mapping, optional
        The ``pipeline.phenotype`` section (``kind``, ``column``; default: the schema's).
    out_outcome : path, optional
        ``outcome.json`` (default: beside ``out``).

    Returns
    -------
    pandas.DataFrame
        The table written.
    """
    phenotype = {**section_defaults("pipeline")["phenotype"], **dict(phenotype or {})}
    rows = [
        client_summary(
            Path(samples_path).parent.name,
            pd.read_parquet(samples_path),
            sp.load_npz(rare_path),
            phenotype["kind"],
        )
        for samples_path, rare_path in zip(samples, rare, strict=True)
    ]
    summary = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    summary.to_csv(out, sep="\t", index=False)
    out_outcome = Path(out).parent / OUTCOME_FILE if out_outcome is None else Path(out_outcome)
    written = write_outcome(out_outcome.parent, phenotype["kind"], phenotype["column"])
    if written != out_outcome:
        raise ValueError(f"outcome record must be named {OUTCOME_FILE}, got {out_outcome}")
    logger.info(
        "%d clients, %d samples; %s phenotype %r",
        len(summary),
        summary["n_samples"].sum(),
        phenotype["kind"],
        phenotype["column"],
    )
    return summary


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            snakemake.input.samples,
            snakemake.input.rare,
            snakemake.output.clients,
            phenotype=snakemake.params.pipeline["phenotype"],
            out_outcome=snakemake.output.outcome,
        )
