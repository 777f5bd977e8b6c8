"""Chunked VCF / BCF reader (cyvcf2): ALT-allele dosages from ``GT`` or ``DS``.

The header's ``##contig`` lengths tell the genome build when they are those of GRCh37 or GRCh38
(:attr:`VcfSource.genome_build`; None otherwise), for the scoring file's build check.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

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

__all__ = ["HALF_CALLS", "VcfSource", "build_from_contigs", "gt_dosages", "half_calls"]

logger = logging.getLogger(__name__)

_FIELDS = ("auto", "GT", "DS")
_MULTIALLELIC = ("error", "exclude")
_BGZF_EOF = bytes.fromhex("1f8b08040000000000ff0600424302001b0003000000000000000000")

#: Chromosome lengths that differ between the builds (autosomes and X), GRCh37 then GRCh38.
_CONTIG_LENGTHS = {
    "1": (249250621, 248956422), "2": (243199373, 242193529), "3": (198022430, 198295559),
    "4": (191154276, 190214555), "5": (180915260, 181538259), "6": (171115067, 170805979),
    "7": (159138663, 159345973), "8": (146364022, 145138636), "9": (141213431, 138394717),
    "10": (135534747, 133797422), "11": (135006516, 135086622), "12": (133851895, 133275309),
    "13": (115169878, 114364328), "14": (107349540, 107043718), "15": (102531392, 101991189),
    "16": (90354753, 90338345), "17": (81195210, 83257441), "18": (78077248, 80373285),
    "19": (59128983, 58617616), "20": (63025520, 64444167), "21": (48129895, 46709983),
    "22": (51304566, 50818468), "X": (155270560, 156040895),
}  # fmt: skip


def build_from_contigs(contigs: dict[str, object]) -> str | None:
    """``"GRCh37"`` or ``"GRCh38"`` when the contig lengths are that build's, else None.

    Parameters
    ----------
    contigs : dict
        Contig name (``chr1``, ``1``, ``X``...) to its length (int or str; None when absent).

    Returns
    -------
    str or None
        The build every recognised length belongs to; None when none is recognised or they
        disagree (a synthetic or a patched reference).
    """
    builds = set()
    for name, length in contigs.items():
        try:
            chrom = normalise_chrom(name)
        except GenotypeFormatError:
            continue
        known = _CONTIG_LENGTHS.get(chrom)
        if known is None or length is None or not str(length).isdigit():
            continue
        if int(length) in known:
            builds.add(("GRCh37", "GRCh38")[known.index(int(length))])
        else:
            return None
    return builds.pop() if len(builds) == 1 else None


def _check_compression(path: Path) -> None:
    """Reject a truncated bgzip file (no BGZF end-of-file block) before htslib reads it."""
    with path.open("rb") as handle:
        head = handle.read(18)
        if head[:2] != b"\x1f\x8b":
            return
        is_bgzf = len(head) >= 16 and head[12:14] == b"BC"
        handle.seek(0, 2)
        size = handle.tell()
        if is_bgzf and path.suffix != ".bcf":
            handle.seek(max(0, size - 28))
            if handle.read(28) != _BGZF_EOF:
                raise GenotypeFormatError(
                    f"{path}: truncated or corrupt bgzip file (no BGZF end-of-file block)"
                )
    if not is_bgzf:
        try:
            with gzip.open(path, "rb") as stream:
                while stream.read(1 << 20):
                    pass
        except (OSError, EOFError) as exc:
            raise GenotypeFormatError(f"{path}: truncated or corrupt gzip file ({exc})") from exc


def _header_samples(path: Path) -> np.ndarray | None:
    """Sample names from the ``#CHROM`` line of a text VCF (None for BCF or no such line)."""
    if path.suffix == ".bcf":
        return None
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    try:
        with opener(path, "rt") as handle:
            for line in handle:
                if line.startswith("#CHROM"):
                    return np.asarray(line.rstrip("\n").split("\t")[9:], dtype=str)
                if not line.startswith("#"):
                    return None
    except (OSError, EOFError, UnicodeDecodeError):
        return None
    return None


def half_calls(genotype: np.ndarray) -> np.ndarray:
    """Which diploid calls of cyvcf2's ``genotype.array()`` have one allele missing (``0/.``)."""
    if genotype.shape[1] < 3:
        return np.zeros(len(genotype), dtype=bool)
    first, second = genotype[:, 0], genotype[:, 1]
    return ((first >= 0) & (second == -1)) | ((first == -1) & (second >= 0))


