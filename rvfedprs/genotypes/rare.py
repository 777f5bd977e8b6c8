"""Sparse minor-allele dosages of the rare variants (the rare pathway's input, design §3)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeSource,
    block_carriers,
    sample_index,
    variant_keys,
)

__all__ = ["rare_dosages"]


def rare_dosages(
    source: GenotypeSource,
    rare_variants: pd.DataFrame,
    *,
    samples: Sequence[str] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> sp.csr_matrix:
    """Minor-allele dosages of the rare variants as a sparse matrix.

    Parameters
    ----------
    source : GenotypeSource
    rare_variants : DataFrame
        The federation-wide rare-variant table (``results/rare_variants.tsv``): ``variant_key``,
        ``ref``, ``alt``, ``minor_allele`` and ``maf`` (global minor-allele frequency). Its row
        order is the column order of the result.
    samples : sequence of str, optional
        Row order of the result (default: the source's samples).
    chunk_size : int
        Variants read at a time; only the non-zero entries of the rare columns are kept.

    Returns
    -------
    scipy.sparse.csr_matrix of float32, shape (n_samples, n_rare)
        Minor-allele dosage in [0, 2] (``2 - alt dosage`` where the minor allele is REF);
        a missing genotype is imputed with the global mean, ``2 * maf``.

    Raises
    ------
    InputDataError
        A rare variant absent from the genotypes, listed twice, or whose minor allele is
        neither its REF nor its ALT (each named).
    """
    needed = {"variant_key", "ref", "alt", "minor_allele", "maf"}
    if needed - set(rare_variants.columns):
        raise InputDataError(
            f"rare-variant table lacks columns {sorted(needed - set(rare_variants.columns))}"
        )
    keys = rare_variants["variant_key"].to_numpy(dtype=str)
    position = pd.Series(np.arange(len(keys)), index=keys)
    if position.index.duplicated().any():
        raise InputDataError(f"rare variant {keys[position.index.duplicated()][0]} is listed twice")
    minor = rare_variants["minor_allele"].to_numpy(dtype=str)
    ref = rare_variants["ref"].to_numpy(dtype=str)
    alt = rare_variants["alt"].to_numpy(dtype=str)
    odd = (minor != ref) & (minor != alt)
    if odd.any():
        raise InputDataError(
            f"rare variant {keys[odd][0]}: minor allele {minor[odd][0]!r} is neither REF nor ALT"
        )
    minor_is_ref = minor == ref
    fill = 2.0 * rare_variants["maf"].to_numpy(dtype=np.float64)
    rows_parts, cols_parts, vals_parts = [], [], []
    found = np.zeros(len(keys), dtype=bool)
    n_samples = None
    if source.variants is not None:  # only the rare variants' carriers are read
        at = pd.Index(variant_keys(source.variants)).get_indexer(keys)
        listed = np.flatnonzero(at >= 0)
        column = listed[np.argsort(at[listed])]  # result column of each variant read, in order
        found[column] = True
        n_samples = len(sample_index(source.samples, samples, source.path))
        carriers = source.iter_carriers(at[column], minor_is_ref[column], chunk_size, samples)
        for variant, sample, dosage in carriers:
            rows_parts.append(sample)
            cols_parts.append(column[variant])
            vals_parts.append(dosage)
    else:
        for chunk in source.iter_chunks(chunk_size=chunk_size, samples=samples):
            n_samples = len(chunk.samples)
            target = position.reindex(chunk.keys.to_numpy()).to_numpy()
            here = np.flatnonzero(~np.isnan(target))
            if not len(here):
                continue
            cols = target[here].astype(np.int64)
            if found[cols].any():
                raise InputDataError(
                    f"rare variant {keys[cols[found[cols]][0]]} occurs twice in {source.path}"
                )
            found[cols] = True
            variant, sample, dosage = block_carriers(chunk.dosages[:, here], minor_is_ref[cols])
            rows_parts.append(sample)
            cols_parts.append(cols[variant])
            vals_parts.append(dosage)
    if n_samples is None:
        raise InputDataError(f"{source.path}: no variants to read rare dosages from")
    if not found.all():
        absent = keys[~found]
        raise InputDataError(
            f"{len(absent)} rare variants are absent from {source.path}: {', '.join(absent[:5])}"
        )
    if rows_parts:
        rows = np.concatenate(rows_parts)
        cols = np.concatenate(cols_parts)
        vals = np.concatenate(vals_parts).astype(np.float32)
        missing = np.isnan(vals)
        vals[missing] = fill[cols[missing]].astype(np.float32)  # the global mean, 2 × maf
    else:
        rows = cols = np.zeros(0, dtype=np.int64)
        vals = np.zeros(0, dtype=np.float32)
    matrix = sp.csr_matrix((vals, (rows, cols)), shape=(n_samples, len(keys)), dtype=np.float32)
    matrix.sum_duplicates()
    matrix.eliminate_zeros()  # a missing call imputed as 0 (a variant with maf 0)
    return matrix
