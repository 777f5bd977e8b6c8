"""Evaluation metrics of paper §III and design §10.

Pooled AUC/AUPRC, carrier AUC, per-client fairness (with the spread corrected for sampling
noise), ARI of the recovered clusters, calibration, and the two headline shares: of the
centralised gain over FedAvg, and of the learnable signal between a PRS-only floor and an oracle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.metrics import adjusted_rand_score, average_precision_score, roc_auc_score

from rvfedprs.exceptions import InputDataError

__all__ = [
    "roc_auc",
    "auprc",
    "causal_carrier_mask",
    "true_client_clusters",
    "cluster_label",
    "cluster_ari",
    "client_auc_summary",
    "between_client_sd",
    "headline_gain_recovered",
    "signal_share",
    "calibration",
    "ECE_BINS",
]

#: Equal-frequency bins of the expected calibration error.
ECE_BINS = 10


def _checked(y_true: np.ndarray, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y_true).astype(int).ravel()
    s = np.asarray(score, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ValueError(f"y_true has {y.size} values but score has {s.size}")
    return y, s


def roc_auc(y_true: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve; NaN when only one class is present.

    Parameters
    ----------
    y_true : array of {0, 1}, shape (n,)
    score : array of float, shape (n,)
        Higher = more likely a case (logits or probabilities).
    """
    y, s = _checked(y_true, score)
    if y.size == 0 or np.unique(y).size < 2:
        return float("nan")
    return float(roc_auc_score(y, s))


def auprc(y_true: np.ndarray, score: np.ndarray) -> float:
    """Area under the precision–recall curve (average precision); NaN without cases."""
    y, s = _checked(y_true, score)
    if y.size == 0 or y.sum() == 0:
        return float("nan")
    return float(average_precision_score(y, s))


def causal_carrier_mask(
    dosages: sp.spmatrix,
    variant_keys: Sequence[str],
    sample_clusters: Sequence[object],
    truth: pd.DataFrame,
) -> np.ndarray:
    """Which samples carry a causal rare variant of their own cluster (paper Table III).

    Parameters
    ----------
    dosages : sparse matrix, shape (n_samples, n_variants)
        Minor-allele dosages, columns in the order of ``variant_keys``.
    variant_keys : sequence of str, shape (n_variants,)
        ``chrom:pos:ref:alt`` of each column.
    sample_clusters : sequence, shape (n_samples,)
        The true cluster of each sample (compared as strings).
    truth : DataFrame
        ``truth/causal_variants.tsv``: columns ``variant_key``, ``kind``, ``cluster``.

    Returns
    -------
    array of bool, shape (n_samples,)
    """
    missing = {"variant_key", "kind", "cluster"} - set(truth.columns)
    if missing:
        raise InputDataError(f"causal variant table lacks columns {sorted(missing)}")
    csr = sp.csr_matrix(dosages)
    if csr.shape[1] != len(variant_keys):
        raise ValueError(f"{csr.shape[1]} dosage columns but {len(variant_keys)} variant keys")
    clusters = np.asarray([str(c) for c in sample_clusters])
    if clusters.size != csr.shape[0]:
        raise ValueError(f"{csr.shape[0]} dosage rows but {clusters.size} sample clusters")
    column = {key: j for j, key in enumerate(variant_keys)}
    rare = truth[truth["kind"].astype(str) == "rare"]
    mask = np.zeros(csr.shape[0], dtype=bool)
    for cluster, rows in rare.groupby(rare["cluster"].map(cluster_label)):
        columns = [column[k] for k in rows["variant_key"] if k in column]
        in_cluster = clusters == cluster
        if not columns or not in_cluster.any():
            continue
        carries = np.asarray((csr[:, columns] > 0).sum(axis=1)).ravel() > 0
        mask |= carries & in_cluster
    return mask


def cluster_label(value: object) -> str:
    """A cluster label as a string; 1.0 (a float read from a TSV column with blanks) → '1'."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def true_client_clusters(samples: pd.DataFrame) -> dict[str, str]:
    """Each client's true cluster: the most frequent ``cluster`` of its samples."""
    missing = {"client", "cluster"} - set(samples.columns)
    if missing:
        raise InputDataError(f"samples sheet lacks columns {sorted(missing)}")
    out = {}
    for client, rows in samples.groupby(samples["client"].astype(str)):
        out[client] = cluster_label(rows["cluster"].map(cluster_label).mode().iloc[0])
    return out


def cluster_ari(predicted: Mapping[str, object], truth: Mapping[str, object]) -> float:
    """Adjusted Rand index between predicted and true client clusters, over the shared clients."""
    clients = sorted(set(predicted) & set(truth))
    if not clients:
        return float("nan")
    return float(
        adjusted_rand_score(
            [cluster_label(truth[c]) for c in clients],
            [cluster_label(predicted[c]) for c in clients],
        )
    )


def client_auc_summary(client_auc: Mapping[str, float]) -> tuple[float, float]:
    """Mean and (population) standard deviation of per-client AUCs, NaN clients ignored."""
    values = np.array([v for v in client_auc.values() if np.isfinite(v)], dtype=np.float64)
    if values.size == 0:
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std())


