"""How good a polygenic score is: AUC, odds ratios and incremental R², per site and pooled.

Given a score table (``rvfedprs prepare score`` output or any table with a sample id and score
columns), a 0/1 phenotype, optional covariates and an optional site (or ancestry group) column,
:func:`assess_scores` reports for every score, every site and the pooled samples the statistics
below. A quantitative phenotype (``phenotype_kind="quantitative"``) gets PRSice-2's R²s, β per
SD and the top decile's mean difference instead (:mod:`.assess_quantitative`).

- **AUC** with DeLong's 95% interval;
- **OR per SD**: exp(β) of the standardised score in ``logit P(y) = α + C·γ + β·z``, with its
  Wald 95% interval (z standardised over the rows assessed: within a site for a site's row,
  over all sites for the pooled row; sample SD, ddof 1);
- **top-decile OR**: the odds among the 10% highest scores against the other 90%, Woolf's
  interval (Haldane's ½ added when a cell is empty), as :func:`.prs_metrics.top_decile_or`;
- **incremental R²** over the covariates-only model: Nagelkerke's (logistic likelihoods), the
  observed-scale one of linear regressions and, given the population prevalence K, Lee et al.'s
  (2012) liability-scale transformation of the latter (:func:`.prs_metrics.liability_factor`).

Every statistic is computed from per-site *blocks*: the logistic fits sum each site's score
vector, Hessian and log-likelihood, the linear fit each site's X'X, X'y, y'y, the
standardisation each site's n, Σs, Σs². Pooled exact metrics use one block of all samples; with
``federated=True`` the pooled row is built from what each site would send (those sums, and
:func:`.summaries.site_summary` histograms of the standardised score for the AUC, its DeLong
interval and the top decile) — equal to the exact pooled values up to scores that share a
histogram bin (``auc_tie_bound`` bounds the AUC's difference).
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation import assess_quantitative as quantitative
from rvfedprs.evaluation.paired import delong_ci
from rvfedprs.evaluation.prs_metrics import liability_factor, nagelkerke_r2
from rvfedprs.evaluation.summaries import (
    histogram_auc,
    histogram_delong_se,
    merge_histograms,
    site_summary,
    tie_bound,
)
from rvfedprs.exceptions import InputDataError
from rvfedprs.outcomes import BINARY, QUANTITATIVE, Outcome, outcome

__all__ = [
    "ID_COLUMNS",
    "AssessData",
    "load_assess_data",
    "score_metrics",
    "assess_scores",
    "histogram_delong_se",
    "ReportSection",
    "png_base64",
    "write_assessment",
    "run_assessment",
]

_log = logging.getLogger(__name__)

#: Sample id columns recognised when none is named, in order of preference.
ID_COLUMNS = ("sample_id", "IID", "#IID", "iid", "Subject id", "eid")
#: The label of the pooled rows.
POOLED = "pooled"
_Z95 = 1.959963984540054
_MAX_LEVELS = 20  # a text covariate with more levels is an error, not 19+ dummy columns


# ---------------------------------------------------------------------------------------------
# Reading the inputs


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


# ---------------------------------------------------------------------------------------------
# Statistics from per-site blocks


@dataclass
class _Block:
    """One site's rows: phenotype, raw score and covariates."""

    y: np.ndarray
    score: np.ndarray
    covariates: np.ndarray  # shape (n, c), c may be 0


def _moments(blocks: Sequence[_Block]) -> tuple[float, float]:
    """Mean and sample SD (ddof 1) of the score from each block's n, Σs, Σs²."""
    n = sum(b.score.size for b in blocks)
    total = sum(float(b.score.sum()) for b in blocks)
    mean = total / n
    # Σ(s − mean)² per block, summed: a numerically safe form of Σs² − n·mean².
    squares = sum(float(((b.score - mean) ** 2).sum()) for b in blocks)
    return mean, math.sqrt(squares / (n - 1)) if n > 1 else float("nan")


