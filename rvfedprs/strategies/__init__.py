"""Server strategies, chosen by name.

Every strategy implements :class:`~rvfedprs.strategies.base.Strategy` and knows nothing of the
engine that runs it. The registry maps each name to its class (imported on first use: the
classes pull in torch and scikit-learn). ``get_strategy("fedce", n_clusters=3)`` builds one
from keyword options; :func:`strategy_from_config` builds one from a validated configuration,
the class reading its own sections (``Strategy.from_config``).

Adding a strategy is one class and one :func:`register_strategy` call: the configuration's
strategy names (``train.strategy``, ``train.compare``, ``paper_evaluation.strategies``) are read
from this registry (:func:`strategy_names`), not listed in the schemas.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rvfedprs.exceptions import ConfigError, RvfedprsError
from rvfedprs.similarity import METHODS as DISTANCE_METHODS
from rvfedprs.strategies.base import (
    FitInstruction,
    FitResult,
    GlobalModelStrategy,
    Strategy,
    StrategyContext,
    config_section,
)
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
    "StrategyContext",
    "get_strategy",
    "register_strategy",
    "strategy_class",
    "strategy_from_config",
    "strategy_names",
    "unregister_strategy",
]

#: Registry name → ``"module:Class"`` (or the class itself, once registered by
#: :func:`register_strategy` with a class); each class builds itself from the configuration
#: (``from_config``), except the GLMs, whose options are read in :data:`_CONFIG_READERS`.
_REGISTRY: dict[str, str | type[Strategy]] = {
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
    # federated rare-variant association under the floor (SPEC §7)
    "fedassoc": "rvfedprs.strategies.fedassoc:FedAssociation",
}

#: The built-in strategies' names (:func:`strategy_names` adds those registered since).
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

# DISTANCE_METHODS: values of ``strategies.distance`` naming a method computed on the
# federation (anything else is the path of a TSV matrix) — the similarity registry's names.


def strategy_names() -> tuple[str, ...]:
    """Every registered strategy name, the built-in ones first (what the configuration accepts)."""
    return tuple(_REGISTRY)


def register_strategy(name: str, target: str | type[Strategy]) -> None:
    """Register the strategy class ``target`` under ``name``.

    ``target`` is the class, or ``"module:Class"`` to import it on first use. The name is then
    accepted wherever a configuration names a strategy, and built by :func:`get_strategy` and
    :func:`strategy_from_config` (through the class's ``from_config``).

    Raises
    ------
    ConfigError
        For a name already registered, or a target that is neither a :class:`Strategy`
        subclass nor a ``"module:Class"`` string.
    """
    if name in _REGISTRY:
        raise ConfigError(f"strategy {name!r} is already registered ({_REGISTRY[name]!r})")
    if isinstance(target, str):
        if target.count(":") != 1:
            raise ConfigError(f"strategy target {target!r} must look like 'module:Class'")
    elif not (isinstance(target, type) and issubclass(target, Strategy)):
        raise ConfigError(f"strategy {name!r}: {target!r} is not a Strategy subclass")
    _REGISTRY[name] = target


def unregister_strategy(name: str) -> None:
    """Remove a strategy added by :func:`register_strategy` (a built-in one stays).

    Raises
    ------
    ConfigError
        For a built-in or unknown name.
    """
    if name in STRATEGY_NAMES or name not in _REGISTRY:
        raise ConfigError(
            f"strategy {name!r} is not a registered addition; added: "
            f"{sorted(set(_REGISTRY) - set(STRATEGY_NAMES))}"
        )
    del _REGISTRY[name]


def strategy_class(name: str) -> type[Strategy]:
    """The class registered under ``name``.

    Raises
    ------
    ConfigError
        ``"strategy 'fedcee' unknown; choose from [...]"``.
    """
    if name not in _REGISTRY:
        raise ConfigError(f"strategy {name!r} unknown; choose from {sorted(_REGISTRY)}")
    target = _REGISTRY[name]
    if not isinstance(target, str):
        return target
    module_name, class_name = target.split(":")
    return getattr(importlib.import_module(module_name), class_name)


@contextmanager
def _named_errors(name: str) -> Iterator[None]:
    """Turn a constructor's TypeError/ValueError into a ConfigError naming strategy ``name``."""
    try:
        yield
    except RvfedprsError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"strategy {name!r}: {exc}") from None


def get_strategy(name: str, **config: Any) -> Strategy:
    """Build the strategy ``name`` with keyword options ``config``.

    Raises
    ------
    ConfigError
        For an unknown name, or an option or value the strategy does not accept.
    """
    cls = strategy_class(name)
    with _named_errors(name):
        return cls(**config)


