"""The cohort around the genotypes: samples sheet, phenotype table and per-client sample sets.

Pure table logic the preparation pipeline builds on: read and check the samples sheet
(``sample_id, client, ...``) and a UK-Biobank-style phenotype table, reconcile their sample IDs
with the genotype files, drop clients that cannot be trained on, and split each client's
samples into train and test sets stratified by phenotype. The phenotype is binary (cases and
controls) or quantitative (a finite number per sample); which, ``kind``, is an outcome of
:mod:`rvfedprs.outcomes`, whose strata the splits keep in proportion. Nothing is dropped
silently: every
function that removes something returns the removals as an exclusion table
(:data:`EXCLUSION_COLUMNS`), which the pipeline writes to ``results/logs/exclusions.tsv``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.outcomes import Outcome, outcome

__all__ = [
    "EXCLUSION_COLUMNS",
    "exclusions",
    "check_line_endings",
    "sniff_table",
    "read_tsv",
    "load_samples_sheet",
    "samples_sheet_from_psam",
    "load_phenotypes",
    "COVARIATE_MISSING",
    "RESERVED_COLUMNS",
    "load_covariates",
    "impute_covariates",
    "reconcile_samples",
    "restrict_to_genotyped",
    "check_clients",
    "stratified_split",
    "assign_splits",
]

EXCLUSION_COLUMNS = ("kind", "id", "reason", "step")
"""Columns of an exclusion table: ``kind`` is ``sample``, ``client`` or ``variant``."""

_MAX_NAMED = 20  # how many offending values an error message lists by name


def exclusions(
    kind: str, ids: Iterable[str], reason: str | Iterable[str], step: str
) -> pd.DataFrame:
    """Build an exclusion table.

    Parameters
    ----------
    kind : str
        ``"sample"``, ``"client"`` or ``"variant"``.
    ids : iterable of str
        The excluded identifiers.
    reason : str or iterable of str
        One reason for all, or one per identifier.
    step : str
        The pipeline step that excluded them.

    Returns
    -------
    pandas.DataFrame
        Columns :data:`EXCLUSION_COLUMNS`, one row per identifier.
    """
    ids = [str(i) for i in ids]
    reasons = [reason] * len(ids) if isinstance(reason, str) else [str(r) for r in reason]
    if len(reasons) != len(ids):
        raise ValueError(f"{len(ids)} ids but {len(reasons)} reasons")
    return pd.DataFrame(
        {"kind": kind, "id": ids, "reason": reasons, "step": step},
        columns=list(EXCLUSION_COLUMNS),
    )


def _name_some(values: Sequence[str]) -> str:
    values = sorted(map(str, values))
    shown = ", ".join(values[:_MAX_NAMED])
    if len(values) > _MAX_NAMED:
        shown += f", ... ({len(values) - _MAX_NAMED} more)"
    return shown


#: Leading bytes of compressed files, and the format each names.
_COMPRESSED = {
    b"\x1f\x8b": "gzip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
}
#: The suffixes of a gzip (or bgzip) file that tables are read through.
_GZIP_SUFFIXES = (".gz", ".bgz")


def sniff_table(path: str | Path, what: str = "table") -> str | None:
    """Check that a text table is present, not empty and compressed only as its name says.

    Returns
    -------
    str or None
        ``"gzip"`` for a gzip/bgzip file named ``.gz``/``.bgz``, None for plain text.

    Raises
    ------
    InputDataError
        The file is absent, empty (0 bytes), or compressed (gzip, zstd, bzip2, xz, zip) under
        a name that does not say gzip — naming the file and the format.
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"{what} not found: {path}")
    if path.stat().st_size == 0:
        raise InputDataError(f"{what} {path} is empty (0 bytes)")
    with open(path, "rb") as handle:
        head = handle.read(8)
    for magic, name in _COMPRESSED.items():
        if head.startswith(magic):
            if name == "gzip" and path.suffix in _GZIP_SUFFIXES:
                return "gzip"
            raise InputDataError(
                f"{what} {path} is {name}-compressed but its name does not end in .gz; "
                + ("rename it to end in .gz" if name == "gzip" else "decompress it")
            )
    return None


