"""Chunked PLINK readers: PLINK1 ``.bed/.bim/.fam`` (numpy, or pandas-plink) and PLINK2 ``.pgen``.

Allele convention, checked against plink2 and the VCF copies of the same data: in a ``.bim`` the
fifth column (PLINK's A1, usually minor) is the ALT allele and the sixth column is REF, exactly as
``plink2 --bfile X --make-pgen`` writes them into the ``.pvar``. Dosages count the ALT allele.

``.bed`` engines. The default, ``engine="numpy"``, memory-maps the ``.bed`` and decodes each chunk
of variants with a 256-entry lookup table (one byte = four 2-bit genotypes); per-variant genotype
counts (:meth:`BedSource.iter_counts`) are popcounts on the packed bytes and never build dosages.
``engine="pandas-plink"`` (the reader the design names) goes through pandas-plink's dask array;
it counts its ``a1`` (the sixth column, REF) by default, so the reader asks it to count ``a0``.
Both give identical chunks (tested); the numpy engine is the default for speed, measured in
BENCHMARKS.md: pandas-plink's import (dask, xarray) alone takes 2-13 s on a loaded machine and
every chunk pays ~0.2 s of dask scheduling, which made allele counts 20-90x slower than
``plink2 --freq``; the numpy engine has no such costs.
"""

from __future__ import annotations

import io
import logging
import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeChunk,
    GenotypeSource,
    check_chunk_size,
    check_unique_samples,
    make_variant_table,
    normalise_chrom,
    sample_index,
)

__all__ = ["BedSource", "PgenSource"]

logger = logging.getLogger(__name__)

_BED_MAGIC = b"\x6c\x1b\x01"
BED_ENGINES = ("numpy", "pandas-plink")

# .bed 2-bit codes: 0b00 hom A1 (2 ALT), 0b01 missing, 0b10 het, 0b11 hom A2 (REF)
_CODE_ALT_DOSAGE = np.array([2.0, np.nan, 1.0, 0.0])
_SHIFTS = np.array([0, 2, 4, 6], dtype=np.uint8)


def _byte_table(dtype: type) -> np.ndarray:
    """For each byte value, the ALT dosages of its four samples packed as one opaque item.

    Indexing this (256,) table of ``V{4*itemsize}`` items by a ``uint8`` array and viewing the
    result as ``dtype`` decodes four samples per byte in a single gather.
    """
    codes = (np.arange(256, dtype=np.uint8)[:, None] >> _SHIFTS) & 3
    table = np.ascontiguousarray(_CODE_ALT_DOSAGE[codes].astype(dtype))  # (256, 4)
    return table.view(f"V{4 * np.dtype(dtype).itemsize}").ravel()


_BYTE_TABLES = {np.dtype(t): _byte_table(t) for t in (np.float32, np.float64)}
_BYTE_CODES = (np.arange(256, dtype=np.uint8)[:, None] >> _SHIFTS) & 3  # (256, 4)
#: ALT dosage of each sample of a byte with missing counted as 0, shape (256, 4).
_BYTE_DOSAGE_0 = np.nan_to_num(_CODE_ALT_DOSAGE)[_BYTE_CODES]
#: 1.0 for each sample of a byte whose genotype is missing, shape (256, 4).
_BYTE_MISSING = (_BYTE_CODES == 1).astype(np.float64)
_MISSING_COUNT_BYTE = (_BYTE_CODES == 1).sum(axis=1)
_CODE_ALT_COUNT = np.array([2, 0, 1, 0], dtype=np.uint8)
#: Per byte value: how many of its first 1-4 samples have each code, shape (256, 4) per entry.
_CODE_COUNTS = [None] + [
    (_BYTE_CODES[:, :v, None] == np.arange(4)).sum(axis=1).astype(np.int64) for v in (1, 2, 3, 4)
]
_EVEN_BITS = np.uint64(0x5555555555555555)


def _normalise_chroms(values: pd.Series, source: str) -> list[str]:
    mapping = {name: normalise_chrom(name, source=source) for name in pd.unique(values)}
    return [mapping[name] for name in values]


