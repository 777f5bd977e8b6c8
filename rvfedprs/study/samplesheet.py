"""The consortium's site sheet: which files each site holds (pgsc_calc-style).

One row per site and genotype file (a site with per-chromosome files has several rows)::

    site  genotypes                 format  phenotypes            samples  vcf_genotype_field  truth
    ukb   /data/ukb/chr22.vcf.gz    vcf     /data/ukb/pheno.tsv            GT
    ukb   /data/ukb/chr21.vcf.gz    vcf     /data/ukb/pheno.tsv            GT
    hunt  /data/hunt/hunt           bfile   /data/hunt/pheno.tsv

``genotypes`` is a file or a PLINK/pgen prefix; ``format`` one of ``vcf``, ``bfile``, ``pfile``,
``bgen``; ``phenotypes`` the site's phenotype table; ``samples`` (optional) a samples sheet
naming the site's samples (all of the phenotype table's otherwise); ``vcf_genotype_field``
(optional) ``GT`` or ``DS``; ``truth`` (optional, simulated cohorts only) the causal-variant
table a site uses to score carriers. Sites may use different formats and hold disjoint sample
sets. Relative paths are relative to the sheet's folder. Every problem is named with its row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from rvfedprs.cohort import check_line_endings
from rvfedprs.exceptions import InputDataError

__all__ = [
    "FORMATS",
    "REQUIRED_COLUMNS",
    "OPTIONAL_COLUMNS",
    "SiteInputs",
    "read_samplesheet",
    "read_site_ids",
    "write_samplesheet",
]

#: The ``format`` values and the files each stands for (``genotypes`` is the path or prefix).
FORMATS = ("vcf", "bfile", "pfile", "bgen")
REQUIRED_COLUMNS = ("site", "genotypes", "format", "phenotypes")
OPTIONAL_COLUMNS = ("samples", "vcf_genotype_field", "truth")
_SITE_WIDE = ("format", "phenotypes", "samples", "vcf_genotype_field", "truth")


@dataclass(frozen=True)
class SiteInputs:
    """One site's input files.

    Attributes
    ----------
    site : str
    genotypes : tuple of str
        Files or prefixes (several: one per chromosome).
    format : {"vcf", "bfile", "pfile", "bgen"}
    phenotypes : str
    samples : str or None
    vcf_genotype_field : str or None
    truth : str or None
    """

    site: str
    genotypes: tuple[str, ...]
    format: str
    phenotypes: str
    samples: str | None = None
    vcf_genotype_field: str | None = None
    truth: str | None = None

    def as_dict(self) -> dict[str, object]:
        """JSON-able form (a site's node receives its own inputs this way)."""
        return {
            "site": self.site,
            "genotypes": list(self.genotypes),
            "format": self.format,
            "phenotypes": self.phenotypes,
            "samples": self.samples,
            "vcf_genotype_field": self.vcf_genotype_field,
            "truth": self.truth,
        }

    @classmethod
    def from_dict(cls, value: Mapping[str, object]) -> SiteInputs:
        """Inverse of :meth:`as_dict`."""
        return cls(
            site=str(value["site"]),
            genotypes=tuple(str(g) for g in value["genotypes"]),
            format=str(value["format"]),
            phenotypes=str(value["phenotypes"]),
            samples=None if value.get("samples") is None else str(value["samples"]),
            vcf_genotype_field=None
            if value.get("vcf_genotype_field") is None
            else str(value["vcf_genotype_field"]),
            truth=None if value.get("truth") is None else str(value["truth"]),
        )


def _resolve(value: str, base: Path) -> str:
    path = Path(value)
    return str(path if path.is_absolute() else (base / path))


def _read_sheet(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise InputDataError(f"site sheet not found: {path}")
    check_line_endings(path)
    return pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)


def read_site_ids(path: str | Path) -> list[str]:
    """The sites of a site sheet, sorted: its ``site`` column only (other columns ignored).

    What a coordinator whose sites start their own SuperNodes (``rvfedprs site``) needs: each
    site names its files in its own configuration, never in the coordinator's sheet.

    Raises
    ------
    InputDataError
        A missing file or ``site`` column, an empty site, or no site at all.
    """
    path = Path(path)
    sheet = _read_sheet(path)
    if "site" not in sheet.columns:
        raise InputDataError(f"site sheet {path} has no 'site' column (has {list(sheet.columns)})")
    sites = sheet["site"].str.strip()
    empty = [line for line, site in zip(sheet.index + 2, sites, strict=True) if not site]
    if empty:
        raise InputDataError(f"site sheet {path}: empty site on line(s) {empty}")
    if sites.empty:
        raise InputDataError(f"site sheet {path} lists no site")
    return sorted(set(sites))


def read_samplesheet(path: str | Path) -> dict[str, SiteInputs]:
    """Read and check a site sheet; returns site → its inputs, sites sorted.

    Raises
    ------
    InputDataError
        A missing file or column, an empty value, an unknown format, or rows of one site that
        disagree on a site-wide column (each naming the line and the value).
    """
    path = Path(path)
    sheet = _read_sheet(path)
    missing = [c for c in REQUIRED_COLUMNS if c not in sheet.columns]
    if missing:
        raise InputDataError(
            f"site sheet {path} lacks columns {missing} (has {list(sheet.columns)})"
        )
    unknown = sorted(set(sheet.columns) - set(REQUIRED_COLUMNS) - set(OPTIONAL_COLUMNS))
    if unknown:
        raise InputDataError(
            f"site sheet {path} has unknown columns {unknown}; "
            f"known: {list(REQUIRED_COLUMNS + OPTIONAL_COLUMNS)}"
        )
    if sheet.empty:
        raise InputDataError(f"site sheet {path} lists no site")
    for column in OPTIONAL_COLUMNS:
        if column not in sheet.columns:
            sheet[column] = ""
    sheet = sheet.apply(lambda col: col.str.strip())
    base = path.parent
    sites: dict[str, SiteInputs] = {}
    for site, rows in sheet.groupby("site", sort=True):
        lines = (rows.index + 2).tolist()
        for column in REQUIRED_COLUMNS:
            empty = [line for line, v in zip(lines, rows[column], strict=True) if not v]
            if empty:
                raise InputDataError(f"site sheet {path}: empty {column!r} on line(s) {empty}")
        if not site:
            raise InputDataError(f"site sheet {path}: empty site on line(s) {lines}")
        for column in _SITE_WIDE:
            values = sorted(set(rows[column]))
            if len(values) > 1:
                raise InputDataError(
                    f"site sheet {path}: site {site!r} has different {column!r} values "
                    f"{values} on lines {lines}"
                )
        first = rows.iloc[0]
        if first["format"] not in FORMATS:
            raise InputDataError(
                f"site sheet {path}, line {lines[0]}: format {first['format']!r} of site "
                f"{site!r} unknown; choose from {list(FORMATS)}"
            )
        field_value = first["vcf_genotype_field"] or None
        if field_value is not None and field_value not in ("GT", "DS"):
            raise InputDataError(
                f"site sheet {path}, line {lines[0]}: vcf_genotype_field {field_value!r} of site "
                f"{site!r} unknown; choose from ['GT', 'DS']"
            )
        sites[site] = SiteInputs(
            site=site,
            genotypes=tuple(_resolve(g, base) for g in rows["genotypes"]),
            format=first["format"],
            phenotypes=_resolve(first["phenotypes"], base),
            samples=_resolve(first["samples"], base) if first["samples"] else None,
            vcf_genotype_field=field_value,
            truth=_resolve(first["truth"], base) if first["truth"] else None,
        )
    return sites


def write_samplesheet(sites: Mapping[str, SiteInputs], path: str | Path) -> Path:
    """Write ``sites`` as a site sheet (absolute paths; one row per genotype file)."""
    rows = []
    for site in sorted(sites):
        inputs = sites[site]
        for genotypes in inputs.genotypes:
            rows.append(
                {
                    "site": site,
                    "genotypes": genotypes,
                    "format": inputs.format,
                    "phenotypes": inputs.phenotypes,
                    "samples": inputs.samples or "",
                    "vcf_genotype_field": inputs.vcf_genotype_field or "",
                    "truth": inputs.truth or "",
                }
            )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=[*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS]).to_csv(
        path, sep="\t", index=False
    )
    return path