def check_line_endings(path: str | Path, *, max_bytes: int = 1 << 16) -> None:
    """Raise when a text table uses Windows (CRLF) line endings.

    Only the first ``max_bytes`` are read; gzip-compressed files are decompressed.

    Raises
    ------
    InputDataError
        Naming the file and the first line that ends in CRLF.
    """
    path = Path(path)
    if path.suffix in _GZIP_SUFFIXES:
        import gzip

        with gzip.open(path, "rb") as handle:
            head = handle.read(max_bytes)
    else:
        with open(path, "rb") as handle:
            head = handle.read(max_bytes)
    position = head.find(b"\r\n")
    if position >= 0:
        line = head[:position].count(b"\n") + 1
        raise InputDataError(
            f"{path} has Windows (CRLF) line endings (first at line {line}); "
            "convert it with `dos2unix` or `sed -i 's/\\r$//'`"
        )


def read_tsv(
    path: str | Path, *, required: Sequence[str] = (), what: str = "table"
) -> pd.DataFrame:
    """Read a tab-separated table as strings, after checking line endings and columns.

    Parameters
    ----------
    path : str or Path
        The file.
    required : sequence of str
        Columns that must be present.
    what : str
        What the table is, for messages (``"samples sheet"``).

    Returns
    -------
    pandas.DataFrame
        All columns as ``str`` (missing cells as empty strings).

    Raises
    ------
    InputDataError
        The file is absent, empty, compressed under a plain name (:func:`sniff_table`), not
        UTF-8 text, has CRLF endings, is not tab-separated, or lacks a required column (naming
        the columns it has).
    """
    path = Path(path)
    compression = sniff_table(path, what)
    check_line_endings(path)
    try:
        table = pd.read_csv(
            path,
            sep="\t",
            dtype=str,
            keep_default_na=False,
            comment=None,
            compression=compression,
            encoding="utf-8",
        )
    except UnicodeDecodeError as exc:
        raise InputDataError(
            f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as "
            "UTF-8 tab-separated text"
        ) from exc
    except pd.errors.EmptyDataError as exc:
        raise InputDataError(f"{what} {path} has no header line (only blank lines)") from exc
    table.columns = [str(c).lstrip("#") if i == 0 else str(c) for i, c in enumerate(table.columns)]
    missing = [c for c in required if c not in table.columns]
    header = str(table.columns[0])
    if missing and len(table.columns) == 1:
        for name, mark in (("comma", ","), ("semicolon", ";"), ("space", " ")):
            if mark in header:
                raise InputDataError(
                    f"{what} {path} is not tab-separated: its header {header[:80]!r} looks "
                    f"{name}-separated; rvfedprs reads tab-separated tables (TSV)"
                )
    if missing:
        raise InputDataError(
            f"{what} {path} lacks column(s) {missing}; it has {list(table.columns)}"
        )
    return table


def _check_unique(values: pd.Series, *, what: str, path: str | Path) -> None:
    counts = values.value_counts()
    duplicated = counts[counts > 1]
    if len(duplicated):
        raise InputDataError(
            f"{len(duplicated)} duplicate ID(s) in {what} {path}: "
            + _name_some([f"{k} (x{v})" for k, v in duplicated.items()])
        )


def load_samples_sheet(path: str | Path) -> pd.DataFrame:
    """Read and check a samples sheet (``sample_id``, ``client`` and any other columns).

    Returns
    -------
    pandas.DataFrame
        The sheet in file order, all columns as ``str``.

    Raises
    ------
    InputDataError
        CRLF endings, missing columns, duplicate or empty sample IDs, or empty client names
        (each naming the offending IDs).
    """
    sheet = read_tsv(path, required=("sample_id", "client"), what="samples sheet")
    if (sheet["sample_id"].str.strip() == "").any():
        rows = (np.flatnonzero(sheet["sample_id"].str.strip() == "") + 2).tolist()
        raise InputDataError(f"samples sheet {path} has empty sample_id on line(s) {rows}")
    _check_unique(sheet["sample_id"], what="samples sheet", path=path)
    empty = sheet.loc[sheet["client"].str.strip() == "", "sample_id"]
    if len(empty):
        raise InputDataError(
            f"{len(empty)} sample(s) in samples sheet {path} have no client: "
            + _name_some(empty.tolist())
        )
    return sheet


