"""FedAvgM: FedAvg with momentum on the server."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.strategies.aggregation import Parameters, copy_parameters
from rvfedprs.strategies.base import GlobalModelStrategy, StrategyContext, config_section

__all__ = ["FedAvgM"]


class FedAvgM(GlobalModelStrategy):
    """FedAvgM: FedAvg with server momentum (Hsu, Qi & Brown 2019, §3).

    "Measuring the effects of non-identical data distribution for federated visual
    classification". With the weighted mean update Δ̄ = Σ_k (n_k/N)(w_k − w^t):
    v ← β v + Δ̄;  w ← w + η v  (v⁰ = 0). β = 0, η = 1 is FedAvg. An ablation for FedCE: a
    larger effective server step on every tensor, with no clusters.

    Parameters
    ----------
    momentum : float
        β in [0, 1).
    server_lr : float
        η > 0.
    """

    name = "fedavgm"
    tuning_axes = {"strategies.fedavgm_momentum": [0.5, 0.7, 0.9]}  # β, with η = 1 (Hsu et al.)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedAvgM:
        """β and η from ``strategies.fedavgm_momentum`` / ``fedavgm_server_lr``."""
        section = config_section(config, "strategies")
        return cls(momentum=section["fedavgm_momentum"], server_lr=section["fedavgm_server_lr"])

    def __init__(self, *, momentum: float = 0.9, server_lr: float = 1.0) -> None:
        super().__init__()
        if not 0 <= momentum < 1:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if server_lr <= 0:
            raise ValueError(f"server_lr must be > 0, got {server_lr}")
        self.momentum, self.server_lr = float(momentum), float(server_lr)
        self.velocity: Parameters = {}

    def initialize(self, global_parameters, client_ids):
        """w^0, and zero velocity."""
        super().initialize(global_parameters, client_ids)
        self.velocity = {k: np.zeros(v.shape, np.float64) for k, v in self.parameters.items()}

    def server_update(self, server_round: int, average: Parameters) -> Parameters:
        """Momentum step: v ← βv + Δ̄, w ← w + ηv."""
        new: Parameters = {}
        for name, w in self.parameters.items():
            delta = average[name].astype(np.float64) - w.astype(np.float64)
            self.velocity[name] = self.momentum * self.velocity[name] + delta
            step = self.server_lr * self.velocity[name]
            new[name] = (w.astype(np.float64) + step).astype(w.dtype)
        return new

    def state_dict(self) -> dict[str, Any]:
        """Parameters and the velocity."""
        state = super().state_dict()
        state["velocity"] = copy_parameters(self.velocity)
        return state

    def load_state_dict(self, state) -> None:
        """Restore parameters and the velocity."""
        super().load_state_dict(state)
        self.velocity = copy_parameters(state["velocity"])
