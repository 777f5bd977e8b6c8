"""Reading and checking an assessment's inputs: score, phenotype, covariate and samples tables.

:func:`load_assess_data` reads each table (TSV, or CSV when named ``.csv``), indexes it by its
sample id, checks its columns and values (a 0/1 or numeric phenotype, numeric scores, text
covariates as 0/1 dummies) and joins them into one :class:`AssessData`, noting every sample
left out on the way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.evaluation import assess_quantitative as quantitative
from rvfedprs.exceptions import InputDataError
from rvfedprs.outcomes import BINARY, QUANTITATIVE, Outcome, outcome

__all__ = ["ID_COLUMNS", "AssessData", "load_assess_data"]

_log = logging.getLogger(__name__)

#: Sample id columns recognised when none is named, in order of preference.
ID_COLUMNS = ("sample_id", "IID", "#IID", "iid", "Subject id", "eid")
_MAX_LEVELS = 20  # a text covariate with more levels is an error, not 19+ dummy columns


@dataclass
class AssessData:
    """The samples assessed: one row each, every input joined on the sample id.

    Attributes
    ----------
    frame : DataFrame, shape (n_samples, ...)
        Indexed by sample id; ``phenotype`` (0/1, or floats for a quantitative trait), the
        score columns, the covariate columns (text covariates as 0/1 dummies) and ``group``
        when a group column was given.
    scores, covariates : list of str
        Column names in ``frame``.
    grouped : bool
        Whether ``frame`` has a ``group`` column.
    notes : list of str
        What was dropped on the way (samples without a phenotype, unmatched ids...).
    outcome : Outcome
        The phenotype's kind (binary or quantitative).
    """

    frame: pd.DataFrame
    scores: list[str]
    covariates: list[str]
    grouped: bool
    notes: list[str] = field(default_factory=list)
    outcome: Outcome = BINARY


def _read_table(path: str | Path, what: str) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"{what} file {path} not found")
    sep = "," if path.suffix.lower() == ".csv" else "\t"
    try:
        frame = pd.read_csv(path, sep=sep, low_memory=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputDataError(f"{what} file {path} cannot be read as a table: {exc}") from None
    if frame.shape[1] < 2:
        raise InputDataError(
            f"{what} file {path} has {frame.shape[1]} column ({list(frame.columns)}); a sample "
            f"id column and at least one more are needed ({'comma' if sep == ',' else 'tab'}"
            "-separated)"
        )
    return frame


def _indexed(frame: pd.DataFrame, path: str | Path, what: str, id_column: str | None):
    """``frame`` indexed by its sample id column (named, or the first of :data:`ID_COLUMNS`)."""
    if id_column is None:
        id_column = next((c for c in ID_COLUMNS if c in frame.columns), None)
        if id_column is None:
            raise InputDataError(
                f"{what} file {path} has no sample id column: none of {list(ID_COLUMNS)} among "
                f"{list(frame.columns)}; name it with --id-column"
            )
    elif id_column not in frame.columns:
        raise InputDataError(
            f"{what} file {path} lacks the id column '{id_column}'; columns: {list(frame.columns)}"
        )
    ids = frame[id_column].astype(str).str.strip()
    duplicated = ids[ids.duplicated()].unique()
    if len(duplicated):
        raise InputDataError(
            f"{what} file {path}: {len(duplicated)} sample ids appear more than once: "
            f"{', '.join(duplicated[:5])}"
        )
    out = frame.drop(columns=[id_column])
    out.index = pd.Index(ids, name="sample_id")
    return out


def _require_columns(frame: pd.DataFrame, columns: Sequence[str], path, what: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputDataError(
            f"{what} file {path} lacks column(s) {missing}; columns: {list(frame.columns)}"
        )


def _score_columns(frame: pd.DataFrame, requested: Sequence[str] | None, path) -> list[str]:
    if requested:
        _require_columns(frame, requested, path, "score")
        columns = list(requested)
    else:
        columns = [c for c in frame.columns if c == "SUM" or str(c).endswith("_SUM")]
        if not columns:  # any table: every numeric column but counts and family ids
            columns = [
                c
                for c in frame.columns
                if pd.api.types.is_numeric_dtype(frame[c])
                and not str(c).endswith("n_matched")
                and c not in ("FID", "#FID")
            ]
        if not columns:
            raise InputDataError(
                f"score file {path} has no score column (SUM, <name>_SUM or numeric); name "
                f"them with --score-columns; columns: {list(frame.columns)}"
            )
    for c in columns:
        if not pd.api.types.is_numeric_dtype(frame[c]):
            raise InputDataError(f"score column '{c}' in {path} is not numeric")
    return columns


def _phenotype(frame: pd.DataFrame, name: str | None, path, kind: Outcome) -> pd.Series:
    if name is None:
        if frame.shape[1] != 1:
            raise InputDataError(
                f"phenotype file {path} has {frame.shape[1]} columns besides the sample id; "
                f"name one with --phenotype: {list(frame.columns)}"
            )
        name = str(frame.columns[0])
    _require_columns(frame, [name], path, "phenotype")
    values = frame[name]
    if kind == QUANTITATIVE:
        return quantitative.trait_values(values, name, path)
    present = values.dropna()
    numeric = pd.to_numeric(present, errors="coerce")
    levels = sorted(set(present.astype(str))) if numeric.isna().any() else sorted(set(numeric))
    if numeric.isna().any() or not set(levels) <= {0, 1}:
        hint = " (PLINK's 1/2 coding? subtract 1)" if set(levels) == {1, 2} else ""
        shown = [v if isinstance(v, str) else float(v) for v in levels[:6]]
        raise InputDataError(
            f"phenotype '{name}' in {path} must be 0/1 (missing allowed); found values "
            f"{shown}{' ...' if len(levels) > 6 else ''}{hint}"
        )
    return pd.to_numeric(values, errors="coerce").rename("phenotype")


def _covariate_frame(frame: pd.DataFrame, columns: Sequence[str] | None, path) -> pd.DataFrame:
    if columns:
        _require_columns(frame, columns, path, "covariate")
        frame = frame[list(columns)]
    parts = []
    for name in frame.columns:
        values = frame[name]
        if pd.api.types.is_bool_dtype(values) or pd.api.types.is_numeric_dtype(values):
            parts.append(values.astype(np.float64).rename(str(name)))
            continue
        levels = sorted(values.dropna().astype(str).unique())
        if len(levels) > _MAX_LEVELS:
            raise InputDataError(
                f"covariate '{name}' in {path} is text with {len(levels)} levels (at most "
                f"{_MAX_LEVELS} become 0/1 columns); leave it out with --covariate-columns"
            )
        for level in levels[1:]:  # the first level is the reference
            dummy = (values.astype(str) == level).astype(np.float64)
            dummy[values.isna()] = np.nan
            parts.append(dummy.rename(f"{name}={level}"))
        _log.info("covariate '%s': text, reference level '%s'", name, levels[0] if levels else "")
    return pd.concat(parts, axis=1) if parts else pd.DataFrame(index=frame.index)


def load_assess_data(
    scores: str | Path,
    phenotypes: str | Path,
    *,
    phenotype: str | None = None,
    score_columns: Sequence[str] | None = None,
    covariates: str | Path | None = None,
    covariate_columns: Sequence[str] | None = None,
    samples: str | Path | None = None,
    group_column: str = "client",
    id_column: str | None = None,
    phenotype_kind: str | Outcome = "binary",
) -> AssessData:
    """Read and join the inputs of an assessment on their sample ids.

    Parameters
    ----------
    scores : path
        TSV (CSV when named ``.csv``) with a sample id column and score columns (default: ``SUM``
        and ``<name>_SUM`` as ``rvfedprs prepare score`` writes, else every numeric column).
    phenotypes : path
        Sample id and a 0/1 (or, quantitative, numeric) column (``phenotype``; blank =
        missing, left out).
    phenotype : str, optional
        The phenotype column; required when the table has several.
    score_columns : sequence of str, optional
    covariates : path, optional
        Sample id and covariate columns (default all; text ones become 0/1 dummies). May be the
        phenotype file itself.
    covariate_columns : sequence of str, optional
    samples : path, optional
        A samples sheet with a site or group column (the simulator's ``samples.tsv``).
    group_column : str
        The column of ``samples`` giving each sample's site or group.
    id_column : str, optional
        The sample id column of every table (default: the first of :data:`ID_COLUMNS`).
    phenotype_kind : {"binary", "quantitative"} or Outcome
        The phenotype's kind.

    Raises
    ------
    InputDataError
        A file or column is missing, no sample id is shared, the phenotype is not 0/1 (binary)
        or not numeric (quantitative), or has one value among the samples assessed.
    """
    kind = outcome(phenotype_kind)
    notes: list[str] = []
    score_table = _indexed(_read_table(scores, "score"), scores, "score", id_column)
    names = _score_columns(score_table, score_columns, scores)
    pheno_table = _indexed(_read_table(phenotypes, "phenotype"), phenotypes, "phenotype", id_column)
    if phenotype is None and covariates is not None and Path(covariates) == Path(phenotypes):
        raise InputDataError(
            "name the phenotype column (--phenotype) when the phenotype file "
            "also holds the covariates"
        )
    y = _phenotype(pheno_table, phenotype, phenotypes, kind)
    shared = score_table.index.intersection(y.index)
    if len(shared) == 0:
        raise InputDataError(
            f"no sample id is shared by the score file {scores} ({len(score_table)} samples, "
            f"e.g. {', '.join(score_table.index[:3])}) and the phenotype file {phenotypes} "
            f"({len(y)} samples, e.g. {', '.join(y.index[:3])})"
        )
    frame = pd.concat([y.loc[shared], score_table.loc[shared, names]], axis=1)
    if len(shared) < len(score_table):
        notes.append(f"{len(score_table) - len(shared)} scored samples have no phenotype row")
    cov_names: list[str] = []
    if covariates is not None:
        cov_table = _indexed(
            _read_table(covariates, "covariate"), covariates, "covariate", id_column
        )
        if covariate_columns is None and Path(covariates) == Path(phenotypes):
            covariate_columns = [c for c in cov_table.columns if c != phenotype]
        cov = _covariate_frame(cov_table, covariate_columns, covariates)
        cov.columns = [f"cov:{c}" for c in cov.columns]
        cov_names = list(cov.columns)
        missing = frame.index.difference(cov.index)
        if len(missing):
            notes.append(f"{len(missing)} samples have no covariate row: left out")
        frame = frame.join(cov, how="inner")
    grouped = samples is not None
    if grouped:
        sheet = _indexed(_read_table(samples, "samples"), samples, "samples", id_column)
        _require_columns(sheet, [group_column], samples, "samples")
        groups = sheet[group_column].astype("string").rename("group")
        missing = frame.index.difference(groups.dropna().index)
        if len(missing):
            notes.append(f"{len(missing)} samples have no {group_column}: left out")
        frame = frame.join(groups.dropna(), how="inner")
    before = len(frame)
    frame = frame.dropna(subset=["phenotype", *cov_names])
    if len(frame) < before:
        notes.append(f"{before - len(frame)} samples with a missing phenotype or covariate")
    if len(frame) == 0:
        raise InputDataError(
            f"no sample has a score, a phenotype{', covariates' if cov_names else ''}"
            f"{' and a ' + group_column if grouped else ''} together"
        )
    y_values = frame["phenotype"].to_numpy()
    if y_values.min() == y_values.max() and kind == QUANTITATIVE:
        raise InputDataError(
            f"the phenotype is {y_values[0]:g} for all {len(frame)} samples assessed; R² needs "
            "a trait that varies"
        )
    if y_values.min() == y_values.max():
        only = "cases (1)" if y_values[0] == 1 else "controls (0)"
        raise InputDataError(
            f"the phenotype has only {only} among the {len(frame)} samples assessed; AUC and "
            "odds ratios need cases and controls"
        )
    if kind == BINARY:
        frame["phenotype"] = frame["phenotype"].astype(np.int64)
    return AssessData(frame, names, cov_names, grouped, notes, kind)
