"""Paired comparison of two models' AUCs on the same test samples.

Two strategies evaluated on the same held-out individuals give correlated AUCs: their
confidence intervals overlap even when one model ranks almost every individual better. The
right question is the distribution of the *difference*:

- :func:`delong_test` — DeLong, DeLong & Clarke-Pearson (1988), with the midrank algorithm of
  Sun & Xu (2014): both AUCs, their difference, its standard error and a two-sided p-value.
- :func:`paired_bootstrap` — the difference of seed-averaged AUCs under resampling of the test
  individuals (cases and controls resampled separately), for runs repeated over training seeds
  on one test set: training randomness and test sampling in one interval.
- :func:`paired_table` — both, for every strategy against a reference, from the driver's
  ``predictions.parquet`` files (pooled test set or carriers only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import InputDataError

__all__ = [
    "DeLongResult",
    "auc_standard_error",
    "delong_ci",
    "delong_test",
    "paired_bootstrap",
    "paired_table",
    "load_predictions",
]


@dataclass(frozen=True)
class DeLongResult:
    """DeLong's paired test of AUC(a) − AUC(b).

    Attributes
    ----------
    auc_a, auc_b : float
    difference : float
        ``auc_a − auc_b``.
    se : float
        Standard error of the difference (0 when the two scores rank identically).
    z : float
    p_value : float
        Two-sided, normal approximation.
    """

    auc_a: float
    auc_b: float
    difference: float
    se: float
    z: float
    p_value: float


def _midranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank, along the last axis."""
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    n = len(x)
    ranks = np.empty(n, dtype=np.float64)
    i = 0
    while i < n:  # runs of ties
        j = i
        while j < n and sorted_x[j] == sorted_x[i]:
            j += 1
        ranks[i:j] = 0.5 * (i + j - 1) + 1
        i = j
    out = np.empty(n, dtype=np.float64)
    out[order] = ranks
    return out


