"""The one in-memory representation of genotypes: a chunk of variants × samples.

Every reader (VCF, BCF, PLINK1 ``.bed``, PLINK2 ``.pgen``) yields :class:`GenotypeChunk` objects,
so the computations in ``frequencies``, ``qc``, ``scoring`` and ``rare`` never see a file format.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.exceptions import GenotypeFormatError, InputDataError

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "VARIANT_COLUMNS",
    "block_carriers",
    "dot_dosages",
    "hardcall_counts",
    "GenotypeChunk",
    "GenotypeSource",
    "normalise_chrom",
    "variant_keys",
]

#: Variants per chunk when a caller does not say (4096 × 10 000 samples × 4 bytes ≈ 160 MB).
DEFAULT_CHUNK_SIZE = 4096

#: Columns of every variant table, in this order.
VARIANT_COLUMNS = ("chrom", "pos", "id", "ref", "alt")

_CHROM_ALIASES = {"23": "X", "24": "Y", "25": "XY", "26": "MT", "M": "MT"}
_VALID_CHROMS = frozenset([str(i) for i in range(1, 23)] + ["X", "Y", "XY", "MT"])
_CHR_PREFIX = re.compile(r"^chr", re.IGNORECASE)


def normalise_chrom(name: str, *, source: str = "") -> str:
    """Normalise a chromosome name: no ``chr`` prefix, ``X``/``Y``/``XY``/``MT``.

    Parameters
    ----------
    name : str
        A name as written in a file: ``"chr1"``, ``"1"``, ``"chrX"``, ``"23"``, ``"chrM"``.
    source : str
        The file the name comes from, for the error message.

    Returns
    -------
    str
        ``"1"`` … ``"22"``, ``"X"``, ``"Y"``, ``"XY"`` or ``"MT"``.

    Raises
    ------
    GenotypeFormatError
        For a name outside the human nuclear and mitochondrial chromosomes (``"chrUn_gl000220"``).
    """
    bare = _CHR_PREFIX.sub("", str(name).strip())
    bare = bare.upper() if bare.upper() in {"X", "Y", "XY", "M", "MT"} else bare
    bare = bare.lstrip("0") if bare.isdigit() and bare != "0" else bare
    bare = _CHROM_ALIASES.get(bare, bare)
    if bare not in _VALID_CHROMS:
        where = f" in {source}" if source else ""
        raise GenotypeFormatError(
            f"unknown chromosome name {name!r}{where}; expected 1-22, X, Y, XY, MT "
            "(optionally with a 'chr' prefix, or PLINK codes 23-26)"
        )
    return bare


def variant_keys(variants: pd.DataFrame) -> pd.Series:
    """The ``chrom:pos:ref:alt`` key of every row of a variant table.

    Parameters
    ----------
    variants : DataFrame
        Columns ``chrom``, ``pos``, ``ref``, ``alt`` (``chrom`` already normalised).

    Returns
    -------
    Series of str, shape (n_variants,)
    """
    keys = [
        f"{c}:{p}:{r}:{a}"
        for c, p, r, a in zip(
            variants["chrom"].tolist(),
            variants["pos"].astype("int64").tolist(),
            variants["ref"].tolist(),
            variants["alt"].tolist(),
            strict=True,
        )
    ]
    return pd.Series(keys, index=variants.index, dtype=object)


@dataclass(frozen=True)
class GenotypeChunk:
    """A block of genotypes: a variant table, ALT-allele dosages and the sample IDs.

    Attributes
    ----------
    variants : DataFrame, shape (n_variants, 5)
        Columns ``chrom`` (str, normalised), ``pos`` (int64), ``id`` (str), ``ref``, ``alt`` (str).
    dosages : ndarray of float32, shape (n_samples, n_variants)
        Count of the ``alt`` allele in [0, 2]; NaN where the genotype is missing.
    samples : ndarray of str, shape (n_samples,)
    """

    variants: pd.DataFrame
    dosages: np.ndarray
    samples: np.ndarray

    def __post_init__(self) -> None:
        if self.dosages.shape != (len(self.samples), len(self.variants)):
            raise ValueError(
                f"dosages of shape {self.dosages.shape} do not match "
                f"{len(self.samples)} samples × {len(self.variants)} variants"
            )

    @property
    def keys(self) -> pd.Series:
        """The ``chrom:pos:ref:alt`` key of each variant."""
        return variant_keys(self.variants)


def check_unique_samples(samples: np.ndarray, source: str) -> None:
    """Raise when a sample ID occurs twice, naming up to five duplicates."""
    values, counts = np.unique(samples, return_counts=True)
    dups = values[counts > 1]
    if len(dups):
        shown = ", ".join(map(str, dups[:5]))
        raise GenotypeFormatError(f"{len(dups)} duplicate sample IDs in {source}: {shown}")


#: id(samples array) → (a weak reference to it, its pd.Index): a reader's sample IDs are looked
#: up once per pass (several per job); hashing 500,000 IDs each time cost ~0.1 s
_LOOKUPS: dict[int, tuple[weakref.ref, pd.Index]] = {}


def _lookup(available: np.ndarray) -> pd.Index:
    """The pd.Index of ``available`` (a reader's sample IDs), built once per array."""
    if not isinstance(available, np.ndarray):
        return pd.Index(available)
    held = _LOOKUPS.get(id(available))
    if held is not None and held[0]() is available:
        return held[1]
    for key in [k for k, (ref, _) in _LOOKUPS.items() if ref() is None]:
        del _LOOKUPS[key]  # arrays gone since
    index = pd.Index(available)
    _LOOKUPS[id(available)] = (weakref.ref(available), index)
    return index


def sample_index(available: np.ndarray, wanted: Sequence[str] | None, source: str) -> np.ndarray:
    """Row indices into ``available`` for the ``wanted`` sample IDs, in the wanted order.

    Raises
    ------
    InputDataError
        When a wanted sample is absent (naming up to five) or listed twice.
    """
    if wanted is None:
        return np.arange(len(available))
    wanted = np.asarray(list(wanted), dtype=str)
    check_unique_samples(wanted, "the requested samples")
    idx = _lookup(available).get_indexer(wanted)
    missing = wanted[idx < 0]
    if len(missing):
        shown = ", ".join(map(str, missing[:5]))
        raise InputDataError(f"{len(missing)} requested samples are absent from {source}: {shown}")
    return idx.astype(np.int64)


class GenotypeSource:
    """Base of the readers: sample IDs plus a chunked iterator over variants.

    Subclasses set ``path`` (a label for messages) and ``samples``. A reader that knows its
    variant table without reading genotypes (PLINK1, PLINK2, BGEN) sets ``variants`` and
    implements :meth:`_chunk_reader`, the reading of one chunk: the chunk loop, :meth:`_blocks`,
    is this class's. A reader that learns its variants as it reads them (VCF/BCF) implements
    :meth:`iter_chunks` instead. Either may override :meth:`iter_selected`,
    :meth:`dosage_dot` and :meth:`iter_counts` with faster versions.
    """

    path: str
    samples: np.ndarray
    #: The full variant table (columns as :attr:`GenotypeChunk.variants`) when it is known
    #: before reading genotypes, else None (VCF/BCF).
    variants: pd.DataFrame | None = None

    def iter_chunks(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[GenotypeChunk]:
        """Yield chunks of at most ``chunk_size`` variants, in file order.

        Parameters
        ----------
        chunk_size : int
            Variants per chunk; memory is ``O(n_samples × chunk_size)``.
        samples : sequence of str, optional
            Sample IDs to keep, in this order (default: all, in file order).

        Notes
        -----
        The base implementation reads every row of :attr:`variants` with
        :meth:`iter_selected`; a reader without a variant table implements this method.
        """
        if self.variants is None:
            raise NotImplementedError(f"{type(self).__name__} reads no chunks")
        return self.iter_selected(np.arange(len(self.variants)), chunk_size, samples)

    def _blocks(
        self,
        index: np.ndarray,
        chunk_size: int,
        samples: Sequence[str] | None,
        dtype: type,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, Any]]:
        """The chunk loop: (positions, dosages, what the reader adds) per chunk of ``index``.

        A chunk holds at most ``chunk_size`` positions of ``index`` (fewer where its buffer
        would pass :data:`CHUNK_BYTES`). Its dosages, of shape (k, n_samples), are a reused
        variant-major buffer of ``dtype`` filled by :meth:`_chunk_reader` (in the reader's
        sample order and encoding of missing calls); the third item is what its ``read``
        returns.
        """
        chunk_size = check_chunk_size(chunk_size)
        n_out = len(sample_index(self.samples, samples, self.path))
        chunk_size = check_chunk_size(chunk_size, n_out, np.dtype(dtype).itemsize)
        buffer = np.empty((min(chunk_size, max(len(index), 1)), n_out), dtype=dtype)
        with self._chunk_reader(samples, dtype, chunk_size) as read:
            for start in range(0, len(index), chunk_size):
                part = index[start : start + chunk_size]
                out = buffer[: len(part)]
                yield part, out, read(part, out)

    def _chunk_reader(
        self, samples: Sequence[str] | None, dtype: type, chunk_size: int
    ) -> AbstractContextManager[Callable[[np.ndarray, np.ndarray], Any]]:
        """The file opened for :meth:`_blocks`: ``read(positions, out)`` reads one chunk.

        ``read`` fills ``out``, shape (len(positions), n_samples), with the dosages of the
        variants at ``positions`` (increasing, each chunk after the last) among ``samples``;
        it may return what the chunk's callers need besides. ``chunk_size`` is the most
        positions one call gets.
        """
        raise NotImplementedError(f"{type(self).__name__} reads no chunk by position")

    def _sample_major(self, samples: Sequence[str] | None) -> Callable[[np.ndarray], np.ndarray]:
        """How a block of :meth:`_blocks` becomes a chunk's dosages.

        Shape (n_samples, k), in the order of ``samples``, NaN where missing; by default the
        block transposed.
        """
        return np.transpose

    def iter_selected(
        self,
        index: np.ndarray,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        samples: Sequence[str] | None = None,
        dtype: type = np.float32,
    ) -> Iterator[GenotypeChunk]:
        """Chunks of only the variants at ``index`` (positions in file order), as ``dtype``.

        Parameters
        ----------
        index : ndarray of int, shape (n_selected,)
            Increasing positions of the wanted variants among all the source's variants (the
            rows of :attr:`variants`, or the concatenated chunks of :meth:`iter_chunks`).
        chunk_size : int
            At most this many selected variants per chunk.
        samples : sequence of str, optional
        dtype : {numpy.float32, numpy.float64}
            Dosage type (float64 for exact sums downstream).

        Notes
        -----
        A reader with a variant table reads the chunks of ``index`` only (:meth:`_blocks`);
        for another the base implementation reads every chunk and keeps the selected columns.
        """
        if self.variants is not None:
            return self._selected_blocks(index, chunk_size, samples, dtype)
        return self._selected_columns(index, chunk_size, samples, dtype)

    def _selected_blocks(
        self, index: np.ndarray, chunk_size: int, samples: Sequence[str] | None, dtype: type
    ) -> Iterator[GenotypeChunk]:
        """:meth:`iter_selected` through :meth:`_blocks` (Fortran-ordered dosages)."""
        index = check_index(index, len(self.variants))
        out_samples = self.samples[sample_index(self.samples, samples, self.path)]
        to_dosages = self._sample_major(samples)
        for part, block, _ in self._blocks(index, chunk_size, samples, dtype):
            yield GenotypeChunk(
                self.variants.iloc[part].reset_index(drop=True),
                to_dosages(block).copy(order="F"),
                out_samples,
            )

    def _selected_columns(
        self, index: np.ndarray, chunk_size: int, samples: Sequence[str] | None, dtype: type
    ) -> Iterator[GenotypeChunk]:
        """:meth:`iter_selected` keeping the selected columns of every chunk read."""
        index = check_index(index)
        offset = 0
        for chunk in self.iter_chunks(chunk_size=chunk_size, samples=samples):
            n = chunk.dosages.shape[1]
            lo, hi = np.searchsorted(index, [offset, offset + n])
            cols = index[lo:hi] - offset
            offset += n
            if len(cols):
                yield GenotypeChunk(
                    chunk.variants.iloc[cols].reset_index(drop=True),
                    chunk.dosages[:, cols].astype(dtype),
                    chunk.samples,
                )

    def dosage_dot(
        self,
        index: np.ndarray,
        coef: np.ndarray,
        fill: np.ndarray | None = None,
        samples: Sequence[str] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per-sample ``Σ_j coef[j] × ALT dosage`` over the variants at ``index``.

        Parameters
        ----------
        index : ndarray of int, shape (n_selected,)
            Strictly increasing variant positions (as for :meth:`iter_selected`).
        coef : ndarray of float64, shape (n_selected,) or (n_selected, n_scores)
        fill : ndarray of float64, shape (n_selected,), optional
            The ALT dosage a missing genotype counts as (NaN allowed where nothing is missing);
            default: the variant's mean ALT dosage over the called ``samples`` (plink2's mean
            imputation).
        samples : sequence of str, optional
        chunk_size : int

        Returns
        -------
        sums : ndarray of float64, shape (n_samples,) or (n_samples, n_scores)
        n_missing : ndarray of int64, shape (n_selected,)
            Missing genotypes per selected variant among ``samples``.
        """
        coef = np.asarray(coef, dtype=np.float64)
        rows = sample_index(self.samples, samples, self.path)
        sums = np.zeros((len(rows), *coef.shape[1:]), dtype=np.float64)
        n_missing = np.zeros(len(coef), dtype=np.int64)
        done = 0
        for chunk in self.iter_selected(index, chunk_size, samples, np.float64):
            k = chunk.dosages.shape[1]
            part = slice(done, done + k)
            add, n_missing[part] = dot_dosages(
                chunk.dosages, coef[part], None if fill is None else fill[part]
            )
            sums += add
            done += k
        return sums, n_missing

    def iter_carriers(
        self,
        index: np.ndarray,
        count_ref: np.ndarray | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        samples: Sequence[str] | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The non-zero allele dosages of the variants at ``index``, as sparse triplets.

        For rare variants, where almost every dosage is 0: a reader that stores such variants
        as their carriers (a hard-call ``.pgen``) yields them without decoding the others.

        Parameters
        ----------
        index : ndarray of int, shape (n_selected,)
            Increasing variant positions (as for :meth:`iter_selected`).
        count_ref : ndarray of bool, shape (n_selected,), optional
            Where true, the REF allele is counted (``2 − ALT dosage``); default: ALT everywhere.
        chunk_size : int
        samples : sequence of str, optional

        Yields
        ------
        variant : ndarray of int64
            Positions in ``index``, in no particular order across the batches.
        sample : ndarray of int64
            Rows in the order of ``samples`` (default: the source's).
        dosage : ndarray of float32
            The counted allele's dosage, non-zero; NaN where the call is missing.
        """
        index = check_index(index)
        count_ref = count_ref_mask(count_ref, len(index))
        done = 0
        for chunk in self.iter_selected(index, chunk_size, samples):
            k = chunk.dosages.shape[1]
            variant, sample, dosage = block_carriers(chunk.dosages, count_ref[done : done + k])
            yield variant + done, sample, dosage
            done += k

    def iter_counts(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray, np.ndarray]]:
        """Per-variant ALT-dosage sums and hard-call genotype counts, chunk by chunk.

        The base implementation reduces :meth:`iter_chunks`; a reader may compute the same
        numbers faster from its own encoding (the PLINK1 reader counts packed bytes).

        Yields
        ------
        variants : DataFrame, shape (n, 5)
        alt_sum : ndarray of float64, shape (n,)
            Sum of the ALT dosages over the called samples.
        counts : ndarray of int64, shape (n, 4)
            Samples whose dosage rounds to 0, 1, 2 ALT alleles (hom REF, het, hom ALT), and
            missing ones.
        """
        for chunk in self.iter_chunks(chunk_size=chunk_size, samples=samples):
            counts, alt_sum = hardcall_counts(chunk.dosages)
            yield chunk.variants, alt_sum, counts

    def sample_missing(
        self, samples: Sequence[str] | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> tuple[np.ndarray, int]:
        """Missing genotypes per sample over all variants (for sample call rates).

        Returns
        -------
        n_missing : ndarray of int64, shape (n_samples,)
            In the order of ``samples`` (default: the source's).
        n_variants : int
        """
        missing = None
        n_variants = 0
        for chunk in self.iter_chunks(chunk_size=chunk_size, samples=samples):
            counts = np.isnan(chunk.dosages).sum(axis=1).astype(np.int64)
            missing = counts if missing is None else missing + counts
            n_variants += chunk.dosages.shape[1]
        if missing is None:
            missing = np.zeros(len(sample_index(self.samples, samples, self.path)), np.int64)
        return missing, n_variants

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, n_samples={len(self.samples)})"


