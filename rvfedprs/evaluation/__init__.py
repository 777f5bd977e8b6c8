"""Evaluation of a federation's models (SPEC §10): every client on its held-out test split.

Each client is scored with the model it would use — ``parameters_for(client)``: its cluster's
personalised model for FedCE, the global model for FedAvg — then the metrics of paper §III are
computed: pooled AUC/AUPRC (Table II), AUC on carriers of their cluster's causal rare variants
(Table III), per-client AUC mean and sd (Table IV), and the ARI of the recovered clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation.metrics import (
    auprc,
    causal_carrier_mask,
    client_auc_summary,
    cluster_ari,
    roc_auc,
    true_client_clusters,
)
from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, model_from_config, set_parameters
from rvfedprs.training import ClientData, evaluate

__all__ = [
    "Truth",
    "load_truth",
    "carrier_masks",
    "predict_clients",
    "federation_metrics",
    "evaluate_models",
    "cluster_recovery",
]


@dataclass(frozen=True)
class Truth:
    """The simulator's ground truth.

    Attributes
    ----------
    causal : DataFrame or None
        ``truth/causal_variants.tsv`` (``variant_key``, ``kind``, ``cluster``, ...).
    samples : DataFrame
        ``samples.tsv`` (``sample_id``, ``population``, ``cluster``, ``client``).
    """

    causal: pd.DataFrame | None
    samples: pd.DataFrame

    def client_clusters(self) -> dict[str, str]:
        """Each client's true cluster."""
        return true_client_clusters(self.samples)


def load_truth(causal_path: str | Path | None, samples_path: str | Path) -> Truth:
    """Read ``samples.tsv`` and (optionally) ``truth/causal_variants.tsv``.

    Raises
    ------
    InputDataError
        When a file is missing or lacks a required column.
    """
    samples_path = Path(samples_path)
    if not samples_path.is_file():
        raise InputDataError(f"samples sheet not found: {samples_path}")
    samples = pd.read_csv(samples_path, sep="\t", dtype={"sample_id": str, "client": str})
    missing = {"sample_id", "cluster", "client"} - set(samples.columns)
    if missing:
        raise InputDataError(f"{samples_path} lacks columns {sorted(missing)}")
    causal = None
    if causal_path is not None:
        causal_path = Path(causal_path)
        if not causal_path.is_file():
            raise InputDataError(f"causal variant table not found: {causal_path}")
        causal = pd.read_csv(causal_path, sep="\t", dtype={"variant_key": str})
        missing = {"variant_key", "kind", "cluster"} - set(causal.columns)
        if missing:
            raise InputDataError(f"{causal_path} lacks columns {sorted(missing)}")
    return Truth(causal=causal, samples=samples)


def carrier_masks(
    test: Mapping[str, ClientData], variant_keys: Sequence[str], truth: Truth
) -> dict[str, np.ndarray]:
    """Per client, which test samples carry a causal rare variant of their own cluster.

    Raises
    ------
    InputDataError
        When test samples are absent from the samples sheet (named, up to 5).
    """
    if truth.causal is None:
        raise InputDataError("carrier masks need the causal variant table (evaluate.truth)")
    cluster_of = dict(zip(truth.samples["sample_id"], truth.samples["cluster"], strict=True))
    out = {}
    for client, data in test.items():
        absent = [s for s in data.sample_ids if s not in cluster_of]
        if absent:
            raise InputDataError(
                f"{len(absent)} test samples of client {client!r} are absent from the samples "
                f"sheet: {', '.join(absent[:5])}"
            )
        clusters = [cluster_of[s] for s in data.sample_ids]
        out[client] = causal_carrier_mask(data.rare, variant_keys, clusters, truth.causal)
    return out


def predict_clients(
    parameters_for: Callable[[str], Mapping[str, np.ndarray]],
    test: Mapping[str, ClientData],
    model: TwoPathwayModel,
) -> dict[str, np.ndarray]:
    """Case probabilities of every client's test samples under that client's own model.

    Parameters
    ----------
    parameters_for : callable
        Client id → parameters (e.g. ``strategy.parameters_for``).
    test : dict of str to ClientData
    model : TwoPathwayModel
        A model of the right architecture; its weights are overwritten.
    """
    out = {}
    for client in sorted(test):
        set_parameters(model, parameters_for(client))
        out[client] = evaluate(model, test[client])
    return out


def federation_metrics(
    predictions: Mapping[str, np.ndarray],
    test: Mapping[str, ClientData],
    *,
    carriers: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Pooled AUC/AUPRC, carrier AUC and per-client AUCs.

    Returns
    -------
    dict
        ``auc``, ``auprc``, ``carrier_auc`` (NaN without ``carriers``), ``n_carriers``,
        ``client_auc`` {client: auc}, ``client_auc_mean``, ``client_auc_std``.
    """
    clients = sorted(predictions)
    y = np.concatenate([test[c].y for c in clients])
    p = np.concatenate([predictions[c] for c in clients])
    client_auc = {c: roc_auc(test[c].y, predictions[c]) for c in clients}
    mean, std = client_auc_summary(client_auc)
    carrier_auc, n_carriers = float("nan"), None
    if carriers is not None:
        mask = np.concatenate([carriers[c] for c in clients])
        n_carriers = int(mask.sum())
        carrier_auc = roc_auc(y[mask], p[mask])
    return {
        "auc": roc_auc(y, p),
        "auprc": auprc(y, p),
        "carrier_auc": carrier_auc,
        "n_carriers": n_carriers,
        "client_auc": client_auc,
        "client_auc_mean": mean,
        "client_auc_std": std,
    }


def evaluate_models(
    parameters_for: Callable[[str], Mapping[str, np.ndarray]],
    clusters: Mapping[str, object],
    test: Mapping[str, ClientData],
    variant_keys: Sequence[str],
    model_config: Mapping[str, Any],
    *,
    truth: Truth | None = None,
    score_clusters: bool = True,
) -> dict[str, Any]:
    """Every metric of SPEC §10–11 for a trained federation.

    Parameters
    ----------
    parameters_for : callable
        Client id → the parameters that client evaluates with.
    clusters : mapping
        Client id → cluster label (reported, and scored by ARI against ``truth``).
    test : dict of str to ClientData
        Held-out test splits.
    variant_keys : sequence of str, shape (n_rare,)
    model_config : mapping
        ``common_hidden``, ``rare_hidden``, ``dropout``.
    truth : Truth, optional
        Enables ``carrier_auc`` (with a causal table) and ``ari``.
    score_clusters : bool
        False for a strategy that forms no clusters (``Strategy.forms_clusters``): its one
        cluster is reported but ``ari`` is NaN (not applicable) rather than a meaningless 0.

    Returns
    -------
    dict
        :func:`federation_metrics` keys plus ``clusters`` and ``ari`` (NaN without truth).
    """
    model = model_from_config(len(variant_keys), model_config, random_seed=0)
    predictions = predict_clients(parameters_for, test, model)
    carriers = None
    if truth is not None and truth.causal is not None:
        carriers = carrier_masks(test, variant_keys, truth)
    out = federation_metrics(predictions, test, carriers=carriers)
    out["clusters"] = {c: _plain(clusters[c]) for c in sorted(clusters)}
    scored = truth is not None and score_clusters
    out["ari"] = cluster_recovery(clusters, truth) if scored else float("nan")
    return out


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def cluster_recovery(predicted: Mapping[str, object], truth: Truth) -> float:
    """ARI of predicted client clusters against the true ones."""
    return cluster_ari(predicted, truth.client_clusters())
