"""Federated evaluation: what a site sends about its test split, and the pooled metrics from it.

A site evaluates the model it would use on its own test split and sends a summary, never a
prediction with an ID: its exact AUC, AUPRC and carrier AUC, its counts, and histograms of its
cases' and controls' scores (all test samples, and the carriers of causal rare variants) on bin
edges fixed by the coordinator. The coordinator pools the histograms.

Pooled AUC from histograms: a case and a control in different bins are ordered as their scores
are; a pair in the same bin counts one half (a tie). So the histogram AUC differs from the exact
pooled AUC only through case–control pairs that share a bin, by at most half their share
(:func:`tie_bound`, which the coordinator can compute from the histograms themselves). With the
default 2^20 bins over logits in [-20, 20] (width 3.8e-5) that share is of order 1e-5 for scores
spread like a PRS model's, far inside the 1e-3 the issue asks; :func:`pooled_metrics` returns
the bound with the value. The pooled AUPRC is average precision with the samples of a bin
treated as tied, exact when no bin holds both classes.

The histograms are sent sparse (occupied bins and their counts). A bin holds an anonymous,
quantised score, not a sample: the coordinator learns the distribution of scores at each site,
as any pooled ROC curve would show.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.evaluation.metrics import auprc, client_auc_summary, roc_auc
from rvfedprs.evaluation.paired import auc_standard_error

__all__ = [
    "BINS",
    "LOGIT_RANGE",
    "score_bins",
    "site_summary",
    "merge_histograms",
    "histogram_auc",
    "histogram_delong_se",
    "histogram_auprc",
    "tie_bound",
    "pooled_metrics",
    "validation_summary",
    "pooled_validation",
    "SECURE_BINS",
    "LOSS_SCALE",
    "VALIDATION_TENSORS",
    "dense_validation",
    "summed_validation",
    "log_loss_sum",
]

#: Histogram bins of a validation summary summed securely (dense: every bin is sent).
SECURE_BINS = 1 << 16
#: Fixed point of a securely summed log-loss sum (resolution 2^-24 per site).
LOSS_SCALE = 1 << 24
#: Probabilities are clipped to [ε, 1 − ε] before the log-loss.
LOSS_EPS = 1e-12
#: The integer tensors of a securely summed validation summary.
VALIDATION_TENSORS = ("cases", "controls", "counts", "log_loss")

#: Number of histogram bins and the logit range they cover (scores outside go to the end bins).
BINS = 1 << 20
LOGIT_RANGE = (-20.0, 20.0)


def score_bins(p: np.ndarray, *, bins: int = BINS) -> np.ndarray:
    """The bin of each predicted probability (logit scale, clipped to :data:`LOGIT_RANGE`)."""
    p = np.clip(np.asarray(p, dtype=np.float64), 1e-300, 1.0 - 1e-16)
    logit = np.log(p) - np.log1p(-p)
    lo, hi = LOGIT_RANGE
    index = np.floor((logit - lo) / (hi - lo) * bins).astype(np.int64)
    return np.clip(index, 0, bins - 1)


def _histogram(y: np.ndarray, p: np.ndarray, bins: int) -> dict[str, np.ndarray]:
    """Sparse histograms: occupied bins, and the cases and controls in each."""
    index = score_bins(p, bins=bins)
    occupied, inverse = np.unique(index, return_inverse=True)
    cases = np.bincount(inverse, weights=(y == 1), minlength=occupied.size).astype(np.int64)
    controls = np.bincount(inverse, weights=(y == 0), minlength=occupied.size).astype(np.int64)
    return {"bins": occupied, "cases": cases, "controls": controls}


def site_summary(
    y: np.ndarray,
    p: np.ndarray,
    *,
    carriers: np.ndarray | None = None,
    prs: np.ndarray | None = None,
    bins: int = BINS,
) -> dict[str, Any]:
    """What one site sends about its test split.

    Parameters
    ----------
    y : array of {0, 1}, shape (n,)
    p : array of float, shape (n,)
        Predicted case probabilities of the site's own model.
    carriers : array of bool, shape (n,), optional
        Carriers of a causal rare variant of the site's cluster (simulated cohorts only; the
        truth is read at the site).
    prs : array, shape (n,), optional
        The (standardised) input PRS: its histogram gives the pooled PRS-only floor.
    bins : int

    Returns
    -------
    dict
        ``n``, ``n_cases``, ``auc``, ``auc_se`` (DeLong), ``auprc``, ``histogram``; with
        ``carriers`` ``n_carriers``, ``carrier_auc``, ``carrier_histogram``; with ``prs``
        ``prs_only_auc``, ``prs_histogram``.
    """
    y = np.asarray(y).astype(int)
    p = np.asarray(p, dtype=np.float64)
    out: dict[str, Any] = {
        "n": int(y.size),
        "n_cases": int(y.sum()),
        "auc": roc_auc(y, p),
        "auc_se": auc_standard_error(y, p) if 0 < y.sum() < y.size else float("nan"),
        "auprc": auprc(y, p),
        "histogram": _histogram(y, p, bins),
    }
    if prs is not None:
        score = 1.0 / (1.0 + np.exp(-np.asarray(prs, dtype=np.float64)))  # monotone: same AUC
        out["prs_only_auc"] = roc_auc(y, score)
        out["prs_histogram"] = _histogram(y, score, bins)
    if carriers is not None:
        mask = np.asarray(carriers, dtype=bool)
        out["n_carriers"] = int(mask.sum())
        out["carrier_auc"] = roc_auc(y[mask], p[mask])
        out["carrier_histogram"] = _histogram(y[mask], p[mask], bins)
    return out


def merge_histograms(parts: list[Mapping[str, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Cases and controls per occupied bin over every part, bins in increasing score order."""
    bins = np.concatenate([np.asarray(h["bins"], np.int64) for h in parts] or [np.zeros(0, int)])
    cases = np.concatenate([np.asarray(h["cases"], np.int64) for h in parts] or [np.zeros(0, int)])
    ctrl = np.concatenate(
        [np.asarray(h["controls"], np.int64) for h in parts] or [np.zeros(0, int)]
    )
    occupied, inverse = np.unique(bins, return_inverse=True)
    return (
        np.bincount(inverse, weights=cases, minlength=occupied.size),
        np.bincount(inverse, weights=ctrl, minlength=occupied.size),
    )