def between_client_sd(
    client_auc: Mapping[str, float], client_se: Mapping[str, float]
) -> dict[str, float]:
    """Between-client spread of the AUC with the sampling noise of each client's AUC removed.

    A client's AUC on a few hundred test samples has a standard error of ≈ 0.02, so clients
    that share one true AUC still differ. With ``s²`` the sample variance (ddof 1) of the
    per-client AUCs and ``SE_k`` their standard errors (e.g. DeLong's), the true spread is
    estimated as ``τ² = max(0, s² − mean(SE_k²))`` (a method-of-moments estimate, floored at 0).

    Parameters
    ----------
    client_auc, client_se : mappings of client id to float
        NaN entries (and clients missing from either) are left out.

    Returns
    -------
    dict
        ``sd_observed`` (s), ``mean_se`` (√mean SE²), ``sd_corrected`` (τ), ``n_clients``.
    """
    clients = [
        c
        for c in sorted(client_auc)
        if c in client_se and np.isfinite(client_auc[c]) and np.isfinite(client_se[c])
    ]
    nan = float("nan")
    if len(clients) < 2:
        return {"sd_observed": nan, "mean_se": nan, "sd_corrected": nan, "n_clients": len(clients)}
    auc = np.array([client_auc[c] for c in clients], dtype=np.float64)
    se2 = np.array([client_se[c] for c in clients], dtype=np.float64) ** 2
    observed = float(auc.var(ddof=1))
    return {
        "sd_observed": float(np.sqrt(observed)),
        "mean_se": float(np.sqrt(se2.mean())),
        "sd_corrected": float(np.sqrt(max(0.0, observed - se2.mean()))),
        "n_clients": len(clients),
    }


def headline_gain_recovered(auc_method: float, auc_fedavg: float, auc_central: float) -> float:
    """(AUC_method − AUC_FedAvg) / (AUC_Central − AUC_FedAvg), the share of the gain recovered."""
    gap = auc_central - auc_fedavg
    if gap == 0:
        return float("nan")
    return float((auc_method - auc_fedavg) / gap)


def signal_share(auc: float, floor_auc: float, ceiling_auc: float) -> float:
    """(AUC − AUC_floor) / (AUC_ceiling − AUC_floor): the share of the learnable signal captured.

    The floor is the PRS alone, the ceiling the true genetic value (an oracle) on the same test
    samples; NaN when the ceiling does not exceed the floor (nothing to learn).
    """
    gap = ceiling_auc - floor_auc
    if not np.isfinite(gap) or gap <= 0:
        return float("nan")
    return float((auc - floor_auc) / gap)


def _logistic_fit(
    y: np.ndarray, x: np.ndarray, *, fit_slope: bool, max_iter: int = 100
) -> tuple[float, float]:
    """Maximum-likelihood ``logit P(y) = a + b·x`` by Newton's method.

    Without ``fit_slope`` ``b`` stays 1 (an offset model: calibration-in-the-large).
    Not :func:`.prs_metrics.logistic_fit`: that solver has no offset (fixed-slope) model and
    its ridge answers a finite fit where calibration reports NaN for a singular Hessian.
    """
    a, b = 0.0, 1.0
    for _ in range(max_iter):
        eta = np.clip(a + b * x, -50, 50)
        p = 1.0 / (1.0 + np.exp(-eta))
        w = np.maximum(p * (1 - p), 1e-12)
        r = y - p
        if fit_slope:
            grad = np.array([r.sum(), (r * x).sum()])
            hess = np.array([[w.sum(), (w * x).sum()], [(w * x).sum(), (w * x * x).sum()]])
            try:
                step = np.linalg.solve(hess, grad)
            except np.linalg.LinAlgError:
                return float("nan"), float("nan")
            a, b = a + step[0], b + step[1]
        else:
            step = np.array([r.sum() / w.sum(), 0.0])
            a += step[0]
        if np.max(np.abs(step)) < 1e-10:
            return float(a), float(b)
    return float(a), float(b)


def calibration(y_true: np.ndarray, probability: np.ndarray, *, n_bins: int = ECE_BINS) -> dict:
    """How well predicted risks match observed rates (Cox 1958; van Calster et al. 2019).

    Parameters
    ----------
    y_true : array of {0, 1}, shape (n,)
    probability : array, shape (n,)
        Predicted case probabilities in (0, 1).
    n_bins : int
        Equal-frequency bins of the ECE.

    Returns
    -------
    dict
        ``slope`` (b of ``logit P(y) = a + b·logit p``: 1 ideal, < 1 over-confident),
        ``intercept`` (calibration-in-the-large: a with b fixed at 1; 0 ideal, > 0 risks
        under-estimated), ``ece`` (Σ_bins n_b/n · |mean y − mean p|), ``mean_predicted``,
        ``observed_rate``, ``n`` — NaN fits when only one class is present.
    """
    y, p = _checked(y_true, probability)
    if y.size == 0:
        raise ValueError("calibration needs predictions")
    if ((p <= 0) | (p >= 1)).any():
        p = np.clip(p, 1e-12, 1 - 1e-12)
    x = np.log(p) - np.log1p(-p)
    nan = float("nan")
    slope = intercept = nan
    if 0 < y.sum() < y.size:
        _, slope = _logistic_fit(y.astype(np.float64), x, fit_slope=True)
        intercept, _ = _logistic_fit(y.astype(np.float64), x, fit_slope=False)
    order = np.argsort(p, kind="stable")
    ece = sum(
        len(b) / y.size * abs(float(y[b].mean()) - float(p[b].mean()))
        for b in np.array_split(order, min(n_bins, y.size))
        if len(b)
    )
    return {
        "slope": slope,
        "intercept": intercept,
        "ece": float(ece),
        "mean_predicted": float(p.mean()),
        "observed_rate": float(y.mean()),
        "n": int(y.size),
    }