def gt_dosages(genotype: np.ndarray, half_call: str = "haploid") -> np.ndarray:
    """ALT-allele count from cyvcf2's ``genotype.array()`` of a biallelic record.

    Parameters
    ----------
    genotype : ndarray of int16, shape (n_samples, ploidy + 1)
        Allele indices (-1 missing, -2 end of a shorter ploidy), last column the phase flag.
    half_call : {"haploid", "missing"}
        A half-call (``1/.``, as 1000 Genomes codes male chrX): read as the haploid call of
        its one allele, or as missing (plink2's ``--vcf-half-call haploid`` / ``missing``).

    Returns
    -------
    ndarray of float32, shape (n_samples,)
        Diploid calls count ALT alleles; a haploid call counts as homozygous (0 or 2, as plink2
        stores it and ``plink2 --score`` counts it); ``./.`` is NaN.
    """
    first = genotype[:, 0]
    if genotype.shape[1] < 3:  # every call haploid
        dosage = 2.0 * (first > 0)
        missing = first < 0
    else:
        second = genotype[:, 1]
        half = half_calls(genotype)
        if half_call == "haploid":  # the called allele, counted as a haploid call
            first = np.where(first == -1, second, first)
            second = np.where(half, -2, second)
        haploid = second == -2
        dosage = (first > 0).astype(np.float32) + np.where(haploid, first > 0, second > 0)
        missing = (first < 0) | (second == -1)
    dosage = dosage.astype(np.float32)
    dosage[missing] = np.nan
    return dosage


#: How a GT half-call (``0/.``) is read: plink2's ``--vcf-half-call`` modes.
HALF_CALLS = ("haploid", "missing", "error")