def _kept_covariates(blocks: Sequence[_Block]) -> np.ndarray:
    """Covariate columns that vary over the blocks (a constant one is the intercept again)."""
    c = blocks[0].covariates.shape[1]
    if c == 0:
        return np.zeros(0, dtype=int)
    lo = np.min([b.covariates.min(axis=0) for b in blocks], axis=0)
    hi = np.max([b.covariates.max(axis=0) for b in blocks], axis=0)
    return np.flatnonzero(hi > lo)


def _designs(blocks, mean, sd, kept, with_score):
    out = []
    for b in blocks:
        parts = [np.ones((b.y.size, 1)), b.covariates[:, kept]]
        if with_score:
            parts.append(((b.score - mean) / sd)[:, None])
        out.append((np.hstack(parts), b.y.astype(np.float64)))
    return out


def _logistic(designs, *, max_iter: int = 100) -> tuple[np.ndarray, np.ndarray, float]:
    """Maximum-likelihood logistic regression on summed per-block score vectors and Hessians.

    Returns
    -------
    (beta, covariance, loglik)
        Newton–Raphson with step halving; a 1e-9 ridge keeps the Hessian invertible.
    """
    p = designs[0][0].shape[1]

    def loglik(beta):
        return -sum(BINARY.glm_sums(X, y, beta, hessian=False)[0] for X, y in designs)

    def derivatives(beta):
        """Score (gradient of the log-likelihood) and information, summed over the blocks."""
        grad, hess = np.zeros(p), 1e-9 * np.eye(p)
        for X, y in designs:
            _, g, h = BINARY.glm_sums(X, y, beta)
            grad -= g
            hess += h
        return grad, hess

    beta = np.zeros(p)
    current = loglik(beta)
    for _ in range(max_iter):
        grad, hess = derivatives(beta)
        step = np.linalg.solve(hess, grad)
        for _ in range(30):
            trial = loglik(beta + step)
            if trial >= current - 1e-12:
                break
            step /= 2
        beta, current = beta + step, trial
        if np.max(np.abs(step)) < 1e-10:
            break
    _, hess = derivatives(beta)
    return beta, np.linalg.inv(hess), current


def _linear_r2(designs) -> float:
    """Observed-scale R² of least squares from summed X'X, X'y, y'y, Σy and n."""
    xtx = sum(X.T @ X for X, _ in designs)
    xty = sum(X.T @ y for X, y in designs)
    yty = sum(float(y @ y) for _, y in designs)
    n = sum(y.size for _, y in designs)
    total = yty - sum(float(y.sum()) for _, y in designs) ** 2 / n
    beta = np.linalg.lstsq(xtx, xty, rcond=None)[0]
    return float(1.0 - (yty - beta @ xty) / total)


def _woolf(a: float, b: float, c: float, d: float) -> tuple[float, float, float]:
    """Odds ratio a·d / (b·c) with Woolf's 95% interval; ½ added to every cell if one is 0."""
    if min(a, b, c, d) == 0:
        a, b, c, d = a + 0.5, b + 0.5, c + 0.5, d + 0.5
    log_or = math.log(a * d / (b * c))
    se = math.sqrt(1 / a + 1 / b + 1 / c + 1 / d)
    return math.exp(log_or), math.exp(log_or - _Z95 * se), math.exp(log_or + _Z95 * se)


def _top_decile_table(y: np.ndarray, score: np.ndarray) -> tuple[int, int, int, int]:
    """Cases and controls in the top decile (score ≥ its 90th percentile) and below."""
    top = score >= np.quantile(score, 0.9)
    return (
        int(((y == 1) & top).sum()),
        int(((y == 0) & top).sum()),
        int(((y == 1) & ~top).sum()),
        int(((y == 0) & ~top).sum()),
    )


def _histogram_top_decile(cases: np.ndarray, controls: np.ndarray) -> tuple[int, int, int, int]:
    """:func:`_top_decile_table` from pooled histograms (bins in increasing score order).

    ``np.quantile(s, 0.9) <= s`` holds from the order statistic ``ceil(0.9 (n − 1))`` on; the
    top decile is that statistic's bin and every bin above it.
    """
    counts = cases + controls
    n = int(counts.sum())
    first = math.ceil(0.9 * (n - 1) - 1e-9)
    start = int(np.searchsorted(np.cumsum(counts), first + 1))
    a, b = int(cases[start:].sum()), int(controls[start:].sum())
    return a, b, int(cases.sum()) - a, int(controls.sum()) - b


