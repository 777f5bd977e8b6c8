"""Convert a VCF/BCF or BGEN once into a PLINK2 ``.pgen`` fileset with plink2.

A text VCF costs a full parse per pass, and a workflow makes several passes per site (sample QC,
counts, scoring, rare dosages). Converted once with ``plink2 --make-pgen``, every later pass is a
pgenlib read of the binary copy (see BENCHMARKS.md). The conversion keeps what our own readers
read, so that results do not depend on it: GT calls (a haploid call counts as homozygous, a
half-missing call ``0/.`` as missing), or DS dosages when the VCF declares DS (stored at plink2's
precision of 1/16384, the only difference from reading the VCF directly), and for a BGEN the
expected ALT count with the REF allele chosen by ``bgen_ref_allele`` and IDs from its ``.sample``.
Phase is erased (``--make-pgen erase-phase``): nothing here reads it, and an unphased copy stores
each rare variant as the list of its carriers, which the PRS and rare-dosage reads use directly.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes.formats import genotype_files, genotype_format

__all__ = ["CONVERTIBLE_FORMATS", "converted", "plink2_available", "to_pgen"]

#: Formats :func:`to_pgen` converts (the others are read directly).
CONVERTIBLE_FORMATS = ("vcf", "bgen")


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
        source = VcfSource(path, field=field, multiallelic="exclude")  # checks the header
        flag = "--bcf" if str(path).endswith(".bcf") else "--vcf"
        args = [flag, str(path)]
        if source.field == "DS":
            args.append("dosage=DS")
        args += ["--vcf-half-call", "missing"]
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
        raise GenotypeFormatError(f"plink2 could not convert {path}: {' '.join(errors)}")
    return Path(f"{out_prefix}.pgen")


@contextmanager
def converted(
    paths: Sequence[str | Path], *, field: str = "auto", bgen_ref_allele: str = "first"
) -> Iterator[list[str]]:
    """The given genotype paths, each VCF/BGEN replaced by a temporary ``.pgen`` copy.

    For one-off commands (``rvfedprs prepare score --via-pgen``) that would otherwise parse a
    VCF; the copies are deleted on exit. Other formats are passed through.
    """
    with tempfile.TemporaryDirectory(prefix="rvfedprs_pgen_") as tmp:
        out = []
        for i, path in enumerate(paths):
            if genotype_format(path) in CONVERTIBLE_FORMATS:
                pgen = to_pgen(
                    path, Path(tmp) / str(i), field=field, bgen_ref_allele=bgen_ref_allele
                )
                out.append(str(pgen))
            else:
                out.append(str(path))
        yield out
