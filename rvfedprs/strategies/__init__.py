"""Server strategies, chosen by name.

Every strategy implements :class:`~rvfedprs.strategies.base.Strategy` and knows nothing of the
engine that runs it. ``get_strategy("fedce", n_clusters=3)`` builds one;
:func:`strategy_from_config` maps the validated ``train``/``fedce`` configuration sections onto
each strategy's options.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies.base import FitInstruction, FitResult, GlobalModelStrategy, Strategy

__all__ = [
    "STRATEGY_NAMES",
    "FitInstruction",
    "FitResult",
    "GlobalModelStrategy",
    "Strategy",
    "get_strategy",
    "strategy_class",
    "strategy_from_config",
]

_REGISTRY: dict[str, str] = {
    "fedce": "rvfedprs.strategies.fedce:FedCE",
    "fedavg": "rvfedprs.strategies.fedavg:FedAvg",
    "fedprox": "rvfedprs.strategies.fedprox:FedProx",
    "fedadam": "rvfedprs.strategies.fedadam:FedAdam",
    "clustered": "rvfedprs.strategies.clustered:ClusteredFL",
    "centralized": "rvfedprs.strategies.centralized:Centralized",
    "local": "rvfedprs.strategies.local_only:LocalOnly",
    "fedavg_w": "rvfedprs.strategies.fedavg_w:FedAvgW",
    "cluster_fedavg": "rvfedprs.strategies.cluster_fedavg:ClusterFedAvg",
    "scaffold": "rvfedprs.strategies.scaffold:Scaffold",
    "fedsvrg": "rvfedprs.strategies.scaffold:Scaffold",
    "fedatt": "rvfedprs.strategies.fedatt:FedAtt",
    "fedatt_cosine": "rvfedprs.strategies.fedatt:FedAttCosine",
    "ditto": "rvfedprs.strategies.ditto:Ditto",
}

#: Names accepted by :func:`get_strategy` (and by the ``train.strategy`` schema enum).
STRATEGY_NAMES: tuple[str, ...] = tuple(_REGISTRY)


def strategy_class(name: str) -> type[Strategy]:
    """The class registered under ``name``.

    Raises
    ------
    ConfigError
        ``"strategy 'fedcee' unknown; choose from [...]"``.
    """
    if name not in _REGISTRY:
        raise ConfigError(f"strategy {name!r} unknown; choose from {sorted(_REGISTRY)}")
    module_name, class_name = _REGISTRY[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)


def get_strategy(name: str, **config: Any) -> Strategy:
    """Build the strategy ``name`` with keyword options ``config``.

    Raises
    ------
    ConfigError
        For an unknown name, or an option or value the strategy does not accept.
    """
    cls = strategy_class(name)
    try:
        return cls(**config)
    except TypeError as exc:
        raise ConfigError(f"strategy {name!r}: {exc}") from None
    except ValueError as exc:
        raise ConfigError(f"strategy {name!r}: {exc}") from None


def strategy_from_config(name: str, config: Mapping[str, Any]) -> Strategy:
    """Build strategy ``name`` from a validated configuration (sections ``train``, ``fedce``)."""
    train = config.get("train", {})
    fedce = config.get("fedce", {})
    options: dict[str, Any] = {}
    if name == "fedprox":
        options = {"proximal_mu": train["proximal_mu"]}
    elif name == "fedadam":
        options = {
            "server_lr": train["server_lr"],
            "beta1": train["server_beta1"],
            "beta2": train["server_beta2"],
            "tau": train["server_tau"],
        }
    elif name == "clustered":
        options = {
            "eps1": train["cfl_eps1"],
            "eps2": train["cfl_eps2"],
            "min_cluster_size": train["cfl_min_cluster_size"],
        }
    elif name == "fedce":
        options = {
            key: fedce[key]
            for key in (
                "bloom_capacity",
                "bloom_error_rate",
                "top_k",
                "relative_threshold",
                "n_clusters",
                "distance_threshold",
                "recluster_every",
                "head_aggregation",
            )
        }
    return get_strategy(name, **options)