def samples_sheet_from_psam(path: str | Path, *, column: str = "Population") -> pd.DataFrame:
    """Build a samples sheet from a PLINK2 ``.psam``: one client per value of ``column``.

    Parameters
    ----------
    path : str or Path
        A ``.psam`` file whose header starts with ``#IID`` or ``#FID``.
    column : str
        The column naming each sample's client (1000 Genomes: ``Population`` or ``SuperPop``).

    Returns
    -------
    pandas.DataFrame
        Columns ``sample_id, client, population`` (``population`` = the ``column`` value).
    """
    table = read_tsv(path, required=("IID", column), what="psam")
    _check_unique(table["IID"], what="psam", path=path)
    return pd.DataFrame(
        {"sample_id": table["IID"], "client": table[column], "population": table[column]}
    )


def load_phenotypes(
    path: str | Path,
    *,
    column: str,
    id_column: str = "Subject id",
    cases: Sequence[str] = ("1",),
    controls: Sequence[str] = ("0",),
    kind: str | Outcome = "binary",
    step: str = "validate_inputs",
    missing: Sequence[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read a binary or quantitative phenotype from a (UK-Biobank-style) phenotype table.

    A missing value (empty, ``NA``, ``NaN`` and the other cells pandas reads as missing, ``.``,
    or one of ``missing``) excludes the sample (logged). Binary: values are compared as strings
    after stripping blanks; numeric codings such as ``1.0`` also match ``1``; any other value
    is a data error. Quantitative: every other value must parse as a finite number.

    Parameters
    ----------
    path : str or Path
        Tab-separated table with one row per individual.
    column : str
        The phenotype column (``"disease"``, ``"Ever smoked-0.0"``).
    id_column : str
        The column holding the genotype sample ID.
    cases, controls : sequence of str
        Values coding a case (1) and a control (0); binary only.
    missing : sequence of str
        Further values read as missing (``pipeline.phenotype.missing``: UK Biobank's
        ``Prefer not to answer``, ``-3``).
    kind : {"binary", "quantitative"} or Outcome
        The phenotype's kind (``pipeline.phenotype.kind``).
    step : str
        Step name recorded in the exclusion table.

    Returns
    -------
    phenotypes : pandas.DataFrame
        Columns ``sample_id`` (str), ``phenotype`` (int8 0/1; float64 for a quantitative
        trait), in file order.
    excluded : pandas.DataFrame
        One ``sample`` exclusion per individual whose value is missing.

    Raises
    ------
    InputDataError
        Missing columns (listing those present), duplicate IDs, overlapping case/control codes;
        a binary value that is neither a case, a control nor missing, or a quantitative one
        that is not a finite number (naming the column, the values and a few samples and
        their lines).
    """
    table = read_tsv(path, required=(id_column, column), what="phenotype table")
    _check_unique(table[id_column], what="phenotype table", path=path)
    text = table[column].astype(str).str.strip()
    missing_codes = {str(v).strip().upper() for v in missing}
    absent = text.str.upper().isin(_NA_TEXT | missing_codes).to_numpy()
    if outcome(kind).kind == "quantitative":
        return _quantitative_phenotype(table, path, column, id_column, step, absent)
    cases = {_normalise_code(v) for v in cases}
    controls = {_normalise_code(v) for v in controls}
    if cases & controls:
        raise InputDataError(f"values {sorted(cases & controls)} code both cases and controls")
    values = table[column].map(_normalise_code)
    is_case = values.isin(cases).to_numpy()
    is_control = values.isin(controls).to_numpy()
    usable = is_case | is_control
    bad = ~usable & ~absent
    if bad.any():
        raise InputDataError(
            f"phenotype {column!r} in {path}: {int(bad.sum())} value(s) are neither a case "
            f"{sorted(cases)}, a control {sorted(controls)} nor missing: "
            f"{_bad_values(table, bad, column, id_column)}; code them in "
            "pipeline.phenotype.cases / controls, or list them in pipeline.phenotype.missing "
            "to exclude those samples"
        )
    excluded = exclusions(
        "sample",
        table.loc[absent, id_column],
        [f"phenotype {column!r} missing ({v!r})" for v in table.loc[absent, column]],
        step,
    )
    phenotypes = pd.DataFrame(
        {
            "sample_id": table.loc[usable, id_column].to_numpy(dtype=str),
            "phenotype": is_case[usable].astype(np.int8),
        }
    )
    return phenotypes, excluded


def _bad_values(table: pd.DataFrame, bad: np.ndarray, column: str, id_column: str) -> str:
    """The distinct bad values of ``column`` and the first samples holding them, with lines."""
    shown = sorted(set(table.loc[bad, column]))
    rows = np.flatnonzero(bad)
    some = [f"{table[id_column].iloc[i]} (line {i + 2})" for i in rows[:5]]
    more = ", ..." if len(rows) > len(some) else ""
    return f"{_name_some([repr(v) for v in shown])} (samples {', '.join(some)}{more})"


def _quantitative_phenotype(
    table: pd.DataFrame,
    path: str | Path,
    column: str,
    id_column: str,
    step: str,
    missing: np.ndarray,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`load_phenotypes` of a quantitative trait: finite numbers, missing ones logged."""
    text = table[column].str.strip()
    values = pd.to_numeric(text.where(~missing), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~missing & ~np.isfinite(values)
    if bad.any():
        raise InputDataError(
            f"phenotype {column!r} in {path} is quantitative but {int(bad.sum())} value(s) are "
            f"not finite numbers: {_bad_values(table, bad, column, id_column)}; leave a missing "
            "value empty or NA, or list it in pipeline.phenotype.missing"
        )
    excluded = exclusions(
        "sample",
        table.loc[missing, id_column],
        [f"phenotype {column!r} missing ({v!r})" for v in table.loc[missing, column]],
        step,
    )
    phenotypes = pd.DataFrame(
        {
            "sample_id": table.loc[~missing, id_column].to_numpy(dtype=str),
            "phenotype": values[~missing],
        }
    )
    return phenotypes, excluded


#: What to do with a sample whose covariate is empty (``pipeline.covariate_missing``).
COVARIATE_MISSING = ("exclude", "impute_mean")
#: Columns of ``samples.parquet`` a covariate may not be named after.
RESERVED_COLUMNS = ("sample_id", "prs", "phenotype", "split")
#: A missing cell, upper-cased: pandas' default missing values, and ``.`` (PLINK, VCF).
_NA_TEXT = frozenset(
    {"", "NA", "N/A", "#N/A", "#N/A N/A", "#NA", "<NA>", "NAN", "-NAN", "NULL", "NONE", "."}
    | {"1.#IND", "-1.#IND", "1.#QNAN", "-1.#QNAN"}
)


def load_covariates(
    path: str | Path,
    *,
    columns: Sequence[str],
    id_column: str = "Subject id",
    on_missing: str = "exclude",
    step: str = "validate_inputs",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read numeric covariates (age, sex, genetic PCs, ...) from the phenotype table.

    Parameters
    ----------
    path : str or Path
        The phenotype table (tab-separated, one row per individual).
    columns : sequence of str
        The covariate columns, in the order they are written to ``samples.parquet``.
    id_column : str
        The column holding the genotype sample ID.
    on_missing : {"exclude", "impute_mean"}
        A sample with an empty cell (``""``, ``NA``, ``NaN``, ``.``): excluded (one exclusion
        row naming the columns), or kept with NaN for :func:`impute_covariates`.
    step : str
        Step name recorded in the exclusion table.

    Returns
    -------
    covariates : pandas.DataFrame
        ``sample_id`` (str) and one float64 column per covariate, in file order, without the
        excluded samples.
    excluded : pandas.DataFrame
        One ``sample`` exclusion per sample dropped for a missing covariate.

    Raises
    ------
    InputDataError
        A missing column (listing those present), a column named like a ``samples.parquet``
        column (:data:`RESERVED_COLUMNS`), or a non-numeric value (naming the column, the
        sample and the value).
    """
    if on_missing not in COVARIATE_MISSING:
        raise ValueError(
            f"on_missing {on_missing!r} unknown; choose from {list(COVARIATE_MISSING)}"
        )
    columns = list(columns)
    clash = [c for c in columns if c in RESERVED_COLUMNS]
    if clash:
        raise InputDataError(
            f"covariate column(s) {clash} would overwrite samples.parquet columns "
            f"{list(RESERVED_COLUMNS)}; rename them in {path}"
        )
    table = read_tsv(path, required=(id_column, *columns), what="phenotype table")
    out = pd.DataFrame({"sample_id": table[id_column].to_numpy(dtype=str)})
    missing = np.zeros(len(table), dtype=bool)
    missing_names: list[list[str]] = [[] for _ in range(len(table))]
    for column in columns:
        text = table[column].str.strip()
        blank = text.str.upper().isin(_NA_TEXT).to_numpy()
        values = pd.to_numeric(text.where(~blank), errors="coerce")
        bad = values.isna().to_numpy() & ~blank
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputDataError(
                f"covariate {column!r} in {path} is not numeric for sample "
                f"{out['sample_id'].iloc[i]!r}: {table[column].iloc[i]!r} ({int(bad.sum())} "
                "such values); code categories as numbers (e.g. sex 0/1)"
            )
        out[column] = values.to_numpy(dtype=np.float64)
        missing |= blank
        for i in np.flatnonzero(blank):
            missing_names[i].append(column)
    excluded = exclusions("sample", [], [], step)
    if on_missing == "exclude" and missing.any():
        excluded = exclusions(
            "sample",
            out.loc[missing, "sample_id"],
            [
                f"covariate(s) {names} missing"
                for names, m in zip(missing_names, missing, strict=True)
                if m
            ],
            step,
        )
        out = out.loc[~missing].reset_index(drop=True)
    return out, excluded


def impute_covariates(
    covariates: pd.DataFrame, columns: Sequence[str]
) -> tuple[pd.DataFrame, dict[str, list[str]]]:
    """Replace missing covariates by the column's mean over the given samples (one client's).

    Returns
    -------
    covariates : pandas.DataFrame
        A copy with no NaN in ``columns``.
    imputed : dict of str to list of str
        The samples imputed, per column (for the log).

    Raises
    ------
    InputDataError
        When a column has no value at all among these samples (nothing to impute from).
    """
    out = covariates.copy()
    imputed: dict[str, list[str]] = {}
    for column in columns:
        gap = out[column].isna().to_numpy()
        if not gap.any():
            continue
        if gap.all():
            raise InputDataError(
                f"covariate {column!r} is missing for all {len(out)} samples of the client; "
                "nothing to impute the mean from"
            )
        out.loc[gap, column] = float(out.loc[~gap, column].mean())
        imputed[column] = out.loc[gap, "sample_id"].astype(str).tolist()
    return out, imputed


def _normalise_code(value: object) -> str:
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else text


def reconcile_samples(
    genotype_ids: Sequence[str],
    sheet: pd.DataFrame,
    phenotypes: pd.DataFrame,
    *,
    on_mismatch: str = "error",
    sources: tuple[str, str, str] = ("genotypes", "samples sheet", "phenotype table"),
    step: str = "validate_inputs",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Join genotype sample IDs, the samples sheet and phenotypes into one cohort table.

    Parameters
    ----------
    genotype_ids : sequence of str, shape (n_genotyped,)
        Sample IDs in the genotype files, in file order.
    sheet : pandas.DataFrame
        Samples sheet with ``sample_id`` and ``client``.
    phenotypes : pandas.DataFrame
        ``sample_id`` and ``phenotype`` (as from :func:`load_phenotypes`, usable values only;
        the cohort keeps its dtype).
    on_mismatch : {"error", "exclude"}
        What to do with a sample absent from one of the three sources.
    sources : tuple of str
        Names of the three sources used in messages (e.g. the file names).
    step : str
        Step name recorded in the exclusion table.

    Returns
    -------
    cohort : pandas.DataFrame
        ``sample_id, client, phenotype`` (plus the sheet's other columns) for samples present
        in all three sources, in genotype-file order.
    excluded : pandas.DataFrame
        The samples present somewhere but not everywhere (empty when ``on_mismatch="error"``).

    Raises
    ------
    InputDataError
        With ``on_mismatch="error"``: one line per pair of sources, naming the mismatching IDs
        (``"3 samples in phenotypes.tsv are absent from the genotypes: HG1, HG2, HG3"``).
    """
    if on_mismatch not in ("error", "exclude"):
        raise ValueError(f"on_mismatch {on_mismatch!r} unknown; choose from ['error', 'exclude']")
    id_sets = {
        sources[0]: set(map(str, genotype_ids)),
        sources[1]: set(sheet["sample_id"]),
        sources[2]: set(phenotypes["sample_id"]),
    }
    problems: list[str] = []
    reasons: dict[str, list[str]] = {}
    for here, there in [(1, 0), (2, 0), (0, 1), (2, 1), (0, 2), (1, 2)]:
        name_here, name_there = sources[here], sources[there]
        absent = sorted(id_sets[name_here] - id_sets[name_there])
        if absent:
            problems.append(
                f"{len(absent)} sample(s) in {name_here} are absent from {name_there}: "
                + _name_some(absent)
            )
            for sample in absent:
                reasons.setdefault(sample, []).append(f"absent from {name_there}")
    if problems and on_mismatch == "error":
        raise InputDataError("sample IDs disagree between sources:\n  " + "\n  ".join(problems))
    excluded = exclusions("sample", list(reasons), ["; ".join(r) for r in reasons.values()], step)
    genotype_order = pd.DataFrame({"sample_id": np.asarray(genotype_ids, dtype=str)})
    cohort = genotype_order.merge(sheet, on="sample_id", how="inner").merge(
        phenotypes[["sample_id", "phenotype"]], on="sample_id", how="inner"
    )
    # int8 0/1 or a float64 trait, as load_phenotypes gave it (the merge must not change it)
    cohort["phenotype"] = cohort["phenotype"].astype(phenotypes["phenotype"].dtype)
    return cohort.reset_index(drop=True), excluded


def restrict_to_genotyped(
    sheet: pd.DataFrame,
    genotype_ids: Sequence[str],
    *,
    source: str = "the samples sheet",
    step: str = "validate_inputs",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Keep the rows of a samples sheet whose sample is genotyped; log the others.

    A sheet built from a reference panel's labels (``pipeline.clients_from``) usually names
    more samples than a cohort's genotypes hold; those are not an error.

    Parameters
    ----------
    sheet : pandas.DataFrame
        With ``sample_id``.
    genotype_ids : sequence of str
        Sample IDs in the genotype files.
    source : str
        Where the sheet comes from, for the exclusion reason.
    step : str
        Step name recorded in the exclusion table.

    Returns
    -------
    kept : pandas.DataFrame
        The sheet's genotyped rows, in sheet order.
    excluded : pandas.DataFrame
        One ``sample`` exclusion per dropped row.
    """
    present = sheet["sample_id"].isin(set(map(str, genotype_ids)))
    dropped = sheet.loc[~present, "sample_id"]
    excluded = exclusions("sample", dropped, f"in {source} but absent from the genotypes", step)
    return sheet.loc[present].reset_index(drop=True), excluded


def check_clients(
    cohort: pd.DataFrame,
    *,
    min_samples: int = 20,
    min_per_class: int = 1,
    kind: str | Outcome = "binary",
    on_invalid: str = "exclude",
    step: str = "validate_inputs",
    listed: Sequence[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Stop on (or drop) clients too small to train on, of one class or a constant trait.

    Parameters
    ----------
    cohort : pandas.DataFrame
        ``sample_id, client, phenotype``.
    min_samples : int
        Fewest samples a client may hold.
    min_per_class : int
        Fewest cases, and fewest controls, a client may hold (binary only).
    kind : {"binary", "quantitative"} or Outcome
        The phenotype's kind: a quantitative trait has no classes; a client needs
        ``min_samples`` samples and a trait that is not constant.
    on_invalid : {"exclude", "error"}
        Exclude (and log) such clients, or raise naming them (``pipeline.on_invalid_client``'s
        default).
    step : str
        Step name recorded in the exclusion table.
    listed : sequence of str
        Every client the inputs name (the samples sheet's, over the genotyped samples): one
        with no sample left in ``cohort`` (all excluded by earlier checks) is such a client.

    Returns
    -------
    kept : pandas.DataFrame
        The cohort without the excluded clients' samples.
    excluded : pandas.DataFrame
        One ``client`` row per excluded client and one ``sample`` row per sample it held.

    Raises
    ------
    InputDataError
        With ``on_invalid="error"``, naming each client, its counts and the rule it breaks; or
        when no client is left.
    """
    if on_invalid not in ("error", "exclude"):
        raise ValueError(f"on_invalid {on_invalid!r} unknown; choose from ['error', 'exclude']")
    quantitative = outcome(kind).kind == "quantitative"
    bad: dict[str, str] = {
        client: "no sample left after the earlier checks (see the exclusions table)"
        for client in sorted(set(listed) - set(cohort["client"]))
    }
    for client, group in cohort.groupby("client", sort=True):
        n = len(group)
        if quantitative:
            if n < min_samples:
                bad[client] = f"{n} samples, fewer than min_samples_per_client={min_samples}"
            elif group["phenotype"].nunique() < 2:
                value = group["phenotype"].iloc[0]
                bad[client] = f"a constant phenotype ({n} samples, all {value:g})"
            continue
        n_cases = int(group["phenotype"].sum())
        n_controls = n - n_cases
        if n < min_samples:
            bad[client] = f"{n} samples, fewer than min_samples_per_client={min_samples}"
        elif n_cases == 0 or n_controls == 0:
            only = "cases" if n_controls == 0 else "controls"
            bad[client] = f"a single phenotype class ({n} {only}, no other class)"
        elif min(n_cases, n_controls) < min_per_class:
            bad[client] = (
                f"{n_cases} cases and {n_controls} controls, fewer than "
                f"min_per_class={min_per_class}"
            )
    if bad and on_invalid == "error":
        raise InputDataError(
            f"{len(bad)} client(s) unusable for training: "
            + "; ".join(f"client {c!r} has {why}" for c, why in bad.items())
            + "; fix the inputs, or set pipeline.on_invalid_client: exclude to leave such "
            "clients out (logged and counted)"
        )
    dropped = cohort["client"].isin(list(bad))
    excluded = pd.concat(
        [
            exclusions("client", list(bad), list(bad.values()), step),
            exclusions(
                "sample",
                cohort.loc[dropped, "sample_id"],
                [f"client {c!r} excluded" for c in cohort.loc[dropped, "client"]],
                step,
            ),
        ],
        ignore_index=True,
    )
    kept = cohort.loc[~dropped].reset_index(drop=True)
    if kept.empty:
        raise InputDataError(
            "no client left after validation: "
            + (
                "; ".join(f"client {c!r} has {why}" for c, why in bad.items())
                or "no sample passed the earlier checks (see the exclusions table)"
            )
        )
    return kept, excluded


def stratified_split(
    phenotype: np.ndarray, *, test_fraction: float = 0.2, random_seed: int | Sequence[int]
) -> np.ndarray:
    """Split samples into train and test, stratified by a label per sample.

    In each stratum, ``round(test_fraction * n_stratum)`` samples go to test, but at least one
    when the stratum has two or more samples and ``test_fraction > 0`` (so both sets hold both
    classes whenever possible).

    Parameters
    ----------
    phenotype : array, shape (n_samples,)
        Stratum labels: the classes of a binary phenotype (0/1), an outcome's
        :meth:`~rvfedprs.outcomes.Outcome.strata` in general.
    test_fraction : float
        Share of each class in the test set, in [0, 1).
    random_seed : int or sequence of int
        Seed of the shuffle.

    Returns
    -------
    numpy.ndarray of str, shape (n_samples,)
        ``"train"`` or ``"test"`` per sample.
    """
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie in [0, 1), got {test_fraction}")
    phenotype = np.asarray(phenotype)
    rng = np.random.default_rng(random_seed)
    split = np.full(phenotype.shape[0], "train", dtype=object)
    for label in np.unique(phenotype):
        members = np.flatnonzero(phenotype == label)
        n_test = int(round(test_fraction * members.size))
        if test_fraction > 0 and members.size >= 2:
            n_test = min(max(n_test, 1), members.size - 1)
        chosen = rng.permutation(members)[:n_test]
        split[chosen] = "test"
    return split.astype(str)


def assign_splits(
    cohort: pd.DataFrame,
    *,
    test_fraction: float = 0.2,
    random_seed: int,
    kind: str | Outcome = "binary",
) -> pd.Series:
    """Train/test split per client, stratified by phenotype.

    The strata are the outcome's (:meth:`~rvfedprs.outcomes.Outcome.strata` of the client's
    phenotype): the classes of a binary phenotype, the client's quintiles of a quantitative
    trait. Each client's shuffle is seeded from ``(random_seed, crc32(client))``, so a client's
    split does not change when other clients are added or removed.

    Parameters
    ----------
    cohort : pandas.DataFrame
        ``sample_id, client, phenotype``.
    test_fraction : float
        Share of each stratum held out per client.
    random_seed : int
        The pipeline seed.
    kind : {"binary", "quantitative"} or Outcome
        The phenotype's kind.

    Returns
    -------
    pandas.Series of str
        ``"train"``/``"test"``, indexed like ``cohort``.
    """
    strata = outcome(kind).strata
    split = pd.Series("train", index=cohort.index, dtype=object)
    for client, group in cohort.groupby("client", sort=True):
        seed = [int(random_seed), zlib.crc32(str(client).encode())]
        split.loc[group.index] = stratified_split(
            strata(group["phenotype"].to_numpy()), test_fraction=test_fraction, random_seed=seed
        )
    return split.astype(str)
