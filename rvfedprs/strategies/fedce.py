"""FedCE: federated clustering and ensemble, the aggregation of RV-FedPRS."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.bloom import BloomSpec
from rvfedprs.clustering import ClientClusterer, match_labels, nearest_cluster
from rvfedprs.config import section_defaults
from rvfedprs.exceptions import ConfigError
from rvfedprs.similarity.jaccard import jaccard_matrix
from rvfedprs.strategies.aggregation import (
    Parameters,
    apply_weighted_delta,
    copy_parameters,
    parameter_delta,
    select_prefix,
    weighted_average,
)
from rvfedprs.strategies.base import (
    FitInstruction,
    FitResult,
    Strategy,
    StrategyContext,
    _sorted_results,
    config_section,
)
from rvfedprs.strategies.secure import SMALL_CLUSTERS, SumGroup, normalised_weights

__all__ = ["FedCE", "fedce_options"]

HEAD_AGGREGATION = ("cluster", "global")


def _plus(base: Parameters, step: Parameters) -> Parameters:
    """Base + step per tensor of ``base``, in float64, cast back to base's dtype."""
    return {
        name: (np.asarray(value, dtype=np.float64) + step[name]).astype(np.asarray(value).dtype)
        for name, value in sorted(base.items())
    }


#: The ``fedce`` section's schema defaults: the keyword defaults below (one default per option).
_DEFAULTS = section_defaults("fedce")

#: The ``fedce`` options FedCE's constructor takes (the Bloom key file is read by the clients).
_OPTIONS = (
    "bloom_capacity",
    "bloom_error_rate",
    "top_k",
    "relative_threshold",
    "n_clusters",
    "distance_threshold",
    "recluster_every",
    "head_aggregation",
)