def _regression_metrics(blocks, prevalence):
    mean, sd = _moments(blocks)
    kept = _kept_covariates(blocks)
    full = _designs(blocks, mean, sd, kept, with_score=True)
    null = _designs(blocks, mean, sd, kept, with_score=False)
    beta, cov, ll_full = _logistic(full)
    _, _, ll_null = _logistic(null)
    n = sum(b.y.size for b in blocks)
    m = sum(int(b.y.sum()) for b in blocks)
    p = m / n
    ll0 = m * math.log(p) + (n - m) * math.log(1 - p)
    se = math.sqrt(cov[-1, -1])
    observed = _linear_r2(full) - _linear_r2(null)
    out = {
        "or_per_sd": math.exp(beta[-1]),
        "or_per_sd_lo": math.exp(beta[-1] - _Z95 * se),
        "or_per_sd_hi": math.exp(beta[-1] + _Z95 * se),
        "r2_nagelkerke": nagelkerke_r2(ll_full, ll0, n) - nagelkerke_r2(ll_null, ll0, n),
        "r2_observed": observed,
    }
    if prevalence is not None:
        out["r2_liability"] = observed * liability_factor(prevalence, p)
    return out


def _empty(prevalence: float | None) -> dict[str, float]:
    keys = (
        "auc auc_lo auc_hi or_per_sd or_per_sd_lo or_per_sd_hi or_top_decile "
        "or_top_decile_lo or_top_decile_hi r2_nagelkerke r2_observed"
    ).split()
    if prevalence is not None:
        keys.append("r2_liability")
    return dict.fromkeys(keys, float("nan"))


def score_metrics(
    y: np.ndarray,
    score: np.ndarray,
    covariates: np.ndarray | None = None,
    *,
    prevalence: float | None = None,
) -> dict[str, Any]:
    """Every assessment statistic of one score on one set of samples (exact).

    Parameters
    ----------
    y : array of {0, 1}, shape (n,)
    score : array, shape (n,)
    covariates : array, shape (n, c), optional
    prevalence : float, optional
        Population prevalence K: adds ``r2_liability``.

    Returns
    -------
    dict
        ``n``, ``n_cases``, ``auc``, ``auc_lo``, ``auc_hi``, ``or_per_sd`` (+ ``_lo``, ``_hi``),
        ``or_top_decile`` (+ ``_lo``, ``_hi``), ``r2_nagelkerke``, ``r2_observed`` and with
        ``prevalence`` ``r2_liability``; ``note`` says why statistics are NaN.
    """
    y = np.asarray(y).astype(np.int64).ravel()
    s = np.asarray(score, dtype=np.float64).ravel()
    c = np.zeros((y.size, 0)) if covariates is None else np.asarray(covariates, np.float64)
    return _exact_metrics(_Block(y, s, c.reshape(y.size, -1)), prevalence)


def _exact_metrics(block: _Block, prevalence: float | None) -> dict[str, Any]:
    y, s = block.y, block.score
    out: dict[str, Any] = {"n": int(y.size), "n_cases": int(y.sum()), **_empty(prevalence)}
    if y.size < 10 or y.min() == y.max() or np.ptp(s) == 0:
        out["note"] = (
            "fewer than 10 samples"
            if y.size < 10
            else "one phenotype class"
            if y.min() == y.max()
            else "constant score"
        )
        return out
    out["auc"], out["auc_lo"], out["auc_hi"] = delong_ci(y, s)
    out["or_top_decile"], out["or_top_decile_lo"], out["or_top_decile_hi"] = _woolf(
        *_top_decile_table(y, s)
    )
    out.update(_regression_metrics([block], prevalence))
    out["note"] = ""
    return out