def hardcall_counts(
    dosages: np.ndarray, *, variant_major: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Hard-call counts and ALT sums of a dosage block (dosages rounded, as plink2's hardcalls).

    Parameters
    ----------
    dosages : ndarray, shape (n_samples, n_variants)
        NaN where missing; shape (n_variants, n_samples) with ``variant_major``.
    variant_major : bool
        Whether variants are the rows (a reader's decode buffer, counted without transposing).

    Returns
    -------
    counts : ndarray of int64, shape (n_variants, 4)
        Samples with 0, 1, 2 ALT alleles, and missing ones.
    alt_sum : ndarray of float64, shape (n_variants,)
        Sum of the ALT dosages over the called samples.

    Notes
    -----
    A dosage rounds (half to even, as ``numpy.rint``) to 2 when it is >= 1.5 and to 1 when it
    is in (0.5, 1.5); comparisons on the block replace rounding it (NaN compares false).
    """
    axis = 1 if variant_major else 0
    n_samples = dosages.shape[axis]

    def count(mask: np.ndarray) -> np.ndarray:
        return np.count_nonzero(mask, axis=axis).astype(np.int64)

    missing = count(np.isnan(dosages))
    n2 = count(dosages >= 1.5)
    n1 = count(dosages > 0.5) - n2
    n0 = n_samples - missing - n1 - n2
    alt_sum = dosages.sum(axis=axis, dtype=np.float64)
    gaps = np.flatnonzero(missing)
    if len(gaps):  # only the variants holding a missing dosage need NaN-aware sums
        part = dosages[gaps] if variant_major else dosages[:, gaps]
        alt_sum[gaps] = np.nansum(part, axis=axis, dtype=np.float64)
    return np.stack([n0, n1, n2, missing], axis=1), alt_sum


def check_dot_args(
    index: np.ndarray, coef: np.ndarray, fill: np.ndarray | None, n_variants: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``dosage_dot``'s arguments checked (``coef`` and ``fill`` one row per index) as arrays."""
    index = check_index(index, n_variants)
    coef = np.asarray(coef, dtype=np.float64)
    if coef.shape[:1] != index.shape or (fill is not None and np.shape(fill) != index.shape):
        raise ValueError(f"coef and fill must have {len(index)} rows, like index")
    return index, coef, None if fill is None else np.asarray(fill, dtype=np.float64)


def count_ref_mask(count_ref: np.ndarray | None, n: int) -> np.ndarray:
    """``count_ref`` of :meth:`GenotypeSource.iter_carriers`, checked: ``n`` bools (None: none)."""
    if count_ref is None:
        return np.zeros(n, dtype=bool)
    count_ref = np.asarray(count_ref, dtype=bool)
    if count_ref.shape != (n,):
        raise ValueError(f"count_ref must have {n} entries, like index; got {count_ref.shape}")
    return count_ref


def block_carriers(
    dosages: np.ndarray, count_ref: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(variant, sample, dosage) of the non-zero and missing entries of a dosage block.

    Parameters
    ----------
    dosages : ndarray, shape (n_samples, n_variants)
        ALT dosages, NaN where missing.
    count_ref : ndarray of bool, shape (n_variants,)
        Variants whose REF allele is counted (``2 − ALT``).

    Returns
    -------
    variant, sample : ndarray of int64
    dosage : ndarray of float32
        Non-zero; NaN where missing.
    """
    block = dosages.astype(np.float32, copy=False)
    if count_ref.any():
        block = np.where(count_ref, np.float32(2.0) - block, block)
    sample, variant = np.nonzero(block)  # NaN is non-zero: missing calls are kept
    return variant.astype(np.int64), sample.astype(np.int64), block[sample, variant]


def dot_dosages(
    dosages: np.ndarray, coef: np.ndarray, fill: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``dosages @ coef`` with missing dosages counted as ``fill`` (default: column means).

    Parameters
    ----------
    dosages : ndarray, shape (n_samples, n_variants)
        NaN where missing; a float64 array is zero-filled in place.
    coef : ndarray of float64, shape (n_variants,) or (n_variants, n_scores)
    fill : ndarray of float64, shape (n_variants,), optional
        Value of a missing dosage per variant; default the mean over the called samples.

    Returns
    -------
    sums : ndarray of float64, shape (n_samples,) or (n_samples, n_scores)
    n_missing : ndarray of int64, shape (n_variants,)
    """
    x = dosages if dosages.dtype == np.float64 else dosages.astype(np.float64)
    coef = np.asarray(coef, dtype=np.float64)
    missing = np.isnan(x)
    n_missing = missing.sum(axis=0, dtype=np.int64)
    if n_missing.any():
        x[missing] = 0.0
        if fill is None:
            with np.errstate(invalid="ignore", divide="ignore"):
                fill = x.sum(axis=0) / (x.shape[0] - n_missing)
        fill = np.where(n_missing > 0, np.asarray(fill, dtype=np.float64), 0.0)
        x += missing * fill[None, :]
    return x @ coef, n_missing


def check_index(index: np.ndarray, n_variants: int | None = None) -> np.ndarray:
    """A variant index as int64, checked strictly increasing (and inside ``0..n_variants-1``).

    Raises
    ------
    ValueError
        Naming the rule broken.
    """
    index = np.asarray(index, dtype=np.int64)
    if n_variants is not None and len(index) and (index[0] < 0 or index[-1] >= n_variants):
        raise ValueError(f"variant index outside 0..{n_variants - 1}")
    if len(index) > 1 and (np.diff(index) <= 0).any():
        raise ValueError("variant index must be strictly increasing")
    return index


#: Largest decoded chunk a reader holds (samples × variants × item size), whatever the cohort.
CHUNK_BYTES = 64 << 20


def check_chunk_size(chunk_size: int, n_samples: int = 0, itemsize: int = 4) -> int:
    """Validate a chunk size (a positive int), capped so that one chunk fits :data:`CHUNK_BYTES`.

    Parameters
    ----------
    chunk_size : int
        Variants per chunk asked for.
    n_samples : int
        Samples per variant (0: no cap).
    itemsize : int
        Bytes per decoded value.
    """
    if int(chunk_size) < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if n_samples > 0:
        return max(1, min(int(chunk_size), CHUNK_BYTES // (n_samples * itemsize)))
    return int(chunk_size)


def make_variant_table(
    chrom: Sequence[str],
    pos: Sequence[int],
    ids: Sequence[str],
    ref: Sequence[str],
    alt: Sequence[str],
) -> pd.DataFrame:
    """Build a variant table with the contract's dtypes."""

    def strings(values: Sequence[str]) -> np.ndarray:
        out = np.asarray(values, dtype=object)
        if pd.api.types.infer_dtype(out, skipna=False) == "string":  # str already: no copy
            return out
        return out.astype(str).astype(object)

    return pd.DataFrame(
        {
            "chrom": strings(chrom),
            "pos": np.asarray(pos, dtype=np.int64),
            "id": strings(ids),
            "ref": strings(ref),
            "alt": strings(alt),
        }
    )
