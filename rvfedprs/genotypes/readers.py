"""``open_genotypes``: one entry point for VCF/BCF, PLINK1, PLINK2 and BGEN files, or lists."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeChunk,
    GenotypeSource,
    check_dot_args,
    check_index,
    count_ref_mask,
    sample_index,
)
from rvfedprs.genotypes.formats import GENOTYPE_FORMATS, genotype_format

__all__ = [
    "READER_OPTIONS",
    "MultiFileSource",
    "genotype_build",
    "open_genotypes",
    "open_with_options",
    "skipped_variants",
]

#: The pipeline-section keys that say how genotype files are read.
READER_OPTIONS = ("on_multiallelic", "vcf_genotype_field", "vcf_half_call", "bgen_ref_allele")


def _open_one(
    path: str | Path, field: str, multiallelic: str, bgen_ref_allele: str, half_call: str
) -> GenotypeSource:
    """``path`` opened by its format's reader with the options that reader takes."""
    text = str(path)
    fmt = GENOTYPE_FORMATS[genotype_format(text)]
    module_name, class_name = fmt.reader.split(":")
    reader = getattr(importlib.import_module(module_name), class_name)
    options = {
        "field": field,
        "multiallelic": multiallelic,
        "half_call": half_call,
        "ref_allele": bgen_ref_allele,
    }
    return reader(text, **{name: options[name] for name in fmt.reader_options})