def _federated_metrics(blocks: Sequence[_Block], prevalence: float | None) -> dict[str, Any]:
    """The pooled row from what each site sends: sums, and histograms of the pooled z-score."""
    n = sum(b.y.size for b in blocks)
    m = sum(int(b.y.sum()) for b in blocks)
    out: dict[str, Any] = {"n": n, "n_cases": m, **_empty(prevalence)}
    mean, sd = _moments(blocks)
    # Each site sends site_summary() of sigmoid(z): bins on the logit scale = bins of z.
    summaries = [site_summary(b.y, 1.0 / (1.0 + np.exp(-(b.score - mean) / sd))) for b in blocks]
    cases, controls = merge_histograms([s["histogram"] for s in summaries])
    auc, se = histogram_auc(cases, controls), histogram_delong_se(cases, controls)
    out.update(auc=auc, auc_lo=max(0.0, auc - _Z95 * se), auc_hi=min(1.0, auc + _Z95 * se))
    out["auc_tie_bound"] = tie_bound(cases, controls)
    out["or_top_decile"], out["or_top_decile_lo"], out["or_top_decile_hi"] = _woolf(
        *_histogram_top_decile(cases, controls)
    )
    out.update(_regression_metrics(blocks, prevalence))
    out["note"] = "federated: from per-site sums and histograms"
    return out


def _quantitative_exact(block: _Block) -> dict[str, Any]:
    kept = _kept_covariates([block])
    return quantitative.exact_row(block.y, block.score, block.covariates[:, kept])


def _quantitative_federated(blocks: Sequence[_Block]) -> dict[str, Any]:
    """The pooled quantitative row from each site's X'X, X'y, y'y and n."""
    kept = _kept_covariates(blocks)
    sums = [quantitative.site_sums(b.y, b.score, b.covariates[:, kept]) for b in blocks]
    return quantitative.federated_row(sums)


def assess_scores(
    data: AssessData, *, prevalence: float | None = None, federated: bool = False
) -> pd.DataFrame:
    """One row per score × site, and per score the pooled row (site ``pooled``).

    Parameters
    ----------
    data : AssessData
    prevalence : float, optional
        Population prevalence K in (0, 1) for the liability-scale R².
    federated : bool
        Build the pooled rows from the sites' summaries (sums and score histograms) instead of
        the pooled samples; needs a group column.

    Returns
    -------
    DataFrame
        Columns ``score, site, n, n_cases, auc, auc_lo, auc_hi, or_per_sd, ...`` as
        :func:`score_metrics`, plus ``method`` (``exact`` / ``federated``) and, federated,
        ``auc_tie_bound``. A quantitative phenotype: ``score, site, n`` and
        :data:`.assess_quantitative.STATISTICS` (its federated pooled row from the sites' sums).
    """
    if prevalence is not None and not 0 < prevalence < 1:
        raise InputDataError(f"prevalence must lie in (0, 1); got {prevalence}")
    if prevalence is not None and data.outcome == QUANTITATIVE:
        raise InputDataError(
            f"prevalence {prevalence} is for a binary phenotype's liability-scale R²; the "
            "phenotype is quantitative"
        )
    if federated and not data.grouped:
        raise InputDataError("--federated needs sites: give --samples with a site column")
    frame = data.frame
    sites = sorted(frame["group"].unique()) if data.grouped else []
    binary = data.outcome == BINARY
    if binary:
        exact = partial(_exact_metrics, prevalence=prevalence)
        pool = partial(_federated_metrics, prevalence=prevalence)
    else:
        exact, pool = _quantitative_exact, _quantitative_federated
    rows = []
    for name in data.scores:

        def block(rows_: pd.DataFrame, name=name) -> _Block:
            return _Block(
                rows_["phenotype"].to_numpy(np.int64 if binary else np.float64),
                rows_[name].to_numpy(np.float64),
                rows_[data.covariates].to_numpy(np.float64),
            )

        blocks = {site: block(frame[frame["group"] == site]) for site in sites}
        for site in sites:
            rows.append(
                {
                    "score": name,
                    "site": site,
                    "method": "exact",
                    **exact(blocks[site]),
                }
            )
        if federated:
            usable = [b for b in blocks.values() if b.y.size]
            pooled = {"method": "federated", **pool(usable)}
        else:
            pooled = {"method": "exact", **exact(block(frame))}
        rows.append({"score": name, "site": POOLED, **pooled})
    table = pd.DataFrame(rows)
    first = ["score", "site", "n", "n_cases"] if binary else ["score", "site", "n"]
    last = ["method", "note"]
    return table[first + [c for c in table.columns if c not in first + last] + last]


