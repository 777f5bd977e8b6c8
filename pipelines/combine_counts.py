"""Rule ``combine_counts`` (the server side): global frequencies, variant QC, common/rare split.

Sums the clients' allele counts (:func:`~rvfedprs.genotypes.frequencies.combine_allele_counts`)
and their control genotype counts, then per variant: call rate over all samples, HWE exact test
in controls, global frequencies (or those of an external file), and the common/rare label. The
rare variants, in file order, are the rare-dosage columns of every client.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.cohort import exclusions
from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.frequencies import (
    COUNT_COLUMNS,
    allele_frequencies,
    combine_allele_counts,
    read_frequency_file,
    split_common_rare,
)
from rvfedprs.genotypes.qc import hwe_exact
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("combine_counts")

STEP = "combine_counts"
RARE_COLUMNS = ("variant_key", "chrom", "pos", "id", "ref", "alt", "minor_allele", "maf")
_GENOTYPE_COUNTS = ("n_hom_ref", "n_het", "n_hom_alt")


def _split_multiallelic(variants: pd.DataFrame) -> pd.Series:
    """Reason per variant at a position holding several records (split multi-allelic sites)."""
    site = variants["chrom"].astype(str) + ":" + variants["pos"].astype(str)
    repeated = site.duplicated(keep=False)
    reasons = pd.Series("", index=variants.index, dtype=object)
    for name, group in variants[repeated].groupby(site[repeated], sort=False):
        alleles = ", ".join(f"{r}>{a}" for r, a in zip(group["ref"], group["alt"], strict=True))
        reasons[group.index] = f"multi-allelic site {name} ({alleles})"
    return reasons


def main(
    *,
    counts: Sequence[str | Path],
    skipped: Sequence[str | Path] = (),
    pipeline: Mapping[str, Any],
    frequencies: str | Path | None = None,
    out_variants: str | Path,
    out_rare: str | Path,
    out_exclusions: str | Path,
) -> pd.DataFrame:
    """Combine per-client counts into the global variant table.

    Parameters
    ----------
    counts : sequence of paths
        Per-client count tables (from ``client_counts``).
    skipped : sequence of paths
        Per-client tables of variants the reader skipped (multi-allelic records).
    pipeline : mapping
        The ``pipeline`` section (``qc``, ``rare_maf_max``, ``on_multiallelic``).
    frequencies : path, optional
        External frequency file replacing the summed frequencies.
    out_variants : path
        Every variant: counts, ``call_rate``, ``hwe_p``, frequencies, ``qc_pass`` (bool),
        ``class`` (``common``/``rare``/``excluded``) and ``reason``.
    out_rare : path
        ``results/rare_variants.tsv``: :data:`RARE_COLUMNS` for the rare variants, in order.
    out_exclusions : path
        Variant exclusions of this step (``kind, id, reason, step``).

    Returns
    -------
    pandas.DataFrame
        The variant table.
    """
    tables = [pd.read_parquet(p) for p in counts]
    if not tables:
        raise InputDataError("no client counts to combine")
    combined = combine_allele_counts([t[list(COUNT_COLUMNS)] for t in tables])
    for column in _GENOTYPE_COUNTS:
        combined[column] = np.sum([t[column].to_numpy() for t in tables], axis=0)
    n_samples = int(sum(int(t["n_samples"].iloc[0]) for t in tables if len(t)))
    qc = pipeline["qc"]

    reasons: list[pd.Series] = []
    combined["call_rate"] = combined["allele_number"] / (2.0 * max(n_samples, 1))
    low_call = combined["call_rate"] < qc["variant_call_rate_min"]
    reasons.append(
        pd.Series(
            np.where(
                low_call,
                [
                    f"call rate {c:.4f} < qc.variant_call_rate_min {qc['variant_call_rate_min']}"
                    for c in combined["call_rate"]
                ],
                "",
            ),
            index=combined.index,
        )
    )
    combined["hwe_p"] = [
        hwe_exact(int(het), int(hom_ref), int(hom_alt))
        for het, hom_ref, hom_alt in zip(
            combined["n_het"], combined["n_hom_ref"], combined["n_hom_alt"], strict=True
        )
    ]
    bad_hwe = combined["hwe_p"] < qc["hwe_p_min"]
    reasons.append(
        pd.Series(
            np.where(
                bad_hwe,
                [
                    f"HWE p {p:.3g} in controls < qc.hwe_p_min {qc['hwe_p_min']}"
                    for p in combined["hwe_p"]
                ],
                "",
            ),
            index=combined.index,
        )
    )
    multi = _split_multiallelic(combined)
    if (multi != "").any() and pipeline["on_multiallelic"] == "error":
        raise InputDataError(
            "multi-allelic sites in the genotypes (set pipeline.on_multiallelic: exclude to "
            "drop them): " + "; ".join(sorted(set(multi[multi != ""]))[:10])
        )
    reasons.append(multi)

    if frequencies:
        external = read_frequency_file(frequencies).set_index("variant_key")
        absent = ~combined["variant_key"].isin(external.index)
        reasons.append(
            pd.Series(
                np.where(absent, f"absent from frequency file {frequencies}", ""),
                index=combined.index,
            )
        )
        freq_columns = ["alt_freq", "minor_allele", "maf", "minor_count"]
        freqs = combined.join(external[freq_columns], on="variant_key")
    else:
        freqs = allele_frequencies(combined)
    qc_reason = pd.concat(reasons, axis=1).apply(lambda row: "; ".join(r for r in row if r), axis=1)
    freqs["qc_pass"] = (qc_reason == "").to_numpy()

    labelled = split_common_rare(freqs[freqs["qc_pass"]], rare_maf_max=pipeline["rare_maf_max"])
    freqs["class"] = "excluded"
    freqs["reason"] = qc_reason.to_numpy()
    freqs.loc[labelled.index, "class"] = labelled["class"]
    split_reason = labelled["reason"].where(labelled["class"] != "excluded", "")
    freqs.loc[labelled.index, "reason"] = [
        f"{r} (not a rare-dosage or common variant)" if r else "" for r in split_reason
    ]

    Path(out_variants).parent.mkdir(parents=True, exist_ok=True)
    freqs.to_csv(out_variants, sep="\t", index=False)
    rare = freqs.loc[freqs["class"] == "rare", list(RARE_COLUMNS)]
    rare.to_csv(out_rare, sep="\t", index=False)

    reader_skipped = [pd.read_csv(p, sep="\t", dtype=str) for p in skipped]
    reader_skipped = pd.concat(reader_skipped, ignore_index=True) if reader_skipped else None
    parts = [
        exclusions(
            "variant",
            freqs.loc[freqs["class"] == "excluded", "variant_key"],
            freqs.loc[freqs["class"] == "excluded", "reason"],
            STEP,
        )
    ]
    if reader_skipped is not None and len(reader_skipped):
        reader_skipped = reader_skipped.drop_duplicates()
        keys = (
            reader_skipped["chrom"]
            + ":"
            + reader_skipped["pos"]
            + ":"
            + reader_skipped["ref"]
            + ":"
            + reader_skipped["alt"]
        )
        parts.append(
            exclusions(
                "variant",
                keys,
                reader_skipped["reason"].map(
                    lambda r: "multi-allelic record" if r == "multiallelic" else r
                ),
                "read_genotypes",
            )
        )
    pd.concat(parts, ignore_index=True).to_csv(out_exclusions, sep="\t", index=False)
    logger.info(
        "%d variants over %d samples in %d clients: %d fail QC, %d common, %d rare",
        len(freqs),
        n_samples,
        len(tables),
        int((~freqs["qc_pass"]).sum()),
        int((freqs["class"] == "common").sum()),
        int((freqs["class"] == "rare").sum()),
    )
    return freqs


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            counts=snakemake.input.counts,
            skipped=snakemake.input.skipped,
            pipeline=snakemake.params.pipeline,
            frequencies=snakemake.input.frequencies or None,
            out_variants=snakemake.output.variants,
            out_rare=snakemake.output.rare,
            out_exclusions=snakemake.output.exclusions,
        )