class VcfSource(GenotypeSource):
    """One VCF, VCF.gz or BCF file read record by record with cyvcf2.

    Parameters
    ----------
    path : str or Path
    field : {"auto", "GT", "DS"}
        ``"auto"`` reads ``DS`` when the header declares it (falling back to ``GT`` in records
        without it), else ``GT``.
    multiallelic : {"error", "exclude"}
        A record with more than one ALT allele raises (naming it), or is skipped and logged in
        :attr:`excluded`.
    half_call : {"haploid", "missing", "error"}
        A GT half-call (``0/.``, ``1/.``; 1000 Genomes phase 3 codes every male chrX call so):
        read as a haploid call, as missing, or refused naming the record and sample, as plink2's
        ``--vcf-half-call``; :attr:`half_calls` counts those read so far.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        field: str = "auto",
        multiallelic: str = "error",
        half_call: str = "haploid",
    ) -> None:
        import cyvcf2

        self.path = str(path)
        if field not in _FIELDS:
            raise GenotypeFormatError(f"genotype field {field!r} unknown; choose from {_FIELDS}")
        if multiallelic not in _MULTIALLELIC:
            raise GenotypeFormatError(
                f"multiallelic={multiallelic!r} unknown; choose from {_MULTIALLELIC}"
            )
        self.multiallelic = multiallelic
        if half_call not in HALF_CALLS:
            raise GenotypeFormatError(f"half_call={half_call!r} unknown; choose from {HALF_CALLS}")
        self.half_call = half_call
        #: GT half-calls met by the last pass, read as :attr:`half_call` says
        self.half_calls = 0
        file = Path(path)
        if not file.is_file():
            raise GenotypeFormatError(f"genotype file {file} does not exist")
        _check_compression(file)
        try:
            vcf = cyvcf2.VCF(self.path, gts012=True, lazy=True)
        except Exception as exc:  # cyvcf2 raises bare Exception on a bad header
            names = _header_samples(file)
            if names is not None:
                check_unique_samples(names, self.path)
            raise GenotypeFormatError(f"{self.path}: not a readable VCF/BCF ({exc})") from exc
        formats = {h["ID"] for h in vcf.header_iter() if h.type == "FORMAT" and "ID" in h.info()}
        try:
            contigs = dict(zip(vcf.seqnames, vcf.seqlens, strict=True))
        except Exception:  # cyvcf2 raises bare Exception when a contig has no length
            contigs = {}
        #: GRCh37/GRCh38 from the ``##contig`` lengths, None when they tell neither
        self.genome_build = build_from_contigs(contigs)
        vcf.close()
        if field == "auto":
            field = "DS" if "DS" in formats else "GT"
        if field not in formats:
            raise GenotypeFormatError(
                f"{self.path}: no FORMAT/{field} in the header "
                f"(declared: {sorted(formats) or 'none'}); need GT or DS"
            )
        self.field = field
        self._has_gt = "GT" in formats
        self.samples = np.asarray(vcf.samples, dtype=str)
        if len(self.samples) == 0:
            raise GenotypeFormatError(f"{self.path}: the VCF has no sample columns")
        check_unique_samples(self.samples, self.path)
        #: records skipped so far, as (chrom, pos, id, ref, alt, reason) tuples
        self.excluded: list[tuple[str, int, str, str, str, str]] = []

    def iter_chunks(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[GenotypeChunk]:
        """Yield :class:`GenotypeChunk` objects of at most ``chunk_size`` records."""
        import cyvcf2

        rows = sample_index(self.samples, samples, self.path)
        chunk_size = check_chunk_size(chunk_size, len(rows))
        out_samples = self.samples[rows]
        all_rows = samples is None
        self.excluded = []
        self.half_calls = 0
        vcf = cyvcf2.VCF(self.path, gts012=True)
        buffer = np.empty((len(rows), chunk_size), dtype=np.float32)
        table: list[list] = [[], [], [], [], []]
        line = 0
        chroms: dict[str, str] = {}
        try:
            for line, record in enumerate(vcf, start=1):
                alts = record.ALT
                if len(alts) > 1:
                    desc = (
                        f"{record.CHROM}:{record.POS} {record.ID or '.'} "
                        f"{record.REF}>{','.join(alts)}"
                    )
                    if self.multiallelic == "error":
                        raise GenotypeFormatError(
                            f"{self.path}: multi-allelic record {desc} (record {line}); "
                            "split it (bcftools norm -m-) or exclude multi-allelic records"
                        )
                    self.excluded.append(
                        (
                            record.CHROM,
                            record.POS,
                            record.ID or ".",
                            record.REF,
                            ",".join(alts),
                            "multiallelic",
                        )
                    )
                    logger.debug("%s: excluded multi-allelic record %s", self.path, desc)
                    continue
                dosage = self._dosage(record, line)
                column = len(table[0])
                buffer[:, column] = dosage if all_rows else dosage[rows]
                chrom = chroms.get(record.CHROM)
                if chrom is None:
                    chrom = chroms[record.CHROM] = normalise_chrom(record.CHROM, source=self.path)
                table[0].append(chrom)
                table[1].append(record.POS)
                table[2].append(record.ID or ".")
                table[3].append(record.REF)
                table[4].append(alts[0] if alts else ".")
                if column + 1 == chunk_size:
                    yield GenotypeChunk(make_variant_table(*table), buffer.copy(), out_samples)
                    table = [[], [], [], [], []]
        except GenotypeFormatError:
            raise
        except Exception as exc:  # htslib read errors surface as bare Exception
            raise GenotypeFormatError(
                f"{self.path}: cannot read record after record {line} ({exc})"
            ) from exc
        finally:
            vcf.close()
        if table[0]:
            n = len(table[0])
            yield GenotypeChunk(make_variant_table(*table), buffer[:, :n].copy(), out_samples)
        if self.excluded:  # one line per file, not one per record (1000 Genomes: hundreds)
            first = self.excluded[0]
            logger.warning(
                "%s: excluded %d multi-allelic record(s), first %s:%s %s %s>%s (listed with "
                "the other exclusions; split them with bcftools norm -m- to keep them)",
                self.path,
                len(self.excluded),
                *first[:5],
            )
        if self.half_calls:
            logger.info(
                "%s: %d GT half-calls (0/., 1/.) read as %s (pipeline.vcf_half_call)",
                self.path,
                self.half_calls,
                "haploid calls" if self.half_call == "haploid" else "missing",
            )

    def _dosage(self, record, line: int) -> np.ndarray:
        if self.field == "DS":
            values = record.format("DS")
            if values is not None:
                dosage = np.array(values[:, 0], dtype=np.float32)  # copy: cyvcf2 reuses buffers
                bad = (dosage < 0) | (dosage > 2)
                if bad.any():
                    raise GenotypeFormatError(
                        f"{self.path}: DS value {dosage[bad][0]} outside [0, 2] at "
                        f"{record.CHROM}:{record.POS} (record {line})"
                    )
                return dosage
            if not self._has_gt:
                raise GenotypeFormatError(
                    f"{self.path}: record {line} ({record.CHROM}:{record.POS}) has no DS and no GT"
                )
        genotype = record.genotype
        if genotype is None:
            raise GenotypeFormatError(
                f"{self.path}: record {line} ({record.CHROM}:{record.POS}) has no GT values"
            )
        calls = genotype.array()
        half = half_calls(calls)
        if half.any():
            if self.half_call == "error":
                raise GenotypeFormatError(
                    f"{self.path}: GT half-call ({int(half.sum())} in record {line}, "
                    f"{record.CHROM}:{record.POS}, first sample {self.samples[half][0]}); "
                    "set pipeline.vcf_half_call (--vcf-half-call) to haploid or missing, "
                    "as plink2's --vcf-half-call"
                )
            self.half_calls += int(half.sum())
        return gt_dosages(calls, self.half_call)
