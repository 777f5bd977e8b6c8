"""Chunked PLINK readers on pgenlib: PLINK1 ``.bed/.bim/.fam`` and PLINK2 ``.pgen``.

Allele convention, checked against plink2 and the VCF copies of the same data: in a ``.bim`` the
fifth column (PLINK's A1, usually minor) is the ALT allele and the sixth column is REF, exactly as
``plink2 --bfile X --make-pgen`` writes them into the ``.pvar``. Dosages count the ALT allele.

Both formats are decoded by pgenlib (plink2's own reader, compiled): a ``.bed`` is a ``.pgen`` in
its PLINK1 storage mode, opened with its sample count. Genotype counts come from pgenlib's
``count`` (plink2's SIMD genotype counter; hard calls), dosages from ``read_dosages_list`` into
float buffers, per-sample missingness from ``read_range``'s int8 codes. A PRS
(``dosage_dot``) and the rare variants' sparse dosages (``iter_carriers``) over a hard-call
``.pgen`` read the variants plink2 stored as carrier lists (most rare ones) as those lists
(``read_sparse8``) and decode only the others (see :mod:`rvfedprs.genotypes.kernels`). A
``.pgen`` that stores dosages (8-bit variant types) has its ALT sums and counts taken from the
dosages instead.
``BedSource(path, engine="pandas-plink")`` decodes the chunks through pandas-plink's dask array
instead (the reader the design first named; 10-100x slower, see BENCHMARKS.md), into pgenlib's
layout: everything else is shared, so both engines give identical results (tested).
"""

from __future__ import annotations

import io
import logging
import os
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeSource,
    check_chunk_size,
    check_dot_args,
    check_index,
    check_unique_samples,
    count_ref_mask,
    make_variant_table,
    normalise_chrom,
    sample_index,
)
from rvfedprs.genotypes.kernels import (
    PGENLIB_MISSING,
    add_sparse_products,
    calls_as_dosages,
    carrier_lists,
    nonzero_cells,
    product_adder,
    stored_as_lists,
)

__all__ = ["BedSource", "PgenSource"]

logger = logging.getLogger(__name__)

_BED_MAGIC = b"\x6c\x1b\x01"
BED_ENGINES = ("pgenlib", "pandas-plink")
#: Decoded block of :meth:`_PgenlibSource.dosage_dot`: small enough to stay in the CPU cache
#: between pgenlib's decode and the matrix product (2-3.5x faster than 64 MiB blocks that go
#: through main memory; BENCHMARKS.md, "Every input format").
_DOT_BLOCK_BYTES = 4 << 20


def _normalise_chroms(values: pd.Series, source: str) -> list[str]:
    mapping = {name: normalise_chrom(name, source=source) for name in pd.unique(values)}
    return [mapping[name] for name in values]


def _positions(values: pd.Series, path: Path) -> np.ndarray:
    try:
        return values.to_numpy().astype(np.int64)
    except (ValueError, TypeError) as exc:
        raise GenotypeFormatError(f"{path}: non-integer position ({exc})") from exc


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
    short = table.isna().any(axis=1).to_numpy()  # whitespace-separated: no empty fields
    if short.any():
        line = int(np.flatnonzero(short)[0]) + 1
        raise GenotypeFormatError(f"{path}: line {line} has fewer than {len(names)} columns")
    return table


def _meta_lines(lines: Iterable[str]) -> tuple[int, str]:
    """(number of leading ``##`` lines, the first line after them or "")."""
    n_meta = 0
    for line in lines:
        if not line.startswith("##"):
            return n_meta, line
        n_meta += 1
    return n_meta, ""


