"""Local-only training: no aggregation at all."""

from __future__ import annotations

from typing import Any

from rvfedprs.strategies.aggregation import Parameters, copy_parameters
from rvfedprs.strategies.base import FitInstruction, Strategy, _sorted_results

__all__ = ["LocalOnly"]


class LocalOnly(Strategy):
    """Local-only baseline: each client trains and keeps its own model, w_k^{t+1} = w_k(local).

    All clients start from the same w^0; nothing is ever averaged (the lower bound for
    collaboration, paper §III baselines, design §7).
    """

    name = "local"
    tuning_axes = {}
    secagg_refusal = (
        "it keeps each client's own model on the server; there is no sum to take (every model "
        "the server holds is one client's)"
    )

    def __init__(self) -> None:
        self.models: dict[str, Parameters] = {}
        self.initial: Parameters = {}
        self.client_ids: list[str] = []

    def initialize(self, global_parameters, client_ids):
        """Every client starts from w^0."""
        self.initial = copy_parameters(global_parameters)
        self.client_ids = sorted(client_ids)
        self.models = {c: copy_parameters(global_parameters) for c in self.client_ids}

    def configure_fit(self, server_round, client_ids):
        """Each client continues from its own model."""
        return {c: FitInstruction(self.parameters_for(c), {}) for c in client_ids}

    def aggregate_fit(self, server_round, results):
        """Keep each client's own result."""
        for result in _sorted_results(results):
            self.models[result.client_id] = copy_parameters(result.parameters)

    def parameters_for(self, client_id):
        """The client's own model (w^0 for a client never trained)."""
        return copy_parameters(self.models.get(client_id, self.initial))

    def state_dict(self) -> dict[str, Any]:
        """Per-client models."""
        return {
            "initial": copy_parameters(self.initial),
            "models": {c: copy_parameters(p) for c, p in self.models.items()},
            "client_ids": list(self.client_ids),
        }

    def load_state_dict(self, state) -> None:
        """Restore per-client models."""
        self.initial = copy_parameters(state["initial"])
        self.models = {c: copy_parameters(p) for c, p in state["models"].items()}
        self.client_ids = list(state["client_ids"])
