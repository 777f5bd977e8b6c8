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
    # heterozygote counts, outwards from the mode (probability 1 before normalising). The
    # products fall faster than geometrically away from the mode, so each side is taken only
    # until its last term is below 1e-20 of the observed count's (what is left of that side
    # is smaller still): a window of a few standard deviations, not all n_rare / 2 counts.
    n_down, n_up = len(range(mid, 1, -2)), len(range(mid, n_rare - 1, 2))
    offset = (n_het - mid) // 2  # steps from the mode to the observed count
    width = 16 + int(6 * np.sqrt(mid + 1)) + abs(offset)
    while True:
        down = _running_products(mid, hom_r, hom_c, min(width, n_down), -1)
        up = _running_products(mid, hom_r, hom_c, min(width, n_up), +1)
        observed = 1.0 if offset == 0 else (down[-offset - 1] if offset < 0 else up[offset - 1])
        floor = 1e-20 * observed
        if (len(down) == n_down or down[-1] < floor) and (len(up) == n_up or up[-1] < floor):
            break
        width *= 2
    total = 1.0 + down.sum() + up.sum()
    limit = observed * (1 + 1e-12)
    p = ((1.0 if limit >= 1.0 else 0.0) + down[down <= limit].sum() + up[up <= limit].sum()) / total
    return float(min(1.0, p))


def _running_products(mid: int, hom_r: int, hom_c: int, length: int, direction: int) -> np.ndarray:
    """The first ``length`` probabilities (relative to the mode ``mid``) down or up from it.

    Down (``direction`` −1): het → het − 2 multiplies by het (het − 1) / (4 (hom_r + 1)
    (hom_c + 1)) with both homozygote counts one higher; up: by 4 hom_r hom_c / ((het + 2)
    (het + 1)) with both one lower (Wigginton et al. 2005).
    """
    step = np.arange(length, dtype=np.float64)
    if direction < 0:
        het = mid - 2 * step
        return np.cumprod(het * (het - 1) / (4.0 * (hom_r + step + 1) * (hom_c + step + 1)))
    het = mid + 2 * step
    return np.cumprod(4.0 * (hom_r - step) * (hom_c - step) / ((het + 2.0) * (het + 1.0)))


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