# ---------------------------------------------------------------------------------------------
# Writing: TSV, Markdown, HTML with embedded figures

HOW_TO_READ = (
    "How to read this table. AUC: the chance that a random case scores higher than a random "
    "control (0.5 = no discrimination), with DeLong's 95% interval. OR per SD: the odds ratio "
    "for one standard deviation more score, from a logistic regression on the standardised "
    "score and the covariates (Wald 95% interval). Top 10% OR: the odds of being a case among "
    "the 10% highest scores against the other 90% (Woolf's interval; not covariate-adjusted). "
    "R² Nagelkerke: what the score adds to a covariates-only logistic model (Nagelkerke's "
    "pseudo-R², difference of the two models). R² liability: the observed-scale incremental R² "
    "of a linear model turned to the liability scale for population prevalence K (Lee et al. "
    "2012); it depends on K, and on the case fraction of the sample. Each site's row uses its "
    "own samples (its score standardised within it); the pooled row uses all of them "
    "(a site's liability R² uses K with the site's own case fraction)."
)


def _fmt(value: float, digits: int = 3) -> str:
    return "" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _interval(row: Mapping[str, Any], key: str, digits: int = 3) -> str:
    if not np.isfinite(row[key]):
        return "–"
    return (
        f"{_fmt(row[key], digits)} ({_fmt(row[key + '_lo'], digits)}–"
        f"{_fmt(row[key + '_hi'], digits)})"
    )


#: A binary phenotype's readable columns: (header, statistic, digits, with its interval).
_READABLE = (
    ("AUC (95% CI)", "auc", 3, True),
    ("OR per SD (95% CI)", "or_per_sd", 2, True),
    ("Top 10% OR (95% CI)", "or_top_decile", 2, True),
    ("R² Nagelkerke", "r2_nagelkerke", 4, False),
    ("R² liability", "r2_liability", 4, False),
)


def readable_table(table: pd.DataFrame, kind: Outcome = BINARY) -> pd.DataFrame:
    """The assessment as text cells: estimate (95% interval), R² with 4 decimals.

    ``kind`` picks the columns: AUC and odds ratios, or (quantitative) the R²s and β per SD
    (:data:`.assess_quantitative.READABLE`); a statistic absent from ``table`` is left out.
    """
    out = pd.DataFrame({"score": table["score"], "site": table["site"]})
    if kind == BINARY:
        out["n (cases)"] = [f"{r.n} ({r.n_cases})" for r in table.itertuples()]
    else:
        out["n"] = table["n"]
    spec = _READABLE if kind == BINARY else quantitative.READABLE
    for header, key, digits, interval in spec:
        if key in table:
            out[header] = [
                _interval(r, key, digits) if interval else _fmt(r[key], digits)
                for _, r in table.iterrows()
            ]
    if table["note"].astype(bool).any():
        out["note"] = table["note"]
    return out


def _markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.to_numpy()]
    return "\n".join([header, rule, *body])


