"""Chunked BGEN reader (v1.2 and v1.3: layout 2, 1–16-bit probabilities, phased or unphased).

Decoding goes through the ``bgen`` package (a maintained C++ reader, zlib and zstd blocks); the
dosage of a sample is its expected ALT-allele count, Σ_g P(g) × (ALT copies in g), as plink2
imports it. Which of a variant's two alleles is REF is not in the file: ``ref_allele="first"``
(UK Biobank's files, and plink2's ``ref-first``) or ``"last"`` (``ref-last``: PLINK-exported and
older files). Sample IDs come from the ``.sample`` file beside the ``.bgen`` (its ``ID_2``
column, as plink2 ``--sample`` reads it), else from the IDs embedded in the file; a file with
neither is an error. A ``.bgi`` index beside the file is used by the reader when present.

Ploidy is stored per sample and variant (male chrX calls are haploid in the files plink2 and
the imputation servers write). A haploid call is read as plink2 imports it, as homozygous: ALT
dosage 2 × P(ALT) (the VCF reader reads a haploid ``GT`` the same way), and ploidy 0 as missing.
Where a variant holds haploid calls, :meth:`BgenSource.dosage_dot` imputes a missing dosage as
2·p with p counted as plink2 counts it when it knows the sexes: a haploid call is one allele, a
diploid call two (``plink2 --bgen F ref-first --sample F.sample --score``: equal, tested). The
allele counts (:meth:`BgenSource.iter_counts`) count a haploid call as homozygous, as every
reader does: equal to ``plink2 --geno-counts`` with its ``HAP_*`` columns folded into the
homozygous ones. Only variants that hold a non-diploid sample pay for any of this; the ploidy
array is the one the decoder filled anyway.

Refused with an error naming the file and the value: layout 1 (BGEN v1.1: re-export it with
``plink2 --export bgen-1.2``), probabilities stored with more than 16 bits (plink2's dosage
precision is 1/16384; convert with ``bits=16``), and samples of ploidy above 2 (plink2 refuses
them too).
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeSource,
    check_dot_args,
    check_unique_samples,
    dot_dosages,
    hardcall_counts,
    make_variant_table,
    normalise_chrom,
    sample_index,
)

__all__ = ["BgenSource", "REF_ALLELE_CHOICES"]

logger = logging.getLogger(__name__)

REF_ALLELE_CHOICES = ("first", "last")
_MAX_BITS = 16
_COMPRESSION = {0: None, 1: "zlib", 2: "zstd"}


def _header(path: Path) -> dict:
    """The BGEN header block: variant and sample counts, compression, layout, embedded IDs."""
    with path.open("rb") as handle:
        head = handle.read(24)
        if len(head) < 24 or head[16:20] not in (b"bgen", b"\x00\x00\x00\x00"):
            raise GenotypeFormatError(f"{path}: not a BGEN file (no 'bgen' magic number)")
        offset, length, n_variants, n_samples = struct.unpack("<4I", head[:16])
        handle.seek(length)  # the flags are the header block's last 4 bytes
        (flags,) = struct.unpack("<I", handle.read(4))
    return {
        "offset": offset,
        "n_variants": n_variants,
        "n_samples": n_samples,
        "compression": flags & 3,
        "layout": (flags >> 2) & 15,
        "has_ids": bool(flags >> 31),
    }


def _first_block(path: Path, info: dict) -> tuple[int, int, int] | None:
    """(smallest ploidy, largest ploidy, bits per probability) of the first variant's block."""
    if info["n_variants"] == 0:
        return None
    with path.open("rb") as handle:
        handle.seek(info["offset"] + 4)
        for _ in range(3):  # variant ID, rsID, chromosome
            (n,) = struct.unpack("<H", handle.read(2))
            handle.read(n)
        handle.read(4)  # position
        (n_alleles,) = struct.unpack("<H", handle.read(2))
        for _ in range(n_alleles):
            (n,) = struct.unpack("<I", handle.read(4))
            handle.read(n)
        (size,) = struct.unpack("<I", handle.read(4))
        block = handle.read(size)
    method = _COMPRESSION.get(info["compression"])
    if method == "zlib":
        data = zlib.decompressobj().decompress(block[4:], 10 + info["n_samples"])
    elif method == "zstd":
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(block[4:])
        data = reader.read(10 + info["n_samples"])
    else:
        data = block
    n = info["n_samples"]
    return (data[6], data[7], data[8 + n + 1]) if len(data) > 9 + n else None