def _read_table(path: Path, names: list[str], sep: str, what: str) -> pd.DataFrame:
    try:
        table = pd.read_csv(
            path,
            sep=sep,
            header=None,
            names=names,
            dtype=str,
            comment=None,
            keep_default_na=False,
        )
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise GenotypeFormatError(f"{path}: cannot parse the {what} ({exc})") from exc
    if table.isna().any().any() or (table == "").any().any():
        line = int(np.flatnonzero((table.isna() | (table == "")).any(axis=1))[0]) + 1
        raise GenotypeFormatError(f"{path}: line {line} has fewer than {len(names)} columns")
    return table


class BedSource(GenotypeSource):
    """A PLINK1 binary fileset (SNP-major ``.bed`` with ``.bim`` and ``.fam``).

    Parameters
    ----------
    path : str or Path
        The prefix, or the ``.bed`` path; ``.bim`` and ``.fam`` sit beside it.
    engine : {"numpy", "pandas-plink"}
        How the ``.bed`` is decoded (identical results; see the module docstring).

    Notes
    -----
    Sample IDs are the ``.fam`` IIDs (second column).
    """

    def __init__(self, path: str | Path, *, engine: str = "numpy") -> None:
        if engine not in BED_ENGINES:
            raise ValueError(f"unknown .bed engine {engine!r}; expected one of {BED_ENGINES}")
        self.engine = engine
        prefix = str(path)[:-4] if str(path).endswith(".bed") else str(path)
        self.path = prefix
        self.bed, self.bim, self.fam = (Path(prefix + ext) for ext in (".bed", ".bim", ".fam"))
        for file in (self.bed, self.bim, self.fam):
            if not file.is_file():
                raise GenotypeFormatError(f"PLINK file {file} does not exist")
        bim = _read_table(
            self.bim, ["chrom", "id", "cm", "pos", "a1", "a2"], r"\s+", "variant table (.bim)"
        )
        fam = _read_table(
            self.fam, ["fid", "iid", "father", "mother", "sex", "pheno"], r"\s+", "samples (.fam)"
        )
        try:
            positions = bim["pos"].astype(np.int64)
        except ValueError as exc:
            raise GenotypeFormatError(f"{self.bim}: non-integer position ({exc})") from exc
        self.variants = make_variant_table(
            _normalise_chroms(bim["chrom"], str(self.bim)),
            positions,
            bim["id"],
            bim["a2"],
            bim["a1"],
        )
        self.samples = fam["iid"].to_numpy(dtype=str)
        check_unique_samples(self.samples, str(self.fam))
        n_var, n_samp = len(self.variants), len(self.samples)
        self._bytes_per_variant = (n_samp + 3) // 4
        expected = 3 + n_var * self._bytes_per_variant
        with self.bed.open("rb") as handle:
            magic = handle.read(3)
        if magic != _BED_MAGIC:
            raise GenotypeFormatError(
                f"{self.bed}: not a SNP-major PLINK1 .bed (magic bytes {magic.hex()}, "
                f"expected {_BED_MAGIC.hex()})"
            )
        size = self.bed.stat().st_size
        if size != expected:
            raise GenotypeFormatError(
                f"{self.bed}: {size} bytes, but {n_var} variants in {self.bim.name} × {n_samp} "
                f"samples in {self.fam.name} need {expected}; the .bed/.bim/.fam do not belong "
                "together"
            )

    def iter_chunks(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[GenotypeChunk]:
        """Yield :class:`GenotypeChunk` objects of at most ``chunk_size`` variants.

        With the numpy engine a chunk's dosages are the transpose of a C-ordered
        (n_variants, n_samples) block, i.e. Fortran-ordered (n_samples, n_variants).
        """
        if self.engine == "pandas-plink":
            yield from self._iter_chunks_pandas_plink(chunk_size, samples)
            return
        chunk_size = check_chunk_size(chunk_size)
        rows = None if samples is None else sample_index(self.samples, samples, self.path)
        out_samples = self.samples if rows is None else self.samples[rows]
        for start, packed in self._iter_packed(chunk_size):
            block = _decode(packed, len(self.samples), rows, np.float32)
            yield GenotypeChunk(
                self.variants.iloc[start : start + len(packed)].reset_index(drop=True),
                block.T,
                out_samples,
            )

    def iter_selected(
        self,
        index: np.ndarray,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        samples: Sequence[str] | None = None,
        dtype: type = np.float32,
    ) -> Iterator[GenotypeChunk]:
        """Chunks of the variants at ``index`` only, decoded straight into ``dtype``.

        See :meth:`GenotypeSource.iter_selected`; the numpy engine reads only the selected
        variants' bytes.
        """
        if self.engine == "pandas-plink":
            yield from super().iter_selected(index, chunk_size, samples, dtype)
            return
        chunk_size = check_chunk_size(chunk_size)
        index = self._check_index(index)
        rows = None if samples is None else sample_index(self.samples, samples, self.path)
        out_samples = self.samples if rows is None else self.samples[rows]
        bed = self._memmap()
        for start in range(0, len(index), chunk_size):
            part = index[start : start + chunk_size]
            packed = bed[part] if bed is not None else np.zeros((len(part), 0), np.uint8)
            block = _decode(packed, len(self.samples), rows, dtype)
            yield GenotypeChunk(
                self.variants.iloc[part].reset_index(drop=True), block.T, out_samples
            )

    def dosage_dot(
        self,
        index: np.ndarray,
        coef: np.ndarray,
        fill: np.ndarray | None = None,
        samples: Sequence[str] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``Σ_j coef[j] × ALT dosage`` per sample, computed on the packed bytes.

        See :meth:`GenotypeSource.dosage_dot`. No dosage matrix is built: for each byte
        column (four samples) the coefficients are summed per byte value (a weighted
        histogram, ``np.bincount``), and the histogram times the byte → dosages table gives
        the sums; missing genotypes (rare) are found from the bytes and added one by one.
        For a sample subset the same is done on 2-bit codes per sample.
        """
        if self.engine == "pandas-plink":
            return super().dosage_dot(index, coef, fill, samples, chunk_size)
        chunk_size = check_chunk_size(chunk_size)
        index = self._check_index(index)
        coef = np.asarray(coef, dtype=np.float64)
        if coef.shape != index.shape or (fill is not None and np.shape(fill) != index.shape):
            raise ValueError(f"coef and fill must have the shape of index {index.shape}")
        rows = None if samples is None else sample_index(self.samples, samples, self.path)
        n = len(self.samples)
        n_out = n if rows is None else len(rows)
        n_missing = np.zeros(len(index), dtype=np.int64)
        bed = self._memmap()
        if bed is None or n_out == 0 or len(index) == 0:
            return np.zeros(n_out, dtype=np.float64), n_missing
        width = self._bytes_per_variant
        cells_per_row = 256 if rows is None else 4  # byte values, or 2-bit codes
        n_cells = width if rows is None else n_out
        hist = np.zeros(n_cells * cells_per_row, dtype=np.float64)
        base = (np.arange(n_cells, dtype=np.intp) * cells_per_row)[:, None]  # subset only
        missing_sum = np.zeros(n_cells * (256 if rows is None else 1), dtype=np.float64)
        for start in range(0, len(index), chunk_size):
            part = slice(start, start + len(index[start : start + chunk_size]))
            packed = bed[index[part]]
            if rows is None:
                j, col, value, count, alt = _scan_packed(packed, n, alt=fill is None)
                positions = col * 256 + value  # into the histogram of missing-holding bytes
                miss = np.bincount(j, weights=count, minlength=len(packed)).astype(np.int64)
            else:
                codes = _codes(packed, rows)
                cells = np.ascontiguousarray(codes.T)  # (n_out, b): 2-bit codes
                alt = _CODE_ALT_COUNT[codes].sum(axis=1, dtype=np.int64)
                positions, j = np.nonzero(cells == 1)
                miss = np.bincount(j, minlength=codes.shape[0])
            n_missing[part] = miss
            c = coef[part]
            if rows is None:
                _add_byte_histogram(hist, packed, c)
            else:
                hist += np.bincount(
                    (base + cells).ravel(),
                    weights=np.broadcast_to(c, cells.shape).ravel(),
                    minlength=len(hist),
                )
            if len(positions):
                with np.errstate(invalid="ignore", divide="ignore"):
                    imputed = alt / (n_out - miss) if fill is None else np.asarray(fill)[part]
                missing_sum += np.bincount(
                    positions, weights=(c * imputed)[j], minlength=len(missing_sum)
                )
        if rows is None:
            sums = (hist.reshape(width, 256) @ _BYTE_DOSAGE_0).ravel()[:n]
            sums += (missing_sum.reshape(width, 256) @ _BYTE_MISSING).ravel()[:n]
        else:
            sums = hist.reshape(n_out, 4) @ np.array([2.0, 0.0, 1.0, 0.0]) + missing_sum
        return sums, n_missing

    def _check_index(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64)
        if len(index) and (index[0] < 0 or index[-1] >= len(self.variants)):
            raise ValueError(f"variant index outside 0..{len(self.variants) - 1}")
        if len(index) > 1 and (np.diff(index) <= 0).any():
            raise ValueError("variant index must be strictly increasing")
        return index

    def _memmap(self) -> _PackedBed | None:
        """The packed genotypes, shape (n_variants, bytes_per_variant); None when empty."""
        if len(self.variants) == 0 or self._bytes_per_variant == 0:
            return None
        return _PackedBed(self.bed, len(self.variants), self._bytes_per_variant)

    def iter_counts(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray, np.ndarray]]:
        """Per-variant ALT dosage sums and hard-call counts, from the packed bytes.

        See :meth:`GenotypeSource.iter_counts`; no dosage matrix is built (popcounts over all
        samples, or a 2-bit code gather for a subset).
        """
        if self.engine == "pandas-plink":
            yield from super().iter_counts(chunk_size, samples)
            return
        chunk_size = check_chunk_size(chunk_size)
        rows = None if samples is None else sample_index(self.samples, samples, self.path)
        n_samp = len(self.samples)
        for start, packed in self._iter_packed(chunk_size):
            if rows is None:
                counts = _packed_counts(packed, n_samp)
            else:
                codes = _codes(packed, rows)
                counts = np.stack(
                    [(codes == c).sum(axis=1, dtype=np.int64) for c in (3, 2, 0, 1)], axis=1
                )
            variants = self.variants.iloc[start : start + len(packed)].reset_index(drop=True)
            alt_sum = (2 * counts[:, 2] + counts[:, 1]).astype(np.float64)
            yield variants, alt_sum, counts

    def _iter_packed(self, chunk_size: int) -> Iterator[tuple[int, np.ndarray]]:
        """(first variant index, packed bytes of shape (n, bytes_per_variant)) per chunk."""
        n_var = len(self.variants)
        bed = self._memmap()
        for start in range(0, n_var, chunk_size):
            if bed is None:  # no samples: nothing to map
                yield start, np.zeros((min(chunk_size, n_var - start), 0), dtype=np.uint8)
            else:
                yield start, bed[start : start + chunk_size]

    def _iter_chunks_pandas_plink(
        self, chunk_size: int, samples: Sequence[str] | None
    ) -> Iterator[GenotypeChunk]:
        os.environ.setdefault("DISABLE_PANDERA_IMPORT_WARNING", "True")
        from pandas_plink import Chunk, read_plink1_bin

        chunk_size = check_chunk_size(chunk_size)
        rows = sample_index(self.samples, samples, self.path)
        out_samples = self.samples[rows]
        data = read_plink1_bin(
            str(self.bed),
            str(self.bim),
            str(self.fam),
            verbose=False,
            ref="a0",
            chunk=Chunk(nsamples=None, nvariants=chunk_size),
        ).data  # dask array, shape (n_samples, n_variants), counts bim column 5 (ALT)
        all_rows = samples is None
        for start in range(0, len(self.variants), chunk_size):
            stop = min(start + chunk_size, len(self.variants))
            block = np.asarray(data[:, start:stop].compute(scheduler="synchronous"), np.float32)
            if not all_rows:
                block = block[rows]
            yield GenotypeChunk(
                self.variants.iloc[start:stop].reset_index(drop=True), block, out_samples
            )


class _PackedBed:
    """A read-only memory map of a ``.bed``'s genotype bytes that does not pile up in RSS.

    ``bed[rows]`` copies the rows (a slice or an index array) out of the map and then drops the
    mapped pages from this process (``madvise(MADV_DONTNEED)``; they stay in the page cache),
    so peak memory stays at one chunk however many variants are read.
    """

    def __init__(self, path: Path, n_variants: int, width: int) -> None:
        with path.open("rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self._array = np.frombuffer(self._map, dtype=np.uint8, count=n_variants * width, offset=3)
        self._array = self._array.reshape(n_variants, width)

    def __getitem__(self, rows: slice | np.ndarray) -> np.ndarray:
        out = np.array(self._array[rows])
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)
        return out


def _codes(packed: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """2-bit genotype codes of the samples ``rows``, shape (n_variants, len(rows)), uint8."""
    return (packed[:, rows // 4] >> _SHIFTS[rows % 4]) & np.uint8(3)


def _decode(packed: np.ndarray, n_samples: int, rows: np.ndarray | None, dtype: type) -> np.ndarray:
    """ALT dosages (NaN missing) of shape (n_variants, n_samples or len(rows)), C-ordered."""
    if rows is not None:
        return _CODE_ALT_DOSAGE.astype(dtype)[_codes(packed, rows)]
    table = _BYTE_TABLES[np.dtype(dtype)]
    flat = table[packed].view(dtype).reshape(len(packed), -1)
    return flat if flat.shape[1] == n_samples else flat[:, :n_samples]


_TILE = 64  # byte columns per histogram tile: 64 × 256 × 8 bytes stay in the L2 cache


def _add_byte_histogram(hist: np.ndarray, packed: np.ndarray, coef: np.ndarray) -> None:
    """``hist[col * 256 + byte] += coef[row]`` for every byte ``packed[row, col]``, in place.

    Runs over tiles of byte columns so that the part of ``hist`` being updated stays in cache.
    """
    width = packed.shape[1]
    offsets = (np.arange(_TILE, dtype=np.intp) * 256)[None, :]
    weights = np.repeat(coef, _TILE)
    for start in range(0, width, _TILE):
        stop = min(width, start + _TILE)
        span = stop - start
        cells = (packed[:, start:stop] + offsets[:, :span]).ravel()
        w = weights if span == _TILE else np.repeat(coef, span)
        hist[start * 256 : stop * 256] += np.bincount(cells, weights=w, minlength=span * 256)


def _scan_packed(
    packed: np.ndarray, n_samples: int, alt: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Missing genotypes and ALT counts of packed rows of shape (n, width), on 64-bit words.

    Copies the rows into whole words with the padding bits cleared, flags the missing code
    (0b01: low bit set, high bit clear), and looks into flagged words only.

    Returns
    -------
    row, col : ndarray of int64, shape (m,)
        Position of each byte that holds a missing genotype.
    value : ndarray of uint8, shape (m,)
        That byte (padding bits cleared).
    count : ndarray of int64, shape (m,)
        Missing genotypes in it.
    alt_count : ndarray of int64, shape (n,), or None
        With ``alt``: ALT alleles over the called samples per row; zeros when nothing is
        missing (then no imputation needs them).
    """
    n_rows, width = packed.shape
    words = np.zeros((n_rows, -(-width // 8) * 8), dtype=np.uint8)
    words[:, :width] = packed
    if n_samples % 4:
        words[:, width - 1] &= np.uint8((1 << (2 * (n_samples % 4))) - 1)
    x = words.view(np.uint64)
    flags = x & ~(x >> np.uint64(1)) & _EVEN_BITS
    row, word = np.nonzero(flags)
    in_word, byte = np.nonzero(flags[row, word].view(np.uint8).reshape(-1, 8))
    row = row[in_word]
    col = word[in_word] * 8 + byte
    value = words[row, col]
    count = _MISSING_COUNT_BYTE[value].astype(np.int64)
    alt_count = None
    if alt:  # only needed to impute missing genotypes
        alt_count = np.zeros(n_rows, dtype=np.int64)
    if alt and len(row):
        counts = _packed_counts(packed, n_samples)
        alt_count = 2 * counts[:, 2] + counts[:, 1]
    return row, col, value, count, alt_count


def _packed_counts(packed: np.ndarray, n_samples: int) -> np.ndarray:
    """Counts of (hom REF, het, hom ALT, missing) per variant, shape (n_variants, 4), int64.

    A histogram of byte values per row (``np.bincount``) times the per-byte code counts; the
    last byte of a row counts only its real samples (not the padding bits).
    """
    n_var, width = packed.shape
    if width == 0:
        return np.zeros((n_var, 4), dtype=np.int64)
    counts = _CODE_COUNTS[n_samples - 4 * (width - 1)][packed[:, -1]]  # the last byte
    step = max(1, (1 << 22) // width)  # rows per block: ≤ 32 MiB of bincount indices
    for start in range(0, n_var, step):
        block = packed[start : start + step, :-1]
        offsets = (np.arange(len(block), dtype=np.intp) * 256)[:, None]
        hist = np.bincount((block + offsets).ravel(), minlength=len(block) * 256)
        counts[start : start + step] += hist.reshape(len(block), 256) @ _CODE_COUNTS[4]
    return counts[:, [3, 2, 0, 1]]  # codes 0b11 hom REF, 0b10 het, 0b00 hom ALT, 0b01 missing


def _read_pvar(path: Path) -> pd.DataFrame:
    if path.suffix == ".zst":
        import zstandard

        with path.open("rb") as raw:
            text = zstandard.ZstdDecompressor().stream_reader(raw).read().decode()
    else:
        text = path.read_text()
    lines = text.splitlines()
    header_at = next((i for i, ln in enumerate(lines) if not ln.startswith("##")), len(lines))
    if header_at < len(lines) and lines[header_at].startswith("#CHROM"):
        names = lines[header_at][1:].split("\t")
        body = "\n".join(lines[header_at + 1 :])
        table = pd.read_csv(io.StringIO(body), sep="\t", header=None, names=names, dtype=str)
        table = table.rename(
            columns={"CHROM": "chrom", "POS": "pos", "ID": "id", "REF": "ref", "ALT": "alt"}
        )
    else:  # headerless .pvar = .bim layout
        body = "\n".join(lines[header_at:])
        table = pd.read_csv(
            io.StringIO(body),
            sep=r"\s+",
            header=None,
            dtype=str,
            names=["chrom", "id", "cm", "pos", "alt", "ref"],
        )
    missing = {"chrom", "pos", "id", "ref", "alt"} - set(table.columns)
    if missing:
        raise GenotypeFormatError(f"{path}: missing columns {sorted(missing)}")
    return table


def _read_psam(path: Path) -> np.ndarray:
    first = path.read_text().split("\n", 1)[0]
    if first.startswith("#"):
        table = pd.read_csv(path, sep="\t", dtype=str)
        table.columns = [c.lstrip("#") for c in table.columns]
        if "IID" not in table.columns:
            raise GenotypeFormatError(f"{path}: no IID column in the header {list(table.columns)}")
        return table["IID"].to_numpy(dtype=str)
    table = pd.read_csv(path, sep=r"\s+", header=None, dtype=str)
    return table[1].to_numpy(dtype=str)  # .fam layout


class PgenSource(GenotypeSource):
    """A PLINK2 fileset (``.pgen``, ``.pvar``/``.pvar.zst``, ``.psam``/``.fam``) read with pgenlib.

    Dosages come from ``read_dosages_range`` (ALT allele; hardcalls where no dosage is stored).

    Parameters
    ----------
    path : str or Path
        The prefix or the ``.pgen`` path.
    multiallelic : {"error", "exclude"}
    """

    def __init__(self, path: str | Path, *, multiallelic: str = "error") -> None:
        prefix = str(path)[:-5] if str(path).endswith(".pgen") else str(path)
        self.path = prefix
        self.pgen = Path(prefix + ".pgen")
        if not self.pgen.is_file():
            raise GenotypeFormatError(f"PLINK2 file {self.pgen} does not exist")
        pvar = next(
            (
                Path(prefix + e)
                for e in (".pvar", ".pvar.zst", ".bim")
                if Path(prefix + e).is_file()
            ),
            None,
        )
        psam = next(
            (Path(prefix + e) for e in (".psam", ".fam") if Path(prefix + e).is_file()), None
        )
        if pvar is None or psam is None:
            raise GenotypeFormatError(
                f"{self.pgen}: no .pvar[.zst]/.bim or no .psam/.fam beside it"
            )
        table = _read_pvar(pvar)
        multi = table["alt"].str.contains(",", regex=False)
        table_all_commas = table["alt"].str.count(",").to_numpy(dtype=np.int64)
        if multi.any():
            row = table[multi].iloc[0]
            if multiallelic == "error":
                raise GenotypeFormatError(
                    f"{pvar}: multi-allelic variant {row['chrom']}:{row['pos']} {row['id']} "
                    f"{row['ref']}>{row['alt']}; exclude multi-allelic variants or split them"
                )
            logger.warning("%s: excluded %d multi-allelic variants", pvar, int(multi.sum()))
        self.excluded = table.loc[multi, ["chrom", "pos", "id", "ref", "alt"]].assign(
            reason="multiallelic"
        )
        self._keep = np.flatnonzero(~multi.to_numpy())
        table = table[~multi]
        self.variants = make_variant_table(
            _normalise_chroms(table["chrom"], str(pvar)),
            table["pos"].astype(np.int64),
            table["id"],
            table["ref"],
            table["alt"],
        )
        self.samples = _read_psam(psam)
        check_unique_samples(self.samples, str(psam))
        self._n_raw_variants = len(multi)
        self._allele_offsets = None
        if multi.any():  # pgenlib needs the allele count of every variant
            n_alleles = 2 + table_all_commas
            self._allele_offsets = np.concatenate([[0], np.cumsum(n_alleles)]).astype(np.uintp)

    def iter_chunks(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[GenotypeChunk]:
        """Yield :class:`GenotypeChunk` objects of at most ``chunk_size`` variants."""
        return self._read(np.arange(len(self._keep)), chunk_size, samples, np.float32)

    def iter_selected(
        self,
        index: np.ndarray,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        samples: Sequence[str] | None = None,
        dtype: type = np.float32,
    ) -> Iterator[GenotypeChunk]:
        """Chunks of the variants at ``index`` only (see :meth:`GenotypeSource.iter_selected`)."""
        index = np.asarray(index, dtype=np.int64)
        if len(index) and (index[0] < 0 or index[-1] >= len(self.variants)):
            raise ValueError(f"variant index outside 0..{len(self.variants) - 1}")
        if len(index) > 1 and (np.diff(index) <= 0).any():
            raise ValueError("variant index must be strictly increasing")
        return self._read(index, chunk_size, samples, dtype)

    def _read(
        self, positions: np.ndarray, chunk_size: int, samples: Sequence[str] | None, dtype: type
    ) -> Iterator[GenotypeChunk]:
        """Chunks of the kept variants at ``positions`` (a generator: opens the file lazily)."""
        import pgenlib

        chunk_size = check_chunk_size(chunk_size)
        rows = sample_index(self.samples, samples, self.path)
        try:
            reader = pgenlib.PgenReader(
                bytes(self.pgen),
                raw_sample_ct=len(self.samples),
                allele_idx_offsets=self._allele_offsets,
            )
        except RuntimeError as exc:
            raise GenotypeFormatError(f"{self.pgen}: cannot open ({exc})") from exc
        if reader.get_variant_ct() != self._n_raw_variants:
            raise GenotypeFormatError(
                f"{self.pgen}: {reader.get_variant_ct()} variants, but the variant table lists "
                f"{self._n_raw_variants}"
            )
        out_samples, all_rows = self.samples[rows], samples is None
        try:
            for start in range(0, len(positions), chunk_size):
                part = positions[start : start + chunk_size]
                index = self._keep[part].astype(np.uint32)
                buf = np.empty((len(index), len(self.samples)), dtype=np.float32)
                reader.read_dosages_list(index, buf)
                block = np.ascontiguousarray(buf.T) if all_rows else buf.T[rows]
                block[block == -9] = np.nan
                yield GenotypeChunk(
                    self.variants.iloc[part].reset_index(drop=True),
                    block if dtype == np.float32 else block.astype(dtype),
                    out_samples,
                )
        finally:
            reader.close()
