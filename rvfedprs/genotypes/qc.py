"""Genotype quality control: genotype counts, sample call rates, Hardy–Weinberg exact test.

The per-variant tests run on the sites' counts (:mod:`rvfedprs.genotypes.sitecounts`, through
:func:`hwe_exact_many`); :func:`sample_call_rates` returns one row per sample with an
``excluded``/``reason`` pair, so that no sample is dropped without a record.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from rvfedprs.genotypes.chunk import DEFAULT_CHUNK_SIZE, GenotypeSource, sample_index

__all__ = ["genotype_counts", "hwe_exact", "hwe_exact_many", "sample_call_rates"]


def hwe_exact(n_het: int, n_hom_1: int, n_hom_2: int) -> float:
    """Hardy–Weinberg equilibrium exact test p-value (Wigginton, Cutler & Abecasis 2005).

    The same two-sided test as ``plink2 --hardy`` (``P`` column) and ``--hwe``: the sum of the
    probabilities of all heterozygote counts no more likely than the observed one, given the
    allele counts.

    Parameters
    ----------
    n_het, n_hom_1, n_hom_2 : int
        Observed heterozygotes and the two homozygote counts.

    Returns
    -------
    float
        p-value in (0, 1]; 1.0 when no genotypes are called.
    """
    n_het, n_hom_1, n_hom_2 = int(n_het), int(n_hom_1), int(n_hom_2)
    if min(n_het, n_hom_1, n_hom_2) < 0:
        raise ValueError(f"negative genotype count in ({n_het}, {n_hom_1}, {n_hom_2})")
    n_rare_hom, n_common_hom = sorted((n_hom_1, n_hom_2))
    n = n_het + n_rare_hom + n_common_hom
    if n == 0:
        return 1.0
    n_rare = 2 * n_rare_hom + n_het  # copies of the rarer allele
    mid = n_rare * (2 * n - n_rare) // (2 * n)
    if (n_rare - mid) % 2:  # heterozygote count has the parity of n_rare
        mid += 1
    hom_r = (n_rare - mid) // 2
    hom_c = n - mid - hom_r
    # The Wigginton recursion as running products of the ratios between neighbouring
    # heterozygote counts, outwards from the mode (probability 1 before normalising).
    het = np.arange(mid, 1, -2, dtype=np.float64)  # downwards: het → het - 2
    step = np.arange(len(het), dtype=np.float64)
    down = np.cumprod(het * (het - 1) / (4.0 * (hom_r + step + 1) * (hom_c + step + 1)))
    het = np.arange(mid, n_rare - 1, 2, dtype=np.float64)  # upwards: het → het + 2
    step = np.arange(len(het), dtype=np.float64)
    up = np.cumprod(4.0 * (hom_r - step) * (hom_c - step) / ((het + 2.0) * (het + 1.0)))
    probs = np.zeros(n_rare + 1, dtype=np.float64)
    probs[mid] = 1.0
    if len(down):
        probs[mid - 2 * len(down) : mid - 1 : 2] = down[::-1]
    if len(up):
        probs[mid + 2 : mid + 2 * len(up) + 1 : 2] = up
    probs /= 1.0 + down.sum() + up.sum()
    observed = probs[n_het]
    p = probs[probs <= observed * (1 + 1e-12)].sum()
    return float(min(1.0, p))


def hwe_exact_many(n_het: np.ndarray, n_hom_1: np.ndarray, n_hom_2: np.ndarray) -> np.ndarray:
    """:func:`hwe_exact` for many variants, computed once per distinct genotype-count triple.

    Parameters
    ----------
    n_het, n_hom_1, n_hom_2 : array of int, shape (n_variants,)

    Returns
    -------
    ndarray of float64, shape (n_variants,)
    """
    het = np.asarray(n_het, dtype=np.int64)
    hom_1 = np.asarray(n_hom_1, dtype=np.int64)
    hom_2 = np.asarray(n_hom_2, dtype=np.int64)
    if len(het) == 0:
        return np.zeros(0, dtype=np.float64)
    triples = np.stack([het, np.minimum(hom_1, hom_2), np.maximum(hom_1, hom_2)], axis=1)
    unique, inverse = np.unique(triples, axis=0, return_inverse=True)
    values = np.array([hwe_exact(*t) for t in unique], dtype=np.float64)
    return values[inverse.ravel()]


def genotype_counts(
    source: GenotypeSource,
    *,
    samples: Sequence[str] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> pd.DataFrame:
    """Hard-call genotype counts per variant (dosages rounded to 0/1/2, as plink2's hardcalls).

    Returns
    -------
    DataFrame, shape (n_variants, 9)
        Variant columns plus ``n_hom_ref``, ``n_het``, ``n_hom_alt``, ``n_missing`` (int64).
    """
    parts = []
    for variants, _, counts in source.iter_counts(chunk_size=chunk_size, samples=samples):
        table = variants.copy()
        for i, name in enumerate(("n_hom_ref", "n_het", "n_hom_alt", "n_missing")):
            table[name] = counts[:, i]
        parts.append(table)
    return pd.concat(parts, ignore_index=True)


def sample_call_rates(
    source: GenotypeSource,
    *,
    samples: Sequence[str] | None = None,
    min_call_rate: float = 0.95,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> pd.DataFrame:
    """Fraction of variants called per sample, with exclusions (plink ``--mind``).

    Returns
    -------
    DataFrame, shape (n_samples, 5)
        ``sample_id``, ``n_called``, ``call_rate``, ``excluded`` (bool), ``reason``.
    """
    missing, n_variants = source.sample_missing(samples=samples, chunk_size=chunk_size)
    if n_variants == 0:
        raise ValueError(f"{source.path}: no variants to compute sample call rates")
    out_samples = source.samples[sample_index(source.samples, samples, source.path)]
    called = n_variants - missing
    rate = called / n_variants
    excluded = rate < min_call_rate
    return pd.DataFrame(
        {
            "sample_id": out_samples,
            "n_called": called,
            "call_rate": rate,
            "excluded": excluded,
            "reason": np.where(excluded, "call_rate", ""),
        }
    )
