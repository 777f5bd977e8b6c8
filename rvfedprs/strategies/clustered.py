"""Clustered Federated Learning: recursive bipartition by the cosine similarity of updates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from sklearn.cluster import AgglomerativeClustering

from rvfedprs.strategies.aggregation import (
    Parameters,
    apply_weighted_delta,
    copy_parameters,
    cosine_similarity_matrix,
    flatten_parameters,
    parameter_delta,
)
from rvfedprs.strategies.base import (
    FitInstruction,
    FitResult,
    Strategy,
    StrategyContext,
    _sorted_results,
    config_section,
)

__all__ = ["ClusteredFL", "bipartition"]


def bipartition(similarity: np.ndarray) -> np.ndarray:
    """Split clients in two by complete-linkage clustering of the cosine similarities.

    Sattler et al.'s optimal bipartition maximises the smallest cross-cluster dissimilarity;
    complete linkage on 1 − cos (their reference implementation) gives it.

    Parameters
    ----------
    similarity : array, shape (n, n)
        Pairwise cosine similarity of the clients' updates, n ≥ 2.

    Returns
    -------
    array of int, shape (n,)
        0/1 labels; the first client is always in part 0.
    """
    distance = np.clip(1.0 - similarity, 0.0, 2.0)
    labels = AgglomerativeClustering(
        n_clusters=2, metric="precomputed", linkage="complete"
    ).fit_predict(distance)
    return (labels != labels[0]).astype(int)


class ClusteredFL(Strategy):
    """Clustered FL (Sattler, Müller & Samek 2020, IEEE TNNLS, Algorithm 1).

    "Clustered federated learning: model-agnostic distributed multitask optimization under
    privacy constraints".

    Each cluster c keeps its own model and aggregates its members' updates as FedAvg. When a
    cluster is near a stationary point of the joint objective while some clients are not —
    ‖Σ_k (n_k/N_c) Δw_k‖ < ε1 and max_k ‖Δw_k‖ > ε2 (eq. 30–31) — it is split in two by the
    cosine similarity of the members' updates, and each part continues with the cluster model
    updated by its own members only. The γ_max cross-similarity check of the paper is not
    applied.

    Parameters
    ----------
    eps1 : float
        Threshold on the norm of the mean update.
    eps2 : float
        Threshold on the largest single update norm.
    min_cluster_size : int
        Clusters smaller than this are never split (at least 2 so each part is non-empty).
    """

    name = "clustered"
    # ε2 is tuned as a multiple of ε1 (rvfedprs.protocol.grids)
    tuning_axes = {"train.cfl_eps1": [0.02, 0.05, 0.1, 0.2], "train.cfl_eps2": [1.5, 2.0, 3.0]}
    secagg_refusal = (
        "it splits a cluster by the cosine similarity of its members' individual updates and "
        "checks each member's update norm (eq. 30-31): it needs every client's update"
    )
    forms_clusters = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> ClusteredFL:
        """The split criteria from ``train.cfl_*``."""
        train = config_section(config, "train")
        return cls(
            eps1=train["cfl_eps1"],
            eps2=train["cfl_eps2"],
            min_cluster_size=train["cfl_min_cluster_size"],
        )

    def __init__(self, *, eps1: float = 0.4, eps2: float = 1.6, min_cluster_size: int = 3) -> None:
        if min_cluster_size < 2:
            raise ValueError(f"min_cluster_size must be >= 2, got {min_cluster_size}")
        self.eps1, self.eps2, self.min_cluster_size = float(eps1), float(eps2), min_cluster_size
        self.models: dict[int, Parameters] = {}
        self.assignment: dict[str, int] = {}
        self.client_ids: list[str] = []

    def initialize(self, global_parameters, client_ids):
        """One cluster (0) holding every client, starting from w^0."""
        self.client_ids = sorted(client_ids)
        self.models = {0: copy_parameters(global_parameters)}
        self.assignment = {c: 0 for c in self.client_ids}

    def configure_fit(self, server_round, client_ids):
        """Each client starts from its cluster's model."""
        return {c: FitInstruction(self.parameters_for(c), {}) for c in client_ids}

    def aggregate_fit(self, server_round, results):
        """FedAvg within clusters; split clusters that meet the ε1/ε2 criterion."""
        ordered = _sorted_results(results)
        by_cluster: dict[int, list[FitResult]] = {}
        for result in ordered:
            by_cluster.setdefault(self.assignment.get(result.client_id, 0), []).append(result)
        next_id = max(self.models) + 1
        for cluster_id in sorted(by_cluster):
            members = by_cluster[cluster_id]
            base = self.models[cluster_id]
            deltas = [parameter_delta(r.parameters, base) for r in members]
            weights = [r.n_samples for r in members]
            flat = np.stack([flatten_parameters(d) for d in deltas])
            mean_norm = float(np.linalg.norm(np.average(flat, axis=0, weights=weights)))
            max_norm = float(np.linalg.norm(flat, axis=1).max())
            split = (
                len(members) >= self.min_cluster_size
                and mean_norm < self.eps1
                and max_norm > self.eps2
            )
            parts = bipartition(cosine_similarity_matrix(flat)) if split else np.zeros(len(members))
            for part in (0, 1):
                index = np.flatnonzero(parts == part)
                if index.size == 0:
                    continue
                target = cluster_id if part == 0 else next_id
                self.models[target] = apply_weighted_delta(
                    base, [deltas[i] for i in index], [weights[i] for i in index]
                )
                for i in index:
                    self.assignment[members[i].client_id] = target
            if split:
                next_id += 1

    def parameters_for(self, client_id):
        """The model of the client's cluster (cluster 0 for an unknown client)."""
        return copy_parameters(self.models[self.assignment.get(client_id, 0)])

    def clusters(self) -> dict[str, int]:
        """Client → cluster."""
        return dict(self.assignment)

    def state_dict(self) -> dict[str, Any]:
        """Cluster models (keys as strings) and assignment."""
        return {
            "models": {str(k): copy_parameters(v) for k, v in self.models.items()},
            "assignment": dict(self.assignment),
            "client_ids": list(self.client_ids),
        }

    def load_state_dict(self, state) -> None:
        """Restore cluster models and assignment."""
        self.models = {int(k): copy_parameters(v) for k, v in state["models"].items()}
        self.assignment = {c: int(v) for c, v in state["assignment"].items()}
        self.client_ids = list(state["client_ids"])
