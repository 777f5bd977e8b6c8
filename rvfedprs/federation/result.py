"""What a federated run leaves behind, whichever engine ran it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rvfedprs.strategies.base import Strategy

__all__ = ["RunResult"]


@dataclass
class RunResult:
    """The trained strategy, the per-round history and the checkpoints of a run.

    Attributes
    ----------
    strategy : Strategy
        The trained strategy (``parameters_for(client)`` gives each client's model).
    history : list of dict
        Per round: ``round``, ``loss`` (n_k-weighted mean local training loss), ``failed``
        (client → reason) when a reply was lost or rejected, and whatever the
        ``evaluate_round`` callback returned (e.g. ``auc``).
    seed : int
    checkpoints : list of Path
        The checkpoints still on disk (older ones may have been pruned).
    client_state : dict
        Client id → its persistent state as the server last saw it (DP accountants).
    metrics : dict
        What the run's evaluation gave (``metrics.json``), when the caller evaluated it.
    selected : dict, optional
        The run's choice on the sites' validation samples (the models of the chosen round,
        :meth:`~rvfedprs.evaluation.selection.RoundSelection.state_dict`); None without one.
    """

    strategy: Strategy
    history: list[dict[str, Any]]
    seed: int
    checkpoints: list[Path] = field(default_factory=list)
    client_state: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    selected: dict[str, Any] | None = None
