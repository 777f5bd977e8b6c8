"""Rule ``collect_exclusions``: every step's exclusions in one ``results/logs/exclusions.tsv``."""

import logging
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from rvfedprs.cohort import EXCLUSION_COLUMNS
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("collect_exclusions")


def main(parts: Sequence[str | Path], out: str | Path) -> pd.DataFrame:
    """Concatenate exclusion tables (columns ``kind, id, reason, step``) in the given order.

    Every exclusion carries its reason: a row with an empty one is an error naming its step.
    """
    tables = [pd.read_csv(p, sep="\t", dtype=str, keep_default_na=False) for p in parts]
    for path, table in zip(parts, tables, strict=True):
        if list(table.columns) != list(EXCLUSION_COLUMNS):
            raise ValueError(f"{path} has columns {list(table.columns)}, not {EXCLUSION_COLUMNS}")
    merged = (
        pd.concat(tables, ignore_index=True)
        if tables
        else pd.DataFrame(columns=list(EXCLUSION_COLUMNS))
    )
    blank = merged[merged["reason"].str.strip() == ""]
    if len(blank):
        first = blank.head(5)
        named = "; ".join(f"{r.step}: {r.kind} {r.id}" for r in first.itertuples())
        raise ValueError(f"{len(blank)} exclusion(s) without a reason, e.g. {named}")
    merged.to_csv(out, sep="\t", index=False)
    for (kind, step), n in merged.groupby(["kind", "step"]).size().items():
        logger.info("%s: %d %s(s) excluded", step, n, kind)
    return merged


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            [
                snakemake.input.validate,
                *snakemake.input.sample_qc,
                snakemake.input.combine,
                snakemake.input.match,
            ],
            snakemake.output[0],
        )
