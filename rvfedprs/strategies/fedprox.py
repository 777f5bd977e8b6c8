"""FedProx: FedAvg aggregation with a proximal term in the clients' objective."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rvfedprs.config import section_defaults
from rvfedprs.strategies.base import StrategyContext, config_section
from rvfedprs.strategies.fedavg import FedAvg

__all__ = ["FedProx"]

#: μ's default is the ``train`` section's (one default per option).
_MU = section_defaults("train")["proximal_mu"]


class FedProx(FedAvg):
    """FedProx (Li et al. 2020, "Federated optimization in heterogeneous networks", eq. 2).

    Clients minimise L_k(w) + (μ/2)‖w − w^t‖²; the server averages as FedAvg. μ travels to the
    clients as ``proximal_mu`` in the round configuration; μ = 0 is FedAvg.

    Parameters
    ----------
    proximal_mu : float
        μ ≥ 0.
    """

    name = "fedprox"
    tuning_axes = {"train.proximal_mu": [0.001, 0.01, 0.1, 1.0]}  # μ = 0.01 barely differs

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedProx:
        """μ from ``train.proximal_mu``."""
        return cls(proximal_mu=config_section(config, "train")["proximal_mu"])

    def __init__(self, *, proximal_mu: float = _MU) -> None:
        super().__init__()
        if proximal_mu < 0:
            raise ValueError(f"proximal_mu must be >= 0, got {proximal_mu}")
        self.proximal_mu = float(proximal_mu)

    def client_config(self, server_round: int) -> dict[str, Any]:
        """Send μ to every client."""
        return {"proximal_mu": self.proximal_mu}
