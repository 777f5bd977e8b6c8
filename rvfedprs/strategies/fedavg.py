"""Federated Averaging."""

from __future__ import annotations

from rvfedprs.strategies.base import GlobalModelStrategy

__all__ = ["FedAvg"]


class FedAvg(GlobalModelStrategy):
    """FedAvg (McMahan et al. 2017, AISTATS, Algorithm 1): w^{t+1} = Σ_k (n_k / N) w_k^{t+1}.

    "Communication-efficient learning of deep networks from decentralized data".
    """

    name = "fedavg"
    #: Its own knobs in the tuning grid (rvfedprs.protocol.grids): none beyond the shared axes.
    tuning_axes = {}
