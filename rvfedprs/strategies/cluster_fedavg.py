"""Distance-based cluster FedAvg (Alekseenko et al. §2.3, Algorithm 1): FedAvg per cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.strategies.aggregation import Parameters, copy_parameters, weighted_average
from rvfedprs.strategies.base import (
    FitInstruction,
    Strategy,
    StrategyContext,
    _sorted_results,
    config_section,
)
from rvfedprs.strategies.fedavg_w import (
    aligned_distance,
    configured_distance,
    most_distant_client,
)

__all__ = ["ClusterFedAvg", "assign_two_clusters"]


def assign_two_clusters(distance: np.ndarray) -> np.ndarray:
    """Alekseenko et al. Algorithm 1: the most distant client and its nearest neighbours form C2.

    i_max = argmax_i Σ_j D_ij starts C2; the client of C1 closest to i_max moves to C2 until
    two clients remain in C1.  For K = 4 this moves one client, for K = 5 two, as in the paper.
    **Deviation:** the paper's loop tests "two left" only after a move, which for K ≤ 3 would
    empty C1; here the loop runs while |C1| > 2, so for K ≤ 3, C2 = {i_max}.

    Parameters
    ----------
    distance : array, shape (K, K), K ≥ 2

    Returns
    -------
    array of int, shape (K,)
        1 for C2 (i_max's cluster), 0 for C1.
    """
    d = np.asarray(distance, dtype=np.float64)
    k = d.shape[0]
    if k < 2:
        raise ValueError(f"need at least 2 clients, got {k}")
    i_max = most_distant_client(d)
    labels = np.zeros(k, dtype=np.int64)
    labels[i_max] = 1
    c1 = [i for i in range(k) if i != i_max]
    while len(c1) > 2:
        nxt = min(c1, key=lambda i: (d[i_max, i], i))
        labels[nxt] = 1
        c1.remove(nxt)
    return labels


class ClusterFedAvg(Strategy):
    """Cluster FedAvg: one FedAvg model per cluster of a client distance matrix.

    Clients are grouped once and each cluster trains its own FedAvg model
    (Alekseenko et al. "FedAvg_EMD / FedAvg_EUC" personalisation).

    Parameters
    ----------
    distance : array (K, K), TSV path, or None
        Client distance matrix (any registered method, as a distance).
    distance_clients : sequence of str, optional
        Row order of an array ``distance`` (default: sorted client ids).
    method : {"algorithm1", "agglomerative"}
        Alekseenko et al. Algorithm 1 (two clusters), or average-linkage agglomerative clustering
        (:class:`rvfedprs.clustering.ClientClusterer`) on the matrix.
    n_clusters : int or "auto"
        For ``agglomerative`` only.
    """

    name = "cluster_fedavg"
    secagg_refusal = (
        "its clusters are fixed before training from a client distance matrix and are not "
        "checked against secagg.min_clients (Algorithm 1 always leaves a cluster of 2 clients, "
        "or of 1 with 3 clients), so a cluster model would be the sum of fewer clients than "
        "the minimum; use fedce, whose small clusters are merged"
    )
    forms_clusters = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> ClusterFedAvg:
        """The clustering from the ``strategies`` section; the distance as configured."""
        section = config_section(config, "strategies")
        return cls(
            method=section["cluster_method"],
            n_clusters=section["n_clusters"],
            **configured_distance(cls.name, config, context),
        )

    def __init__(
        self,
        *,
        distance: np.ndarray | str | Path | None = None,
        distance_clients: Sequence[str] | None = None,
        method: str = "algorithm1",
        n_clusters: int | str = 2,
    ) -> None:
        if method not in ("algorithm1", "agglomerative"):
            raise ValueError(f"method must be 'algorithm1' or 'agglomerative', got {method!r}")
        self.method = method
        self.n_clusters = n_clusters
        self._distance_source = (distance, distance_clients)
        self.client_ids: list[str] = []
        self.assignment: dict[str, int] = {}
        self.models: dict[int, Parameters] = {}

    def set_distance(self, distance, distance_clients: Sequence[str] | None = None) -> None:
        """Set the distance matrix before :meth:`initialize`."""
        self._distance_source = (distance, distance_clients)

    def _labels(self, d: np.ndarray) -> np.ndarray:
        if self.method == "algorithm1":
            return assign_two_clusters(d)
        from rvfedprs.clustering import ClientClusterer

        if len(d) < 2:
            return np.zeros(len(d), dtype=np.int64)
        n = self.n_clusters if self.n_clusters == "auto" else min(int(self.n_clusters), len(d))
        return ClientClusterer(n_clusters=n).fit(d).labels_

    def initialize(self, global_parameters, client_ids):
        """Cluster the clients; every cluster starts from w^0."""
        self.client_ids = sorted(client_ids)
        d = aligned_distance(*self._distance_source, self.client_ids)
        labels = self._labels(d)
        self.assignment = {c: int(lab) for c, lab in zip(self.client_ids, labels, strict=True)}
        self.models = {int(m): copy_parameters(global_parameters) for m in set(labels.tolist())}

    def configure_fit(self, server_round, client_ids):
        """Each client starts from its cluster's model."""
        return {c: FitInstruction(self.parameters_for(c), {}) for c in client_ids}

    def aggregate_fit(self, server_round, results):
        """FedAvg within each cluster: w_m ← Σ_{k∈C_m} (n_k/N_m) w_k."""
        ordered = _sorted_results(results)
        for m in sorted(self.models):
            members = [r for r in ordered if self.assignment[r.client_id] == m]
            if members:
                self.models[m] = weighted_average(
                    [r.parameters for r in members],
                    [r.n_samples for r in members],
                    names=self.models[m].keys(),
                )

    def parameters_for(self, client_id):
        """The model of the client's cluster."""
        return copy_parameters(self.models[self.assignment[client_id]])

    def clusters(self) -> dict[str, int]:
        """Client → cluster."""
        return dict(self.assignment)

    def state_dict(self) -> dict[str, Any]:
        """Cluster models and assignment."""
        return {
            "client_ids": list(self.client_ids),
            "assignment": dict(self.assignment),
            "models": {str(m): copy_parameters(p) for m, p in self.models.items()},
        }

    def load_state_dict(self, state) -> None:
        """Restore from :meth:`state_dict`."""
        self.client_ids = list(state["client_ids"])
        self.assignment = {c: int(m) for c, m in state["assignment"].items()}
        self.models = {int(m): copy_parameters(p) for m, p in state["models"].items()}
