"""What one site releases about its genotypes, and how the coordinator combines the sites.

:func:`site_counts` is the per-site step: it reads one site's genotype source over that site's
samples and returns summary counts only — per variant the ALT-allele count and number of called
alleles over the site's samples, and the hard-call genotype counts over its controls. Nothing
individual-level is in the table.

:func:`combine_site_counts` is the coordinator's step, a pure function of the sites' tables:
global call rates and allele frequencies from the summed counts, and Hardy–Weinberg exact tests
run **within each site** on that site's control genotype counts, never on the pooled sum (pooling
sites with different allele frequencies creates a heterozygote deficit, the Wahlund effect, that
is not a genotyping error). A variant failing HWE in any site is excluded with a reason naming
the site(s) and p-value(s). Then the common/rare split on the global minor-allele frequency.
:func:`combine_summed_counts` is the same step when the coordinator holds only the sum over the
sites (a secure sum): each site runs its HWE test itself (:func:`site_hwe_p`) and releases only
which variants fail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeSource,
    hardcall_counts,
    variant_keys,
)
from rvfedprs.genotypes.frequencies import (
    COUNT_COLUMNS,
    allele_frequencies,
    combine_allele_counts,
    split_common_rare,
)
from rvfedprs.genotypes.qc import hwe_exact_many

__all__ = [
    "GENOTYPE_COUNT_COLUMNS",
    "SITE_COUNT_COLUMNS",
    "combine_site_counts",
    "combine_summed_counts",
    "multiallelic_sites",
    "site_counts",
    "site_hwe_p",
]

#: Hard-call genotype counts among a site's controls (for the HWE test).
GENOTYPE_COUNT_COLUMNS = ("n_hom_ref", "n_het", "n_hom_alt")
#: Columns of one site's count table.
SITE_COUNT_COLUMNS = (*COUNT_COLUMNS, *GENOTYPE_COUNT_COLUMNS, "n_samples")


def site_counts(
    source: GenotypeSource,
    *,
    samples: Sequence[str],
    controls: Sequence[str],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> pd.DataFrame:
    """One site's summary counts (see the module docstring).

    Parameters
    ----------
    source : GenotypeSource
        The site's genotypes.
    samples : sequence of str
        The site's QC-passing samples (allele counts are over these).
    controls : sequence of str
        Its controls among them (genotype counts for the HWE test are over these).
    chunk_size : int

    Returns
    -------
    DataFrame, shape (n_variants, 12)
        :data:`SITE_COUNT_COLUMNS`: ``alt_count`` (summed ALT dosage), ``allele_number``
        (2 × called samples), ``n_hom_ref, n_het, n_hom_alt`` among controls (int64) and
        ``n_samples`` (the number of ``samples``).
    """
    samples, controls = list(samples), list(controls)
    parts = []
    for variants, alt_sum, counts, control_counts in _count_pass(
        source, samples, controls, chunk_size
    ):
        table = variants.copy()
        table.insert(0, "variant_key", variant_keys(variants).to_numpy())
        table["alt_count"] = alt_sum
        table["allele_number"] = 2 * (len(samples) - counts[:, 3]).astype(np.int64)
        for i, column in enumerate(GENOTYPE_COUNT_COLUMNS):
            table[column] = control_counts[:, i].astype(np.int64)
        parts.append(table)
    if not parts:
        out = pd.DataFrame({c: pd.Series(dtype=object) for c in SITE_COUNT_COLUMNS})
    else:
        out = pd.concat(parts, ignore_index=True)
    out["n_samples"] = np.int64(len(samples))
    return out[list(SITE_COUNT_COLUMNS)]


def _count_pass(source: GenotypeSource, samples: list[str], controls: list[str], chunk_size: int):
    """(variants, ALT sums, counts over ``samples``, counts over ``controls``) per chunk.

    Sources that count hard calls without decoding dosages (PLINK via pgenlib) are asked twice;
    the others (VCF, BGEN, dosage .pgen) are read once and the controls' rows taken from it.
    """
    if getattr(source, "counts_hardcalls", False):
        yield from (
            (v, s, c, cc)
            for (v, s, c), (_, _, cc) in zip(
                source.iter_counts(chunk_size=chunk_size, samples=samples),
                source.iter_counts(chunk_size=chunk_size, samples=controls),
                strict=True,
            )
        )
        return
    rows = pd.Index(samples).get_indexer(controls)
    if (rows < 0).any():
        raise InputDataError(f"control {controls[int(np.argmin(rows))]} is not among the samples")
    for chunk in source.iter_chunks(chunk_size=chunk_size, samples=samples):
        counts, alt_sum = hardcall_counts(chunk.dosages)
        control_counts = hardcall_counts(chunk.dosages[rows])[0][:, :3]
        yield chunk.variants, alt_sum, counts, control_counts


def multiallelic_sites(variants: pd.DataFrame) -> pd.Series:
    """Reason per variant at a position holding several records (split multi-allelic sites).

    Returns
    -------
    Series of str
        ``"multi-allelic site 22:100 (A>G, A>T)"`` for each such record, ``""`` otherwise.
    """
    site = variants["chrom"].astype(str) + ":" + variants["pos"].astype(str)
    repeated = site.duplicated(keep=False)
    reasons = pd.Series("", index=variants.index, dtype=object)
    for name, group in variants[repeated].groupby(site[repeated], sort=False):
        alleles = ", ".join(f"{r}>{a}" for r, a in zip(group["ref"], group["alt"], strict=True))
        reasons[group.index] = f"multi-allelic site {name} ({alleles})"
    return reasons


def site_hwe_p(table: pd.DataFrame) -> np.ndarray:
    """One site's HWE exact-test p-value per variant, from its controls' genotype counts."""
    return hwe_exact_many(table["n_het"], table["n_hom_ref"], table["n_hom_alt"])


def _hwe_reasons(failing: Mapping[str, np.ndarray], hwe_p_min: float, p=None) -> np.ndarray:
    """Per variant, the reason naming the sites whose controls fail HWE (with their p-values)."""
    names = list(failing)
    flags = np.column_stack([np.asarray(failing[n], dtype=bool) for n in names])
    reason = np.full(len(flags), "", dtype=object)
    for j in np.flatnonzero(flags.any(axis=1)):
        sites = ", ".join(
            names[k] if p is None else f"{names[k]} p={p[j, k]:.3g}"
            for k in np.flatnonzero(flags[j])
        )
        reason[j] = f"HWE in controls within site ({sites}) < qc.hwe_p_min {hwe_p_min:g}"
    return reason


def _within_site_hwe(
    tables: Mapping[str, pd.DataFrame], hwe_p_min: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per variant: the smallest per-site HWE p-value, and the reason naming failing sites."""
    p = np.column_stack([site_hwe_p(t) for t in tables.values()])
    failing = {name: p[:, k] < hwe_p_min for k, name in enumerate(tables)}
    return p.min(axis=1), _hwe_reasons(failing, hwe_p_min, p)


