"""Kernels that add ``coef × ALT dosage`` products of pgenlib reads to per-sample sums.

Used by the PLINK readers' ``dosage_dot`` (:mod:`rvfedprs.genotypes.plink`): a decoded block
is added by one matrix product (:func:`product_adder`), a variant stored as its carriers only by
touching those carriers (:func:`add_sparse_products`). Sums are float64 and equal a dense
numpy product to rounding (tested).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "INPLACE_MIN_CELLS",
    "PGENLIB_MISSING",
    "SPARSE_BATCH",
    "add_sparse_products",
    "product_adder",
]

PGENLIB_MISSING = -9  # pgenlib's code for a missing genotype or dosage
#: (blocks × samples) from which :func:`product_adder` adds each block's product with BLAS
#: ``dgemv`` (beta = 1: added in place) instead of ``sums += x.T @ coef``, which writes the
#: product and then passes over the samples again to add it. Blocks of a few variants make
#: that second pass the cost: 30,000 variants × 100,000 samples take 0.69 s instead of 1.11 s,
#: paying for the 0.10-0.14 s import of ``scipy.linalg`` from about 2 × 10^8 (blocks × samples)
#: on.
INPLACE_MIN_CELLS = 400_000_000
#: Carrier entries gathered from sparse records before they are added to the sums (one
#: ``bincount`` per batch; keeps the memory flat in the number of variants).
SPARSE_BATCH = 1 << 20


def product_adder(sums: np.ndarray, n_blocks: int) -> Callable[[np.ndarray, np.ndarray], None]:
    """``add(x, c)`` doing ``sums += x.T @ c`` for ``n_blocks`` blocks (``sums`` Fortran-ordered).

    By BLAS ``dgemv`` with beta = 1 (one pass over the samples per block and score) when
    ``n_blocks × samples`` reaches :data:`INPLACE_MIN_CELLS`, by numpy below it.
    """
    if n_blocks * len(sums) < INPLACE_MIN_CELLS:

        def add(x: np.ndarray, c: np.ndarray) -> None:
            np.add(sums, x.T @ c, out=sums)

        return add
    from scipy.linalg.blas import dgemv

    columns = [sums] if sums.ndim == 1 else [sums[:, s] for s in range(sums.shape[1])]

    def add_inplace(x: np.ndarray, c: np.ndarray) -> None:
        c = c.reshape(len(c), -1)
        for s, column in enumerate(columns):
            out = dgemv(1.0, x.T, c[:, s], beta=1.0, y=column, overwrite_y=1)
            if out is not column:  # f2py copied (it should not for a contiguous float64 y)
                column[:] = out

    return add_inplace


def add_sparse_products(
    reader,
    raw: np.ndarray,
    coef: np.ndarray,
    fill: np.ndarray | None,
    sums: np.ndarray,
) -> np.ndarray:
    """Add ``coef × ALT dosage`` of variants stored sparse to ``sums``; missing calls per variant.

    Each ``raw`` variant must be one pgenlib reads sparse (``has_sparse``: a hard-call record
    stored as the list of samples that differ from hom REF). Only those carriers are touched:
    the record's het, hom ALT and missing calls, the missing ones imputed as in
    :meth:`rvfedprs.genotypes.plink.PgenSource.dosage_dot` (``fill``, or the mean ALT dosage of
    the called samples).

    Parameters
    ----------
    reader : pgenlib.PgenReader
        Open on the file, with the sample subset the sums are for.
    raw : ndarray of int, shape (n,)
        Raw variant indices in the file.
    coef : ndarray of float64, shape (n,) or (n, n_scores)
    fill : ndarray of float64, shape (n,), optional
    sums : ndarray of float64, shape (n_samples,) or (n_samples, n_scores)
        Added to in place.

    Returns
    -------
    ndarray of int64, shape (len(raw),)
        Missing calls per variant.
    """
    n_out = len(sums)
    n_missing = np.zeros(len(raw), dtype=np.int64)
    columns = [sums] if sums.ndim == 1 else [sums[:, s] for s in range(sums.shape[1])]
    coef = coef.reshape(len(coef), -1)
    ids: list[np.ndarray] = []
    calls: list[np.ndarray] = []
    held = start = 0

    def flush(stop: int) -> None:
        var = np.repeat(np.arange(stop - start), [len(c) for c in calls])
        who = np.concatenate(ids)
        call = np.concatenate(calls)  # int8: 1 (het), 2 (hom ALT) or -9 (missing)
        gap = np.flatnonzero(call == PGENLIB_MISSING)
        gap_var = var[gap]
        miss = np.bincount(gap_var, minlength=stop - start)
        n_missing[start:stop] = miss
        if len(gap) and fill is None:  # mean ALT dosage of the called samples (others are 0)
            called = np.bincount(var, weights=call, minlength=len(miss)) + miss * -PGENLIB_MISSING
            with np.errstate(invalid="ignore", divide="ignore"):
                value = called / (n_out - miss)
        elif len(gap):
            value = fill[start:stop]
        for s, column in enumerate(columns):
            c = coef[start:stop, s]
            weights = c[var]
            weights *= call
            if len(gap):
                weights[gap] = value[gap_var] * c[gap_var]
            column += np.bincount(who, weights=weights, minlength=n_out)

    read = reader.read_sparse8
    for i, variant in enumerate(raw.tolist()):
        who, call = read(variant)
        ids.append(who)
        calls.append(call)
        held += len(who)
        if held >= SPARSE_BATCH:
            flush(i + 1)
            ids, calls, held, start = [], [], 0, i + 1
    if start < len(raw):
        flush(len(raw))
    return n_missing
