"""The coordinator's preparation steps: pure functions of what the sites release.

:func:`combine_counts` turns the sites' summary counts into the global variant table (call
rates and frequencies from the summed counts, Hardy–Weinberg tests within each site, the
common/rare split) and the rare-variant columns every site uses; :func:`combine_secure_counts`
does the same from counts the sites summed securely (each site then tests HWE itself and releases
only which variants fail); :func:`match_scores` matches the scoring file to the variants (plink2
``--score`` rules, the matcher of ``rvfedprs prepare score``) and keeps the usable rows, which
every site then scores with. The variant QC (call rate, HWE, multi-allelic sites, the common/rare
split) shapes the rare-variant features only: it removes a scoring variant from the PRS only when
``pipeline.qc.apply_to_score`` asks (:func:`score_exclusions` logs each such row). No genotype and
no sample ID is read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.cohort import exclusions
from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.matching import USABLE_STATUSES, match_scorefile
from rvfedprs.genotypes.scorefile import read_scorefile, scorefile_rows, write_scorefile
from rvfedprs.genotypes.scoring import check_build
from rvfedprs.genotypes.sitecounts import combine_site_counts, combine_summed_counts

__all__ = [
    "RARE_COLUMNS",
    "combine_counts",
    "combine_secure_counts",
    "match_scores",
    "score_exclusions",
    "write_weights",
]

#: Columns of ``rare_variants.tsv`` (their order is the dosage columns' order).
RARE_COLUMNS = ("variant_key", "chrom", "pos", "id", "ref", "alt", "minor_allele", "maf")


def combine_counts(
    tables: Mapping[str, pd.DataFrame],
    pipeline: Mapping[str, Any],
    *,
    skipped: list[pd.DataFrame] = (),
    frequencies: pd.DataFrame | None = None,
    frequency_source: str = "frequency file",
    step: str = "combine_counts",
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The global variant table from the sites' count tables.

    Parameters
    ----------
    tables : mapping of str to DataFrame
        Site → its :func:`~rvfedprs.prepare.site.count_alleles` table.
    pipeline : mapping
        The ``pipeline`` section (``qc``, ``rare_maf_max``, ``on_multiallelic``).
    skipped : list of DataFrame
        The sites' tables of records their readers skipped (multi-allelic records).
    frequencies : DataFrame, optional
        External frequencies replacing the summed ones.
    frequency_source : str
        How messages name the external frequencies.

    Returns
    -------
    variants : DataFrame
        Every variant: counts, ``call_rate``, ``hwe_p``, frequencies, ``qc_pass``, ``class``
        (``common``/``rare``/``excluded``) and ``reason``.
    rare : DataFrame
        :data:`RARE_COLUMNS` of the rare variants, in order.
    excluded : DataFrame
        ``kind, id, reason, step`` of every variant left out (and of the skipped records).
    """
    if not tables:
        raise InputDataError("no site counts to combine")
    qc = pipeline["qc"]
    variants = combine_site_counts(
        dict(tables),
        variant_call_rate_min=qc["variant_call_rate_min"],
        hwe_p_min=qc["hwe_p_min"],
        rare_maf_max=pipeline["rare_maf_max"],
        on_multiallelic=pipeline["on_multiallelic"],
        frequencies=frequencies,
        frequency_source=frequency_source,
    )
    return _split_tables(variants, skipped, step)


