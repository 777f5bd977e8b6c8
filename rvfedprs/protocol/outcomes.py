"""Test-split outcomes of a chosen model: predictions and AUCs, pooled and per true cluster.

One frame per method and cohort (``client, sample_id, cluster, y, p, carrier``) holds
everything the paired analysis needs; :func:`outcome_table` turns it into one row per
(subset, metric): subsets ``pooled`` and ``cluster=<c>`` (the samples' true ancestry
cluster), metrics ``auc`` (every sample) and ``carrier_auc`` (carriers of a causal rare variant
of their own cluster, SPEC §10 Table III), each with DeLong's 95% interval and its counts.
The truth is read here for reporting only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from rvfedprs.evaluation.paired import delong_ci
from rvfedprs.training import ClientData

__all__ = ["predictions_frame", "outcome_table", "metric_subsets", "FRAME_COLUMNS"]

FRAME_COLUMNS = ("client", "sample_id", "cluster", "y", "p", "carrier")


def predictions_frame(
    scores: Mapping[str, np.ndarray],
    test: Mapping[str, ClientData],
    *,
    sample_clusters: Mapping[str, str] | None = None,
    carriers: Mapping[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """One row per test sample: client, sample id, true cluster, label, score, carrier flag.

    Parameters
    ----------
    scores : dict of str to array
        Client → score of each of its test samples (probabilities, PRS, genetic values...).
    test : dict of str to ClientData
    sample_clusters : mapping, optional
        Sample id → true cluster ("" where not given).
    carriers : dict of str to array of bool, optional
        Client → carrier mask (:func:`rvfedprs.evaluation.carrier_masks`).
    """
    frames = []
    for client in sorted(test):
        data = test[client]
        frames.append(
            pd.DataFrame(
                {
                    "client": client,
                    "sample_id": data.sample_ids,
                    "cluster": [
                        str(sample_clusters.get(s, "")) if sample_clusters else ""
                        for s in data.sample_ids
                    ],
                    "y": data.y.astype(np.int8),
                    "p": np.asarray(scores[client], dtype=np.float64),
                    "carrier": carriers[client] if carriers is not None else False,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)[list(FRAME_COLUMNS)]


def _auc_row(subset: str, metric: str, part: pd.DataFrame) -> dict:
    y = part["y"].to_numpy()
    n_cases = int(y.sum())
    row = {"subset": subset, "metric": metric, "n": len(part), "n_cases": n_cases}
    if 0 < n_cases < len(part):
        auc, low, high = delong_ci(y, part["p"].to_numpy())
        row.update(value=auc, ci_low=low, ci_high=high)
    else:
        row.update(value=np.nan, ci_low=np.nan, ci_high=np.nan)
    return row


def metric_subsets(frame: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """The (subset, metric, rows) an outcome is computed on.

    Subsets ``pooled`` and ``cluster=<c>`` of a :func:`predictions_frame`, each for ``auc``
    (every row) and ``carrier_auc`` (the carriers' rows).
    """
    subsets = [("pooled", frame)] + [
        (f"cluster={c}", part) for c, part in frame.groupby("cluster", sort=True) if c != ""
    ]
    out = []
    for name, part in subsets:
        out += [(name, "auc", part), (name, "carrier_auc", part[part["carrier"].astype(bool)])]
    return out


def outcome_table(frame: pd.DataFrame) -> pd.DataFrame:
    """AUC and carrier AUC, pooled and per true cluster, with DeLong 95% intervals.

    Returns
    -------
    DataFrame
        Columns ``subset, metric, value, ci_low, ci_high, n, n_cases``; NaN where a subset
        lacks cases or controls.
    """
    rows = [_auc_row(subset, metric, part) for subset, metric, part in metric_subsets(frame)]
    return pd.DataFrame(rows)[["subset", "metric", "value", "ci_low", "ci_high", "n", "n_cases"]]
