"""Allele counts per client, summed the federated way into global frequencies; common/rare split.

Each client computes :func:`allele_counts` on its own genotypes and shares only the table (ALT
allele count and number of called alleles per variant). The server sums the tables with
:func:`combine_allele_counts`; :func:`allele_frequencies` turns the sum into frequencies and
:func:`split_common_rare` labels each variant common or rare on the global minor-allele frequency.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.chunk import DEFAULT_CHUNK_SIZE, GenotypeSource, variant_keys

__all__ = [
    "COUNT_COLUMNS",
    "allele_counts",
    "allele_frequencies",
    "combine_allele_counts",
    "read_frequency_file",
    "split_common_rare",
]

#: Columns of an allele-count table, in this order.
COUNT_COLUMNS = ("variant_key", "chrom", "pos", "id", "ref", "alt", "alt_count", "allele_number")


def allele_counts(
    source: GenotypeSource,
    *,
    samples: Sequence[str] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> pd.DataFrame:
    """ALT-allele count and number of called alleles per variant (one client's contribution).

    Parameters
    ----------
    source : GenotypeSource
        From :func:`rvfedprs.genotypes.open_genotypes`.
    samples : sequence of str, optional
        Count only these samples (default: all).
    chunk_size : int
        Variants read at a time.

    Returns
    -------
    DataFrame, shape (n_variants, 8)
        :data:`COUNT_COLUMNS`; ``alt_count`` is the summed ALT dosage (float64, integral for
        hard calls) and ``allele_number`` is 2 × the number of non-missing samples (int64).
    """
    parts = []
    n_samples = len(source.samples) if samples is None else len(list(samples))
    for variants, alt_sum, counts in source.iter_counts(chunk_size=chunk_size, samples=samples):
        table = variants.copy()
        table.insert(0, "variant_key", variant_keys(variants).to_numpy())
        table["alt_count"] = alt_sum
        table["allele_number"] = 2 * (n_samples - counts[:, 3]).astype(np.int64)
        parts.append(table)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in COUNT_COLUMNS})
    return pd.concat(parts, ignore_index=True)[list(COUNT_COLUMNS)]


def combine_allele_counts(tables: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Sum per-client allele-count tables into the global table.

    Parameters
    ----------
    tables : sequence of DataFrame
        Outputs of :func:`allele_counts`, one per client.

    Returns
    -------
    DataFrame
        The first table's variant columns with ``alt_count`` and ``allele_number`` summed.

    Raises
    ------
    InputDataError
        When the tables do not list the same variants in the same order (naming the first
        difference), or a variant key repeats.
    """
    if not tables:
        raise InputDataError("no allele-count tables to combine")
    first = tables[0]
    keys = first["variant_key"].to_numpy()
    dup = pd.Index(keys).duplicated()
    if dup.any():
        raise InputDataError(f"variant {keys[dup][0]} occurs twice in allele-count table 0")
    total = first[list(COUNT_COLUMNS)].copy()
    total["alt_count"] = total["alt_count"].astype(np.float64)
    total["allele_number"] = total["allele_number"].astype(np.int64)
    for i, table in enumerate(tables[1:], start=1):
        other = table["variant_key"].to_numpy()
        if len(other) != len(keys) or not np.array_equal(other, keys):
            diff = sorted(set(keys) ^ set(other))[:3]
            detail = f"differing variants: {diff}" if diff else "same variants in another order"
            raise InputDataError(
                f"allele-count table {i} ({len(other)} variants) does not match table 0 "
                f"({len(keys)} variants): {detail}"
            )
        total["alt_count"] += table["alt_count"].to_numpy(dtype=np.float64)
        total["allele_number"] += table["allele_number"].to_numpy(dtype=np.int64)
    return total


def allele_frequencies(counts: pd.DataFrame) -> pd.DataFrame:
    """Add ALT frequency, minor allele and minor-allele frequency to a (combined) count table.

    Parameters
    ----------
    counts : DataFrame
        With ``ref``, ``alt``, ``alt_count``, ``allele_number``.

    Returns
    -------
    DataFrame
        ``counts`` plus ``alt_freq`` (NaN where nothing is called), ``minor_allele`` (``alt``
        where ``alt_freq`` <= 0.5, else ``ref``), ``maf`` and ``minor_count``.
    """
    out = counts.copy()
    n = out["allele_number"].to_numpy(dtype=np.float64)
    alt = out["alt_count"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        freq = np.where(n > 0, alt / n, np.nan)
    alt_minor = ~(freq > 0.5)
    out["alt_freq"] = freq
    out["minor_allele"] = np.where(alt_minor, out["alt"], out["ref"])
    out["maf"] = np.where(alt_minor, freq, 1.0 - freq)
    out["minor_count"] = np.where(alt_minor, alt, n - alt)
    return out


def split_common_rare(
    freqs: pd.DataFrame, *, rare_maf_max: float = 0.01, min_minor_count: float = 1
) -> pd.DataFrame:
    """Label each variant common, rare or excluded on its global minor-allele frequency.

    Parameters
    ----------
    freqs : DataFrame
        From :func:`allele_frequencies`.
    rare_maf_max : float
        Variants with ``0 < maf <= rare_maf_max`` (and enough minor alleles) are rare.
    min_minor_count : float
        Fewest minor alleles (over all clients) for a rare variant to be kept.

    Returns
    -------
    DataFrame
        ``freqs`` plus ``class`` (``"common"``, ``"rare"`` or ``"excluded"``) and ``reason``
        (empty unless excluded: ``"monomorphic"``, ``"no_calls"``, ``"minor_count<k"``).
    """
    if not 0 < rare_maf_max < 0.5:
        raise InputDataError(f"rare_maf_max must lie in (0, 0.5), got {rare_maf_max}")
    out = freqs.copy()
    maf = out["maf"].to_numpy(dtype=np.float64)
    minor = out["minor_count"].to_numpy(dtype=np.float64)
    no_calls = np.isnan(maf)
    monomorphic = ~no_calls & ((maf <= 0) | (minor <= 0))
    rare = ~no_calls & ~monomorphic & (maf <= rare_maf_max)
    too_few = rare & (minor < min_minor_count)
    label = np.where(rare & ~too_few, "rare", "common").astype(object)
    reason = np.full(len(out), "", dtype=object)
    for mask, why in (
        (no_calls, "no_calls"),
        (monomorphic, "monomorphic"),
        (too_few, f"minor_count<{min_minor_count:g}"),
    ):
        label[mask] = "excluded"
        reason[mask] = why
    out["class"] = label
    out["reason"] = reason
    return out


def read_frequency_file(path: str | Path) -> pd.DataFrame:
    """Read an external frequency table to use instead of the federated one.

    Two layouts are accepted (tab-separated, header line):

    * ``plink2 --freq`` output (``.afreq``): ``#CHROM ID REF ALT [PROVISIONAL_REF?] ALT_FREQS
      OBS_CT`` — needs a position, so only together with IDs ``chrom:pos:ref:alt``; or
    * ours: ``variant_key`` or ``chrom, pos, ref, alt``, plus ``alt_freq`` and optionally
      ``allele_number`` (default 0 = unknown).

    Returns
    -------
    DataFrame
        Same columns as :func:`allele_frequencies`
        (``alt_count`` = ``alt_freq`` × ``allele_number``).

    Raises
    ------
    InputDataError
        Missing columns, frequencies outside [0, 1], or duplicate variants (named).
    """
    path = Path(path)
    table = pd.read_csv(path, sep="\t", dtype=str)
    table.columns = [c.lstrip("#") for c in table.columns]
    if "ALT_FREQS" in table.columns:  # plink2 .afreq
        parts = table["ID"].str.split(":", expand=True)
        if parts.shape[1] != 4:
            raise InputDataError(
                f"{path}: a plink2 .afreq needs IDs chrom:pos:ref:alt to give positions; "
                f"got e.g. {table['ID'].iloc[0]!r}"
            )
        table = pd.DataFrame(
            {
                "chrom": table["CHROM"],
                "pos": parts[1],
                "id": table["ID"],
                "ref": table["REF"],
                "alt": table["ALT"],
                "alt_freq": table["ALT_FREQS"],
                "allele_number": table.get("OBS_CT", "0"),
            }
        )
    elif "variant_key" in table.columns and "chrom" not in table.columns:
        parts = table["variant_key"].str.split(":", expand=True)
        table[["chrom", "pos", "ref", "alt"]] = parts
    needed = {"chrom", "pos", "ref", "alt", "alt_freq"}
    if needed - set(table.columns):
        raise InputDataError(
            f"{path}: frequency file lacks columns {sorted(needed - set(table.columns))}; "
            "expected variant_key (or chrom, pos, ref, alt) and alt_freq"
        )
    from rvfedprs.genotypes.chunk import normalise_chrom

    table["chrom"] = [normalise_chrom(c, source=str(path)) for c in table["chrom"]]
    table["pos"] = table["pos"].astype(np.int64)
    if "id" not in table.columns:
        table["id"] = "."
    table["variant_key"] = variant_keys(table)
    freq = table["alt_freq"].astype(np.float64)
    bad = ~((freq >= 0) & (freq <= 1))
    if bad.any():
        raise InputDataError(
            f"{path}: alt_freq {table['alt_freq'][bad].iloc[0]!r} of "
            f"{table['variant_key'][bad].iloc[0]} outside [0, 1]"
        )
    dup = table["variant_key"].duplicated()
    if dup.any():
        raise InputDataError(f"{path}: variant {table['variant_key'][dup].iloc[0]} listed twice")
    number = table.get("allele_number", pd.Series(0, index=table.index)).astype(np.int64)
    counts = table[["variant_key", "chrom", "pos", "id", "ref", "alt"]].copy()
    counts["alt_count"] = freq * number
    counts["allele_number"] = number
    result = allele_frequencies(counts)
    result["alt_freq"] = freq.to_numpy()
    alt_minor = ~(freq.to_numpy() > 0.5)
    result["minor_allele"] = np.where(alt_minor, result["alt"], result["ref"])
    result["maf"] = np.where(alt_minor, freq, 1.0 - freq)
    known = number.to_numpy() > 0
    result["minor_count"] = np.where(known, result["maf"] * number, np.nan)
    return result