def _read_pvar(path: Path) -> pd.DataFrame:
    """The variant columns of a ``.pvar`` (``##`` meta lines, ``#CHROM`` header) or a ``.bim``."""
    if path.suffix == ".zst":
        import zstandard

        with path.open("rb") as raw:
            text = zstandard.ZstdDecompressor().stream_reader(raw).read().decode()
        source: Path | io.StringIO = io.StringIO(text)
        n_meta, first = _meta_lines(io.StringIO(text))
    else:
        source = path
        with path.open() as handle:
            n_meta, first = _meta_lines(handle)
    if first.startswith("#CHROM"):
        names = first[1:].rstrip("\r\n").split("\t")
        renamed = {"CHROM": "chrom", "POS": "pos", "ID": "id", "REF": "ref", "ALT": "alt"}
        missing = {"CHROM", "POS", "ID", "REF", "ALT"} - set(names)
        if missing:
            raise GenotypeFormatError(f"{path}: missing columns {sorted(missing)}")
        table = pd.read_csv(
            source,
            sep="\t",
            header=None,
            skiprows=n_meta + 1,
            names=names,
            usecols=list(renamed),
            dtype=str,
            na_filter=False,
        )
        return table.rename(columns=renamed)
    return pd.read_csv(  # headerless .pvar = .bim layout
        source,
        sep=r"\s+",
        header=None,
        skiprows=n_meta,
        dtype=str,
        names=["chrom", "id", "cm", "pos", "alt", "ref"],
        usecols=["chrom", "id", "pos", "alt", "ref"],
        na_filter=False,
    )


def _read_psam(path: Path) -> np.ndarray:
    with path.open() as handle:
        first = handle.readline().rstrip("\r\n")
    if first.startswith("#"):
        names = first.split("\t")
        columns = [c.lstrip("#") for c in names]
        if "IID" not in columns:
            raise GenotypeFormatError(f"{path}: no IID column in the header {columns}")
        iid = names[columns.index("IID")]
        return pd.read_csv(path, sep="\t", dtype=str, usecols=[iid])[iid].to_numpy(dtype=str)
    table = pd.read_csv(path, sep=r"\s+", header=None, dtype=str)
    return table[1].to_numpy(dtype=str)  # .fam layout


def _stores_hardcalls_only(path: Path) -> bool:
    """Whether a ``.pgen``/``.bed`` holds hard calls only (no dosages, no phase).

    A PLINK1 ``.bed`` (mode 0x01) and a fixed-width hard-call ``.pgen`` (0x02) do; a standard
    ``.pgen`` (0x10) does when its header stores 4-bit variant types (``header_ctrl & 15 < 4``),
    which cannot encode dosages.
    """
    with path.open("rb") as handle:
        head = handle.read(12)
    if len(head) < 3:
        return True
    mode = head[2]
    if mode in (0x01, 0x02):
        return True
    if mode == 0x10 and len(head) == 12:
        return (head[11] & 15) < 4
    return False


