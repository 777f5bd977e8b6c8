"""PGS Catalog scoring files as the Catalog ships them: the one reader and the one writer.

:func:`read_scorefile` parses format 2.0 files and custom files with the same columns, plain
or gzipped: the ``#key=value`` header, positions from ``hm_chr``/``hm_pos`` when the file is
harmonised (``HmPOS_build``) else from ``chr_name``/``chr_position``, rsIDs (``hm_rsID`` before
``rsID``), ``other_allele`` (or a single ``hm_inferOtherAllele``), the effect type
(``is_dominant`` / ``is_recessive``) and one or several weight columns (``effect_weight``, or
``effect_weight_<name>`` for several scores in one file).

Rows that cannot be matched by position are kept and labelled (``pre_status``), never fatal:

* ``no_position`` — a harmonised row without ``hm_pos`` (the Catalog could not place it on the
  target build), or a row with neither a position nor an rsID;
* ``non_primary_contig`` — a chromosome outside 1–22, X, Y, XY, MT (``22_KI270879v1_alt``,
  ``HSCHR6_MHC_COX_CTG1``, fix patches);
* ``complex`` — ``is_haplotype`` / ``is_diplotype`` / ``is_interaction`` rows and effect alleles
  that are not nucleotides (HLA alleles such as ``HLA-DQA1*0102``, ``P``/``N`` codes).

:func:`write_scorefile` writes the format (header, columns in Catalog order, gzip with a fixed
mtime so that the same weights give the same bytes).
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import GenotypeFormatError, InputDataError
from rvfedprs.genotypes.alleles import spelled_with, upper
from rvfedprs.genotypes.chunk import normalise_chrom

__all__ = [
    "COMPLEX_FLAGS",
    "EFFECT_TYPES",
    "PRE_STATUSES",
    "ScoreFile",
    "declared_build",
    "normalise_build",
    "read_scorefile",
    "write_scorefile",
]

#: Columns flagging rows that are not a single biallelic variant (excluded, logged).
COMPLEX_FLAGS = ("is_haplotype", "is_diplotype", "is_interaction")
#: How a row's effect-allele dosage enters the score (plink2 ``--score`` models).
EFFECT_TYPES = ("additive", "dominant", "recessive")
#: Statuses a row gets before matching (``""``: matchable).
PRE_STATUSES = ("no_position", "non_primary_contig", "complex")

_TRUE = frozenset({"TRUE", "T", "1", "YES"})
_ASCII_SPACES = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # what str.strip() removes from ASCII text
_BANNER = (
    "###PGS CATALOG SCORING FILE - see https://www.pgscatalog.org/downloads/#dl_ftp_scoring "
    "for additional information"
)
#: Catalog column order for the writer (those present are written in this order).
_WRITE_ORDER = (
    "rsID",
    "chr_name",
    "chr_position",
    "effect_allele",
    "other_allele",
    "effect_weight",
    "is_dominant",
    "is_recessive",
)


@dataclass
class ScoreFile:
    """A parsed scoring file: one row per line, one weight column per score.

    Attributes
    ----------
    path : str
    table : DataFrame, shape (n_rows, 9)
        ``row`` (0-based line number among the data lines), ``rsid`` (``""`` when absent),
        ``chrom`` (normalised, ``""`` when unplaced), ``pos`` (Int64, NA when unplaced),
        ``effect_allele``, ``other_allele`` (upper case, ``""`` when absent), ``effect_type``
        (one of :data:`EFFECT_TYPES`), ``pre_status`` (``""`` or one of :data:`PRE_STATUSES`),
        and ``effect_weight`` (the first score's weights, float64).
    weights : ndarray of float64, shape (n_rows, n_scores)
        NaN where a row is not part of a score (a blank cell of ``effect_weight_<name>``).
    scores : list of str
        Score names: the ``pgs_id`` header (else the file name) for a single ``effect_weight``
        column; ``<name>`` for each ``effect_weight_<name>`` column.
    header : dict of str to str
        The ``#key=value`` lines (``genome_build``, ``pgs_id``, ``HmPOS_build``, ...).
    genome_build : str or None
        ``HmPOS_build`` when positions are harmonised, else ``genome_build``.
    harmonised : bool
        Positions come from ``hm_chr``/``hm_pos``.
    """

    path: str
    table: pd.DataFrame
    weights: np.ndarray
    scores: list[str]
    header: dict[str, str] = field(default_factory=dict)
    genome_build: str | None = None
    harmonised: bool = False

    def __repr__(self) -> str:
        return (
            f"ScoreFile({self.path!r}, n_rows={len(self.table)}, scores={self.scores}, "
            f"build={self.genome_build!r})"
        )


def _open_text(path: Path):
    with path.open("rb") as handle:
        gz = handle.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt") if gz else path.open("rt")


def _read_raw(path: Path) -> tuple[pd.DataFrame, dict[str, str]]:
    header: dict[str, str] = {}
    try:
        with _open_text(path) as handle:
            n_comment = 0
            for line in handle:
                if not line.startswith("#"):
                    break
                n_comment += 1
                key, sep, value = line.lstrip("#").strip().partition("=")
                if sep:
                    header[key.strip()] = value.strip()
        with _open_text(path) as handle:
            raw = pd.read_csv(
                handle, sep="\t", skiprows=n_comment, dtype=str, keep_default_na=False
            )
            columns = list(raw.columns)
    except (OSError, EOFError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise InputDataError(f"{path}: cannot read the scoring file ({exc})") from exc
    except pd.errors.EmptyDataError as exc:
        raise InputDataError(f"{path}: the scoring file has no column header") from exc
    cells = [raw.iloc[:, i].tolist() for i in range(raw.shape[1])]
    stripped = [_stripped(column) for column in cells]
    if any(new is not old for new, old in zip(stripped, cells, strict=True)):
        raw = pd.DataFrame(dict(enumerate(stripped)), index=raw.index, dtype=object)
    raw.columns = [c.strip() for c in columns]
    return raw, header


def _stripped(values: list) -> list[str]:
    """``values`` with surrounding spaces removed; "" for a field missing from a short row.

    A column of ASCII text without a single space character is returned as it is (most
    columns of most files; a substring search per space character over the joined column is
    far cheaper than a call per field). Otherwise each field is stripped (a plain list
    comprehension: pandas' ``.str`` methods cost several times more per value).
    """
    try:
        joined = "".join(values)
    except TypeError:  # a short row's missing field (NaN)
        return [v.strip() if isinstance(v, str) else "" for v in values]
    if joined.isascii() and not any(space in joined for space in _ASCII_SPACES):
        return values
    return [v.strip() for v in values]


def _upper(values: pd.Series) -> pd.Series:
    return pd.Series(upper(values.tolist()), index=values.index, dtype=object)


def _flag(raw: pd.DataFrame, column: str) -> np.ndarray:
    if column not in raw.columns:
        return np.zeros(len(raw), dtype=bool)
    return _upper(raw[column]).isin(_TRUE).to_numpy()


def _weights(raw: pd.DataFrame, path: Path, header: dict[str, str]) -> tuple[np.ndarray, list]:
    """The weight matrix and the score names (see :class:`ScoreFile`)."""
    multi = [c for c in raw.columns if c.startswith("effect_weight_")]
    if multi:
        columns, names = multi, [c.removeprefix("effect_weight_") for c in multi]
    elif "effect_weight" in raw.columns:
        stem = path.name.split(".")[0]
        columns, names = ["effect_weight"], [header.get("pgs_id") or stem]
    else:
        raise InputDataError(
            f"{path}: no 'effect_weight' column (columns: {list(raw.columns)}); "
            "expected a PGS Catalog scoring file"
        )
    out = np.empty((len(raw), len(columns)), dtype=np.float64)
    for k, column in enumerate(columns):
        text = raw[column]
        values = pd.to_numeric(text, errors="coerce")
        bad = values.isna() & ~((text == "") & bool(multi))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputDataError(
                f"{path}: {column} {raw[column].iloc[i]!r} on row {i + 1} is not a number"
            )
        out[:, k] = values.to_numpy(dtype=np.float64)
        if np.isnan(out[:, k]).all():
            raise InputDataError(
                f"{path}: {column} is blank on every row; score {names[k]!r} has no variants"
            )
    return out, names


def _placement(
    raw: pd.DataFrame, path: Path, harmonised: bool
) -> tuple[np.ndarray, pd.Series, np.ndarray]:
    """(chrom, pos, pre_status) per row from the harmonised or the author-reported columns."""
    chrom_col, pos_col = ("hm_chr", "hm_pos") if harmonised else ("chr_name", "chr_position")
    n = len(raw)
    status = np.full(n, "", dtype=object)
    if chrom_col not in raw.columns or pos_col not in raw.columns:
        return (
            np.full(n, "", dtype=object),
            pd.Series(pd.NA, index=raw.index, dtype="Int64"),
            status,
        )
    names = raw[chrom_col]
    positions = pd.to_numeric(raw[pos_col], errors="coerce").astype("Int64")
    placed = (names != "") & positions.notna()
    mapping: dict[str, str] = {}
    for name in pd.unique(names[placed]):
        try:
            mapping[name] = normalise_chrom(name, source=str(path))
        except GenotypeFormatError:
            mapping[name] = ""
    chrom = names.map(mapping).where(placed, "").fillna("").to_numpy(dtype=object)
    off_primary = placed.to_numpy() & (chrom == "")
    status[off_primary] = "non_primary_contig"
    if harmonised:  # the Catalog could not place the row on the target build
        status[~placed.to_numpy()] = "no_position"
    return chrom, positions.where(placed & ~off_primary), status


def read_scorefile(path: str | Path) -> ScoreFile:
    """Read a PGS Catalog scoring file (format 2.0 or a custom file with the same columns).

    Parameters
    ----------
    path : str or Path
        Plain or gzip-compressed; ``#`` lines before the column header hold metadata.

    Returns
    -------
    ScoreFile

    Raises
    ------
    InputDataError
        A file with no variant rows (only ``#`` lines and the column header), missing
        ``effect_allele`` or weight columns, a non-numeric weight (naming the row and value),
        a weight column blank on every row, a row both dominant and recessive, or a file whose
        every row is complex or unplaceable (nothing could be scored).
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"scoring file {path} does not exist")
    raw, header = _read_raw(path)
    if len(raw) == 0:
        raise InputDataError(
            f"{path}: the scoring file has no variant rows (only its header: "
            f"{len(header)} '#key=value' lines and the columns {list(raw.columns)}); a score "
            "of no variants would be 0 for every sample"
        )
    if "effect_allele" not in raw.columns:
        raise InputDataError(
            f"{path}: no 'effect_allele' column (columns: {list(raw.columns)}); "
            "expected a PGS Catalog scoring file"
        )
    weights, names = _weights(raw, path, header)
    harmonised = {"hm_chr", "hm_pos"} <= set(raw.columns)
    chrom, pos, status = _placement(raw, path, harmonised)
    rsid = pd.Series("", index=raw.index, dtype=object)
    for column in ("rsID", "hm_rsID"):  # the harmonised ID wins where present
        if column in raw.columns:
            value = raw[column]
            rsid = value.where(value != "", rsid)
    effect = _upper(raw["effect_allele"])
    other = (
        _upper(raw["other_allele"])
        if "other_allele" in raw.columns
        else pd.Series("", index=raw.index)
    )
    if "hm_inferOtherAllele" in raw.columns:  # only a single inferred allele is usable
        inferred = _upper(raw["hm_inferOtherAllele"])
        usable = (other == "").to_numpy() & spelled_with(inferred, "ACGT")
        other = other.where(~usable, inferred)
    dominant, recessive = _flag(raw, "is_dominant"), _flag(raw, "is_recessive")
    both = dominant & recessive
    if both.any():
        raise InputDataError(
            f"{path}: row {int(np.flatnonzero(both)[0]) + 1} has is_dominant and is_recessive "
            "both True; a row has one effect model"
        )
    complex_row = np.zeros(len(raw), dtype=bool)
    for column in COMPLEX_FLAGS:
        complex_row |= _flag(raw, column)
    complex_row |= ~spelled_with(effect, "ACGTN")
    complex_row |= (other != "").to_numpy() & ~spelled_with(other, "ACGTN")
    status = np.where(complex_row, "complex", status).astype(object)
    unplaced = np.asarray(pd.isna(pos), dtype=bool) & (rsid == "").to_numpy() & (status == "")
    status[unplaced] = "no_position"
    if len(raw) and (status != "").all():
        counts = pd.Series(status).value_counts().to_dict()
        raise InputDataError(
            f"{path}: none of its {len(raw)} rows can be scored ({counts}); complex rows "
            "(haplotypes, diplotypes, interactions, HLA alleles) and rows without a position "
            "on a primary chromosome are excluded"
        )
    table = pd.DataFrame(
        {
            "row": np.arange(len(raw), dtype=np.int64),
            "rsid": rsid.to_numpy(dtype=object),
            "chrom": chrom,
            "pos": pos,
            "effect_allele": effect.to_numpy(dtype=object),
            "other_allele": other.to_numpy(dtype=object),
            "effect_type": np.select(
                [dominant, recessive], ["dominant", "recessive"], "additive"
            ).astype(object),
            "pre_status": status,
            "effect_weight": weights[:, 0],
        }
    )
    build = header.get("HmPOS_build") if harmonised else header.get("genome_build")
    return ScoreFile(str(path), table, weights, names, header, build, harmonised)


_BUILD_ALIASES = {
    "grch37": "GRCh37", "hg19": "GRCh37", "37": "GRCh37", "b37": "GRCh37", "hs37": "GRCh37",
    "grch38": "GRCh38", "hg38": "GRCh38", "38": "GRCh38", "b38": "GRCh38",
}  # fmt: skip


def normalise_build(name: str, *, where: str = "") -> str:
    """``GRCh37`` or ``GRCh38`` for a build name or alias (``hg19``, ``b38``, ...).

    Raises
    ------
    InputDataError
        For a name outside the known aliases (naming it and ``where`` it comes from).
    """
    build = _BUILD_ALIASES.get(str(name).lower())
    if build is None:
        source = f"{where} declares" if where else "got"
        raise InputDataError(
            f"{source} an unknown genome build {name!r}; "
            f"expected one of {sorted(set(_BUILD_ALIASES.values()))}"
        )
    return build


def declared_build(scorefile: str | Path | ScoreFile) -> str | None:
    """The genome build a scoring file declares, normalised to ``GRCh37``/``GRCh38``.

    A harmonised file's ``#HmPOS_build`` wins over ``#genome_build``. Only the header is read
    when given a path.

    Returns
    -------
    str or None
        None when the header declares none or ``NR`` (not reported).

    Raises
    ------
    InputDataError
        For a build name outside the known aliases (naming it).
    """
    if isinstance(scorefile, ScoreFile):
        header, where = scorefile.header, scorefile.path
    else:
        header, where = {}, str(scorefile)
        with _open_text(Path(scorefile)) as handle:
            for line in handle:
                if not line.startswith("#"):
                    break
                key, sep, value = line.lstrip("#").strip().partition("=")
                if sep:
                    header[key.strip()] = value.strip()
    raw = header.get("HmPOS_build") or header.get("genome_build")
    if raw is None or raw.upper() in ("", "NR", "NA", "NONE"):
        return None
    return normalise_build(raw, where=f"scoring file {where}")


def write_scorefile(
    path: str | Path,
    weights: pd.DataFrame,
    *,
    header: Mapping[str, object],
    float_format: str = "%.10g",
) -> Path:
    """Write a PGS Catalog scoring file (format 2.0), gzipped when ``path`` ends in ``.gz``.

    Parameters
    ----------
    path : str or Path
    weights : DataFrame
        Columns among ``rsID, chr_name, chr_position, effect_allele, other_allele,
        effect_weight, is_dominant, is_recessive`` (written in that order) and any
        ``effect_weight_<name>`` columns (written after them); ``effect_allele`` and a weight
        column are required.
    header : mapping
        ``#key=value`` lines in the given order after the Catalog banner and
        ``#format_version=2.0`` (e.g. ``pgs_id``, ``pgs_name``, ``trait_reported``,
        ``weight_type``, ``genome_build``, ``variants_number``).
    float_format : str
        How weights are printed.

    Returns
    -------
    Path
    """
    columns = [c for c in _WRITE_ORDER if c in weights.columns]
    columns += [c for c in weights.columns if c.startswith("effect_weight_")]
    if "effect_allele" not in columns or not any(c.startswith("effect_weight") for c in columns):
        raise ValueError(f"weights need effect_allele and a weight column, got {columns}")
    lines = [_BANNER, "#format_version=2.0", "##POLYGENIC SCORE (PGS) INFORMATION"]
    lines += [f"#{k}={v}" for k, v in header.items() if k != "format_version"]
    text = (
        "\n".join(lines)
        + "\n"
        + weights[columns].to_csv(sep="\t", index=False, float_format=float_format)
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":  # no name, mtime=0: the same weights give the same bytes
        path.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        path.write_text(text)
    return path


def scorefile_rows(scorefile: ScoreFile, rows: Sequence[int]) -> pd.DataFrame:
    """The given rows of a parsed file in the writer's columns (for :func:`write_scorefile`).

    Positions are the matched (harmonised, where the file was) ones; every weight column is
    kept (``effect_weight`` for one score, ``effect_weight_<name>`` for several).
    """
    picked = scorefile.table.set_index("row").loc[list(rows)]
    out = pd.DataFrame(
        {
            "rsID": picked["rsid"].to_numpy(),
            "chr_name": picked["chrom"].to_numpy(),
            "chr_position": picked["pos"].to_numpy(),
            "effect_allele": picked["effect_allele"].to_numpy(),
            "other_allele": picked["other_allele"].to_numpy(),
        }
    )
    w = scorefile.weights[np.asarray(list(rows), dtype=np.int64)]
    if len(scorefile.scores) == 1:
        out["effect_weight"] = w[:, 0]
    else:
        for k, name in enumerate(scorefile.scores):
            out[f"effect_weight_{name}"] = w[:, k]
    kinds = picked["effect_type"].to_numpy()
    if (kinds != "additive").any():
        out["is_dominant"] = np.where(kinds == "dominant", "TRUE", "FALSE")
        out["is_recessive"] = np.where(kinds == "recessive", "TRUE", "FALSE")
    return out