def png_base64(fig) -> str:
    """``fig`` as a base64 PNG (for an ``<img>``), the figure closed."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def _figures(data: AssessData, table: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(title, caption, base64 PNG) of the ROC curves, risk by decile and score by group.

    A quantitative trait's: :func:`.assess_quantitative.trait_figures`.
    """
    if data.outcome == QUANTITATIVE:
        pooled = table[table["site"] == POOLED].set_index("score")
        figures = quantitative.trait_figures(data.frame, data.scores, data.grouped, pooled)
        return [(title, caption, png_base64(fig)) for title, caption, fig in figures]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import roc_curve

    frame, y = data.frame, data.frame["phenotype"].to_numpy()
    pooled = table[table["site"] == POOLED].set_index("score")
    figures = []

    fig, ax = plt.subplots(figsize=(5.2, 5))
    for name in data.scores:
        fpr, tpr, _ = roc_curve(y, frame[name].to_numpy(np.float64))
        ax.plot(fpr, tpr, label=f"{name} (AUC {_fmt(pooled.loc[name, 'auc'])})")
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls="--")
    ax.set(
        xlabel="False positive rate (1 − specificity)",
        ylabel="True positive rate (sensitivity)",
        title="ROC curve, pooled samples",
    )
    ax.legend(fontsize=8, loc="lower right")
    figures.append(
        (
            "ROC curves",
            "One curve per score over all samples assessed; the dashed "
            "diagonal is a score that ranks at random.",
            png_base64(fig),
        )
    )

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, name in enumerate(data.scores):
        decile = pd.qcut(frame[name].rank(method="first"), 10, labels=False) + 1
        grouped = pd.Series(y).groupby(decile.to_numpy())
        rate, count = grouped.mean(), grouped.size()
        half = _Z95 * np.sqrt(rate * (1 - rate) / count)
        offset = (i - (len(data.scores) - 1) / 2) * 0.08
        ax.errorbar(rate.index + offset, rate, yerr=half, marker="o", capsize=3, label=name)
    ax.axhline(y.mean(), color="grey", lw=0.8, ls="--", label=f"overall ({y.mean():.1%})")
    ax.set_xticks(range(1, 11))
    ax.set(
        xlabel="Score decile (1 = lowest)",
        ylabel="Case fraction",
        title="Risk by score decile, pooled samples",
    )
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0, decimals=0))
    ax.legend(fontsize=8)
    figures.append(
        (
            "Risk by score decile",
            "The share of cases in each tenth of the score "
            "distribution, with 95% binomial intervals. A useful score rises from left "
            "to right.",
            png_base64(fig),
        )
    )

    if data.grouped:
        groups = sorted(frame["group"].unique())
        fig, axes = plt.subplots(
            len(data.scores),
            1,
            squeeze=False,
            figsize=(7.5, (0.42 * len(groups) + 1.3) * len(data.scores)),
        )
        for ax, name in zip(axes[:, 0], data.scores, strict=True):
            s = frame[name].to_numpy(np.float64)
            z = (s - s.mean()) / s.std(ddof=1)
            for label, colour, shift in ((0, "#4c72b0", -0.18), (1, "#c44e52", 0.18)):
                values = [z[(frame["group"] == g).to_numpy() & (y == label)] for g in groups]
                positions = [k + shift for k, v in enumerate(values) if len(v)]
                kept = [v for v in values if len(v)]
                if kept:
                    ax.boxplot(
                        kept,
                        positions=positions,
                        widths=0.3,
                        orientation="horizontal",
                        patch_artist=True,
                        showfliers=False,
                        boxprops={"facecolor": colour, "alpha": 0.6},
                        medianprops={"color": "k"},
                    )
            ax.set_yticks(range(len(groups)), groups)
            ax.invert_yaxis()
            ax.set(xlabel=f"{name}, standardised over all samples", title=name)
        axes[0, 0].legend(
            handles=[
                matplotlib.patches.Patch(color="#4c72b0", alpha=0.6, label="controls"),
                matplotlib.patches.Patch(color="#c44e52", alpha=0.6, label="cases"),
            ],
            fontsize=8,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
        )
        fig.tight_layout()
        figures.append(
            (
                "Score by site or group",
                "Boxes span the middle half of each group's "
                "standardised scores (controls blue, cases red; whiskers 1.5 IQR). A "
                "shifted group may need its own calibration or ancestry adjustment.",
                png_base64(fig),
            )
        )
    return figures


