"""Kernels on pgenlib's reads: block products and carrier lists.

Used by the PLINK readers (:mod:`rvfedprs.genotypes.plink`). A decoded block is added to
per-sample sums by one matrix product (:func:`product_adder`). A variant that a hard-call
``.pgen`` stores as the list of its carriers (plink2's "difflist" against a common genotype,
how it writes most rare variants) is read as that list (:func:`carrier_lists`), and only its
carriers are touched: added to sums (:func:`add_sparse_products`) or kept as sparse entries
(``iter_carriers``). Sums are float64 and equal a dense numpy product to rounding (tested).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

__all__ = [
    "INPLACE_MIN_CELLS",
    "PGENLIB_MISSING",
    "SPARSE_BATCH",
    "add_sparse_products",
    "calls_as_dosages",
    "carrier_lists",
    "nonzero_cells",
    "product_adder",
    "stored_as_lists",
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


def stored_as_lists(reader, raw: Sequence[int], allele: Sequence[int] | None = None) -> np.ndarray:
    """Whether pgenlib reads each ``raw`` variant as a carrier list for its counted ``allele``.

    ``allele`` as in :func:`carrier_lists` (default: ALT everywhere). A ``.bed`` has none.
    """
    alleles = [1] * len(raw) if allele is None else allele
    return np.fromiter(map(reader.has_sparse, raw, alleles), dtype=bool, count=len(raw))


def carrier_lists(
    reader, raw: Sequence[int], allele: Sequence[int] | None = None
) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Read variants stored as carrier lists, in batches of about :data:`SPARSE_BATCH` entries.

    Parameters
    ----------
    reader : pgenlib.PgenReader
        Open on the file, with the sample subset wanted.
    raw : sequence of int
        Raw variant indices, each one pgenlib reads sparse for its ``allele`` (``has_sparse``).
    allele : sequence of int, optional
        Per variant, the allele counted: 1 (ALT; the list is against hom REF, the default) or
        0 (REF; the list is against hom ALT).

    Yields
    ------
    start, stop : int
        The batch's variants are ``raw[start:stop]``.
    variant : ndarray of int64
        Per entry, its variant's position in the batch (0 .. stop − start − 1).
    sample : ndarray of uint32
        Per entry, the sample's position in the reader's subset.
    call : ndarray of int8
        Per entry, the counted allele's count (1 or 2), or -9 where the call is missing.
    """
    read = reader.read_sparse8
    alleles = [1] * len(raw) if allele is None else allele
    ids: list[np.ndarray] = []
    calls: list[np.ndarray] = []
    held = start = 0
    for i, (variant, counted) in enumerate(zip(raw, alleles, strict=True)):
        who, call = read(variant, counted)
        ids.append(who)
        calls.append(call)
        held += len(who)
        if held >= SPARSE_BATCH or i == len(raw) - 1:
            lengths = [len(c) for c in calls]
            var = np.repeat(np.arange(i + 1 - start), lengths)
            yield start, i + 1, var, np.concatenate(ids), np.concatenate(calls)
            ids, calls, held, start = [], [], 0, i + 1


def calls_as_dosages(call: np.ndarray) -> np.ndarray:
    """Int8 allele counts from pgenlib as float32 dosages, NaN where missing (-9)."""
    dosage = call.astype(np.float32)
    dosage[call == PGENLIB_MISSING] = np.nan
    return dosage


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
    for start, stop, var, who, call in carrier_lists(reader, raw.tolist()):
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
    return n_missing


def nonzero_cells(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of the non-zero cells of a C-contiguous int8 block, as ``numpy.nonzero``.

    Tests 8 cells at a time (the block's bytes read as 64-bit words) and looks inside only
    the non-zero words: ~10x faster than ``numpy.nonzero`` on a block of rare variants' codes.
    """
    if block.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    flat = block.reshape(-1)
    full = len(flat) // 8 * 8
    words = np.flatnonzero(flat[:full].view(np.uint64))
    cells = (words[:, None] * 8 + np.arange(8)).ravel()
    cells = np.concatenate([cells[flat[cells] != 0], np.flatnonzero(flat[full:]) + full])
    return np.divmod(cells, block.shape[1])
