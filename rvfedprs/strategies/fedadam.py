"""FedAdam: an Adam optimiser on the server, fed the clients' average update."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.strategies.aggregation import Parameters, copy_parameters
from rvfedprs.strategies.base import GlobalModelStrategy, StrategyContext, config_section

__all__ = ["FedAdam"]


class FedAdam(GlobalModelStrategy):
    """FedAdam (Reddi et al. 2021, "Adaptive federated optimization", Algorithm 2).

    With the weighted mean update Δ̄ = Σ_k (n_k/N)(w_k − w^t) (the negative pseudo-gradient):
    m ← β1 m + (1 − β1) Δ̄;  v ← β2 v + (1 − β2) Δ̄²;  w ← w + η m / (√v + τ).
    As in the paper, there is no bias correction.

    Parameters
    ----------
    server_lr : float
        η.
    beta1, beta2 : float
        Moment decay rates in [0, 1).
    tau : float
        τ > 0, the adaptivity (numerical stability) constant.
    """

    name = "fedadam"
    tuning_axes = {"train.server_lr": [0.003, 0.01, 0.03, 0.1]}  # η on a log grid (Reddi et al.)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedAdam:
        """The server optimiser's settings from ``train.server_*``."""
        train = config_section(config, "train")
        return cls(
            server_lr=train["server_lr"],
            beta1=train["server_beta1"],
            beta2=train["server_beta2"],
            tau=train["server_tau"],
        )

    def __init__(
        self,
        *,
        server_lr: float = 0.1,
        beta1: float = 0.9,
        beta2: float = 0.99,
        tau: float = 1e-3,
    ) -> None:
        super().__init__()
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1):
            raise ValueError(f"beta1, beta2 must be in [0, 1), got {beta1}, {beta2}")
        if tau <= 0 or server_lr <= 0:
            raise ValueError(f"server_lr and tau must be > 0, got {server_lr}, {tau}")
        self.server_lr, self.beta1, self.beta2, self.tau = server_lr, beta1, beta2, tau
        self.m: Parameters = {}
        self.v: Parameters = {}

    def initialize(self, global_parameters, client_ids):
        """w^0, and zero moments."""
        super().initialize(global_parameters, client_ids)
        self.m = {k: np.zeros_like(v, dtype=np.float64) for k, v in self.parameters.items()}
        self.v = {k: np.zeros_like(v, dtype=np.float64) for k, v in self.parameters.items()}

    def server_update(self, server_round: int, average: Parameters) -> Parameters:
        """One Adam step on the pseudo-gradient −Δ̄."""
        new: Parameters = {}
        for name, w in self.parameters.items():
            delta = average[name].astype(np.float64) - w.astype(np.float64)
            self.m[name] = self.beta1 * self.m[name] + (1 - self.beta1) * delta
            self.v[name] = self.beta2 * self.v[name] + (1 - self.beta2) * delta**2
            step = self.server_lr * self.m[name] / (np.sqrt(self.v[name]) + self.tau)
            new[name] = (w.astype(np.float64) + step).astype(w.dtype)
        return new

    def state_dict(self) -> dict[str, Any]:
        """Parameters and both moments."""
        state = super().state_dict()
        state.update(m=copy_parameters(self.m), v=copy_parameters(self.v))
        return state

    def load_state_dict(self, state) -> None:
        """Restore parameters and moments."""
        super().load_state_dict(state)
        self.m = copy_parameters(state["m"])
        self.v = copy_parameters(state["v"])