def combine_site_counts(
    tables: Mapping[str, pd.DataFrame],
    *,
    variant_call_rate_min: float = 0.95,
    hwe_p_min: float = 1e-6,
    rare_maf_max: float = 0.01,
    on_multiallelic: str = "exclude",
    frequencies: pd.DataFrame | None = None,
    frequency_source: str = "the frequency file",
) -> pd.DataFrame:
    """The global variant table from the sites' count tables (a pure function).

    Parameters
    ----------
    tables : mapping of str to DataFrame
        Each site's :func:`site_counts` table, by site name; all list the same variants.
    variant_call_rate_min : float
        Variants called in fewer than this share of all samples fail QC.
    hwe_p_min : float
        Variants whose HWE exact-test p-value in the controls of any one site is below this
        fail QC (0 disables).
    rare_maf_max : float
        Upper bound of the global MAF of a rare variant.
    on_multiallelic : {"exclude", "error"}
        Split multi-allelic sites (several records at one position): excluded, or an error.
    frequencies : DataFrame, optional
        External frequencies (:func:`~rvfedprs.genotypes.frequencies.read_frequency_file`)
        replacing the summed ones; variants absent from it fail QC.
    frequency_source : str
        Its name, for the exclusion reason.

    Returns
    -------
    DataFrame
        Summed :data:`SITE_COUNT_COLUMNS` (less ``n_samples``), ``call_rate``, ``hwe_p`` (the
        smallest per-site p-value), ``alt_freq``, ``minor_allele``, ``maf``, ``minor_count``,
        ``qc_pass`` (bool), ``class`` (``common``/``rare``/``excluded``) and ``reason``.

    Raises
    ------
    InputDataError
        No tables, tables listing different variants, or multi-allelic sites with
        ``on_multiallelic="error"``.
    """
    if not tables:
        raise InputDataError("no site counts to combine")
    frames = list(tables.values())
    combined = combine_allele_counts([t[list(COUNT_COLUMNS)] for t in frames])
    for column in GENOTYPE_COUNT_COLUMNS:
        combined[column] = np.sum([t[column].to_numpy(dtype=np.int64) for t in frames], axis=0)
    n_samples = int(sum(int(t["n_samples"].iloc[0]) for t in frames if len(t)))
    hwe_p, hwe_reason = _within_site_hwe(tables, hwe_p_min)
    return _qc_and_split(
        combined,
        n_samples,
        hwe_p,
        hwe_reason,
        variant_call_rate_min=variant_call_rate_min,
        rare_maf_max=rare_maf_max,
        on_multiallelic=on_multiallelic,
        frequencies=frequencies,
        frequency_source=frequency_source,
    )