def fedce_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``fedce`` section's options of :class:`FedCE`'s constructor, as keywords."""
    section = config_section(config, "fedce")
    return {key: section[key] for key in _OPTIONS}


class FedCE(Strategy):
    """FedCE (RV-FedPRS paper §II-B, eq. 3–6; design §6).

    Each round every client trains its personalised model and reports, besides its parameters, a
    Bloom filter of its most influential rare variants (``influence``/``bloom`` in the round
    config). The server

    1. estimates the pairwise Jaccard similarity S of the influential-variant sets from the
       filters (eq. 3), clusters clients by agglomerative clustering on 1 − S — every
       ``recluster_every`` rounds, starting in round 1 — and matches the new cluster labels to
       the previous ones by member overlap so that specialists keep their identity;
    2. aggregates asymmetrically: the common backbone over all clients,
       w_c ← w_c + Σ_k (n_k/N) Δw_c,k (eq. 4); each cluster's rare specialist over its members,
       w_r,m ← w_r,m + Σ_{k∈C_m} (n_k/N_m) Δw_r,k (eq. 5). Δw_k is taken against the model the
       client received. A cluster that did not exist before starts from the n_k-weighted mean of
       the specialists its members received;
    3. keeps the ensemble {w_c, {w_r,m, w_out,m}} (eq. 6) and sends each client its cluster's
       personalised model.

    Decision (paper silent, design §4): the integration head is aggregated per cluster with the
    specialist (``head_aggregation="cluster"``) because it weights h_r, whose meaning differs
    between clusters; ``"global"`` aggregates it with the backbone. With one cluster and a global
    head FedCE is FedAvg.

    Parameters
    ----------
    bloom_capacity, bloom_error_rate : int, float
        The federation-wide Bloom filter parameters sent to clients.
    top_k, relative_threshold : int or None, float or None
        How clients choose their influential variants.
    n_clusters : int or "auto"
        Number of clusters M, or silhouette selection.
    distance_threshold : float or None
        Cut the dendrogram at this distance instead (overrides ``n_clusters``).
    recluster_every : int
        Re-cluster in rounds 1, 1 + r, 1 + 2r, ...; between them the assignment is kept.
    head_aggregation : {"cluster", "global"}
    """

    name = "fedce"
    tuning_axes = {"fedce.top_k": [100, 300, 1000, 3000], "fedce.n_clusters": [2, 3, 4, "auto"]}
    forms_clusters = True
    secagg_refusal = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedCE:
        """FedCE with the ``fedce`` section's options."""
        return cls(**fedce_options(config))

    def __init__(
        self,
        *,
        bloom_capacity: int = _DEFAULTS["bloom_capacity"],
        bloom_error_rate: float = _DEFAULTS["bloom_error_rate"],
        top_k: int | None = _DEFAULTS["top_k"],
        relative_threshold: float | None = _DEFAULTS["relative_threshold"],
        n_clusters: int | str = _DEFAULTS["n_clusters"],
        distance_threshold: float | None = _DEFAULTS["distance_threshold"],
        recluster_every: int = _DEFAULTS["recluster_every"],
        head_aggregation: str = _DEFAULTS["head_aggregation"],
    ) -> None:
        if head_aggregation not in HEAD_AGGREGATION:
            raise ValueError(
                f"head_aggregation {head_aggregation!r} unknown; "
                f"choose from {list(HEAD_AGGREGATION)}"
            )
        if recluster_every < 1:
            raise ValueError(f"recluster_every must be >= 1, got {recluster_every}")
        if top_k is None and relative_threshold is None:
            raise ValueError(
                "set top_k or relative_threshold (or both) to pick influential variants"
            )
        if not (n_clusters == "auto" or (isinstance(n_clusters, int) and n_clusters >= 1)):
            raise ValueError(f"n_clusters must be a positive integer or 'auto', got {n_clusters!r}")
        self.spec = BloomSpec(capacity=int(bloom_capacity), error_rate=float(bloom_error_rate))
        self.top_k = top_k
        self.relative_threshold = relative_threshold
        self.n_clusters = n_clusters
        self.distance_threshold = distance_threshold
        self.recluster_every = int(recluster_every)
        self.head_aggregation = head_aggregation
        cluster_groups = ("rare.", "head.") if head_aggregation == "cluster" else ("rare.",)
        self._cluster_prefixes: tuple[str, ...] = cluster_groups
        self.backbone: Parameters = {}
        self.specialists: dict[int, Parameters] = {}
        self.assignment: dict[str, int] = {}
        self.filters: dict[str, np.ndarray] = {}
        self.client_ids: list[str] = []
        self.similarity_: np.ndarray | None = None
        self.similarity_clients_: list[str] = []
        self._pending: dict[str, Any] = {}

    # -- helpers ---------------------------------------------------------------------------
    def _split(self, parameters: Mapping[str, np.ndarray]) -> tuple[Parameters, Parameters]:
        cluster = select_prefix(parameters, self._cluster_prefixes)
        shared = {k: v for k, v in parameters.items() if k not in cluster}
        return shared, cluster

    def _reclusters(self, server_round: int) -> bool:
        return (server_round - 1) % self.recluster_every == 0

    def client_config(self, server_round: int) -> dict[str, Any]:
        """Ask for influence and a Bloom filter with the federation's parameters."""
        return {
            "influence": True,
            "bloom": {"capacity": self.spec.capacity, "error_rate": self.spec.error_rate},
            "top_k": self.top_k,
            "relative_threshold": self.relative_threshold,
        }

    # -- Strategy interface ------------------------------------------------------------------
    def initialize(self, global_parameters, client_ids):
        """One cluster (0) holding every client; the backbone and its specialist from w^0."""
        self.backbone, first = self._split(copy_parameters(global_parameters))
        self.specialists = {0: first}
        self.client_ids = sorted(client_ids)
        self.assignment = {c: 0 for c in self.client_ids}
        self.filters = {}

    def configure_fit(self, server_round, client_ids):
        """Each client gets the backbone and its cluster's specialist (and head)."""
        config = self.client_config(server_round)
        return {c: FitInstruction(self.parameters_for(c), dict(config)) for c in client_ids}

    def cluster_of(self, client_id: str) -> int:
        """The client's cluster.

        An unseen client goes to the cluster nearest to its filter (mean estimated Jaccard),
        or, with no filter known, to the cluster with most clients.
        """
        if client_id in self.assignment:
            return self.assignment[client_id]
        members: dict[int, list[np.ndarray]] = {}
        for c, label in sorted(self.assignment.items()):
            if c in self.filters:
                members.setdefault(label, []).append(self.filters[c])
        if client_id in self.filters and members:
            return nearest_cluster(self.filters[client_id], members, self.spec)
        sizes: dict[int, int] = {}
        for label in self.assignment.values():
            sizes[label] = sizes.get(label, 0) + 1
        return min(sizes, key=lambda label: (-sizes[label], label))

    def place_client(self, client_id: str, bloom_bits: np.ndarray) -> int:
        """Assign an unseen client to the nearest cluster by its filter; returns the cluster."""
        self.filters[client_id] = np.asarray(bloom_bits, dtype=np.uint8)
        if client_id not in self.assignment:
            self.assignment[client_id] = self.cluster_of(client_id)
        return self.assignment[client_id]

    def assign(self, client_ids: Sequence[str]) -> dict[str, int]:
        """Partition ``client_ids`` for this round (the hook the ablations override).

        FedCE: agglomerative clustering of 1 − Ŝ, the Jaccard similarities estimated from the
        clients' current filters (eq. 3). Labels are arbitrary; :meth:`recluster` matches them
        to the previous round's.
        """
        ids = sorted(client_ids)
        similarity = jaccard_matrix([self.filters[c] for c in ids], self.spec)
        self.similarity_, self.similarity_clients_ = similarity, ids
        clusterer = ClientClusterer(
            self.n_clusters if self.distance_threshold is None else None,
            distance_threshold=self.distance_threshold,
        ).fit(1.0 - similarity)
        return {c: int(label) for c, label in zip(ids, clusterer.labels_, strict=True)}

    def recluster(self, client_ids: Sequence[str]) -> dict[str, int]:
        """Partition ``client_ids`` (:meth:`assign`); labels matched to the previous round's."""
        ids = sorted(client_ids)
        current = self.assign(ids)
        previous = {c: self.assignment[c] for c in ids if c in self.assignment}
        return match_labels(previous, current)

    def _assign(self, server_round: int, ordered: Sequence[FitResult]) -> dict[str, int]:
        """Store the round's filters; the clients' clusters this round (re-clustered when due)."""
        missing = [r.client_id for r in ordered if r.bloom_bits is None]
        if missing:
            raise ValueError(f"FedCE needs a Bloom filter from every client; none from {missing}")
        for r in ordered:
            self.filters[r.client_id] = np.asarray(r.bloom_bits, dtype=np.uint8)
        ids = [r.client_id for r in ordered]
        if self._reclusters(server_round):
            return self.recluster(ids)
        return {c: self.cluster_of(c) for c in ids}

    def _specialist_base(
        self, label: int, members: Sequence[str], weights: Sequence[float], received
    ) -> Parameters:
        """Where cluster ``label``'s specialist starts: its own, or the members' mean (new)."""
        if label in self.specialists:
            return self.specialists[label]
        return weighted_average([self._split(received[c])[1] for c in members], list(weights))

    def _finish(self, ids: Sequence[str], new: Mapping[str, int], specialists) -> None:
        self.assignment.update(new)
        for label in set(self.assignment.values()) - set(specialists):
            specialists[label] = self.specialists[label]  # clients that sat this round out
        self.specialists = specialists
        self.client_ids = sorted(set(self.client_ids) | set(ids))

    def aggregate_fit(self, server_round, results):
        """Cluster (when due), then aggregate the backbone globally and specialists per cluster."""
        ordered: list[FitResult] = _sorted_results(results)
        received = {r.client_id: self.parameters_for(r.client_id) for r in ordered}
        new = self._assign(server_round, ordered)
        ids = [r.client_id for r in ordered]
        weights = [r.n_samples for r in ordered]
        # eq. 4: every client received the same backbone
        deltas = [parameter_delta(r.parameters, received[r.client_id]) for r in ordered]
        self.backbone = apply_weighted_delta(self.backbone, deltas, weights)
        # eq. 5 within each (new) cluster
        specialists: dict[int, Parameters] = {}
        for label in sorted(set(new.values())):
            index = [i for i, c in enumerate(ids) if new[c] == label]
            w = [weights[i] for i in index]
            base = self._specialist_base(label, [ids[i] for i in index], w, received)
            specialists[label] = apply_weighted_delta(base, [deltas[i] for i in index], w)
        self._finish(ids, new, specialists)

    # -- secure aggregation ------------------------------------------------------------------
    def merge_small_clusters(self, labels: Mapping[str, int], min_clients: int) -> dict[str, int]:
        """Merge every cluster of fewer than ``min_clients`` clients into its nearest one.

        The smallest cluster (lowest label on ties) goes first, into the cluster of highest
        mean estimated Jaccard similarity between their members' filters (average linkage, as
        the clustering; lowest label on ties); repeated until every cluster is large enough
        or one is left.
        """
        labels = dict(sorted(labels.items()))
        ids = list(labels)
        if ids == self.similarity_clients_ and self.similarity_ is not None:
            similarity = self.similarity_
        else:
            similarity = jaccard_matrix([self.filters[c] for c in ids], self.spec)
        while True:
            sizes: dict[int, int] = {}
            for label in labels.values():
                sizes[label] = sizes.get(label, 0) + 1
            small = sorted((n, label) for label, n in sizes.items() if n < min_clients)
            if not small or len(sizes) == 1:
                return labels
            source = small[0][1]
            rows = [i for i, c in enumerate(ids) if labels[c] == source]

            def closeness(label: int, rows=rows) -> tuple[float, int]:
                cols = [j for j, c in enumerate(ids) if labels[c] == label]
                return float(similarity[np.ix_(rows, cols)].mean()), -label

            target = max((label for label in sizes if label != source), key=closeness)
            for c in ids:
                if labels[c] == source:
                    labels[c] = target

    def secure_groups(self, server_round, results, *, min_clients, small_clusters):
        """``backbone`` over every client; ``cluster-<m>`` per cluster, with ω = n_k / N (N_m).

        Clusters come from the filters as in :meth:`aggregate_fit`; a cluster of fewer than
        ``min_clients`` clients is merged into its nearest (:meth:`merge_small_clusters`) or,
        with ``small_clusters="refuse"``, refused.

        Raises
        ------
        ConfigError
            With ``refuse``, naming the small cluster, its members and the minimum.
        """
        ordered = _sorted_results(results)
        received = {r.client_id: self.parameters_for(r.client_id) for r in ordered}
        new = self.secure_assignment(server_round, ordered, min_clients, small_clusters)
        self._pending = {"assignment": dict(new), "received": received}
        n = {r.client_id: float(r.n_samples) for r in ordered}
        shared = tuple(sorted(self.backbone))
        cluster = tuple(sorted(next(iter(self.specialists.values()))))
        groups = {"backbone": SumGroup(tuple(n), shared, normalised_weights(n))}
        for label in sorted(set(new.values())):
            members = {c: n[c] for c in n if new[c] == label}
            groups[f"cluster-{label}"] = SumGroup(
                tuple(members), cluster, normalised_weights(members)
            )
        return groups

    def secure_assignment(
        self, server_round: int, ordered: Sequence[FitResult], min_clients: int, small_clusters: str
    ) -> dict[str, int]:
        """The round's clusters, none smaller than ``min_clients`` (merged, or refused)."""
        new = self._assign(server_round, ordered)
        if small_clusters == "merge":
            new = self.merge_small_clusters(new, min_clients)
        elif small_clusters == "refuse":
            for label in sorted(set(new.values())):
                members = sorted(c for c, m in new.items() if m == label)
                if len(members) < min_clients and len(set(new.values())) > 1:
                    raise ConfigError(
                        f"round {server_round}: FedCE cluster {label} has {len(members)} "
                        f"client(s) {members}, fewer than secagg.min_clients = {min_clients}, "
                        "and secagg.small_clusters is 'refuse': its specialist would be the sum "
                        "of too few updates; set secagg.small_clusters: merge, or fewer clusters"
                    )
        else:
            raise ValueError(f"small_clusters must be one of {list(SMALL_CLUSTERS)}")
        return new

    def aggregate_sums(self, server_round, results, sums):
        """Eq. 4–5 from the secure sums: w_c += Σ ω_k Δw_c,k / Σ ω_k; per cluster likewise."""
        ordered = _sorted_results(results)
        new, received = self._pending["assignment"], self._pending["received"]
        ids = [r.client_id for r in ordered]
        n = {r.client_id: float(r.n_samples) for r in ordered}
        self.backbone = _plus(self.backbone, sums["backbone"].mean())
        specialists: dict[int, Parameters] = {}
        for label in sorted(set(new.values())):
            members = [c for c in ids if new[c] == label]
            if not members:
                continue
            base = self._specialist_base(label, members, [n[c] for c in members], received)
            specialists[label] = _plus(base, sums[f"cluster-{label}"].mean())
        self._finish(list(new), new, specialists)
        self._pending = {}

    def parameters_for(self, client_id):
        """The client's personalised model: backbone ⊕ its cluster's specialist (and head)."""
        return {
            **copy_parameters(self.backbone),
            **copy_parameters(self.specialists[self.cluster_of(client_id)]),
        }

    def clusters(self) -> dict[str, int]:
        """Client → cluster."""
        return dict(sorted(self.assignment.items()))

    def ensemble(self) -> dict[str, Any]:
        """The ensemble M = {w_c, {w_r,m, w_out,m}} (eq. 6)."""
        return {
            "backbone": copy_parameters(self.backbone),
            "specialists": {m: copy_parameters(p) for m, p in self.specialists.items()},
        }

    def state_dict(self) -> dict[str, Any]:
        """Ensemble, assignment and last filters."""
        return {
            "backbone": copy_parameters(self.backbone),
            "specialists": {str(m): copy_parameters(p) for m, p in self.specialists.items()},
            "assignment": dict(self.assignment),
            "filters": {c: np.array(b, copy=True) for c, b in self.filters.items()},
            "client_ids": list(self.client_ids),
            "head_aggregation": self.head_aggregation,
        }

    def load_state_dict(self, state) -> None:
        """Restore from :meth:`state_dict`."""
        if state.get("head_aggregation", self.head_aggregation) != self.head_aggregation:
            raise ValueError(
                f"checkpoint was trained with head_aggregation={state['head_aggregation']!r}, "
                f"this strategy uses {self.head_aggregation!r}"
            )
        self.backbone = copy_parameters(state["backbone"])
        self.specialists = {int(m): copy_parameters(p) for m, p in state["specialists"].items()}
        self.assignment = {c: int(m) for c, m in state["assignment"].items()}
        self.filters = {c: np.asarray(b, dtype=np.uint8) for c, b in state["filters"].items()}
        self.client_ids = list(state["client_ids"])