def _read_sample_file(path: Path) -> np.ndarray:
    """``ID_2`` of an Oxford ``.sample`` file (two header lines: names, then types)."""
    lines = [ln.split() for ln in path.read_text().splitlines() if ln.strip()]
    if len(lines) < 2 or len(lines[0]) < 2:
        raise GenotypeFormatError(f"{path}: not an Oxford .sample file (no ID_1 ID_2 header)")
    return np.asarray([row[1] for row in lines[2:]], dtype=str)


class BgenSource(GenotypeSource):
    """One BGEN file read variant by variant with the ``bgen`` package.

    Parameters
    ----------
    path : str or Path
        The ``.bgen`` file (or its prefix).
    sample_file : str or Path, optional
        An Oxford ``.sample`` file; default the one beside the ``.bgen``
        (``prefix.sample``), else the IDs embedded in the file.
    ref_allele : {"first", "last"}
        Which allele of each variant is REF (see the module docstring).
    multiallelic : {"error", "exclude"}
        A variant with more than two alleles raises (naming it), or is skipped and logged in
        :attr:`excluded`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        sample_file: str | Path | None = None,
        ref_allele: str = "first",
        multiallelic: str = "error",
    ) -> None:
        from bgen import BgenReader

        text = str(path)
        self.bgen = Path(text if text.endswith(".bgen") else text + ".bgen")
        self.path = str(self.bgen)
        if not self.bgen.is_file():
            raise GenotypeFormatError(f"BGEN file {self.bgen} does not exist")
        if ref_allele not in REF_ALLELE_CHOICES:
            raise GenotypeFormatError(
                f"ref_allele={ref_allele!r} unknown; choose from {REF_ALLELE_CHOICES}"
            )
        self.ref_allele = ref_allele
        info = _header(self.bgen)
        if info["layout"] != 2:
            raise GenotypeFormatError(
                f"{self.bgen}: BGEN layout {info['layout']} (v1.1 when 1) is not supported; "
                "rvfedprs reads BGEN v1.2/v1.3 (layout 2): re-export it with "
                "`plink2 --bgen FILE ref-first --export bgen-1.2`"
            )
        if info["compression"] not in _COMPRESSION:
            raise GenotypeFormatError(
                f"{self.bgen}: unknown compression code {info['compression']}"
            )
        first = _first_block(self.bgen, info)
        if first is not None:
            _, high, bits = first
            if not 1 <= bits <= _MAX_BITS:
                raise GenotypeFormatError(
                    f"{self.bgen}: probabilities stored with {bits} bits; rvfedprs reads 1 to "
                    f"{_MAX_BITS} bits (plink2's dosage precision), e.g. `plink2 --export "
                    "bgen-1.2 bits=16`"
                )
            if high > 2:
                raise GenotypeFormatError(
                    f"{self.bgen}: the first variant has samples of ploidy {high}; only "
                    "haploid and diploid calls are read (as plink2)"
                )
        sample_path = Path(sample_file) if sample_file is not None else None
        if sample_path is None and self.bgen.with_suffix(".sample").is_file():
            sample_path = self.bgen.with_suffix(".sample")
        if sample_path is not None:
            if not sample_path.is_file():
                raise GenotypeFormatError(f"sample file {sample_path} does not exist")
            self.samples = _read_sample_file(sample_path)
            if len(self.samples) != info["n_samples"]:
                raise GenotypeFormatError(
                    f"{sample_path} lists {len(self.samples)} samples, but {self.bgen} holds "
                    f"{info['n_samples']}"
                )
        elif info["has_ids"]:
            with BgenReader(self.path, delay_parsing=True) as reader:
                self.samples = np.asarray(reader.samples, dtype=str)
        else:
            raise GenotypeFormatError(
                f"{self.bgen} has no sample IDs: no {self.bgen.with_suffix('.sample').name} "
                "beside it and none embedded in the file; give its .sample file"
            )
        check_unique_samples(self.samples, str(sample_path or self.bgen))
        self.multiallelic = multiallelic
        self._all_diploid = b"\x02" * info["n_samples"]  # a variant's ploidy bytes, all 2
        self._read_variants(info["n_variants"])

    def _read_variants(self, n_variants: int) -> None:
        """The variant table (headers only: no genotype block is decoded)."""
        from bgen import BgenReader

        chrom, pos, ids, ref, alt, keep = [], [], [], [], [], []
        excluded = []
        chroms: dict[str, str] = {}
        with BgenReader(self.path, delay_parsing=True) as reader:
            for i, var in enumerate(reader):
                alleles = var.alleles
                name = var.rsid or var.varid or "."
                if len(alleles) != 2:
                    desc = f"{var.chrom}:{var.pos} {name} {'/'.join(alleles)}"
                    if self.multiallelic == "error":
                        raise GenotypeFormatError(
                            f"{self.bgen}: variant {desc} has {len(alleles)} alleles; exclude "
                            "multi-allelic variants or split them"
                        )
                    excluded.append((var.chrom, var.pos, name, alleles[0], ",".join(alleles[1:])))
                    continue
                c = chroms.get(var.chrom)
                if c is None:
                    c = chroms[var.chrom] = normalise_chrom(var.chrom, source=self.path)
                first, last = alleles
                r, a = (first, last) if self.ref_allele == "first" else (last, first)
                chrom.append(c)
                pos.append(var.pos)
                ids.append(name)
                ref.append(r)
                alt.append(a)
                keep.append(i)
        if len(keep) + len(excluded) != n_variants:
            raise GenotypeFormatError(
                f"{self.bgen}: the header lists {n_variants} variants but "
                f"{len(keep) + len(excluded)} could be read (a truncated file?)"
            )
        self.variants = make_variant_table(chrom, pos, ids, ref, alt)
        self.excluded = [(*e, "multiallelic") for e in excluded]
        if excluded:
            shown = ", ".join(f"{c}:{p} {n}" for c, p, n, *_ in excluded[:3])
            logger.warning(
                "%s: excluded %d multi-allelic variants (%s%s)",
                self.bgen, len(excluded), shown, ", ..." if len(excluded) > 3 else "",
            )  # fmt: skip
        self._keep = np.asarray(keep, dtype=np.int64)

    def _dosage(self, var) -> tuple[np.ndarray, np.ndarray | None]:
        """(ALT dosage of every sample, the haploid samples or None when all are diploid)."""
        try:
            dose = var.alt_dosage  # expected copies of the second allele: P(2nd) when haploid
        except ValueError as exc:  # the decoder's refusal of ploidy > 2
            raise GenotypeFormatError(
                f"{self.bgen}: variant {var.chrom}:{var.pos} {var.rsid or var.varid} has "
                f"samples of ploidy {int(var.ploidy.max())}; only haploid and diploid calls "
                "are read (as plink2)"
            ) from exc
        ploidy = var.ploidy  # filled by the decode above: a copy, no second decode
        haploid = None
        if ploidy.tobytes() != self._all_diploid:  # ~0.3 µs; ploidy 0 decodes as NaN already
            haploid = ploidy == 1
            dose = np.where(haploid, np.float32(2.0) * dose, dose)  # homozygous, as plink2
            if not haploid.any():
                haploid = None
        return (dose if self.ref_allele == "first" else 2.0 - dose), haploid

    def dosage_dot(
        self,
        index: np.ndarray,
        coef: np.ndarray,
        fill: np.ndarray | None = None,
        samples: Sequence[str] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> tuple[np.ndarray, np.ndarray]:
        """See :meth:`GenotypeSource.dosage_dot`; products on the decode buffer (no copy).

        With no ``fill``, a missing dosage of a variant holding haploid calls counts 2·p, p
        with a haploid call as one allele and a diploid call as two (plink2's frequency when
        it knows the sexes); elsewhere the called samples' mean dosage, as every reader.
        """
        index, coef, fill = check_dot_args(index, coef, fill, len(self.variants))
        n_out = len(sample_index(self.samples, samples, self.path))
        sums = np.zeros((n_out, *coef.shape[1:]), dtype=np.float64)
        n_missing = np.zeros(len(index), dtype=np.int64)
        done = 0
        for _, block, haploid in self._blocks(index, chunk_size, samples, np.float64):
            part = slice(done, done + len(block))
            done = part.stop
            part_fill = fill[part] if fill is not None else None
            if part_fill is None and haploid:
                part_fill = _ploidy_fill(block, haploid)
            add, n_missing[part] = dot_dosages(block.T, coef[part], part_fill)
            sums += add
        return sums, n_missing

    def iter_counts(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray, np.ndarray]]:
        """Per-variant ALT sums and hard-call counts, counted on the decode buffer (no transpose).

        See :meth:`GenotypeSource.iter_counts`; a haploid call counts as homozygous.
        """
        index = np.arange(len(self.variants))
        for part, block, _ in self._blocks(index, chunk_size, samples, np.float32):
            counts, alt_sum = hardcall_counts(block, variant_major=True)
            yield self.variants.iloc[part].reset_index(drop=True), alt_sum, counts

    @contextmanager
    def _chunk_reader(
        self, samples: Sequence[str] | None, dtype: type, chunk_size: int
    ) -> Iterator[Callable[[np.ndarray, np.ndarray], dict[int, np.ndarray]]]:
        """The file read once, in order (see :meth:`GenotypeSource._chunk_reader`).

        ``read`` decodes only the chunk's variants (the others' blocks are skipped) and
        returns, for the rows of the chunk holding haploid calls (usually none), which of
        ``samples`` they are.
        """
        from bgen import BgenReader

        rows = None if samples is None else sample_index(self.samples, samples, self.path)
        with BgenReader(self.path, delay_parsing=True) as reader:
            variants = enumerate(reader)

            def read(positions: np.ndarray, out: np.ndarray) -> dict[int, np.ndarray]:
                haploid: dict[int, np.ndarray] = {}
                for row, wanted in enumerate(self._keep[positions].tolist()):
                    variant = next(v for raw, v in variants if raw == wanted)
                    dose, hap = self._dosage(variant)
                    out[row] = dose if rows is None else dose[rows]  # a contiguous row
                    if hap is not None:
                        hap = hap if rows is None else hap[rows]
                        if hap.any():
                            haploid[row] = hap
                return haploid

            yield read


def _ploidy_fill(block: np.ndarray, haploid: dict[int, np.ndarray]) -> np.ndarray:
    """2·p per variant of a variant-major block, a haploid call counting as one allele.

    Parameters
    ----------
    block : ndarray, shape (k, n_samples)
        ALT dosages (a haploid call as homozygous, 0 to 2), NaN where missing.
    haploid : dict of int to ndarray of bool
        Rows of ``block`` holding haploid calls, and which samples they are.

    Returns
    -------
    ndarray of float64, shape (k,)
        The called samples' mean dosage, each haploid call weighing one half (it is one allele
        of ALT frequency dosage/2; a diploid call is two alleles): 2 × the ALT frequency that
        ``plink2 --freq`` reports when it knows the sexes. NaN where nothing is called.
    """
    called = ~np.isnan(block)
    with np.errstate(invalid="ignore", divide="ignore"):
        fill = np.where(called, block, 0.0).sum(axis=1) / called.sum(axis=1)
        for row, hap in haploid.items():
            ok = called[row]
            weight = np.where(hap[ok], 0.5, 1.0)
            fill[row] = weight @ block[row, ok] / weight.sum()
    return fill