def histogram_auc(cases: np.ndarray, controls: np.ndarray) -> float:
    """AUC of binned scores (a case–control pair in one bin counts ½); NaN without both."""
    n_cases, n_controls = float(cases.sum()), float(controls.sum())
    if n_cases == 0 or n_controls == 0:
        return float("nan")
    below = np.cumsum(controls) - controls  # controls in lower bins
    concordant = float(np.sum(cases * (below + 0.5 * controls)))
    return concordant / (n_cases * n_controls)


def histogram_delong_se(cases: np.ndarray, controls: np.ndarray) -> float:
    """DeLong's standard error of the AUC of binned scores (a tie within a bin counts ½).

    The structural components are constant within a bin: a case in bin k has
    ``V10 = (controls below k + ½ controls in k) / n_controls`` and a control in bin k
    ``V01 = (cases above k + ½ cases in k) / n_cases``; their variances (ddof 1) weighted by
    the counts give ``√(var V10 / m + var V01 / n)`` as :func:`.paired.auc_standard_error`
    gives it on the scores themselves.
    """
    cases, controls = np.asarray(cases, float), np.asarray(controls, float)
    m, n = cases.sum(), controls.sum()
    if m < 2 or n < 2:
        return float("nan")
    v10 = (np.cumsum(controls) - controls + 0.5 * controls) / n
    v01 = (cases[::-1].cumsum()[::-1] - cases + 0.5 * cases) / m
    auc = float(np.sum(cases * v10) / m)
    var10 = float(np.sum(cases * (v10 - auc) ** 2) / (m - 1))
    var01 = float(np.sum(controls * (v01 - auc) ** 2) / (n - 1))
    return float(np.sqrt(var10 / m + var01 / n))


def histogram_auprc(cases: np.ndarray, controls: np.ndarray) -> float:
    """Average precision with each bin's samples tied; NaN without cases."""
    n_cases = float(cases.sum())
    if n_cases == 0:
        return float("nan")
    tp = np.cumsum(cases[::-1])
    fp = np.cumsum(controls[::-1])
    precision = tp / np.maximum(tp + fp, 1)
    recall_step = cases[::-1] / n_cases
    return float(np.sum(recall_step * precision))


def tie_bound(cases: np.ndarray, controls: np.ndarray) -> float:
    """Largest possible |histogram AUC − exact AUC|: half the share of pairs sharing a bin."""
    n_cases, n_controls = float(cases.sum()), float(controls.sum())
    if n_cases == 0 or n_controls == 0:
        return float("nan")
    return 0.5 * float(np.sum(cases * controls)) / (n_cases * n_controls)


