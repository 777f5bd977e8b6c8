"""What a strategy asks of secure aggregation, and what it gets back: sums, never updates.

With secure aggregation on (``secagg.enabled``), a round's fit replies carry no parameters: each
client keeps its update Δw_k = w_k − w_sent in its own state. The strategy says which sums it
needs (:meth:`~rvfedprs.strategies.base.Strategy.secure_groups`: a :class:`SumGroup` per sum — its
members, the tensors, each member's weight) and the engine returns, per group, a
:class:`GroupSum`: Σ_{k ∈ included} ω_k Δw_k over the members whose masked vectors arrived,
computed by :mod:`rvfedprs.federation.secagg` so that the server never holds one client's
update. :meth:`~rvfedprs.strategies.base.Strategy.aggregate_sums` turns them into the new model.

A strategy that needs anything per client besides its sample count and (FedCE) its Bloom filter
cannot run this way; it names why in :attr:`~rvfedprs.strategies.base.Strategy.secagg_refusal`
and :func:`check_secure_aggregation` refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from rvfedprs.exceptions import ConfigError

__all__ = [
    "SumGroup",
    "GroupSum",
    "SMALL_CLUSTERS",
    "check_secure_aggregation",
    "normalised_weights",
]

#: How a clustering strategy treats a cluster smaller than ``secagg.min_clients``.
SMALL_CLUSTERS: tuple[str, ...] = ("merge", "refuse")


@dataclass(frozen=True)
class SumGroup:
    """One sum the server needs: Σ_{k ∈ members} ω_k v_k, of some of the vectors' tensors.

    Attributes
    ----------
    members : tuple of str
        The clients whose vectors go into the sum (at least ``secagg.min_clients``).
    tensors : tuple of str
        The tensors of the held vector summed in this group (e.g. ``common.*`` for the FedCE
        backbone).
    weights : mapping of str to float, optional
        ω_k per member (public: chosen by the server, e.g. n_k/N): float vectors are scaled by
        it before quantisation. None for an exact sum of integer vectors (allele counts).
    """

    members: tuple[str, ...]
    tensors: tuple[str, ...]
    weights: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(sorted(self.members)))
        object.__setattr__(self, "tensors", tuple(self.tensors))
        if len(set(self.members)) != len(self.members):
            raise ValueError(f"duplicate members in a sum group: {list(self.members)}")
        if self.weights is not None:
            missing = sorted(set(self.members) - set(self.weights))
            if missing:
                raise ValueError(f"sum group has no weight for members {missing}")
            bad = {c: w for c, w in self.weights.items() if not (np.isfinite(w) and 0 < w <= 1)}
            if bad:
                raise ValueError(f"sum group weights must lie in (0, 1], got {bad}")


@dataclass
class GroupSum:
    """A group's secure sum: what the server learns of its members' vectors.

    Attributes
    ----------
    total : dict of str to array
        Per tensor, Σ_{k ∈ included} ω_k v_k (float64; int64 for an exact integer sum), up to
        the quantisation error of :mod:`rvfedprs.federation.secagg` for float vectors.
    weight : float
        Σ_{k ∈ included} ω_k (the number of included members for an integer sum).
    included : tuple of str
        The members whose vectors are in the sum (those that dropped out are not).
    error_bound : float
        The largest possible absolute difference between an entry of ``total`` and the exact
        weighted sum (0 for an integer sum).
    """

    total: dict[str, np.ndarray]
    weight: float
    included: tuple[str, ...]
    error_bound: float = 0.0
    members: tuple[str, ...] = field(default=())

    def mean(self) -> dict[str, np.ndarray]:
        """Σ ω_k v_k / Σ ω_k over the included members (float64)."""
        return {name: value / self.weight for name, value in self.total.items()}


class _Refusable(Protocol):
    name: str
    secagg_refusal: str | None


def check_secure_aggregation(strategy: _Refusable) -> None:
    """Refuse a strategy (:class:`~rvfedprs.strategies.base.Strategy`) secure aggregation can't run.

    Raises
    ------
    ConfigError
        ``"strategy 'scaffold' cannot run with secure aggregation (secagg.enabled): it keeps
        ..."``, naming the strategy and why.
    """
    reason = strategy.secagg_refusal
    if reason is not None:
        raise ConfigError(
            f"strategy {strategy.name!r} cannot run with secure aggregation "
            f"(secagg.enabled: true): {reason}"
        )


def normalised_weights(values: Mapping[str, float]) -> dict[str, float]:
    """ω_k = v_k / Σ v (e.g. n_k/N), in sorted client order.

    Raises
    ------
    ValueError
        For a non-positive or non-finite value.
    """
    total = float(sum(values.values()))
    if not np.isfinite(total) or total <= 0 or any(v <= 0 for v in values.values()):
        raise ValueError(f"weights must be positive, got {dict(values)}")
    return {c: float(values[c]) / total for c in sorted(values)}
