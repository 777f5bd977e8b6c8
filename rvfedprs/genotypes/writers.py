"""Chunked genotype writers: bgzipped VCF, PLINK1 (bed/bim/fam) and PLINK2 (pgen/pvar/psam).

The VCF is tabix-indexed.

The writers are context managers fed with chunks of biallelic genotypes, so memory is bounded by
the chunk size, never by the number of variants:

>>> with VcfWriter("chr22.vcf.gz", samples) as vcf:            # doctest: +SKIP
...     for variants, genotypes in chunks:
...         vcf.write(variants, genotypes)

``variants`` is a table with columns ``chrom`` (str, no ``chr`` prefix), ``pos`` (int, >= 1),
``id``, ``ref`` and ``alt``; ``genotypes`` is an int8 array of shape (n_samples, n_variants)
holding ALT-allele counts (0, 1, 2) with -1 for missing. Genotypes are written unphased.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Self

import numpy as np
import pandas as pd

from rvfedprs.exceptions import GenotypeFormatError

__all__ = ["VcfWriter", "BedWriter", "PgenWriter", "GRCH37_LENGTHS"]

#: GRCh37 autosome lengths, written as ``##contig`` lines.
GRCH37_LENGTHS: dict[str, int] = {
    "1": 249250621, "2": 243199373, "3": 198022430, "4": 191154276, "5": 180915260,
    "6": 171115067, "7": 159138663, "8": 146364022, "9": 141213431, "10": 135534747,
    "11": 135006516, "12": 133851895, "13": 115169878, "14": 107349540, "15": 102531392,
    "16": 90354753, "17": 81195210, "18": 78077248, "19": 59128983, "20": 63025520,
    "21": 48129895, "22": 51304566,
}  # fmt: skip

_VARIANT_COLUMNS = ("chrom", "pos", "id", "ref", "alt")
_BASES = frozenset("ACGTN")


def _check_chunk(
    variants: pd.DataFrame, genotypes: np.ndarray, n_samples: int, where: str
) -> np.ndarray:
    """Validate one chunk and return the genotypes as int8 of shape (n_samples, n_variants)."""
    missing = [c for c in _VARIANT_COLUMNS if c not in variants.columns]
    if missing:
        raise GenotypeFormatError(f"{where}: variant table lacks columns {missing}")
    genotypes = np.asarray(genotypes)
    if genotypes.ndim != 2 or genotypes.shape != (n_samples, len(variants)):
        raise GenotypeFormatError(
            f"{where}: genotypes have shape {genotypes.shape}, expected "
            f"({n_samples}, {len(variants)}) = (n_samples, n_variants)"
        )
    if genotypes.size and (genotypes.min() < -1 or genotypes.max() > 2):
        bad = genotypes[(genotypes < -1) | (genotypes > 2)][0]
        raise GenotypeFormatError(
            f"{where}: genotype value {bad} outside the ALT-allele counts -1 (missing), 0, 1, 2"
        )
    pos = variants["pos"].to_numpy()
    if len(pos) and pos.min() < 1:
        raise GenotypeFormatError(f"{where}: position {pos.min()} < 1")
    for column in ("ref", "alt"):
        for allele in variants[column]:
            if not allele or set(str(allele)) - _BASES:
                raise GenotypeFormatError(f"{where}: {column} allele {allele!r} is not A/C/G/T/N")
    same = variants["ref"].to_numpy() == variants["alt"].to_numpy()
    if same.any():
        raise GenotypeFormatError(
            f"{where}: variant {variants['id'].to_numpy()[same][0]!r} has ref == alt"
        )
    return genotypes.astype(np.int8, copy=False)


def _check_samples(samples: Sequence[str], where: str) -> list[str]:
    """Sample IDs as str: unique, non-empty, no white space (PLINK's .fam/.psam)."""
    samples = [str(s) for s in samples]
    if len(set(samples)) != len(samples):
        raise GenotypeFormatError(f"{where}: duplicate sample IDs")
    if any(any(ch.isspace() for ch in s) or not s for s in samples):
        raise GenotypeFormatError(f"{where}: sample IDs must be non-empty, no spaces")
    return samples


class _OrderCheck:
    """Positions must increase within a chromosome and each chromosome must appear once."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.chrom: str | None = None
        self.last_pos = 0
        self.seen: set[str] = set()

    def __call__(self, chroms: np.ndarray, positions: np.ndarray) -> None:
        for chrom, pos in zip(chroms, positions, strict=True):
            if chrom != self.chrom:
                if chrom in self.seen:
                    raise GenotypeFormatError(
                        f"{self.where}: chromosome {chrom} appears again after another one"
                    )
                self.seen.add(chrom)
                self.chrom, self.last_pos = chrom, 0
            if pos <= self.last_pos:
                raise GenotypeFormatError(
                    f"{self.where}: position {chrom}:{pos} is not after {chrom}:{self.last_pos} "
                    "(positions must be unique and sorted)"
                )
            self.last_pos = int(pos)


# Four bytes per genotype (the call and a tab, or a newline at the end of a line), looked up as
# one uint32 by ALT count + 1.
_VCF_GT = np.frombuffer(b"./.\t0/0\t0/1\t1/1\t", dtype=np.uint32)
_VCF_GT_LAST = np.frombuffer(b"./.\n0/0\n0/1\n1/1\n", dtype=np.uint32)


class _ChunkWriter:
    """What the VCF, PLINK1 and PLINK2 writers share: :meth:`write` checks a chunk, appends it.

    A subclass sets ``samples``, ``n_written`` and ``_genotype_file`` (the file named in
    errors), says whether it is open (:meth:`_is_open`) and appends a checked, non-empty chunk
    (:meth:`_append`, which checks the variants' order).
    """

    samples: list[str]
    n_written: int
    _genotype_file: str

    def _is_open(self) -> bool:
        raise NotImplementedError

    def _append(self, variants: pd.DataFrame, genotypes: np.ndarray, chroms: np.ndarray,
                positions: np.ndarray) -> None:  # fmt: skip
        raise NotImplementedError

    def write(self, variants: pd.DataFrame, genotypes: np.ndarray) -> None:
        """Append one chunk.

        Parameters
        ----------
        variants : DataFrame
            Columns ``chrom, pos, id, ref, alt``; n_variants rows, sorted by position.
        genotypes : ndarray of int8, shape (n_samples, n_variants)
            ALT-allele counts, -1 = missing.
        """
        if not self._is_open():
            raise RuntimeError(f"{type(self).__name__}.write called outside a 'with' block")
        g = _check_chunk(variants, genotypes, len(self.samples), self._genotype_file)
        if not len(variants):
            return
        chroms = variants["chrom"].astype(str).to_numpy()
        positions = variants["pos"].to_numpy(dtype=np.int64)
        self._append(variants, g, chroms, positions)
        self.n_written += len(variants)


class VcfWriter(_ChunkWriter):
    """Write a bgzipped VCF (GT only) and index it with ``tabix -p vcf`` on close.

    Parameters
    ----------
    path : str or Path
        Output file, normally ending in ``.vcf.gz``.
    samples : sequence of str
        Sample IDs, in the order of the genotype rows.
    contigs : mapping of str to int, optional
        Contig lengths for ``##contig`` lines; GRCh37 autosome lengths by default.
    index : bool
        Run ``tabix -p vcf`` after closing (default True).
    threads : int
        Compression threads for ``bgzip``.
    compress_level : int, optional
        ``bgzip -l`` level (0-9; 1 is several times faster than the default 6).
    """

    def __init__(
        self,
        path: str | Path,
        samples: Sequence[str],
        *,
        contigs: dict[str, int] | None = None,
        index: bool = True,
        threads: int = 1,
        compress_level: int | None = None,
        source: str = "rvfedprs",
    ) -> None:
        self.path = Path(path)
        self.samples = [str(s) for s in samples]
        if len(set(self.samples)) != len(self.samples):
            raise GenotypeFormatError(f"{self.path}: duplicate sample IDs")
        self.contigs = dict(GRCH37_LENGTHS if contigs is None else contigs)
        self.index = index
        self.threads = threads
        self.compress_level = compress_level
        self.source = source
        self.n_written = 0
        self._order = _OrderCheck(str(self.path))
        self._genotype_file = str(self.path)
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    def __enter__(self) -> Self:
        for tool in ("bgzip", "tabix") if self.index else ("bgzip",):
            if shutil.which(tool) is None:
                raise GenotypeFormatError(
                    f"'{tool}' not found on PATH; needed to write {self.path}"
                )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._out = open(self.path, "wb")
        command = ["bgzip", "-c", "-@", str(self.threads)]
        if self.compress_level is not None:
            command += ["-l", str(self.compress_level)]
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=self._out)
        header = [
            "##fileformat=VCFv4.2",
            f"##source={self.source}",
            '##FILTER=<ID=PASS,Description="All filters passed">',
            *(f"##contig=<ID={c},length={n}>" for c, n in self.contigs.items()),
            '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
            "\t".join(["#CHROM", "POS", "ID", "REF", "ALT", "QUAL", "FILTER", "INFO", "FORMAT"])
            + ("\t" + "\t".join(self.samples) if self.samples else ""),
        ]
        self._write(("\n".join(header) + "\n").encode())
        return self

    def _write(self, data: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(data)

    def _is_open(self) -> bool:
        return self._proc is not None

    def _append(self, variants, g, chroms, positions) -> None:
        """The chunk's GT lines to ``bgzip`` (its chromosomes among the contigs)."""
        unknown = sorted(set(chroms) - set(self.contigs))
        if unknown:
            raise GenotypeFormatError(f"{self.path}: chromosome(s) {unknown} not among contigs")
        self._order(chroms, positions)
        index = np.ascontiguousarray(g.T) + np.int8(1)  # (n_variants, n_samples)
        calls = _VCF_GT[index]
        if self.samples:
            calls[:, -1] = _VCF_GT_LAST[index[:, -1]]
        lines = []
        for j, (chrom, pos, vid, ref, alt) in enumerate(
            zip(chroms, positions, variants["id"], variants["ref"], variants["alt"], strict=True)
        ):
            fixed = f"{chrom}\t{pos}\t{vid}\t{ref}\t{alt}\t.\tPASS\t.\tGT"
            lines.append((fixed + ("\t" if self.samples else "\n")).encode())
            lines.append(calls[j].tobytes())
        self._write(b"".join(lines))

    def close(self) -> None:
        """Finish compression and build the tabix index."""
        if self._proc is None:
            return
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        status = self._proc.wait()
        assert self._out is not None
        self._out.close()
        self._proc = None
        if status != 0:
            raise GenotypeFormatError(f"bgzip failed (exit {status}) writing {self.path}")
        if self.index:
            done = subprocess.run(
                ["tabix", "-f", "-p", "vcf", str(self.path)], capture_output=True, text=True
            )
            if done.returncode != 0:
                raise GenotypeFormatError(f"tabix failed on {self.path}: {done.stderr.strip()}")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        if self._proc is not None:  # abandon a partial file
            assert self._proc.stdin is not None
            self._proc.stdin.close()
            self._proc.wait()
            assert self._out is not None
            self._out.close()
            self._proc = None


# PLINK1 2-bit codes indexed by ALT count + 1, with A1 = ALT: missing 01, 0 ALT = hom A2 (11),
# 1 ALT = het (10), 2 ALT = hom A1 (00).
_BED_CODE = np.array([1, 3, 2, 0], dtype=np.uint8)
_BED_MAGIC = bytes([0x6C, 0x1B, 0x01])


class BedWriter(_ChunkWriter):
    """Write PLINK1 binary files (SNP-major ``.bed``, ``.bim``, ``.fam``).

    The ``.bim`` holds A1 = ALT (column 5) and A2 = REF (column 6), so PLINK 1.9 counts and
    plink2 reads the ALT allele as A1/ALT, as in a VCF import.

    Parameters
    ----------
    prefix : str or Path
        Output prefix; ``.bed``, ``.bim`` and ``.fam`` are appended.
    samples : sequence of str
        Sample IDs (written as both FID and IID), in the order of the genotype rows.
    sex : sequence of int, optional
        PLINK sex codes (1 male, 2 female, 0 unknown); unknown by default.
    """

    def __init__(
        self, prefix: str | Path, samples: Sequence[str], *, sex: Sequence[int] | None = None
    ) -> None:
        self.prefix = Path(prefix)
        self.samples = _check_samples(samples, f"{self.prefix}.fam")
        self.sex = [0] * len(self.samples) if sex is None else [int(s) for s in sex]
        self.n_written = 0
        self._order = _OrderCheck(f"{self.prefix}.bim")
        self._genotype_file = f"{self.prefix}.bed"
        self._bed: IO[bytes] | None = None
        self._bim: IO[str] | None = None

    def __enter__(self) -> Self:
        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{self.prefix}.fam", "w") as fam:
            for sample, sex in zip(self.samples, self.sex, strict=True):
                fam.write(f"{sample}\t{sample}\t0\t0\t{sex}\t-9\n")
        self._bed = open(f"{self.prefix}.bed", "wb")
        self._bed.write(_BED_MAGIC)
        self._bim = open(f"{self.prefix}.bim", "w")
        return self

    def _is_open(self) -> bool:
        return self._bed is not None and self._bim is not None

    def _append(self, variants, g, chroms, positions) -> None:
        """Pack the chunk's 2-bit codes into the ``.bed``, its rows into the ``.bim``."""
        self._order(chroms, positions)
        n = len(self.samples)
        n_bytes = (n + 3) // 4
        codes = np.zeros((len(variants), n_bytes * 4), dtype=np.uint8)
        codes[:, :n] = _BED_CODE[g.T.astype(np.intp) + 1]
        codes = codes.reshape(len(variants), n_bytes, 4)
        packed = codes[..., 0] | (codes[..., 1] << 2) | (codes[..., 2] << 4) | (codes[..., 3] << 6)
        self._bed.write(packed.astype(np.uint8).tobytes())
        self._bim.write(
            "".join(
                f"{c}\t{vid}\t0\t{p}\t{alt}\t{ref}\n"
                for c, vid, p, ref, alt in zip(
                    chroms, variants["id"], positions, variants["ref"], variants["alt"],
                    strict=True,
                )
            )
        )  # fmt: skip

    def close(self) -> None:
        """Close the three files."""
        for handle in (self._bed, self._bim):
            if handle is not None:
                handle.close()
        self._bed = self._bim = None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class PgenWriter(_ChunkWriter):
    """Write a PLINK2 fileset (``.pgen``, ``.pvar``, ``.psam``) through pgenlib.

    pgenlib stores a rare variant as the list of its carriers instead of a 2-bit code per
    sample, so an exome-like cohort takes a fraction of its ``.bed`` size. The ``.pvar`` holds
    REF and ALT as given (REF is the reference allele); the ``.psam`` has FID = IID, as the
    :class:`BedWriter`'s ``.fam``, so plink2 names samples alike in both.

    Parameters
    ----------
    prefix : str or Path
        Output prefix; ``.pgen``, ``.pvar`` and ``.psam`` are appended.
    samples : sequence of str
        Sample IDs, in the order of the genotype rows.
    n_variants : int
        Variants that will be written in all (the ``.pgen`` header declares the count; closing
        after a different number is an error).
    sex : sequence of int, optional
        PLINK sex codes (1 male, 2 female, 0 unknown); unknown by default.
    """

    def __init__(
        self,
        prefix: str | Path,
        samples: Sequence[str],
        *,
        n_variants: int,
        sex: Sequence[int] | None = None,
    ) -> None:
        self.prefix = Path(prefix)
        self.samples = _check_samples(samples, f"{self.prefix}.psam")
        if n_variants < 1:
            raise GenotypeFormatError(
                f"{self.prefix}.pgen: n_variants must be >= 1, got {n_variants}"
            )
        self.n_variants = int(n_variants)
        self.sex = [0] * len(self.samples) if sex is None else [int(s) for s in sex]
        self.n_written = 0
        self._order = _OrderCheck(f"{self.prefix}.pvar")
        self._genotype_file = f"{self.prefix}.pgen"
        self._pgen = None
        self._pvar: IO[str] | None = None

    def __enter__(self) -> Self:
        import pgenlib

        self.prefix.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{self.prefix}.psam", "w") as psam:
            psam.write("#FID\tIID\tSEX\n")
            for sample, sex in zip(self.samples, self.sex, strict=True):
                psam.write(f"{sample}\t{sample}\t{sex if sex in (1, 2) else 'NA'}\n")
        self._pgen = pgenlib.PgenWriter(
            f"{self.prefix}.pgen".encode(), len(self.samples), self.n_variants, False
        )
        self._pvar = open(f"{self.prefix}.pvar", "w")
        self._pvar.write("#CHROM\tPOS\tID\tREF\tALT\n")
        return self

    def _is_open(self) -> bool:
        return self._pgen is not None and self._pvar is not None

    def _append(self, variants, g, chroms, positions) -> None:
        """The chunk to pgenlib (carrier lists where shorter), its rows to the ``.pvar``."""
        if self.n_written + len(variants) > self.n_variants:
            raise GenotypeFormatError(
                f"{self.prefix}.pgen: {self.n_written + len(variants)} variants written, more "
                f"than the {self.n_variants} declared"
            )
        self._order(chroms, positions)
        batch = np.ascontiguousarray(g.T)  # (n_variants, n_samples)
        if batch.size and batch.min() < 0:
            batch = np.where(batch < 0, np.int8(-9), batch)  # pgenlib's missing code
        self._pgen.append_biallelic_batch(batch)
        self._pvar.write(
            "".join(
                f"{c}\t{p}\t{vid}\t{ref}\t{alt}\n"
                for c, p, vid, ref, alt in zip(
                    chroms, positions, variants["id"], variants["ref"], variants["alt"],
                    strict=True,
                )
            )
        )  # fmt: skip

    def close(self) -> None:
        """Finish the ``.pgen`` (its header and index) and close the ``.pvar``."""
        if self._pvar is not None:
            self._pvar.close()
            self._pvar = None
        if self._pgen is not None:
            pgen, self._pgen = self._pgen, None
            if self.n_written != self.n_variants:
                raise GenotypeFormatError(
                    f"{self.prefix}.pgen: {self.n_written} variants written, "
                    f"{self.n_variants} declared"
                )
            pgen.close()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        if self._pvar is not None:  # abandon a partial fileset
            self._pvar.close()
            self._pvar = None
        self._pgen = None