def _structural_components(
    positives: np.ndarray, negatives: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AUCs and DeLong's V10 (per positive) and V01 (per negative) for k score vectors.

    ``positives`` has shape (k, m), ``negatives`` (k, n); V10[k, i] is the share of negatives
    ranked below positive i (ties 1/2), V01[k, j] the share of positives ranked above negative j.
    """
    k, m = positives.shape
    n = negatives.shape[1]
    v10 = np.empty((k, m))
    v01 = np.empty((k, n))
    auc = np.empty(k)
    for r in range(k):
        tx = _midranks(positives[r])
        ty = _midranks(negatives[r])
        tz = _midranks(np.concatenate([positives[r], negatives[r]]))
        auc[r] = (tz[:m].sum() - m * (m + 1) / 2) / (m * n)
        v10[r] = (tz[:m] - tx) / n
        v01[r] = 1.0 - (tz[m:] - ty) / m
    return auc, v10, v01


def _checked(y: np.ndarray, *scores: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    y = np.asarray(y).astype(int).ravel()
    out = []
    for s in scores:
        s = np.asarray(s, dtype=np.float64).ravel()
        if s.shape != y.shape:
            raise InputDataError(f"{len(s)} scores for {len(y)} labels")
        if not np.all(np.isfinite(s)):
            raise InputDataError("scores contain NaN or infinite values")
        out.append(s)
    if not set(np.unique(y)) <= {0, 1}:
        raise InputDataError(f"labels must be 0/1, got values {sorted(set(np.unique(y)))}")
    if y.sum() == 0 or y.sum() == len(y):
        raise InputDataError("an AUC needs both cases and controls")
    return y, out


def auc_standard_error(y: np.ndarray, score: np.ndarray) -> float:
    """DeLong's standard error of one AUC: ``√(var(V10)/m + var(V01)/n)``.

    Parameters
    ----------
    y : array of {0, 1}, shape (n_samples,)
    score : array of float, shape (n_samples,)

    Returns
    -------
    float
        NaN with fewer than 2 cases or 2 controls (no variance to estimate).
    """
    y, (s,) = _checked(y, score)
    m, n = int(y.sum()), int(y.size - y.sum())
    if m < 2 or n < 2:
        return float("nan")
    _, v10, v01 = _structural_components(s[None, y == 1], s[None, y == 0])
    return float(math.sqrt(v10[0].var(ddof=1) / m + v01[0].var(ddof=1) / n))


def delong_test(y: np.ndarray, score_a: np.ndarray, score_b: np.ndarray) -> DeLongResult:
    """DeLong's test of two correlated AUCs on the same samples.

    Parameters
    ----------
    y : array of {0, 1}, shape (n_samples,)
    score_a, score_b : array of float, shape (n_samples,)

    Returns
    -------
    DeLongResult
    """
    y, (a, b) = _checked(y, score_a, score_b)
    scores = np.stack([a, b])
    auc, v10, v01 = _structural_components(scores[:, y == 1], scores[:, y == 0])
    m, n = v10.shape[1], v01.shape[1]
    s10 = np.cov(v10) if m > 1 else np.zeros((2, 2))
    s01 = np.cov(v01) if n > 1 else np.zeros((2, 2))
    cov = s10 / m + s01 / n
    var = float(cov[0, 0] + cov[1, 1] - 2 * cov[0, 1])
    diff = float(auc[0] - auc[1])
    se = math.sqrt(max(var, 0.0))
    if se == 0.0:
        z, p = (0.0, 1.0) if diff == 0 else (math.copysign(math.inf, diff), 0.0)
    else:
        z = diff / se
        p = math.erfc(abs(z) / math.sqrt(2))
    return DeLongResult(float(auc[0]), float(auc[1]), diff, se, z, p)


def delong_ci(
    y: np.ndarray, score: np.ndarray, *, confidence: float = 0.95
) -> tuple[float, float, float]:
    """One AUC with DeLong's standard error and a normal confidence interval.

    Returns
    -------
    (auc, ci_low, ci_high)
        The interval clipped to [0, 1].
    """
    y, (s,) = _checked(y, score)
    auc, v10, v01 = _structural_components(s[None, y == 1], s[None, y == 0])
    m, n = v10.shape[1], v01.shape[1]
    var = (np.var(v10, ddof=1) / m if m > 1 else 0.0) + (np.var(v01, ddof=1) / n if n > 1 else 0.0)
    z = math.sqrt(2) * _erfinv(confidence)
    half = z * math.sqrt(max(float(var), 0.0))
    value = float(auc[0])
    return value, max(0.0, value - half), min(1.0, value + half)


def _erfinv(p: float) -> float:
    from scipy.special import erfinv

    return float(erfinv(p))


def paired_bootstrap(
    y: np.ndarray,
    scores_a: Sequence[np.ndarray],
    scores_b: Sequence[np.ndarray],
    *,
    n_boot: int = 2000,
    confidence: float = 0.95,
    random_seed: int = 0,
) -> dict[str, float]:
    """Bootstrap of mean-over-seeds AUC(a) − AUC(b) on one test set.

    Parameters
    ----------
    y : array of {0, 1}, shape (n_samples,)
    scores_a, scores_b : sequences of arrays, each shape (n_samples,)
        One score vector per training seed (paired: seed s of a with seed s of b).
    n_boot : int
        Resamples (cases and controls each resampled with replacement, sizes kept).
    confidence : float
    random_seed : int

    Returns
    -------
    dict
        ``difference`` (on the full set), ``ci_low``, ``ci_high``, ``p_not_greater`` (share of
        resamples with a difference ≤ 0), ``n_seeds``.
    """
    if len(scores_a) != len(scores_b) or not scores_a:
        raise InputDataError(
            f"paired bootstrap needs the same number (>0) of seeds: {len(scores_a)} vs "
            f"{len(scores_b)}"
        )
    y, a_list = _checked(y, *scores_a)
    _, b_list = _checked(y, *scores_b)
    pos, neg = np.flatnonzero(y == 1), np.flatnonzero(y == 0)
    m, n = len(pos), len(neg)
    all_scores = np.stack(a_list + b_list)  # (2S, N)
    s = len(a_list)
    # A resample weights each original case by its count c_i and each control by d_j; its AUC is
    # Σ_i c_i·(Σ_{j: q_j < p_i} d_j + ½·Σ_{j: q_j = p_i} d_j) / (m·n). With the controls sorted
    # once per model, the inner sums are a cumulative sum of the counts read at two fixed
    # positions per case, so a resample costs O(2S·N) and no sorting.
    order = np.argsort(all_scores[:, neg], axis=1, kind="stable")  # (2S, n)
    q = np.take_along_axis(all_scores[:, neg], order, axis=1)
    p = all_scores[:, pos]  # (2S, m)
    below = np.stack([np.searchsorted(q[r], p[r], side="left") for r in range(2 * s)])
    upto = np.stack([np.searchsorted(q[r], p[r], side="right") for r in range(2 * s)])
    rows = np.arange(2 * s)[:, None]
    rng = np.random.default_rng(random_seed)

    def mean_diff(case_counts: np.ndarray, control_counts: np.ndarray) -> float:
        cum = np.zeros((2 * s, n + 1))
        np.cumsum(control_counts[order], axis=1, out=cum[:, 1:])
        inner = 0.5 * (cum[rows, below] + cum[rows, upto])  # (2S, m)
        auc = (inner * case_counts).sum(axis=1) / (case_counts.sum() * control_counts.sum())
        return float(auc[:s].mean() - auc[s:].mean())

    full = mean_diff(np.ones(m), np.ones(n))
    boots = np.array(
        [
            mean_diff(
                np.bincount(rng.choice(m, m), minlength=m).astype(np.float64),
                np.bincount(rng.choice(n, n), minlength=n).astype(np.float64),
            )
            for _ in range(int(n_boot))
        ]
    )
    alpha = (1 - confidence) / 2
    return {
        "difference": full,
        "ci_low": float(np.quantile(boots, alpha)),
        "ci_high": float(np.quantile(boots, 1 - alpha)),
        "p_not_greater": float(np.mean(boots <= 0)),
        "n_seeds": s,
    }


def load_predictions(
    runs_dir: str | Path, experiment: str = "main"
) -> dict[str, dict[int, pd.DataFrame]]:
    """``predictions.parquet`` of every run in ``<strategy>/seed<k>/`` under ``runs_dir``.

    ``runs_dir`` is the driver's output folder, its ``runs/`` folder, or the experiment folder
    itself (``runs/<experiment>/``).

    Returns
    -------
    dict
        strategy → seed → predictions (``client, sample_id, y, p, carrier``), sorted by
        ``(client, sample_id)`` so that runs align row by row.
    """
    root = Path(runs_dir)
    candidates = [root / "runs" / experiment, root / experiment, root]
    base = next(c for c in candidates if c.is_dir() or c == root)
    out: dict[str, dict[int, pd.DataFrame]] = {}
    for path in sorted(base.glob("*/seed*/predictions.parquet")):
        strategy, seed = path.parent.parent.name, int(path.parent.name.removeprefix("seed"))
        df = pd.read_parquet(path).sort_values(["client", "sample_id"], ignore_index=True)
        out.setdefault(strategy, {})[seed] = df
    if not out:
        raise InputDataError(f"no */seed*/predictions.parquet under {base}")
    return out


def paired_table(
    predictions: Mapping[str, Mapping[int, pd.DataFrame]],
    *,
    reference: str = "fedavg",
    subset: str = "carrier",
    n_boot: int = 2000,
    confidence: float = 0.95,
    random_seed: int = 0,
) -> pd.DataFrame:
    """Every strategy's AUC difference against ``reference``, paired by seed and sample.

    Parameters
    ----------
    predictions : mapping
        :func:`load_predictions`'s output.
    reference : str
        The strategy compared against.
    subset : {"carrier", "all"}
        Carriers of their cluster's causal rare variants only (Table III), or every test sample.
    n_boot, confidence, random_seed
        Of :func:`paired_bootstrap`.

    Returns
    -------
    DataFrame
        One row per other strategy: ``strategy, reference, subset, n_samples, n_cases,
        n_seeds, difference, ci_low, ci_high, p_not_greater, delong_p_max, seeds_better``
        (DeLong per seed: the largest p-value, and in how many seeds the strategy's AUC is
        higher).
    """
    if reference not in predictions:
        raise InputDataError(
            f"reference strategy {reference!r} has no predictions; have {sorted(predictions)}"
        )
    if subset not in ("carrier", "all"):
        raise InputDataError(f"subset must be 'carrier' or 'all', got {subset!r}")
    any_run = next(iter(predictions[reference].values()))
    in_subset = any_run["carrier"].to_numpy(bool) if subset == "carrier" else slice(None)
    n_cases = int(any_run["y"].to_numpy()[in_subset].sum())
    n_subset = len(any_run["y"].to_numpy()[in_subset])
    if n_cases in (0, n_subset):
        raise InputDataError(
            f"subset {subset!r} has {n_cases} cases among {n_subset} test samples: "
            "an AUC difference needs both cases and controls"
        )
    rows = []
    for strategy in sorted(set(predictions) - {reference}):
        seeds = sorted(set(predictions[strategy]) & set(predictions[reference]))
        if not seeds:
            continue
        first = predictions[reference][seeds[0]]
        mask = first["carrier"].to_numpy(bool) if subset == "carrier" else np.ones(len(first), bool)
        y = first["y"].to_numpy()[mask]
        scores_a, scores_b, delong = [], [], []
        for seed in seeds:
            a, b = predictions[strategy][seed], predictions[reference][seed]
            if not a["sample_id"].equals(b["sample_id"]) or not b["sample_id"].equals(
                first["sample_id"]
            ):
                raise InputDataError(
                    f"{strategy} and {reference} seed {seed} were evaluated on different samples"
                )
            scores_a.append(a["p"].to_numpy()[mask])
            scores_b.append(b["p"].to_numpy()[mask])
            delong.append(delong_test(y, scores_a[-1], scores_b[-1]))
        boot = paired_bootstrap(
            y, scores_a, scores_b, n_boot=n_boot, confidence=confidence, random_seed=random_seed
        )
        rows.append(
            {
                "strategy": strategy,
                "reference": reference,
                "subset": subset,
                "n_samples": int(mask.sum()),
                "n_cases": int(y.sum()),
                **boot,
                "delong_p_max": max(d.p_value for d in delong),
                "seeds_better": sum(d.difference > 0 for d in delong),
            }
        )
    return pd.DataFrame(rows)
