"""Server strategies, chosen by name.

Every strategy implements :class:`~rvfedprs.strategies.base.Strategy` and knows nothing of the
engine that runs it. ``get_strategy("fedce", n_clusters=3)`` builds one;
:func:`strategy_from_config` maps the validated ``train``/``fedce``/``strategies`` configuration
sections onto each strategy's options.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.similarity import METHODS as DISTANCE_METHODS
from rvfedprs.strategies.base import FitInstruction, FitResult, GlobalModelStrategy, Strategy
from rvfedprs.strategies.secure import check_secure_aggregation

__all__ = [
    "DISTANCE_METHODS",
    "DISTANCE_STRATEGIES",
    "FEDCE_VARIANTS",
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
    # ablations isolating FedCE's mechanism (SPEC §12)
    "fedavg_masked": "rvfedprs.strategies.fedavg_masked:MaskedFedAvg",
    "fedavgm": "rvfedprs.strategies.fedavgm:FedAvgM",
    "fedce_oracle": "rvfedprs.strategies.fedce_oracle:FedCEOracle",
    "fedce_random": "rvfedprs.strategies.fedce_random:FedCERandom",
    "fedce_global_head": "rvfedprs.strategies.fedce_global_head:FedCEGlobalHead",
    "fedce_carried": "rvfedprs.strategies.fedce_carried:FedCECarried",
    # the exact federated GLM (SPEC §7)
    "fedglm": "rvfedprs.strategies.fedglm:FedGLM",
    "fedce_glm": "rvfedprs.strategies.fedce_glm:FedCEGLM",
}

#: Names accepted by :func:`get_strategy` (and by the ``train.strategy`` schema enum).
STRATEGY_NAMES: tuple[str, ...] = tuple(_REGISTRY)

#: Strategies that need a client×client distance matrix (``strategies.distance``).
DISTANCE_STRATEGIES: tuple[str, ...] = ("fedavg_w", "cluster_fedavg")

#: FedCE and its ablations: they all take the ``fedce`` section's options.
FEDCE_VARIANTS: tuple[str, ...] = (
    "fedce",
    "fedce_oracle",
    "fedce_random",
    "fedce_global_head",
    "fedce_carried",
)

_FEDCE_OPTIONS = (
    "bloom_capacity",
    "bloom_error_rate",
    "top_k",
    "relative_threshold",
    "n_clusters",
    "distance_threshold",
    "recluster_every",
    "head_aggregation",
)

# DISTANCE_METHODS: values of ``strategies.distance`` naming a method computed on the
# federation (anything else is the path of a TSV matrix) — the similarity registry's names.


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


#: The ``fedglm`` section's keys FedGLM and FedCE-GLM take.
_GLM_OPTIONS = ("features", "l2", "penalize", "tol", "max_features")


def strategy_from_config(
    name: str,
    config: Mapping[str, Any],
    *,
    distance: Any = None,
    distance_clients: Any = None,
    clusters: Mapping[str, Any] | None = None,
) -> Strategy:
    """Build strategy ``name`` from a validated configuration.

    Parameters
    ----------
    name : str
        A registered strategy name.
    config : mapping
        Validated configuration (sections ``train``, ``fedce``, ``strategies``).
    distance : array, shape (K, K), optional
        The client distance matrix of ``fedavg_w`` / ``cluster_fedavg`` when
        ``strategies.distance`` names a method: the caller computes it on the federation
        (``rvfedprs train`` does, through :func:`rvfedprs.genomic.distance.strategy_distance`).
        Not needed when ``strategies.distance`` is a TSV path.
    distance_clients : sequence of str, optional
        Row order of ``distance``.
    clusters : mapping of client id to group, optional
        The true groups of ``fedce_oracle`` (default: read from the samples sheet named by
        ``strategies.oracle_groups``, else ``evaluate.samples``; none there leaves them unset).

    Raises
    ------
    ConfigError
        For an unknown strategy or option, a distance method with no matrix given, SCAFFOLD
        with client momentum, or (``secagg.enabled``) a strategy that cannot run with secure
        aggregation.
    """
    train = config.get("train", {})
    fedce = config.get("fedce", {})
    section = _strategies_section(config)
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
    elif name in FEDCE_VARIANTS:
        options = {key: fedce[key] for key in _FEDCE_OPTIONS}
        if name == "fedce_global_head":
            del options["head_aggregation"]
        elif name == "fedce_oracle":
            options["groups"] = clusters if clusters is not None else _oracle_groups(config)
        elif name == "fedce_random":
            seed = section["random_clusters_seed"]
            options["random_seed"] = seed if seed is not None else (train.get("seed") or 0)
    elif name == "fedavgm":
        options = {
            "momentum": section["fedavgm_momentum"],
            "server_lr": section["fedavgm_server_lr"],
        }
    elif name == "fedavg_masked":
        dp_on = bool(config.get("dp", {}).get("enabled", False))
        if train.get("weight_decay", 0.0) or dp_on:
            raise ConfigError(
                "strategy 'fedavg_masked' reads each client's carried columns off its update, "
                "which needs local training that leaves uncarried columns untouched; got "
                f"train.weight_decay = {train.get('weight_decay', 0.0)}, dp.enabled = {dp_on}"
            )
    elif name in DISTANCE_STRATEGIES:
        if distance is None:
            source = section["distance"]
            if source in DISTANCE_METHODS:
                raise ConfigError(
                    f"strategy {name!r}: strategies.distance = {source!r} is a method; its matrix "
                    "must be computed on the federation and passed as distance= (rvfedprs train "
                    "does this), or set strategies.distance to a TSV written by rvfedprs distance"
                )
            distance, distance_clients = source, None
        options = {"distance": distance, "distance_clients": distance_clients}
        if name == "fedavg_w":
            options.update(omega=section["omega"], sample_weighted=section["sample_weighted"])
        else:
            options.update(method=section["cluster_method"], n_clusters=section["n_clusters"])
    elif name in ("scaffold", "fedsvrg"):
        momentum = train.get("momentum", 0.0)
        if momentum != 0:
            raise ConfigError(
                f"strategy {name!r} (SCAFFOLD Option II) needs plain local SGD, but "
                f"train.momentum = {momentum}; set train.momentum: 0"
            )
        options = {"server_lr": section["scaffold_server_lr"]}
    elif name == "fedatt":
        options = {"step": section["fedatt_step"]}
    elif name == "ditto":
        options = {"lam": section["ditto_lambda"]}
    elif name == "fedglm":
        glm = config.get("fedglm") or validate_section("fedglm")
        options = {key: glm[key] for key in _GLM_OPTIONS}
        if glm["features"] == "burden":
            options["burden"] = burden_of(config)
    elif name == "fedce_glm":
        glm = config.get("fedglm") or validate_section("fedglm")
        if glm["features"] == "floor":
            raise ConfigError(
                "strategy 'fedce_glm' fits per-cluster rare effects: fedglm.features must be "
                "burden or dosages, not floor"
            )
        options = {key: fedce[key] for key in _FEDCE_OPTIONS if key != "head_aggregation"}
        options.update({key: glm[key] for key in _GLM_OPTIONS})
        if glm["features"] == "burden":
            options["burden"] = burden_of(config)
    strategy = get_strategy(name, **options)
    if (config.get("secagg") or {}).get("enabled", False):
        check_secure_aggregation(strategy)
    return strategy


def _oracle_groups(config: Mapping[str, Any]) -> dict[str, str] | None:
    """``fedce_oracle``'s groups from the configured samples sheet, or None without one."""
    from rvfedprs.strategies.fedce_oracle import client_groups

    section = _strategies_section(config)
    path = section["oracle_groups"] or config.get("evaluate", {}).get("samples")
    return None if path is None else client_groups(path, section["oracle_column"])


def burden_of(config: Mapping[str, Any]):
    """The burden map of ``train.data``'s variant set from the ``burden`` section."""
    from rvfedprs.burden import burden_from_config

    section = config.get("burden") or validate_section("burden")
    return burden_from_config(config["train"]["data"], section)


def validate_section(name: str) -> dict[str, Any]:
    """Section ``name`` holding only its schema defaults."""
    from rvfedprs.config import validate_config

    return dict(validate_config({name: {}})[name])


def _strategies_section(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``strategies`` section with its schema defaults filled in (it may be absent)."""
    section = config.get("strategies")
    return dict(section) if section is not None else validate_section("strategies")
