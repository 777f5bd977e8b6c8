"""Convert a VCF/BCF or BGEN once into a PLINK2 ``.pgen`` fileset with plink2.

A text VCF costs a full parse per pass, and a workflow makes several passes per site (sample QC,
counts, scoring, rare dosages). Converted once with ``plink2 --make-pgen``, every later pass is a
pgenlib read of the binary copy (see BENCHMARKS.md). The conversion keeps what our own readers
read, so that results do not depend on it: GT calls (a haploid call counts as homozygous, a
half-call ``0/.`` as ``vcf_half_call`` says — by default haploid, plink2's
``--vcf-half-call haploid``, as 1000 Genomes codes male chrX), or DS dosages when the VCF
declares DS (stored at plink2's precision of 1/16384, the only difference from reading the VCF
directly), and for a BGEN the expected ALT count with the REF allele chosen by
``bgen_ref_allele`` and IDs from its ``.sample``.
Phase is erased (``--make-pgen erase-phase``): nothing here reads it, and an unphased copy stores
each rare variant as the list of its carriers, which the PRS and rare-dosage reads use directly.

One-off commands keep their copies in a cache (:func:`cached_pgen`, :func:`default_cache_dir`)
keyed by the input's path, size and modification time and the conversion options, so that a
second run on the same file skips the conversion.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rvfedprs.exceptions import GenotypeFormatError, RvfedprsError
from rvfedprs.genotypes.chunk import GenotypeSource
from rvfedprs.genotypes.formats import genotype_files, genotype_format

__all__ = [
    "CONVERTED_BY_DEFAULT",
    "CONVERTIBLE_FORMATS",
    "DEFAULT_CACHE",
    "cached_pgen",
    "converted",
    "default_cache_dir",
    "name_as_inputs",
    "plink2_available",
    "to_pgen",
]

logger = logging.getLogger(__name__)

#: Formats :func:`to_pgen` converts (the others are read directly).
CONVERTIBLE_FORMATS = ("vcf", "bgen")

#: Those whose direct reader is far slower than plink2, so one-off commands convert them unless
#: told not to: a VCF's PRS is 10.4x plink2's time read directly, 1.1-1.3x converted, while a
#: BGEN's is 0.71-0.92x read directly and 1.29x converted (BENCHMARKS.md, "Every input format").
CONVERTED_BY_DEFAULT = ("vcf",)

#: Where one-off commands keep their ``.pgen`` copies, as the help states it.
DEFAULT_CACHE = "$XDG_CACHE_HOME/rvfedprs/pgen (XDG_CACHE_HOME defaulting to ~/.cache)"

#: Part of every cache key: raise it when :func:`to_pgen` changes what it writes.
_CACHE_VERSION = 1


def plink2_available() -> bool:
    """Whether a ``plink2`` executable is on the PATH."""
    return shutil.which("plink2") is not None


def to_pgen(
    path: str | Path,
    out_prefix: str | Path,
    *,
    field: str = "auto",
    bgen_ref_allele: str = "first",
    threads: int = 1,
    memory_mib: int | None = None,
    half_call: str = "haploid",
) -> Path:
    """Write ``out_prefix.{pgen,pvar,psam}`` from a VCF/BCF or BGEN file with plink2.

    Parameters
    ----------
    path : str or Path
        A VCF/BCF (``.vcf``, ``.vcf.gz``, ``.vcf.bgz``, ``.bcf``) or a ``.bgen``.
    out_prefix : str or Path
    field : {"auto", "GT", "DS"}
        For VCF: the FORMAT field read (``auto``: DS when the header declares it).
    bgen_ref_allele : {"first", "last"}
        For BGEN: which allele is REF.
    threads : int
    memory_mib : int, optional
        plink2's ``--memory`` (default: plink2's own).
    half_call : {"haploid", "missing", "error"}
        For VCF: plink2's ``--vcf-half-call`` (``error`` stops on the first, naming its line).

    Returns
    -------
    Path
        The ``.pgen``.

    Raises
    ------
    GenotypeFormatError
        No plink2, a format that needs no conversion, or plink2 failing (with its message).
    """
    from rvfedprs.genotypes.bgen import BgenSource
    from rvfedprs.genotypes.vcf import VcfSource

    if not plink2_available():
        raise GenotypeFormatError("plink2 is not installed; cannot convert genotypes to .pgen")
    kind = genotype_format(path)
    out_prefix = Path(out_prefix)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    if kind == "vcf":
        source = VcfSource(path, field=field, multiallelic="exclude", half_call=half_call)
        flag = "--bcf" if str(path).endswith(".bcf") else "--vcf"
        args = [flag, str(path)]
        if source.field == "DS":
            args.append("dosage=DS")
        args += ["--vcf-half-call", half_call]
        said = {"haploid": "read as haploid calls", "missing": "read as missing"}
        logger.info("%s: GT half-calls (0/., 1/.) %s (vcf_half_call)", path,
                    said.get(half_call, "refused"))  # fmt: skip
    elif kind == "bgen":
        source = BgenSource(path, ref_allele=bgen_ref_allele)  # checks layout, bits, IDs
        files = genotype_files(path)
        args = ["--bgen", files[0], f"ref-{bgen_ref_allele}"]
        sample = [f for f in files if f.endswith(".sample")]
        if sample:
            args += ["--sample", sample[0]]
    else:
        raise GenotypeFormatError(
            f"{path} is a {kind} file; only {list(CONVERTIBLE_FORMATS)} are converted"
        )
    # Phase is dropped: rvfedprs reads ALT dosages only, and only an unphased hard-call record
    # of a rare variant is stored as its carrier list (read without decoding, kernels.py).
    args += ["--make-pgen", "erase-phase", "--out", str(out_prefix), "--threads", str(threads)]
    if memory_mib is not None:
        args += ["--memory", str(memory_mib)]
    done = subprocess.run(["plink2", *args], capture_output=True, text=True)
    if done.returncode != 0:
        log = Path(f"{out_prefix}.log")
        text = log.read_text() if log.is_file() else done.stderr
        errors = [ln for ln in text.splitlines() if "rror" in ln] or text.splitlines()[-3:]
        advice = (
            "; set pipeline.vcf_half_call (--vcf-half-call) to haploid or missing"
            if "half-call" in text
            else ""
        )
        raise GenotypeFormatError(f"plink2 could not convert {path}: {' '.join(errors)}{advice}")
    return Path(f"{out_prefix}.pgen")


def default_cache_dir() -> Path:
    """:data:`DEFAULT_CACHE` for this user (``$XDG_CACHE_HOME`` read now, not at import)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rvfedprs" / "pgen"


