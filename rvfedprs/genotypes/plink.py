"""Chunked PLINK readers: PLINK1 ``.bed/.bim/.fam`` (pandas-plink) and PLINK2 ``.pgen`` (pgenlib).

Allele convention, checked against plink2 and the VCF copies of the same data: in a ``.bim`` the
fifth column (PLINK's A1, usually minor) is the ALT allele and the sixth column is REF, exactly as
``plink2 --bfile X --make-pgen`` writes them into the ``.pvar``. Dosages count the ALT allele.
pandas-plink counts its ``a1`` (the sixth column, REF) by default, so the reader asks it to count
``a0`` (the fifth column) instead.
"""

from __future__ import annotations

import io
import logging
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

    Notes
    -----
    Sample IDs are the ``.fam`` IIDs (second column).
    """

    def __init__(self, path: str | Path) -> None:
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

    def iter_chunks(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[GenotypeChunk]:
        """Yield :class:`GenotypeChunk` objects of at most ``chunk_size`` variants."""
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
        import pgenlib

        chunk_size = check_chunk_size(chunk_size)
        rows = sample_index(self.samples, samples, self.path)
        out_samples = self.samples[rows]
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
        try:
            for start in range(0, len(self._keep), chunk_size):
                index = self._keep[start : start + chunk_size].astype(np.uint32)
                buf = np.empty((len(index), len(self.samples)), dtype=np.float32)
                reader.read_dosages_list(index, buf)
                block = buf.T[rows] if samples is not None else np.ascontiguousarray(buf.T)
                block[block == -9] = np.nan
                yield GenotypeChunk(
                    self.variants.iloc[start : start + len(index)].reset_index(drop=True),
                    block,
                    out_samples,
                )
        finally:
            reader.close()