def combine_summed_counts(
    summed: pd.DataFrame,
    *,
    n_samples: int,
    hwe_failing: Mapping[str, np.ndarray],
    variant_call_rate_min: float = 0.95,
    hwe_p_min: float = 1e-6,
    rare_maf_max: float = 0.01,
    on_multiallelic: str = "exclude",
    frequencies: pd.DataFrame | None = None,
    frequency_source: str = "the frequency file",
) -> pd.DataFrame:
    """:func:`combine_site_counts` from counts already summed over the sites (a secure sum).

    The coordinator never sees one site's genotype counts here, so each site tests HWE in its
    own controls and releases only which variants fail (``hwe_failing``); ``hwe_p`` is NaN.

    Parameters
    ----------
    summed : DataFrame
        The variant columns and the summed :data:`SITE_COUNT_COLUMNS` (less ``n_samples``).
    n_samples : int
        Σ over the sites of their QC-passing samples.
    hwe_failing : mapping of str to array of bool
        Site → per variant, whether its controls fail HWE (p < ``hwe_p_min``).
    variant_call_rate_min, hwe_p_min, rare_maf_max, on_multiallelic, frequencies,
    frequency_source
        As :func:`combine_site_counts`.

    Returns
    -------
    DataFrame
        As :func:`combine_site_counts`.
    """
    if not hwe_failing:
        raise InputDataError("no site HWE flags to combine")
    wrong = {s: len(f) for s, f in hwe_failing.items() if len(f) != len(summed)}
    if wrong:
        raise InputDataError(f"HWE flags of {len(summed)} variants expected, got {wrong}")
    return _qc_and_split(
        summed.reset_index(drop=True),
        int(n_samples),
        np.full(len(summed), np.nan),
        _hwe_reasons(hwe_failing, hwe_p_min),
        variant_call_rate_min=variant_call_rate_min,
        rare_maf_max=rare_maf_max,
        on_multiallelic=on_multiallelic,
        frequencies=frequencies,
        frequency_source=frequency_source,
    )


def _qc_and_split(
    combined: pd.DataFrame,
    n_samples: int,
    hwe_p: np.ndarray,
    hwe_reason: np.ndarray,
    *,
    variant_call_rate_min: float,
    rare_maf_max: float,
    on_multiallelic: str,
    frequencies: pd.DataFrame | None,
    frequency_source: str,
) -> pd.DataFrame:
    """Call rate, HWE, multi-allelic and frequency QC, then the common/rare split."""
    reasons: list[np.ndarray] = []
    combined["call_rate"] = combined["allele_number"] / (2.0 * max(n_samples, 1))
    low_call = combined["call_rate"].to_numpy() < variant_call_rate_min
    reasons.append(
        np.where(
            low_call,
            [
                f"call rate {c:.4f} < qc.variant_call_rate_min {variant_call_rate_min}"
                for c in combined["call_rate"]
            ],
            "",
        ).astype(object)
    )
    combined["hwe_p"] = hwe_p
    reasons.append(hwe_reason)
    multi = multiallelic_sites(combined)
    if (multi != "").any() and on_multiallelic == "error":
        raise InputDataError(
            "multi-allelic sites in the genotypes (set pipeline.on_multiallelic: exclude to "
            "drop them): " + "; ".join(sorted(set(multi[multi != ""]))[:10])
        )
    reasons.append(multi.to_numpy(dtype=object))
    if frequencies is not None:
        external = frequencies.set_index("variant_key")
        absent = ~combined["variant_key"].isin(external.index).to_numpy()
        reasons.append(np.where(absent, f"absent from {frequency_source}", "").astype(object))
        freq_columns = ["alt_freq", "minor_allele", "maf", "minor_count"]
        freqs = combined.join(external[freq_columns], on="variant_key")
    else:
        freqs = allele_frequencies(combined)
    qc_reason = np.array(
        ["; ".join(r for r in row if r) for row in zip(*reasons, strict=True)], dtype=object
    )
    freqs["qc_pass"] = qc_reason == ""
    labelled = split_common_rare(freqs[freqs["qc_pass"]], rare_maf_max=rare_maf_max)
    freqs["class"] = "excluded"
    freqs["reason"] = qc_reason
    freqs.loc[labelled.index, "class"] = labelled["class"]
    split_reason = labelled["reason"].where(labelled["class"] == "excluded", "")
    freqs.loc[labelled.index, "reason"] = [
        f"{r} (not a rare-dosage or common variant)" if r else "" for r in split_reason
    ]
    return freqs