def _cache_key(
    path: str | Path, field: str, bgen_ref_allele: str, half_call: str
) -> tuple[str, str]:
    """(the input's name stem and path digest, the digest of its size, mtime and options)."""
    main, *companions = (Path(f).resolve() for f in genotype_files(path))
    if not main.is_file():
        raise GenotypeFormatError(f"genotype file {main} does not exist")
    files = [main, *(f for f in companions if f.is_file())]
    where = hashlib.sha256(str(files[0]).encode()).hexdigest()[:12]
    state = [_CACHE_VERSION, field, bgen_ref_allele, half_call]
    state += [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    stem = files[0].name.split(".")[0]
    return f"{stem}.{where}", hashlib.sha256(repr(state).encode()).hexdigest()[:12]


def cached_pgen(
    path: str | Path,
    cache_dir: str | Path | None = None,
    *,
    field: str = "auto",
    bgen_ref_allele: str = "first",
    half_call: str = "haploid",
) -> Path:
    """The ``.pgen`` copy of a VCF/BCF or BGEN in ``cache_dir``, converted when absent or stale.

    A copy is named ``<stem>.<path digest>.<state digest>.pgen``: the state digest covers the
    input's files (a BGEN's ``.sample`` too) by size and modification time, ``field``,
    ``bgen_ref_allele``, ``half_call`` and the conversion's version, so an edited input or
    other options give a new copy, and the new copy replaces the older ones of the same input.
    A copy is written under a temporary name and renamed once complete (the ``.pgen`` last), so
    an interrupted or concurrent run never reads half a copy. ``cache_dir`` defaults to
    :func:`default_cache_dir`.

    Returns
    -------
    Path
        The cached ``.pgen``.
    """
    name, state = _cache_key(path, field, bgen_ref_allele, half_call)
    cache_dir = default_cache_dir() if cache_dir is None else Path(cache_dir)
    prefix = cache_dir / f"{name}.{state}"
    pgen = prefix.with_name(prefix.name + ".pgen")
    if all(prefix.with_name(prefix.name + s).is_file() for s in (".pvar", ".psam", ".pgen")):
        logger.info("reusing the .pgen copy of %s: %s", path, pgen)
        return pgen
    cache_dir.mkdir(parents=True, exist_ok=True)
    part = cache_dir / f"{name}.{state}.part{os.getpid()}"
    logger.info("converting %s to .pgen once with plink2 (cached in %s)", path, cache_dir)
    try:
        to_pgen(path, part, field=field, bgen_ref_allele=bgen_ref_allele, half_call=half_call)
        for suffix in (".pvar", ".psam", ".pgen"):
            Path(f"{part}{suffix}").replace(f"{prefix}{suffix}")
    finally:
        for leftover in cache_dir.glob(f"{part.name}.*"):
            leftover.unlink(missing_ok=True)
    for older in cache_dir.glob(f"{name}.*"):
        if not older.name.startswith(f"{name}.{state}.") and ".part" not in older.name:
            older.unlink(missing_ok=True)
    return pgen


@contextmanager
def converted(
    paths: Sequence[str | Path],
    *,
    field: str = "auto",
    bgen_ref_allele: str = "first",
    cache_dir: str | Path | None = None,
    formats: Sequence[str] = CONVERTIBLE_FORMATS,
    half_call: str = "haploid",
) -> Iterator[list[str]]:
    """The given genotype paths, each VCF/BGEN (of ``formats``) replaced by a ``.pgen`` copy.

    For one-off commands (``rvfedprs prepare score``) that would otherwise parse a VCF. With
    ``cache_dir`` the copies are kept there (:func:`cached_pgen`) for the next run; without it
    they are temporary, deleted on exit (also, with a warning, when ``cache_dir`` cannot be
    created). Other formats are passed through.
    """
    if cache_dir is not None:
        try:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            logger.warning("cannot use %s (%s); converting to a temporary folder", cache_dir, exc)
            cache_dir = None
    with tempfile.TemporaryDirectory(prefix="rvfedprs_pgen_") as tmp:
        out = []
        for i, path in enumerate(paths):
            if genotype_format(path) not in set(formats) & set(CONVERTIBLE_FORMATS):
                out.append(str(path))
            elif cache_dir is not None:
                pgen = cached_pgen(
                    path,
                    cache_dir,
                    field=field,
                    bgen_ref_allele=bgen_ref_allele,
                    half_call=half_call,
                )
                out.append(str(pgen))
            else:
                pgen = to_pgen(
                    path,
                    Path(tmp) / str(i),
                    field=field,
                    bgen_ref_allele=bgen_ref_allele,
                    half_call=half_call,
                )
                out.append(str(pgen))
        try:
            yield out
        except RvfedprsError as exc:  # name the user's file, not its copy
            message = str(exc)
            for original, copy in zip(paths, out, strict=True):
                prefix = copy.removesuffix(".pgen")
                for suffix in (".pvar", ".psam", ".pgen", ""):
                    message = message.replace(prefix + suffix, str(original))
            exc.args = (message,)
            raise


def name_as_inputs(
    source: GenotypeSource, inputs: Sequence[str | Path], paths: Sequence[str]
) -> GenotypeSource:
    """A source opened on :func:`converted` ``paths``, made to name (and date) its ``inputs``.

    Each part read from a ``.pgen`` copy takes the path of the file it was made from, for the
    messages, and a VCF's genome build (its ``##contig`` lengths), for the scoring file's build
    check, so that both read as they would from the VCF itself.
    """
    from rvfedprs.genotypes.vcf import VcfSource

    parts = getattr(source, "sources", [source])
    for part, original, path in zip(parts, inputs, paths, strict=True):
        if str(original) == path:
            continue
        part.path = str(original)
        if genotype_format(original) == "vcf":
            part.genome_build = VcfSource(original).genome_build  # reads the header only
    if hasattr(source, "sources"):
        source.path = ", ".join(part.path for part in parts)
    return source