class MultiFileSource(GenotypeSource):
    """Several files (one per chromosome) read as one source, in the order given.

    Every file must list the same sample IDs in the same order.
    """

    def __init__(self, sources: Sequence[GenotypeSource]) -> None:
        if not sources:
            raise GenotypeFormatError("no genotype files given")
        self.sources = list(sources)
        self.path = ", ".join(s.path for s in self.sources)
        first = self.sources[0]
        for other in self.sources[1:]:
            if len(other.samples) != len(first.samples) or not np.array_equal(
                other.samples, first.samples
            ):
                only_first = sorted(set(first.samples) - set(other.samples))[:3]
                only_other = sorted(set(other.samples) - set(first.samples))[:3]
                detail = (
                    f"only in the first: {only_first}, only in the other: {only_other}"
                    if only_first or only_other
                    else "same IDs in a different order"
                )
                raise GenotypeFormatError(
                    f"sample IDs of {other.path} ({len(other.samples)}) differ from those of "
                    f"{first.path} ({len(first.samples)}): {detail}"
                )
        self.samples = first.samples
        tables = [s.variants for s in self.sources]
        if all(t is not None for t in tables):
            self.variants = pd.concat(tables, ignore_index=True)
            self._offsets = np.cumsum([0] + [len(t) for t in tables])

    def iter_chunks(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[GenotypeChunk]:
        """Yield the chunks of each file in turn (a chunk never spans two files)."""
        for source in self.sources:
            yield from source.iter_chunks(chunk_size=chunk_size, samples=samples)

    def iter_selected(
        self,
        index: np.ndarray,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        samples: Sequence[str] | None = None,
        dtype: type = np.float32,
    ) -> Iterator[GenotypeChunk]:
        """Each file's share of ``index`` (positions over all files together) in turn."""
        if self.variants is None:
            yield from super().iter_selected(index, chunk_size, samples, dtype)
            return
        for source, _, part in self._shares(index):
            yield from source.iter_selected(part, chunk_size, samples, dtype)

    def iter_carriers(
        self,
        index: np.ndarray,
        count_ref: np.ndarray | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        samples: Sequence[str] | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Each file's :meth:`GenotypeSource.iter_carriers` for its share of ``index``."""
        if self.variants is None:
            yield from super().iter_carriers(index, count_ref, chunk_size, samples)
            return
        count_ref = count_ref_mask(count_ref, len(index))
        for source, rows, part in self._shares(index):
            for variant, sample, dosage in source.iter_carriers(
                part, count_ref[rows], chunk_size, samples
            ):
                yield variant + rows.start, sample, dosage

    def dosage_dot(
        self,
        index: np.ndarray,
        coef: np.ndarray,
        fill: np.ndarray | None = None,
        samples: Sequence[str] | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The sum of each file's :meth:`GenotypeSource.dosage_dot` over its share of ``index``."""
        if self.variants is None:
            return super().dosage_dot(index, coef, fill, samples, chunk_size)
        index, coef, fill = check_dot_args(index, coef, fill, len(self.variants))
        n_out = len(sample_index(self.samples, samples, self.path))
        sums = np.zeros((n_out, *coef.shape[1:]), dtype=np.float64)
        n_missing = np.zeros(len(index), dtype=np.int64)
        for source, rows, part in self._shares(index):
            part_fill = None if fill is None else fill[rows]
            add, n_missing[rows] = source.dosage_dot(
                part, coef[rows], part_fill, samples, chunk_size
            )
            sums += add
        return sums, n_missing

    def _shares(self, index: np.ndarray) -> Iterator[tuple[GenotypeSource, slice, np.ndarray]]:
        """(file, its rows of ``index``, their positions in the file) for each file with any."""
        index = check_index(index, len(self.variants))
        bounds = np.searchsorted(index, self._offsets)
        for i, source in enumerate(self.sources):
            rows = slice(int(bounds[i]), int(bounds[i + 1]))
            if rows.stop > rows.start:
                yield source, rows, index[rows] - self._offsets[i]

    def iter_counts(
        self, chunk_size: int = DEFAULT_CHUNK_SIZE, samples: Sequence[str] | None = None
    ) -> Iterator[tuple[pd.DataFrame, np.ndarray, np.ndarray]]:
        """Each file's :meth:`GenotypeSource.iter_counts` in turn."""
        for source in self.sources:
            yield from source.iter_counts(chunk_size=chunk_size, samples=samples)


def open_genotypes(
    path_or_paths: str | Path | Sequence[str | Path],
    *,
    field: str = "auto",
    multiallelic: str = "exclude",
    bgen_ref_allele: str = "first",
    half_call: str = "haploid",
) -> GenotypeSource:
    """Open genotype files for chunked reading.

    Parameters
    ----------
    path_or_paths : path or list of paths
        A VCF (``.vcf``, ``.vcf.gz``, ``.vcf.bgz``, ``.bcf``), a PLINK1 prefix or ``.bed``, a
        ``.pgen`` (prefix) or a ``.bgen`` (with its ``.sample`` beside it, or embedded IDs); a
        list reads as one source (e.g. one file per chromosome) in the given order. Formats:
        :data:`~rvfedprs.genotypes.formats.GENOTYPE_FORMATS`.
    field : {"auto", "GT", "DS"}
        For VCF/BCF: the FORMAT field giving dosages (``"auto"``: DS when declared, else GT).
    multiallelic : {"exclude", "error"}
        A record with several ALT alleles (1000 Genomes' ``T>A,C``) is skipped with a logged
        warning and listed in ``source.excluded`` (:func:`skipped_variants`), as the pipeline's
        ``on_multiallelic`` default does; or raises a :class:`GenotypeFormatError` naming the
        record. Split records at one position are read as they are (the pipeline's site QC
        excludes them).
    bgen_ref_allele : {"first", "last"}
        For BGEN: which allele of each variant is REF (plink2's ``ref-first``/``ref-last``).
    half_call : {"haploid", "missing", "error"}
        For VCF/BCF: a GT half-call (``1/.``, 1000 Genomes' male chrX) read as haploid, as
        missing, or refused (plink2's ``--vcf-half-call``).

    Returns
    -------
    GenotypeSource
        With ``samples`` (ndarray of str) and ``iter_chunks(chunk_size, samples=None)``.

    Raises
    ------
    GenotypeFormatError
        Unknown format, missing or inconsistent files, duplicate sample IDs, bad records.
    """
    if isinstance(path_or_paths, (str, Path)):
        return _open_one(path_or_paths, field, multiallelic, bgen_ref_allele, half_call)
    sources = [_open_one(p, field, multiallelic, bgen_ref_allele, half_call) for p in path_or_paths]
    return sources[0] if len(sources) == 1 else MultiFileSource(sources)


def genotype_build(source: GenotypeSource) -> str | None:
    """The genome build the genotype files declare (a VCF's ``##contig`` lengths), if any.

    Returns
    -------
    str or None
        ``"GRCh37"`` or ``"GRCh38"`` when every file that tells one tells the same; None when
        none does (PLINK and BGEN files carry no build) or they disagree.
    """
    builds = {getattr(one, "genome_build", None) for one in getattr(source, "sources", [source])}
    builds.discard(None)
    return builds.pop() if len(builds) == 1 else None


def open_with_options(paths: Sequence[str | Path], options: Mapping[str, str]) -> GenotypeSource:
    """:func:`open_genotypes` with the reader options of a pipeline section.

    Parameters
    ----------
    paths : sequence of paths
    options : mapping
        :data:`READER_OPTIONS`: ``on_multiallelic`` (``exclude``/``error``),
        ``vcf_genotype_field`` (``auto``/``GT``/``DS``), ``vcf_half_call``
        (``haploid``/``missing``/``error``; absent: ``haploid``) and ``bgen_ref_allele``
        (``first``/``last``).
    """
    return open_genotypes(
        [str(p) for p in paths],
        field=options["vcf_genotype_field"],
        multiallelic=options["on_multiallelic"],
        bgen_ref_allele=options["bgen_ref_allele"],
        half_call=options.get("vcf_half_call", "haploid"),
    )


def skipped_variants(source: GenotypeSource) -> pd.DataFrame:
    """Variants a reader skipped (multi-allelic records), as a variant table with a reason.

    Returns
    -------
    DataFrame
        ``chrom, pos, id, ref, alt, reason`` over every file of the source (read the genotypes
        first: a VCF knows its skipped records only after a pass).
    """
    columns = ["chrom", "pos", "id", "ref", "alt", "reason"]
    parts = []
    for one in getattr(source, "sources", [source]):
        excluded = getattr(one, "excluded", None)
        if excluded is None or len(excluded) == 0:
            continue
        frame = excluded if isinstance(excluded, pd.DataFrame) else pd.DataFrame(excluded)
        frame.columns = columns
        parts.append(frame)
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)