def strategy_from_config(
    name: str,
    config: Mapping[str, Any],
    *,
    distance: Any = None,
    distance_clients: Any = None,
    clusters: Mapping[str, Any] | None = None,
    variants: Any = None,
) -> Strategy:
    """Build strategy ``name`` from a validated configuration.

    The registered class reads its own options (its ``from_config``); FedGLM's and
    FedCE-GLM's are read here, passing on every ``fedglm`` key their constructors take.

    Parameters
    ----------
    name : str
        A registered strategy name.
    config : mapping
        Validated configuration (sections ``train``, ``fedce``, ``fedglm``, ``strategies``, ...).
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
    variants : DataFrame, optional
        The federation's rare-variant table, whose burden map the GLMs' burden features read
        (a consortium study's federated one); default: ``train.data``'s ``rare_variants.tsv``.

    Raises
    ------
    ConfigError
        For an unknown strategy or option, a distance method with no matrix given, SCAFFOLD
        with client momentum, or (``secagg.enabled``) a strategy that cannot run with secure
        aggregation.
    """
    cls = strategy_class(name)
    context = StrategyContext(distance, distance_clients, clusters, variants)
    build = _CONFIG_READERS.get(name, cls.from_config)
    with _named_errors(name):
        strategy = build(config, context)
    if config_section(config, "secagg")["enabled"]:
        check_secure_aggregation(strategy)
    return strategy


def glm_section(config: Mapping[str, Any]) -> dict[str, Any]:
    """The ``fedglm`` section, ``top_k`` resolved (:func:`rvfedprs.training.glm.resolved_top_k`)."""
    from rvfedprs.training.glm import resolved_top_k

    glm = dict(config_section(config, "fedglm"))
    glm["top_k"] = resolved_top_k(glm["features"], glm.get("top_k"))
    return glm


def _glm_options(
    cls: type[Strategy], config: Mapping[str, Any], context: StrategyContext
) -> dict[str, Any]:
    """Every key of the ``fedglm`` section that ``cls``'s constructor takes, as keywords.

    A new GLM option so needs only its schema entry and constructor argument; the burden
    features (``burden``, ``burden+top_k``) add the burden map of the federation's variant set
    (:func:`burden_of`).
    """
    from rvfedprs.training.glm import BURDEN_FEATURES

    rare_input = config_section(config, "model")["rare_input"]
    if rare_input != "dosages":
        raise ConfigError(
            f"the GLMs choose their rare features with fedglm.features; model.rare_input must "
            f"be dosages for them, got {rare_input!r}"
        )
    glm = glm_section(config)
    accepted = inspect.signature(cls).parameters
    options = {key: value for key, value in glm.items() if key in accepted}
    if glm["features"] in BURDEN_FEATURES:
        options["burden"] = burden_of(config, context.variants)
    return options


def _fedglm_from_config(config: Mapping[str, Any], context: StrategyContext) -> Strategy:
    """FedGLM with the ``fedglm`` section's options."""
    cls = strategy_class("fedglm")
    return cls(**_glm_options(cls, config, context))


def _fedce_glm_from_config(config: Mapping[str, Any], context: StrategyContext) -> Strategy:
    """FedCE-GLM with the ``fedce`` section's clustering and the ``fedglm`` section's fit.

    Raises
    ------
    ConfigError
        For ``fedglm.features: floor``: FedCE-GLM fits per-cluster rare effects.
    """
    from rvfedprs.strategies.fedce import fedce_options

    features = config_section(config, "fedglm")["features"]
    if features == "floor":
        raise ConfigError(
            "strategy 'fedce_glm' fits per-cluster rare effects: fedglm.features must be "
            "dosages, burden, top_k or burden+top_k, not floor"
        )
    cls = strategy_class("fedce_glm")
    options = fedce_options(config)
    del options["head_aggregation"]  # the model is linear: no head
    # fedglm.top_k (the GLM's top-k variants) is not fedce.top_k (the Bloom filter's)
    top_k = glm_section(config)["top_k"]
    return cls(**options, **_glm_options(cls, config, context), glm_top_k=top_k)


#: The strategies whose options are read here, not by their class's ``from_config``.
_CONFIG_READERS: dict[str, Callable[[Mapping[str, Any], StrategyContext], Strategy]] = {
    "fedglm": _fedglm_from_config,
    "fedce_glm": _fedce_glm_from_config,
}


def burden_of(config: Mapping[str, Any], variants: Any = None):
    """The burden map of the federation's variant set from the ``burden`` section.

    ``variants``: the rare-variant table (a consortium study's federated one, which its
    coordinator holds after the counts stage); default: ``train.data``'s ``rare_variants.tsv``.
    """
    from rvfedprs.burden import burden_from_config

    source = config["train"]["data"] if variants is None else variants
    return burden_from_config(source, config_section(config, "burden"))