def combine_secure_counts(
    summed: pd.DataFrame,
    pipeline: Mapping[str, Any],
    *,
    n_samples: int,
    hwe_failing: Mapping[str, Any],
    skipped: list[pd.DataFrame] = (),
    step: str = "combine_counts",
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """:func:`combine_counts` from counts summed securely over the sites.

    Parameters
    ----------
    summed : DataFrame
        The variant columns and the summed count columns.
    pipeline : mapping
        As :func:`combine_counts`.
    n_samples : int
        The sites' QC-passing samples, summed.
    hwe_failing : mapping of str to array of bool
        Site → which variants fail HWE in its controls (each site tests its own).
    skipped : list of DataFrame
        As :func:`combine_counts`.

    Returns
    -------
    variants, rare, excluded : DataFrame
        As :func:`combine_counts` (``hwe_p`` NaN: no site's p-values are released).
    """
    qc = pipeline["qc"]
    variants = combine_summed_counts(
        summed,
        n_samples=n_samples,
        hwe_failing=hwe_failing,
        variant_call_rate_min=qc["variant_call_rate_min"],
        hwe_p_min=qc["hwe_p_min"],
        rare_maf_max=pipeline["rare_maf_max"],
        on_multiallelic=pipeline["on_multiallelic"],
    )
    return _split_tables(variants, skipped, step)


def _split_tables(
    variants: pd.DataFrame, skipped: list[pd.DataFrame], step: str
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(variants, the rare columns, the exclusions incl. the readers' skipped records)."""
    variants = _explain_split(variants)
    rare = variants.loc[variants["class"] == "rare", list(RARE_COLUMNS)]
    out = variants.loc[variants["class"] == "excluded"]
    parts = [exclusions("variant", out["variant_key"], out["reason"], step)]
    read = [t for t in skipped if len(t)]
    if read:
        table = pd.concat(read, ignore_index=True).astype(str).drop_duplicates()
        keys = table["chrom"] + ":" + table["pos"] + ":" + table["ref"] + ":" + table["alt"]
        reasons = table["reason"].map(
            lambda r: "multi-allelic record" if r == "multiallelic" else r
        )
        parts.append(exclusions("variant", keys, reasons, "read_genotypes"))
    return variants, rare, pd.concat(parts, ignore_index=True)


def _explain_split(variants: pd.DataFrame) -> pd.DataFrame:
    """``variants`` with a reason, and its value, for every variant the common/rare split left out.

    The split labels a QC-passing variant ``excluded`` when it has no calls, no copy of its minor
    allele (monomorphic) or too few; such a variant reaches the exclusion log with the global
    count that decided it (never with an empty reason).
    """
    # QC-passing variants the split left out; the split names the cause, this adds its value
    passed = variants["qc_pass"] if "qc_pass" in variants else variants["reason"].fillna("") == ""
    blank = (variants["class"] == "excluded") & passed.astype(bool)
    if not blank.any():
        return variants
    out = variants.copy()
    rows = out.loc[blank]
    called = rows["allele_number"].to_numpy(dtype=np.float64)
    minor = rows["minor_count"].to_numpy(dtype=np.float64)
    maf = rows["maf"].to_numpy(dtype=np.float64)
    reasons = []
    for n, count, freq in zip(called, minor, maf, strict=True):
        if n <= 0 or np.isnan(freq):
            why = f"no calls: {n:g} called alleles"
        elif freq <= 0 or count <= 0:
            why = f"monomorphic: minor allele count {count:g} of {n:g} called alleles"
        else:
            why = f"minor allele count {count:g} < 1 (MAF {freq:.3g})"
        reasons.append(f"{why} (not a rare-dosage or common variant)")
    out.loc[blank, "reason"] = reasons
    return out


def match_scores(
    variants: pd.DataFrame,
    scoring_file: str | Path,
    pipeline: Mapping[str, Any],
    *,
    variants_name: str = "the global variant table",
    return_candidates: bool = False,
) -> tuple[pd.DataFrame, Any] | tuple[pd.DataFrame, Any, pd.DataFrame]:
    """Match the scoring file to the variants as ``rvfedprs prepare score`` does; check overlap.

    A row is used when the matcher accepts it (plink2 ``--score`` rules: ``matched`` or
    ``flipped``) and its variant has a global frequency to impute missing dosages with. The
    variant QC of the training features (call rate, within-site HWE, multi-allelic sites) is
    reported per row (``qc_pass``, ``qc_reason``) but leaves the PRS alone, as plink2 and
    pgsc_calc score it, unless ``pipeline.qc.apply_to_score`` is true: then a matched row whose
    variant fails that QC is dropped (``match_status`` ``excluded``, ``drop_reason`` naming the
    test and its value). ``variants_name`` names the variant table in messages.

    Parameters
    ----------
    variants : DataFrame
        The global variant table (``variant_key``, ``alt_freq``, ``qc_pass``, ``reason``, ...).
    scoring_file : path
        PGS Catalog scoring file.
    pipeline : mapping
        The ``pipeline`` section (``genome_build``, ``keep_ambiguous``, ``min_overlap``,
        ``qc.apply_to_score``).

    Returns
    -------
    match : DataFrame
        One row per scoring-file row: ``status`` (plink2 rules), pgsc_calc's ``match_type`` and
        ``match_status``, ``qc_pass``, ``qc_reason``, ``used`` and ``drop_reason`` (why a
        matched row is not used; empty otherwise).
    scorefile : ScoreFile
        The parsed scoring file (for :func:`write_weights`).
    candidate_log : DataFrame
        Only with ``return_candidates``: pgsc_calc's candidate-level log, one row per
        (scoring-file row, variant) pair (``ScoreMatcher.candidate_log``), the pair a row kept
        carrying its ``qc_pass``, ``qc_reason``, ``used``, ``drop_reason`` and
        ``match_status``; ``not_best`` pairs are unused.

    Raises
    ------
    InputDataError
        A build mismatch, or fewer than ``min_overlap`` of the rows usable.
    """
    scorefile = read_scorefile(scoring_file)
    check_build(scorefile, pipeline["genome_build"])
    found = match_scorefile(
        variants,
        scorefile,
        keep_ambiguous=pipeline.get("keep_ambiguous", False),
        genotypes=str(variants_name),
        return_candidates=return_candidates,
    )
    match, candidates = found if return_candidates else (found, None)
    apply_qc = bool(pipeline.get("qc", {}).get("apply_to_score", False))
    table = variants.set_index("variant_key")
    matched = match["status"].isin(USABLE_STATUSES)
    keys = match["variant_key"].where(matched)
    match["qc_pass"] = keys.map(table["qc_pass"]).eq(True).to_numpy()
    failing = matched & ~match["qc_pass"]
    match["qc_reason"] = keys.map(table["reason"]).where(failing, "").fillna("")
    if "alt_freq" in table:
        no_freq = matched & keys.map(table["alt_freq"]).isna()
    else:
        no_freq = pd.Series(False, index=match.index)
    drop = pd.Series("", index=match.index, dtype=object)
    if apply_qc:
        drop[failing] = match.loc[failing, "qc_reason"] + " (pipeline.qc.apply_to_score: true)"
    drop[no_freq & (drop == "")] = (
        f"no global frequency in {variants_name} to impute missing dosages with"
    )
    match["used"] = matched & (drop == "")
    match["drop_reason"] = drop
    match.loc[matched & ~match["used"], "match_status"] = "excluded"
    share = float(match["used"].mean()) if len(match) else 0.0
    if share < pipeline["min_overlap"]:
        statuses = match["status"].value_counts().to_dict()
        qc_note = "dropped" if apply_qc else "scored anyway (pipeline.qc.apply_to_score: false)"
        raise InputDataError(
            f"only {int(match['used'].sum())} of {len(match)} rows of {scoring_file} "
            f"({100 * share:.1f}%) are usable, below min_overlap={pipeline['min_overlap']}; "
            f"statuses: {statuses}; matched but failing the variant QC: {int(failing.sum())} "
            f"({qc_note}); matched without a frequency: {int(no_freq.sum())}"
        )
    if not return_candidates:
        return match, scorefile
    return match, scorefile, _with_row_outcomes(candidates, match)


def _with_row_outcomes(candidates: pd.DataFrame, match: pd.DataFrame) -> pd.DataFrame:
    """The candidate log with each row's outcome on the pair it kept; ``not_best`` ones unused."""
    columns = ["qc_pass", "qc_reason", "used", "drop_reason", "match_status"]
    kept = (candidates["match_status"] != "not_best").to_numpy()
    outcome = match.set_index(["accession", "row"])[columns]
    keys = pd.MultiIndex.from_frame(candidates.loc[kept, ["accession", "row"]])
    out = candidates.assign(qc_pass=False, qc_reason="", used=False, drop_reason="")
    out.loc[kept, columns] = outcome.reindex(keys).to_numpy()
    return out


def score_exclusions(match: pd.DataFrame, step: str = "match_scores") -> pd.DataFrame:
    """The matched scoring variants left out of the PRS, with their reasons.

    Rows the matcher refuses (unmatched, ambiguous, ...) are in the match log, not here: these
    are the variants the scoring file and the genotypes agree on that the PRS still leaves out
    (failing the variant QC under ``pipeline.qc.apply_to_score``, or without a frequency).

    Returns
    -------
    DataFrame
        ``kind, id, reason, step``: kind ``score_variant``, id the variant key, one row per
        variant.
    """
    matched = match["status"].isin(USABLE_STATUSES) & ~match["used"].astype(bool)
    rows = match.loc[matched].drop_duplicates("variant_key")
    return exclusions("score_variant", rows["variant_key"], rows["drop_reason"], step)


def write_weights(path: str | Path, match: pd.DataFrame, scorefile: Any) -> Path:
    """The usable rows as a PGS Catalog scoring file (harmonised positions when harmonised)."""
    used_rows = pd.unique(match.loc[match["used"], "row"])
    header = {k: v for k, v in scorefile.header.items() if k != "HmPOS_build"}
    if scorefile.harmonised:  # the written positions are the harmonised ones
        header["genome_build"] = scorefile.genome_build
    return write_scorefile(path, scorefile_rows(scorefile, used_rows), header=header)