class _PgenlibSource(GenotypeSource):
    """What a ``.bed`` and a ``.pgen`` share: reading through ``pgenlib.PgenReader``.

    Subclasses set ``path``, ``samples``, ``variants``, ``_file`` (the ``.bed``/``.pgen``),
    ``_keep`` (raw variant index of each row of ``variants``), ``_n_raw_variants`` and
    ``_allele_offsets``.
    """

    _file: Path
    _keep: np.ndarray
    _hardcalls: bool = True
    _n_raw_variants: int
    _allele_offsets: np.ndarray | None = None

    @property
    def counts_hardcalls(self) -> bool:
        """Whether :meth:`iter_counts` counts stored hard calls without decoding dosages."""
        return self._hardcalls and getattr(self, "engine", "pgenlib") == "pgenlib"

    def _subset(self, samples: Sequence[str] | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(sorted sample subset for pgenlib or None, order of the wanted samples in it)."""
        if samples is None:
            return None, None
        rows = sample_index(self.samples, samples, self.path)
        order = np.argsort(rows, kind="stable")
        subset = rows[order].astype(np.uint32)
        inverse = np.empty(len(rows), dtype=np.int64)
        inverse[order] = np.arange(len(rows))
        if len(subset) == len(self.samples):
            subset = None  # every sample: pgenlib reads faster without a subset
        identity = np.array_equal(inverse, np.arange(len(rows)))
        return subset, None if identity else inverse

    def _reader(self, subset: np.ndarray | None):
        import pgenlib

        try:
            reader = pgenlib.PgenReader(
                bytes(self._file),
                raw_sample_ct=len(self.samples),
                sample_subset=subset,
                allele_idx_offsets=self._allele_offsets,
            )
        except RuntimeError as exc:
            raise GenotypeFormatError(f"{self._file}: cannot open ({exc})") from exc
        if reader.get_variant_ct() != self._n_raw_variants:
            reader.close()
            raise GenotypeFormatError(
                f"{self._file}: {reader.get_variant_ct()} variants, but the variant table lists "
                f"{self._n_raw_variants}"
            )
        return reader

    @contextmanager
    def _chunk_reader(
        self, samples: Sequence[str] | None, dtype: type, chunk_size: int
    ) -> Iterator[Callable[[np.ndarray, np.ndarray], None]]:
        """Chunks decoded by pgenlib (see :meth:`GenotypeSource._chunk_reader`).

        ``read`` fills pgenlib's variant-major layout: samples in file order (callers
        reorder them, :meth:`_subset`), -9 where missing; an int8 ``dtype`` reads hard calls
        (``read_list``) instead of dosages.
        """
        subset, _ = self._subset(samples)
        if samples is not None and len(samples) == 0:  # pgenlib refuses an empty subset
            yield lambda positions, out: None
            return
        reader = self._reader(subset)
        try:
            decode = reader.read_list if np.dtype(dtype) == np.int8 else reader.read_dosages_list

            def read(positions: np.ndarray, out: np.ndarray) -> None:
                if out.shape[1]:
                    decode(self._keep[positions].astype(np.uint32), out)

            yield read
        finally:
            reader.close()

    def _sample_major(self, samples: Sequence[str] | None) -> Callable[[np.ndarray], np.ndarray]:
        """Pgenlib's layout as dosages: NaN for -9, transposed, samples in the order given."""
        inverse = self._subset(samples)[1]

        def dosages(block: np.ndarray) -> np.ndarray:
            block[block == PGENLIB_MISSING] = np.nan
            return block.T if inverse is None else block.T[inverse]

        return dosages

    def dosage_dot(
        self,
        index: np.ndarray,
        coef: np.ndarray,
        fill: np.ndarray | None = None,
        samples: Sequence[str] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``Σ_j coef[j] × ALT dosage`` per sample (see :meth:`GenotypeSource.dosage_dot`).

        In a hard-call ``.pgen``, a variant stored as the list of its carriers (how plink2
        writes most rare variants) is read as that list (pgenlib's ``read_sparse8``) and only
        its carriers are added to the sums. pgenlib decodes the other variants into a reused
        float64 buffer; only the variants holding a missing dosage are filled, and one matrix
        product per chunk is added to the sums (in place by BLAS for large inputs, see
        :data:`~rvfedprs.genotypes.kernels.INPLACE_MIN_CELLS`). The sums are reordered to
        ``samples`` once at the end. Which decoded variants hold a missing call comes from
        pgenlib's ``count`` for hard-call files (no pass over the decoded block), from a row
        minimum for files that store dosages.
        """
        index, coef, fill = check_dot_args(index, coef, fill, len(self.variants))
        subset, inverse = self._subset(samples)
        n_out = len(sample_index(self.samples, samples, self.path))
        sums = np.zeros((n_out, *coef.shape[1:]), dtype=np.float64, order="F")
        n_missing = np.zeros(len(index), dtype=np.int64)
        dense = np.arange(len(index))
        if self.counts_hardcalls and n_out:
            reader = self._reader(subset)
            try:
                raw = self._keep[index]
                stored_sparse = stored_as_lists(reader, raw.tolist())
                if stored_sparse.any():
                    rows = np.flatnonzero(stored_sparse)
                    n_missing[rows] = add_sparse_products(
                        reader,
                        raw[rows],
                        coef[rows],
                        None if fill is None else fill[rows],
                        sums,
                    )
                    dense = np.flatnonzero(~stored_sparse)
            finally:
                reader.close()
        if len(dense):
            n_missing[dense] = self._dense_dot(
                index[dense],
                coef[dense],
                None if fill is None else fill[dense],
                samples,
                chunk_size,
                sums,
            )
        return (sums if inverse is None else sums[inverse]), n_missing

    def _dense_dot(
        self,
        index: np.ndarray,
        coef: np.ndarray,
        fill: np.ndarray | None,
        samples: Sequence[str] | None,
        chunk_size: int,
        sums: np.ndarray,
    ) -> np.ndarray:
        """Add the products of decoded blocks to ``sums`` (file order of samples); missing calls."""
        n_out = len(sums)
        chunk_size = min(check_chunk_size(chunk_size), max(4, _DOT_BLOCK_BYTES // (8 * n_out or 1)))
        add_product = product_adder(sums, -(-len(index) // chunk_size))
        n_missing = np.zeros(len(index), dtype=np.int64)
        gap_rows = None  # hard-call files: the rows holding a missing call, known before decoding
        if self.counts_hardcalls:
            gap_rows = np.flatnonzero(self._missing_calls(index, samples) > 0).tolist()
        done = 0
        for part, x, _ in self._blocks(index, chunk_size, samples, np.float64):
            k = len(part)
            if n_out:
                if gap_rows is not None:
                    first, last = bisect_left(gap_rows, done), bisect_left(gap_rows, done + k)
                    rows = [r - done for r in gap_rows[first:last]]
                else:
                    rows = np.flatnonzero(x.min(axis=1) < 0).tolist()
                for row in rows:  # rows holding a missing dosage
                    gap = x[row] == PGENLIB_MISSING
                    n_missing[done + row] = miss = int(gap.sum())
                    if fill is None:
                        value = (x[row].sum() + miss * -PGENLIB_MISSING) / (n_out - miss)
                    else:
                        value = float(fill[done + row])
                    x[row, gap] = value
                add_product(x, coef[done : done + k])
            done += k
        return n_missing

    def iter_carriers(
        self,
        index: np.ndarray,
        count_ref: np.ndarray | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        samples: Sequence[str] | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Non-zero allele dosages (see :meth:`GenotypeSource.iter_carriers`).

        In a hard-call ``.pgen`` a variant stored as its carrier list against the genotype
        that counts 0 (hom REF for an ALT count, hom ALT for a REF count) is read as that list
        (:func:`~rvfedprs.genotypes.kernels.carrier_lists`). The other hard-call variants (all
        of a ``.bed``) are decoded in chunks as int8 codes; a ``.pgen`` that stores dosages
        is read as float dosages.
        """
        index = check_index(index, len(self.variants))
        count_ref = count_ref_mask(count_ref, len(index))
        subset, inverse = self._subset(samples)
        to_row = None if inverse is None else np.argsort(inverse)  # subset position -> row
        dense = np.arange(len(index))
        if self.counts_hardcalls and len(index) and (subset is None or len(subset)):
            reader = self._reader(subset)
            try:
                raw = self._keep[index].tolist()
                allele = np.where(count_ref, 0, 1).tolist()
                stored_sparse = stored_as_lists(reader, raw, allele)
                rows = np.flatnonzero(stored_sparse)
                lists = carrier_lists(reader, [raw[r] for r in rows], [allele[r] for r in rows])
                for start, _, var, who, call in lists:
                    sample = who.astype(np.int64) if to_row is None else to_row[who]
                    yield rows[var + start], sample, calls_as_dosages(call)
                dense = np.flatnonzero(~stored_sparse)
            finally:
                reader.close()
        if not len(dense):
            return
        if self.counts_hardcalls:
            parts = self._dense_carriers(
                index[dense], count_ref[dense], chunk_size, samples, to_row
            )
        else:  # dosages stored: read them as floats
            parts = GenotypeSource.iter_carriers(
                self, index[dense], count_ref[dense], chunk_size, samples
            )
        for variant, sample, dosage in parts:
            yield dense[variant], sample, dosage

    def _dense_carriers(
        self,
        index: np.ndarray,
        count_ref: np.ndarray,
        chunk_size: int,
        samples: Sequence[str] | None,
        to_row: np.ndarray | None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`iter_carriers` of hard calls decoded as int8 codes, the non-zero ones kept.

        ``to_row`` maps a position in pgenlib's (sorted) sample subset to its row in
        ``samples``; None when they agree.
        """
        done = 0
        for _, calls, _ in self._blocks(index, chunk_size, samples, np.int8):
            k = len(calls)
            flip = count_ref[done : done + k]
            if flip.any():  # REF counted: 2 - ALT count, missing stays -9
                rows = calls[flip]
                calls[flip] = np.where(rows == PGENLIB_MISSING, rows, 2 - rows)
            variant, who = nonzero_cells(calls)
            sample = who if to_row is None else to_row[who]
            yield variant + done, sample, calls_as_dosages(calls[variant, who])
            done += k

    def _missing_calls(self, index: np.ndarray, samples: Sequence[str] | None) -> np.ndarray:
        """Missing hard calls among ``samples`` of each variant at ``index`` (pgenlib ``count``)."""
        if samples is not None and len(samples) == 0:
            return np.zeros(len(index), dtype=np.int64)
        return self._genotype_counts(self._keep[index], self._subset(samples)[0])[:, 3]

    def _genotype_counts(
        self, raw: np.ndarray, subset: np.ndarray | None, reader=None
    ) -> np.ndarray:
        """Hard-call counts (hom REF, het, hom ALT, missing) of the ``raw`` variants, by pgenlib.

        ``reader``: an open reader of ``subset`` to count with (a chunk loop opens one); else
        one is opened and closed here.
        """
        counts = np.empty((len(raw), 4), dtype=np.uint32)
        own = reader is None
        reader = self._reader(subset) if own else reader
        try:
            count = reader.count
            for i, variant in enumerate(raw.tolist()):
                count(variant, counts[i])
        finally:
            if own:
                reader.close()
        return counts.astype(np.int64)

    def iter_counts(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray, np.ndarray]]:
        """Per-variant ALT sums and hard-call counts (pgenlib's ``count``; no dosage matrix).

        See :meth:`GenotypeSource.iter_counts`. For a ``.pgen`` holding dosages the sums come
        from the dosages (and the counts from them rounded), as for any other source.
        """
        if not self.counts_hardcalls:
            yield from GenotypeSource.iter_counts(self, chunk_size, samples)
            return
        chunk_size = check_chunk_size(chunk_size)
        if samples is not None and len(samples) == 0:
            yield from GenotypeSource.iter_counts(self, chunk_size, samples)
            return
        subset, _ = self._subset(samples)  # counts do not depend on the order of samples
        reader = self._reader(subset)
        try:
            for start in range(0, len(self.variants), chunk_size):
                stop = min(start + chunk_size, len(self.variants))
                counts = self._genotype_counts(self._keep[start:stop], subset, reader)
                alt_sum = (2 * counts[:, 2] + counts[:, 1]).astype(np.float64)
                yield self.variants.iloc[start:stop].reset_index(drop=True), alt_sum, counts
        finally:
            reader.close()

    def sample_missing(
        self, samples: Sequence[str] | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE
    ) -> tuple[np.ndarray, int]:
        """Missing genotypes per sample over all variants, from pgenlib's int8 hard calls.

        Only the variants with a missing call among ``samples`` are decoded: pgenlib's
        ``count`` (hom REF, het, hom ALT, missing, without decoding a carrier list) finds them
        first, so a cohort with few missing calls costs about one counts pass. See
        :meth:`GenotypeSource.sample_missing`.
        """
        chunk_size = check_chunk_size(chunk_size)
        if samples is not None and len(samples) == 0:
            return np.zeros(0, dtype=np.int64), len(self.variants)
        inverse = self._subset(samples)[1]
        missing = np.zeros(len(sample_index(self.samples, samples, self.path)), dtype=np.int64)
        index = np.flatnonzero(self._missing_calls(np.arange(len(self.variants)), samples))
        for _, calls, _ in self._blocks(index, chunk_size, samples, np.int8):
            missing += (calls == PGENLIB_MISSING).sum(axis=0)
        return (missing if inverse is None else missing[inverse]), len(self.variants)


class BedSource(_PgenlibSource):
    """A PLINK1 binary fileset (SNP-major ``.bed`` with ``.bim`` and ``.fam``).

    Parameters
    ----------
    path : str or Path
        The prefix, or the ``.bed`` path; ``.bim`` and ``.fam`` sit beside it.
    engine : {"pgenlib", "pandas-plink"}
        How the ``.bed`` is decoded (identical results; see the module docstring).

    Notes
    -----
    Sample IDs are the ``.fam`` IIDs (second column).
    """

    _hardcalls = True

    def __init__(self, path: str | Path, *, engine: str = "pgenlib") -> None:
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
        self.variants = make_variant_table(
            _normalise_chroms(bim["chrom"], str(self.bim)),
            _positions(bim["pos"], self.bim),
            bim["id"],
            bim["a2"],
            bim["a1"],
        )
        self.samples = fam["iid"].to_numpy(dtype=str)
        check_unique_samples(self.samples, str(self.fam))
        n_var, n_samp = len(self.variants), len(self.samples)
        expected = 3 + n_var * ((n_samp + 3) // 4)
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
        self._file = self.bed
        self._keep = np.arange(n_var, dtype=np.int64)
        self._n_raw_variants = n_var

    @contextmanager
    def _chunk_reader(
        self, samples: Sequence[str] | None, dtype: type, chunk_size: int
    ) -> Iterator[Callable[[np.ndarray, np.ndarray], None]]:
        """Chunks decoded by pgenlib, or by pandas-plink's dask array in pgenlib's layout."""
        if self.engine != "pandas-plink":
            with super()._chunk_reader(samples, dtype, chunk_size) as read:
                yield read
            return
        os.environ.setdefault("DISABLE_PANDERA_IMPORT_WARNING", "True")
        from pandas_plink import Chunk, read_plink1_bin

        subset = self._subset(samples)[0]
        data = read_plink1_bin(
            str(self.bed),
            str(self.bim),
            str(self.fam),
            verbose=False,
            ref="a0",
            chunk=Chunk(nsamples=None, nvariants=chunk_size),
        ).data  # dask array, shape (n_samples, n_variants), counts bim column 5 (ALT)

        def read(positions: np.ndarray, out: np.ndarray) -> None:
            block = np.asarray(data[:, positions].compute(scheduler="synchronous"), np.float32)
            block = block if subset is None else block[subset]
            out[:] = np.where(np.isnan(block), PGENLIB_MISSING, block).T

        yield read


class PgenSource(_PgenlibSource):
    """A PLINK2 fileset (``.pgen``, ``.pvar``/``.pvar.zst``, ``.psam``/``.fam``) read with pgenlib.

    Dosages come from ``read_dosages_list`` (ALT allele; hardcalls where no dosage is stored).

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
        alts = table["alt"].tolist()
        multi = pd.Series(False, index=table.index)
        if "," in "".join(alts):  # one search over the column before a test per variant
            multi[:] = np.fromiter(("," in a for a in alts), bool, len(alts))
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
            _positions(table["pos"], pvar),
            table["id"],
            table["ref"],
            table["alt"],
        )
        self.samples = _read_psam(psam)
        check_unique_samples(self.samples, str(psam))
        self._file = self.pgen
        self._n_raw_variants = len(multi)
        self._hardcalls = _stores_hardcalls_only(self.pgen)
        self._allele_offsets = None
        if multi.any():  # pgenlib needs the allele count of every variant
            n_alleles = 2 + np.array([a.count(",") for a in alts], dtype=np.int64)
            self._allele_offsets = np.concatenate([[0], np.cumsum(n_alleles)]).astype(np.uintp)
