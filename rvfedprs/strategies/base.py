"""The interface every server strategy implements, and the messages it exchanges with clients.

A strategy knows nothing of the engine that runs it: the in-process engine and the Flower apps
call the same five methods. Parameters travel as ``dict[str, np.ndarray]`` keyed by tensor name
(``common.*``, ``rare.*``, ``head.*``). Clients return their *full* updated parameters; strategies
compute Δw = w_k − w^t themselves against what they sent.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from rvfedprs.strategies.aggregation import Parameters, copy_parameters, weighted_average
from rvfedprs.strategies.secure import GroupSum, SumGroup, normalised_weights

__all__ = [
    "FitInstruction",
    "FitResult",
    "Strategy",
    "GlobalModelStrategy",
    "StrategyContext",
    "config_section",
]


@dataclass(frozen=True)
class StrategyContext:
    """What a strategy needs besides its configuration: inputs computed on the federation.

    Attributes
    ----------
    distance : array, shape (K, K), optional
        The client distance matrix of ``fedavg_w`` / ``cluster_fedavg`` when
        ``strategies.distance`` names a method (the caller computes it on the federation).
    distance_clients : sequence of str, optional
        Row order of ``distance``.
    clusters : mapping of client id to group, optional
        The true groups of ``fedce_oracle`` (default: read from the configured samples sheet).
    variants : DataFrame, optional
        The federation's rare-variant table, whose burden map the GLMs' burden features read
        (a consortium study's federated one; default: ``train.data``'s ``rare_variants.tsv``).
    """

    distance: Any = None
    distance_clients: Sequence[str] | None = None
    clusters: Mapping[str, Any] | None = None
    variants: Any = None


def config_section(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """Section ``name`` of ``config`` over its schema defaults (the section may be absent)."""
    from rvfedprs.config import section_defaults

    return {**section_defaults(name), **(config.get(name) or {})}


@dataclass
class FitInstruction:
    """What the server sends a client for one round.

    Attributes
    ----------
    parameters : dict of str to array
        The model the client starts from (its personalised model for FedCE).
    config : dict
        Client-side behaviour: JSON-like values and numpy arrays (SCAFFOLD's correction,
        Ditto's personal model), as :func:`~rvfedprs.federation.flower.records.encode_config`
        carries them: ``proximal_mu`` (FedProx), ``influence`` (bool), ``bloom``
        (``{"capacity": int, "error_rate": float}``), ``top_k``, ``relative_threshold``.
    """

    parameters: Parameters
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class FitResult:
    """What a client returns after local training.

    Attributes
    ----------
    client_id : str
    n_samples : int
        n_k, the number of training samples (the aggregation weight).
    parameters : dict of str to array
        The full updated parameters w_k (not the update).
    metrics : dict
        Training metrics (``loss``, ...).
    bloom_bits : array of uint8 or None
        The packed Bloom-filter bit array of the client's influential rare variants (FedCE).
    secure_keys : dict or None
        A securely aggregated round: key slot → the site's two public keys (ASCII) for the
        round's secure sums, sent with the fit reply so that the sums need no key exchange
        (:func:`rvfedprs.federation.secagg.site.held_fit_result`).
    """

    client_id: str
    n_samples: int
    parameters: Parameters
    metrics: dict[str, float] = field(default_factory=dict)
    bloom_bits: np.ndarray | None = None
    secure_keys: dict[str, tuple[str, str]] | None = None


def _sorted_results(results: Sequence[FitResult]) -> list[FitResult]:
    ids = [r.client_id for r in results]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate client ids in results: {sorted(ids)}")
    if not results:
        raise ValueError("aggregate_fit needs at least one result")
    return sorted(results, key=lambda r: r.client_id)


class Strategy(ABC):
    """A server strategy: what each client trains from, and how updates are combined.

    Attributes
    ----------
    name : str
        The registry name.
    pooled : bool
        True for the centralised baseline: the engine trains one virtual client holding every
        client's training data.
    forms_clusters : bool
        True for strategies that group clients (FedCE, clustered FL, cluster FedAvg): only their
        assignment is scored against the true ancestry clusters (ARI).
    random_start : bool
        False for a strategy that reads only the shapes of the parameters it is initialised
        with (FedAssoc serves a linear model of its own fit): the engine then hands it the
        task's :meth:`~rvfedprs.federation.task.Task.parameter_template` (no network drawn)
        instead of a seeded initialisation.
    """

    name: ClassVar[str] = ""
    pooled: ClassVar[bool] = False
    forms_clusters: ClassVar[bool] = False
    random_start: ClassVar[bool] = True
    #: Its own knobs in the equal-budget tuning grid (:mod:`rvfedprs.protocol.grids`), dotted
    #: configuration key → values, spread over the B configurations beside the shared optimiser
    #: axes; ``{}``: the shared axes only; None: not tuned.
    tuning_axes: ClassVar[Mapping[str, list[Any]] | None] = None
    #: A Newton fit's penalty path (dotted key → values, largest first): every tuning trial fits
    #: all of it, and the grid has no shared optimiser axes. None for the networks.
    tuning_path: ClassVar[Mapping[str, list[float]] | None] = None
    #: The strategy whose tuned configuration this one takes instead of a tuning of its own (an
    #: ablation that must differ from it in one mechanism only), or None.
    tuned_as: ClassVar[str | None] = None
    #: Why this strategy cannot run with secure aggregation, or None when it can (it then
    #: implements :meth:`secure_groups` and :meth:`aggregate_sums`).
    secagg_refusal: ClassVar[str | None] = (
        "it does not say which sums its aggregation needs (secure_groups / aggregate_sums)"
    )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> Strategy:
        """The strategy with its options from the validated ``config`` (none by default).

        Subclasses with options override this and read their configuration sections with
        :func:`config_section`; ``context`` carries what the configuration cannot hold.
        """
        return cls()

    @abstractmethod
    def initialize(self, global_parameters: Mapping[str, np.ndarray], client_ids: Sequence[str]):
        """Set the starting model w^0 for the federation of ``client_ids``."""

    @abstractmethod
    def configure_fit(
        self, server_round: int, client_ids: Sequence[str]
    ) -> dict[str, FitInstruction]:
        """One instruction per client for round ``server_round`` (1-based)."""

    @abstractmethod
    def aggregate_fit(self, server_round: int, results: Sequence[FitResult]) -> None:
        """Update the server state from the clients' results; order of ``results`` is irrelevant."""

    @abstractmethod
    def parameters_for(self, client_id: str) -> Parameters:
        """The model ``client_id`` evaluates with (its personalised model, or the global one)."""

    def secure_groups(
        self,
        server_round: int,
        results: Sequence[FitResult],
        *,
        min_clients: int,
        small_clusters: str,
    ) -> dict[str, SumGroup]:
        """The sums round ``server_round`` needs, by name (secure aggregation).

        ``results`` carry n_k, metrics and (FedCE) Bloom filters but no parameters: each
        client holds its update Δw_k = w_k − w_sent. ``min_clients`` is the smallest group the
        server may learn a sum of; ``small_clusters`` (``merge`` | ``refuse``) what a clustering
        strategy does with a smaller cluster.
        """
        raise NotImplementedError(f"strategy {self.name!r}: {self.secagg_refusal}")

    def aggregate_sums(
        self, server_round: int, results: Sequence[FitResult], sums: Mapping[str, GroupSum]
    ) -> None:
        """Update the server state from the groups' secure sums of Δw_k (secure aggregation).

        ``results`` are the clients whose updates are in the sums (dropped ones removed).
        """
        raise NotImplementedError(f"strategy {self.name!r}: {self.secagg_refusal}")

    @property
    def finished(self) -> bool:
        """True when the strategy needs no more rounds (a converged fit); the engine stops."""
        return False

    def clusters(self) -> dict[str, int]:
        """Client → cluster assignment (one cluster, 0, for strategies without clusters)."""
        return {client: 0 for client in getattr(self, "client_ids", [])}

    def client_config(self, server_round: int) -> dict[str, Any]:
        """Configuration sent to every client (hook; empty by default)."""
        return {}

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: numpy arrays, numbers, strings, lists and dicts only."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the state written by :meth:`state_dict`."""


class GlobalModelStrategy(Strategy):
    """Base of strategies that keep one global model w and send it to every client.

    Subclasses override :meth:`server_update`, which receives the current model and the
    client-weighted average of the clients' models, and :meth:`client_weights` (n_k by
    default). With secure aggregation the average is w + Σ_k ω_k Δw_k / Σ_k ω_k from one secure
    sum over every replying client.
    """

    secagg_refusal = None

    def __init__(self) -> None:
        self.parameters: Parameters = {}
        self.client_ids: list[str] = []

    def initialize(self, global_parameters, client_ids):
        """Set w^0 and the client list."""
        self.parameters = copy_parameters(global_parameters)
        self.client_ids = sorted(client_ids)

    def configure_fit(self, server_round, client_ids):
        """Every client starts from the global model."""
        config = self.client_config(server_round)
        return {
            client: FitInstruction(copy_parameters(self.parameters), dict(config))
            for client in client_ids
        }

    def aggregate_fit(self, server_round, results):
        """Set w ← server_update(w, Σ n_k/N w_k)."""
        ordered = _sorted_results(results)
        average = weighted_average(
            [r.parameters for r in ordered],
            [r.n_samples for r in ordered],
            names=self.parameters.keys(),
        )
        self.parameters = self.server_update(server_round, average)

    def client_weights(self, results: Sequence[FitResult]) -> dict[str, float]:
        """The aggregation weight of each client of ``results`` (n_k)."""
        return {r.client_id: float(r.n_samples) for r in results}

    def secure_groups(self, server_round, results, *, min_clients, small_clusters):
        """One sum, ``model``: every tensor over every replying client, ω_k = weight_k / Σ."""
        ordered = _sorted_results(results)
        weights = normalised_weights(self.client_weights(ordered))
        return {"model": SumGroup(tuple(weights), tuple(sorted(self.parameters)), weights)}

    def aggregate_sums(self, server_round, results, sums):
        """Set w ← server_update(w, w + Σ ω_k Δw_k / Σ ω_k) from the ``model`` sum."""
        mean = sums["model"].mean()
        average = {
            name: (np.asarray(w, dtype=np.float64) + mean[name]).astype(np.asarray(w).dtype)
            for name, w in self.parameters.items()
        }
        self.parameters = self.server_update(server_round, average)

    def server_update(self, server_round: int, average: Parameters) -> Parameters:
        """The new global model given the weighted average (FedAvg: the average itself)."""
        return average

    def parameters_for(self, client_id):
        """The global model, whoever asks."""
        return copy_parameters(self.parameters)

    def state_dict(self):
        """Global parameters and client list."""
        return {"parameters": copy_parameters(self.parameters), "client_ids": list(self.client_ids)}

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict`."""
        self.parameters = copy_parameters(state["parameters"])
        self.client_ids = list(state["client_ids"])