@dataclass
class ReportSection:
    """A section a caller adds to the report after the assessment's own figures.

    Attributes
    ----------
    heading, caption : str
    png : str, optional
        A base64 PNG (:func:`png_base64`), shown in the HTML.
    table : DataFrame, optional
        Shown in the HTML and the Markdown.
    """

    heading: str
    caption: str
    png: str | None = None
    table: pd.DataFrame | None = None


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td:nth-child(-n+2), th:nth-child(-n+2) { text-align: left; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5em 0; }
.note { color: #555; font-size: 0.9em; }
"""


def write_assessment(
    data: AssessData,
    table: pd.DataFrame,
    out: str | Path,
    *,
    prevalence: float | None = None,
    title: str = "Polygenic score assessment",
    sections: Sequence[ReportSection] = (),
) -> list[Path]:
    """Write ``assess.tsv``, ``assess.md`` and ``assess.html`` (figures embedded) into ``out``.

    ``sections`` follow the assessment's own figures (their tables in the Markdown too).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    readable = readable_table(table, data.outcome)
    how_to_read = HOW_TO_READ if data.outcome == BINARY else quantitative.HOW_TO_READ
    y, binary = data.frame["phenotype"], data.outcome == BINARY
    covariates = ", ".join(c.removeprefix("cov:") for c in data.covariates) or "none"
    counted = f"{int(y.sum())} cases, {y.mean():.1%}" if binary else (
        f"trait mean {y.mean():.4g}, SD {y.std(ddof=1):.4g}"
    )  # fmt: skip
    facts = [f"{len(y)} samples ({counted}); scores: {', '.join(data.scores)}; covariates: "
             f"{covariates}."]  # fmt: skip
    if binary:
        facts.append(f"Population prevalence K = {prevalence}." if prevalence is not None
                     else "No population prevalence given: no liability-scale R².")  # fmt: skip
    facts += [f"Note: {note}." for note in data.notes]
    if not binary and (table["method"] == "federated").any():
        facts.append(quantitative.FEDERATED)
    if "auc_tie_bound" in table:
        bound = table["auc_tie_bound"].max()
        facts.append(
            "Pooled rows are federated: built from each site's sums and score "
            f"histograms (AUC within {bound:.1e} of the exact pooled AUC)."
        )
    paths = [out / "assess.tsv", out / "assess.md", out / "assess.html"]
    table.to_csv(paths[0], sep="\t", index=False, float_format="%.6g")
    markdown = [f"# {title}", " ".join(facts), _markdown(readable), how_to_read]
    for section in sections:
        markdown.append(f"## {section.heading}")
        if section.table is not None:
            markdown.append(_markdown(section.table))
        markdown.append(section.caption)
    paths[1].write_text("\n\n".join(markdown) + "\n")
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>",
        "".join(f"<p>{html.escape(f)}</p>" for f in facts),
        readable.to_html(index=False, border=0, na_rep=""),
        f"<p class='note'>{html.escape(how_to_read)}</p>",
    ]
    own = [ReportSection(heading, caption, png) for heading, caption, png in _figures(data, table)]
    for section in [*own, *sections]:
        parts.append(f"<h2>{html.escape(section.heading)}</h2>")
        if section.png is not None:
            parts.append(
                f"<img alt='{html.escape(section.heading)}' "
                f"src='data:image/png;base64,{section.png}'>"
            )
        if section.table is not None:
            parts.append(section.table.to_html(index=False, border=0, na_rep=""))
        parts.append(f"<p class='note'>{html.escape(section.caption)}</p>")
    parts.append("</body></html>")
    paths[2].write_text("\n".join(parts))
    return paths


def run_assessment(
    scores: str | Path,
    phenotypes: str | Path,
    out: str | Path,
    *,
    prevalence: float | None = None,
    federated: bool = False,
    title: str = "Polygenic score assessment",
    sections: Sequence[ReportSection] = (),
    **inputs: Any,
) -> tuple[pd.DataFrame, list[Path]]:
    """Read the inputs, assess every score, write the outputs and ``provenance.json``.

    ``inputs`` are :func:`load_assess_data`'s keyword options; ``title`` and ``sections`` go to
    :func:`write_assessment`. Returns the table and the files written.
    """
    from rvfedprs.provenance import write_provenance

    data = load_assess_data(scores, phenotypes, **inputs)
    table = assess_scores(data, prevalence=prevalence, federated=federated)
    paths = write_assessment(
        data, table, out, prevalence=prevalence, title=title, sections=sections
    )
    files = [scores, phenotypes, inputs.get("covariates"), inputs.get("samples")]
    parameters = {
        "scores": scores,
        "phenotypes": phenotypes,
        "prevalence": prevalence,
        "federated": federated,
        **inputs,
        "phenotype_kind": data.outcome.kind,
    }
    paths.append(
        write_provenance(
            out,
            command="rvfedprs assess",
            parameters=parameters,
            seed=None,
            inputs=[f for f in files if f is not None],
            extra={"n_samples": len(data.frame), "notes": data.notes},
        )
    )
    return table, paths