def pooled_metrics(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The coordinator's metrics from the sites' summaries (design §11 keys).

    Returns
    -------
    dict
        ``auc``, ``auprc`` and ``carrier_auc`` pooled from the histograms, with
        ``auc_tie_bound`` and ``carrier_auc_tie_bound``; ``n_carriers``; ``client_auc`` (each
        site's exact AUC), ``client_auc_mean``, ``client_auc_std``.
    """
    sites = sorted(summaries)
    cases, controls = merge_histograms([summaries[s]["histogram"] for s in sites])
    client_auc = {s: float(summaries[s]["auc"]) for s in sites}
    mean, std = client_auc_summary(client_auc)
    out: dict[str, Any] = {
        "metric": "auc",
        "auc": histogram_auc(cases, controls),
        "auprc": histogram_auprc(cases, controls),
        "auc_tie_bound": tie_bound(cases, controls),
        "carrier_auc": float("nan"),
        "n_carriers": None,
        "client_auc": client_auc,
        "client_auc_mean": mean,
        "client_auc_std": std,
        "client_auc_se": {s: float(summaries[s].get("auc_se", float("nan"))) for s in sites},
    }
    if all("prs_histogram" in summaries[s] for s in sites):
        out["prs_only_auc"] = histogram_auc(
            *merge_histograms([summaries[s]["prs_histogram"] for s in sites])
        )
    with_carriers = [s for s in sites if "carrier_histogram" in summaries[s]]
    if with_carriers:
        c_cases, c_controls = merge_histograms(
            [summaries[s]["carrier_histogram"] for s in with_carriers]
        )
        out["carrier_auc"] = histogram_auc(c_cases, c_controls)
        out["carrier_auc_tie_bound"] = tie_bound(c_cases, c_controls)
        out["n_carriers"] = int(sum(summaries[s]["n_carriers"] for s in with_carriers))
    return out


def validation_summary(y: np.ndarray, p: np.ndarray, *, bins: int = BINS) -> dict[str, Any]:
    """What one site sends about its validation samples: counts, histograms, the log-loss sum.

    Nothing per sample: the sparse case and control histograms of its scores (the pooled AUC,
    :func:`pooled_validation`) and Σ of the binary cross-entropy (the pooled log-loss, exact).
    """
    y = np.asarray(y).astype(int)
    return {
        "n": int(y.size),
        "n_cases": int(y.sum()),
        "log_loss_sum": log_loss_sum(y, p),
        "histogram": _histogram(y, np.asarray(p, dtype=np.float64), bins),
    }


def pooled_validation(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """The pooled validation ``auc`` (histograms), ``log_loss`` (exact) and ``auc_tie_bound``.

    ``auc_tie_bound`` bounds |``auc`` − the exact pooled AUC| (:func:`tie_bound`).
    """
    sites = sorted(summaries)
    cases, controls = merge_histograms([summaries[s]["histogram"] for s in sites])
    n = sum(int(summaries[s]["n"]) for s in sites)
    loss = sum(float(summaries[s]["log_loss_sum"]) for s in sites)
    return _validation_scores(cases, controls, n, loss)


def dense_validation(y: np.ndarray, p: np.ndarray, *, bins: int = SECURE_BINS) -> dict:
    """A validation summary as integer vectors, for a secure sum (:data:`VALIDATION_TENSORS`).

    ``cases`` and ``controls`` per bin (dense), ``counts`` (n, cases) and ``log_loss``
    (round(2^24 · Σ cross-entropy)): summed over the sites, :func:`summed_validation` gives
    what :func:`pooled_validation` gives from the clear summaries, on ``bins`` bins.
    """
    y = np.asarray(y).astype(int)
    index = score_bins(p, bins=bins)
    return {
        "cases": np.bincount(index[y == 1], minlength=bins).astype(np.int64),
        "controls": np.bincount(index[y == 0], minlength=bins).astype(np.int64),
        "counts": np.array([y.size, int(y.sum())], dtype=np.int64),
        "log_loss": np.array([round(log_loss_sum(y, p) * LOSS_SCALE)], dtype=np.int64),
    }


def summed_validation(total: Mapping[str, np.ndarray]) -> dict[str, float]:
    """:func:`pooled_validation`'s scores from the secure sum of :func:`dense_validation`."""
    cases = np.asarray(total["cases"], dtype=np.float64)
    controls = np.asarray(total["controls"], dtype=np.float64)
    n = int(np.asarray(total["counts"])[0])
    loss = float(np.asarray(total["log_loss"])[0]) / LOSS_SCALE
    return _validation_scores(cases, controls, n, loss)


def _validation_scores(
    cases: np.ndarray, controls: np.ndarray, n: int, loss: float
) -> dict[str, float]:
    """The pooled scores of pooled histograms and a pooled cross-entropy sum over ``n``."""
    return {
        "auc": histogram_auc(cases, controls),
        "log_loss": loss / n if n else float("nan"),
        "auc_tie_bound": tie_bound(cases, controls),
    }


def log_loss_sum(y: np.ndarray, p: np.ndarray) -> float:
    """Σ of the binary cross-entropy of probabilities ``p`` for ``y``, clipped to [ε, 1 − ε].

    ε = :data:`LOSS_EPS`; the mean over samples is the log-loss.
    """
    y = np.asarray(y, dtype=np.float64)
    q = np.clip(np.asarray(p, dtype=np.float64), LOSS_EPS, 1 - LOSS_EPS)
    return float(-np.sum(y * np.log(q) + (1 - y) * np.log1p(-q)))
