"""Rule ``summarize_clients``: ``results/clients.tsv`` from the per-client feature sets."""

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import scipy.sparse as sp

from rvfedprs.prepare.site import SUMMARY_COLUMNS, client_summary
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("summarize_clients")


def main(
    samples: Sequence[str | Path], rare: Sequence[str | Path], out: str | Path
) -> pd.DataFrame:
    """Summarise each client folder ``results/clients/{client}/``.

    Parameters
    ----------
    samples, rare : sequences of paths
        Each client's ``samples.parquet`` and ``rare_dosages.npz`` (same order); the client is
        the name of the folder holding them.
    out : path
        ``clients.tsv``: ``client, n_samples, n_cases, n_train, n_test`` then ``n_carriers``
        (samples carrying at least one rare allele) and ``n_rare_carried`` (rare variants with
        at least one carrier in the client).

    Returns
    -------
    pandas.DataFrame
        The table written.
    """
    rows = [
        client_summary(
            Path(samples_path).parent.name, pd.read_parquet(samples_path), sp.load_npz(rare_path)
        )
        for samples_path, rare_path in zip(samples, rare, strict=True)
    ]
    summary = pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))
    summary.to_csv(out, sep="\t", index=False)
    logger.info("%d clients, %d samples", len(summary), summary["n_samples"].sum())
    return summary


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(snakemake.input.samples, snakemake.input.rare, snakemake.output[0])
