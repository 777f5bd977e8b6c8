"""Rule ``summarize_clients``: ``results/clients.tsv`` from the per-client feature sets."""

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import scipy.sparse as sp

from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("summarize_clients")

COLUMNS = ("client", "n_samples", "n_cases", "n_train", "n_test", "n_carriers", "n_rare_carried")


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
    rows = []
    for samples_path, rare_path in zip(samples, rare, strict=True):
        table = pd.read_parquet(samples_path)
        dosages = sp.load_npz(rare_path).tocsr()
        if dosages.shape[0] != len(table):
            raise ValueError(
                f"{rare_path} has {dosages.shape[0]} rows but {samples_path} {len(table)} samples"
            )
        carriers = dosages.getnnz(axis=1) > 0
        rows.append(
            {
                "client": Path(samples_path).parent.name,
                "n_samples": len(table),
                "n_cases": int(table["phenotype"].sum()),
                "n_train": int((table["split"] == "train").sum()),
                "n_test": int((table["split"] == "test").sum()),
                "n_carriers": int(carriers.sum()),
                "n_rare_carried": int((dosages.getnnz(axis=0) > 0).sum()),
            }
        )
    summary = pd.DataFrame(rows, columns=list(COLUMNS))
    summary.to_csv(out, sep="\t", index=False)
    logger.info("%d clients, %d samples", len(summary), summary["n_samples"].sum())
    return summary


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(snakemake.input.samples, snakemake.input.rare, snakemake.output[0])
