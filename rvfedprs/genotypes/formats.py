"""The one registry of genotype file formats: names, suffixes, readers and the files behind a path.

Every place that needs to know what a genotype path means — :func:`~rvfedprs.genotypes.
open_genotypes` (which opens a path with its format's reader), the Snakemake rules' input lists
(``snakemake/common.smk``), input validation — asks :func:`genotype_format` and
:func:`genotype_files` here. A new format is one reader class and one
:func:`register_genotype_format` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rvfedprs.exceptions import GenotypeFormatError

__all__ = [
    "GENOTYPE_FORMATS",
    "GenotypeFormat",
    "genotype_files",
    "genotype_format",
    "register_genotype_format",
]


@dataclass(frozen=True)
class GenotypeFormat:
    """One genotype file format.

    Attributes
    ----------
    name : str
        ``vcf``, ``bfile``, ``pfile`` or ``bgen`` (pgsc_calc's samplesheet names).
    suffixes : tuple of str
        What a path of this format ends with (the main file).
    companions : tuple of tuple of str
        Files beside the main one, by suffix replacing the main suffix; each inner tuple lists
        alternatives, the first existing one is used (the first one when none exists).
    optional : tuple of str
        Companions used when present (a BGEN's ``.sample``, its ``.bgi`` index).
    text : tuple of str
        The companions that are text tables (checked for CRLF line endings).
    reader : str
        ``"module:Class"``, the :class:`~rvfedprs.genotypes.chunk.GenotypeSource` that reads it
        (imported on first use): ``Class(path, **options)``.
    reader_options : tuple of str
        The reading options the reader takes, by its keyword names, among ``field`` (a VCF's
        FORMAT field), ``multiallelic``, ``half_call`` and ``ref_allele``.
    prefix : bool
        Whether a bare prefix (the path less the main suffix) may name a file set of it.
    """

    name: str
    suffixes: tuple[str, ...]
    companions: tuple[tuple[str, ...], ...] = ()
    optional: tuple[str, ...] = ()
    text: tuple[str, ...] = ()
    reader: str = ""
    reader_options: tuple[str, ...] = ()
    prefix: bool = True


#: Every format rvfedprs reads, by name.
GENOTYPE_FORMATS: dict[str, GenotypeFormat] = {
    "vcf": GenotypeFormat(
        "vcf",
        (".vcf", ".vcf.gz", ".vcf.bgz", ".bcf"),
        reader="rvfedprs.genotypes.vcf:VcfSource",
        reader_options=("field", "multiallelic", "half_call"),
        prefix=False,
    ),
    "bfile": GenotypeFormat(
        "bfile",
        (".bed",),
        ((".bim",), (".fam",)),
        text=(".bim", ".fam"),
        reader="rvfedprs.genotypes.plink:BedSource",
    ),
    "pfile": GenotypeFormat(
        "pfile",
        (".pgen",),
        ((".pvar", ".pvar.zst", ".bim"), (".psam", ".fam")),
        text=(".pvar", ".psam", ".bim", ".fam"),
        reader="rvfedprs.genotypes.plink:PgenSource",
        reader_options=("multiallelic",),
    ),
    "bgen": GenotypeFormat(
        "bgen",
        (".bgen",),
        optional=(".sample", ".bgen.bgi"),
        text=(".sample",),
        reader="rvfedprs.genotypes.bgen:BgenSource",
        reader_options=("ref_allele", "multiallelic"),
    ),
}


def register_genotype_format(fmt: GenotypeFormat) -> GenotypeFormat:
    """Add ``fmt`` to :data:`GENOTYPE_FORMATS`: its paths then open with its reader.

    Raises
    ------
    GenotypeFormatError
        For a name already registered, no reader, or a suffix another format claims.
    """
    if fmt.name in GENOTYPE_FORMATS:
        raise GenotypeFormatError(f"genotype format {fmt.name!r} is already registered")
    if fmt.reader.count(":") != 1:
        raise GenotypeFormatError(
            f"genotype format {fmt.name!r}: reader {fmt.reader!r} must look like 'module:Class'"
        )
    taken = {s: f.name for f in GENOTYPE_FORMATS.values() for s in f.suffixes}
    clash = sorted(s for s in fmt.suffixes if s in taken)
    if clash:
        raise GenotypeFormatError(
            f"genotype format {fmt.name!r}: suffix(es) {clash} already read as "
            f"{sorted({taken[s] for s in clash})}"
        )
    GENOTYPE_FORMATS[fmt.name] = fmt
    return fmt


def _split(path: str) -> tuple[GenotypeFormat, str] | None:
    """(format, prefix) of a path by its suffix, or by the main file beside a prefix."""
    for fmt in GENOTYPE_FORMATS.values():
        for suffix in fmt.suffixes:
            if path.endswith(suffix):
                return fmt, path[: -len(suffix)]
    for fmt in GENOTYPE_FORMATS.values():  # a bare prefix: the first main file present
        if fmt.prefix and Path(path + fmt.suffixes[0]).is_file():
            return fmt, path
    return None


def genotype_format(path: str | Path, *, default: str | None = None) -> str:
    """The format name of a genotype path (a file, or a PLINK/BGEN prefix).

    Parameters
    ----------
    path : str or Path
    default : str, optional
        Returned for a path that matches no format (e.g. ``"bfile"`` for a PLINK prefix whose
        files a workflow has yet to write); without it such a path is an error.

    Raises
    ------
    GenotypeFormatError
        When the path matches no format and no ``default`` is given, listing the accepted
        suffixes.
    """
    found = _split(str(path))
    if found is None and default is not None:
        return default
    if found is None:
        accepted = ", ".join(s for f in GENOTYPE_FORMATS.values() for s in f.suffixes)
        beside = ", ".join(
            "/".join([f.suffixes[0], *(c[0] for c in f.companions)])
            for f in GENOTYPE_FORMATS.values()
            if f.prefix
        )
        raise GenotypeFormatError(
            f"cannot tell the genotype format of {str(path)!r}: expected a file ending in "
            f"{accepted}, or a prefix with {beside} beside it"
        )
    return found[0].name


def genotype_files(path: str | Path, *, text_only: bool = False) -> list[str]:
    """The files behind a genotype path (a PLINK prefix stands for its .bed/.bim/.fam).

    A bare prefix that names no existing file is taken as a PLINK1 fileset (Snakemake asks for
    files before they exist).

    Parameters
    ----------
    path : str or Path
    text_only : bool
        Only the text tables among them (``.bim``, ``.fam``, ``.pvar``, ``.psam``,
        ``.sample``) that exist.
    """
    text = str(path)
    found = _split(text)
    fmt, prefix = found if found is not None else (GENOTYPE_FORMATS["bfile"], text)
    main = text if found is not None and text.endswith(fmt.suffixes) else prefix + fmt.suffixes[0]
    files = [main]
    for alternatives in fmt.companions:
        present = [prefix + s for s in alternatives if Path(prefix + s).is_file()]
        files.append(present[0] if present else prefix + alternatives[0])
    for suffix in fmt.optional:
        if Path(prefix + suffix).is_file():
            files.append(prefix + suffix)
    if text_only:
        return [f for f in files if f.endswith(fmt.text) and Path(f).is_file()]
    return files
