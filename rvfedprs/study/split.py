"""Splitting one cohort into one folder per site: the one-machine form of a consortium.

:func:`split_cohort` gives each client of a samples sheet its own files, as a biobank would hold
them: its genotypes (only its samples, every variant, with ``plink2 --keep`` for PLINK/pgen
inputs and ``bcftools view -S`` for VCFs), its rows of the phenotype table and of the samples
sheet, and (simulated cohorts) a copy of the truth table. It writes the site sheet that the
study reads (:mod:`rvfedprs.study.samplesheet`).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.study.samplesheet import SiteInputs, write_samplesheet

__all__ = ["split_cohort", "split_site"]


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise InputDataError(
            f"{what} failed (status {done.returncode}): {(done.stderr or done.stdout)[-800:]}"
        )


def _format_of(path: str) -> str:
    if path.endswith((".vcf", ".vcf.gz", ".vcf.bgz", ".bcf")):
        return "vcf"
    if path.endswith(".pgen") or Path(f"{path}.pgen").is_file():
        return "pfile"
    if path.endswith(".bed") or Path(f"{path}.bed").is_file():
        return "bfile"
    raise InputDataError(
        f"cannot split genotypes {path}: give a PLINK prefix (.bed), a .pgen or a VCF"
    )


def _keep_file(stem: str, kind: str, ids_file: Path) -> Path:
    """A plink2 ``--keep`` file (``#FID IID``) for the sample IDs listed in ``ids_file``.

    plink2 reads a one-column keep file as family IDs in some versions: the family IDs are
    taken from the ``.fam``/``.psam`` so that the file is unambiguous.
    """
    wanted = set(ids_file.read_text().split())
    if kind == "bfile":
        table = pd.read_csv(f"{stem}.fam", sep=r"\s+", header=None, dtype=str, usecols=[0, 1])
        fid, iid = table[0], table[1]
    else:
        table = pd.read_csv(f"{stem}.psam", sep="\t", dtype=str)
        iid = table["IID"] if "IID" in table.columns else table["#IID"]
        fid = table["#FID"] if "#FID" in table.columns else iid
    keep = ids_file.with_suffix(".plink2")
    rows = [f"{f}\t{i}\n" for f, i in zip(fid, iid, strict=True) if i in wanted]
    keep.write_text("#FID\tIID\n" + "".join(rows))
    return keep


def _split_genotypes(path: str, ids_file: Path, out_prefix: Path) -> tuple[str, str]:
    """The site's copy of ``path`` restricted to the samples in ``ids_file``: (path, format)."""
    kind = _format_of(path)
    out_prefix.parent.mkdir(parents=True, exist_ok=True)
    if kind == "vcf":
        out = f"{out_prefix}.vcf.gz"
        _run(["bcftools", "view", "-S", str(ids_file), "-Oz", "-o", out, path], f"bcftools {path}")
        _run(["bcftools", "index", "-t", out], f"bcftools index {out}")
        return out, "vcf"
    stem = path.removesuffix(".bed").removesuffix(".pgen")
    flag = "--bfile" if kind == "bfile" else "--pfile"
    make = "--make-bed" if kind == "bfile" else "--make-pgen"
    keep = _keep_file(stem, kind, ids_file)
    argv = ["plink2", flag, stem, "--keep", str(keep), make, "--out", str(out_prefix)]
    _run(argv + ["--silent"], f"plink2 split of {path}")
    return str(out_prefix), kind


def split_site(
    site: str,
    sample_ids: Sequence[str],
    *,
    genotypes: Sequence[str],
    phenotypes: pd.DataFrame,
    id_column: str,
    sheet: pd.DataFrame,
    out: str | Path,
    truth: str | Path | None = None,
) -> SiteInputs:
    """Write one site's folder ``out``: ``genotypes/``, ``phenotypes.tsv``, ``samples.tsv``.

    Parameters
    ----------
    site : str
    sample_ids : sequence of str
        The site's samples (genotype IDs).
    genotypes : sequence of str
        The cohort's genotype files or prefixes (each is split).
    phenotypes : DataFrame
        The cohort's phenotype table, every column as text.
    id_column : str
        Its column holding the genotype sample ID.
    sheet : DataFrame
        The cohort's samples sheet (``sample_id``, ``client``, ...), as text.
    out : str or Path
    truth : str or Path, optional
        The simulator's causal-variant table, copied to ``out/truth.tsv``.
    """
    out = Path(out)
    (out / "genotypes").mkdir(parents=True, exist_ok=True)
    ids = list(sample_ids)
    ids_file = out / "genotypes" / "samples.keep"
    ids_file.write_text("".join(f"{s}\n" for s in ids))
    files, formats = [], set()
    for i, path in enumerate(genotypes):
        name = site if len(genotypes) == 1 else f"{site}.{i + 1}"
        split, kind = _split_genotypes(str(path), ids_file, out / "genotypes" / name)
        files.append(split)
        formats.add(kind)
    if len(formats) != 1:
        raise InputDataError(f"the cohort's genotype files mix formats {sorted(formats)}")
    wanted = set(ids)
    phenotypes[phenotypes[id_column].isin(wanted)].to_csv(
        out / "phenotypes.tsv", sep="\t", index=False
    )
    sheet[sheet["sample_id"].isin(wanted)].to_csv(out / "samples.tsv", sep="\t", index=False)
    copied = None
    if truth is not None:
        copied = out / "truth.tsv"
        shutil.copyfile(truth, copied)
    return SiteInputs(
        site=site,
        genotypes=tuple(str(Path(f).resolve()) for f in files),
        format=formats.pop(),
        phenotypes=str((out / "phenotypes.tsv").resolve()),
        samples=str((out / "samples.tsv").resolve()),
        truth=None if copied is None else str(copied.resolve()),
    )


def split_cohort(
    *,
    genotypes: Sequence[str],
    samples: str | Path,
    phenotypes: str | Path,
    id_column: str,
    out: str | Path,
    truth: str | Path | None = None,
    sites: Sequence[str] | None = None,
) -> dict[str, SiteInputs]:
    """Give every client of the samples sheet its own folder ``out/{site}``; write the sheet.

    Returns
    -------
    dict of str to SiteInputs
        Also written to ``out/samplesheet.tsv``.

    Raises
    ------
    InputDataError
        A client of ``sites`` absent from the samples sheet, a phenotype table without
        ``id_column``, or a tool that fails (its message quoted).
    """
    sheet = pd.read_csv(samples, sep="\t", dtype=str, keep_default_na=False)
    table = pd.read_csv(phenotypes, sep="\t", dtype=str, keep_default_na=False)
    if id_column not in table.columns:
        raise InputDataError(f"phenotype table {phenotypes} has no column {id_column!r}")
    clients = sorted(sheet["client"].unique())
    chosen = clients if sites is None else list(sites)
    unknown = sorted(set(chosen) - set(clients))
    if unknown:
        raise InputDataError(f"sites {unknown} are not clients of samples sheet {samples}")
    out = Path(out)
    result = {}
    for site in chosen:
        ids = sheet.loc[sheet["client"] == site, "sample_id"].tolist()
        result[site] = split_site(
            site,
            ids,
            genotypes=genotypes,
            phenotypes=table,
            id_column=id_column,
            sheet=sheet,
            out=out / site,
            truth=truth,
        )
    write_samplesheet(result, out / "samplesheet.tsv")
    return result
