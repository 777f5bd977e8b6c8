"""The centralised (pooled-data) upper bound."""

from __future__ import annotations

from rvfedprs.strategies.fedavg import FedAvg

__all__ = ["Centralized"]


class Centralized(FedAvg):
    """Centralised training (the upper bound of paper Table II).

    The engine pools every client's training data into one virtual client and trains the same
    model with the same budget (rounds × local epochs); with one client FedAvg's average is that
    client's model. Every client is then evaluated with the one pooled model.
    """

    name = "centralized"
    tuning_axes = {"train.weight_decay": [0.0, 1e-4, 1e-3, 1e-2]}
    pooled = True
    secagg_refusal = (
        "it pools every client's training data in one place, so there is no aggregation to "
        "protect; train the centralised reference in a run without secure aggregation"
    )
