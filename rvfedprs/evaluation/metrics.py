"""Evaluation metrics of paper §III: pooled AUC/AUPRC, carrier AUC, per-client fairness, ARI."""

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
    "cluster_ari",
    "client_auc_summary",
    "headline_gain_recovered",
]


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
    for cluster, rows in rare.groupby(rare["cluster"].map(_cluster_str)):
        columns = [column[k] for k in rows["variant_key"] if k in column]
        in_cluster = clusters == cluster
        if not columns or not in_cluster.any():
            continue
        carries = np.asarray((csr[:, columns] > 0).sum(axis=1)).ravel() > 0
        mask |= carries & in_cluster
    return mask


def _cluster_str(value: object) -> str:
    """Cluster labels as strings; 1.0 (a float read from a TSV column with blanks) → '1'."""
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
        out[client] = _cluster_str(rows["cluster"].map(_cluster_str).mode().iloc[0])
    return out


def cluster_ari(predicted: Mapping[str, object], truth: Mapping[str, object]) -> float:
    """Adjusted Rand index between predicted and true client clusters, over the shared clients."""
    clients = sorted(set(predicted) & set(truth))
    if not clients:
        return float("nan")
    return float(
        adjusted_rand_score(
            [_cluster_str(truth[c]) for c in clients],
            [_cluster_str(predicted[c]) for c in clients],
        )
    )


def client_auc_summary(client_auc: Mapping[str, float]) -> tuple[float, float]:
    """Mean and (population) standard deviation of per-client AUCs, NaN clients ignored."""
    values = np.array([v for v in client_auc.values() if np.isfinite(v)], dtype=np.float64)
    if values.size == 0:
        return float("nan"), float("nan")
    return float(values.mean()), float(values.std())


def headline_gain_recovered(auc_method: float, auc_fedavg: float, auc_central: float) -> float:
    """(AUC_method − AUC_FedAvg) / (AUC_Central − AUC_FedAvg), the share of the gain recovered."""
    gap = auc_central - auc_fedavg
    if gap == 0:
        return float("nan")
    return float((auc_method - auc_fedavg) / gap)
