"""Tuning grids: what every method may try, with the same budget for all (SPEC §12).

A *configuration* is a flat mapping of dotted configuration keys to values
(``{"train.lr": 0.05, "fedce.top_k": 300}``), merged over a base configuration by
:func:`configuration_overrides`. :func:`configurations` gives every method the same number B of
configurations:

- the **shared axes** (client learning rate, batch size, local epochs) are drawn once — the
  first B points of a seeded order of their product, balanced so that every value of every axis
  comes up about equally often, with a seed that does not depend on the method — so every
  method tries the same optimiser settings;
- each of the method's **own knobs** (FedProx μ, FedAdam's server lr, FedAvgM's β, clustered
  FL's ε's, Ditto's λ, FedCE's top_k and number of clusters, the centralised network's weight
  decay) gets its values spread over the B configurations, each value about equally often
  (shuffled blocks of the values, in a seeded order of the method's own).

Both are prefix-consistent: raising B keeps the configurations already tried.

A method with knobs therefore explores them at the cost of no extra runs: the same budget.
The L2 logistic regression has no shared axes; its B configurations are B values of C, coarse
to fine.

The FedCE ablations (oracle / random clusters, global head, carried-set Jaccard) are not
tuned: they take FedCE's chosen configuration (:data:`TUNED_AS`), so that they differ from it
in one mechanism only. The oracle reads the simulator's truth: it is an analysis tool.

Each strategy's knobs are class attributes beside its code (``tuning_axes``; an exact GLM's
``tuning_path``; an ablation's ``tuned_as``): registering a strategy gives it its grid. The
grids, with the reasons for their ranges:

- ``train.lr`` 0.02–0.2 around the default 0.05 (SGD with momentum 0.9 on a BCE loss);
- ``train.batch_size`` 32–128: on ~650-sample sites this is 5–20 local steps per epoch (the
  issue #17 finding: too few steps per round starve FedAvg);
- ``train.local_epochs`` 1–2;
- FedProx μ 0.001–1 (μ = 0.01 barely differs from FedAvg); FedAdam η 0.003–0.1 (Reddi et al.
  tune η on a log grid); FedAvgM β 0.5–0.9 with η = 1 (Hsu et al.); clustered FL ε1 0.02–0.2
  and ε2 = r·ε1 with r ∈ {1.5, 2, 3}: on the scenario cohorts the norm of the mean update falls
  to 0.02–0.2 within a few rounds while the largest client update is 2–5 times larger, so these
  settings can split (the defaults ε1 0.4, ε2 1.6 never do: issue #17);
  Ditto λ 0.01–1 (Li et al.); FedCE top_k 100–3000 and M ∈ {2, 3, 4, auto}; the centralised
  network's weight decay 0–0.01; the logistic regression's C over 1e-3–10 (log grid);
- the exact federated GLMs (``fedglm``, ``fedce_glm``): no shared axes (Newton has no learning
  rate, batch or epochs), and **a trial is a whole penalty path** (:data:`GLM_PATHS`, issue
  40): one run fits every λ, largest first, each from the previous converged fit, and the
  floor and every converged fit are its validation candidates (BestRound keeps the best), so λ
  is chosen on every cohort's own validation split rather than once on a tuning cohort. λ
  (``fedglm.l2``, on the *summed* log-loss of ~6,000 training samples) spans 0.3–30,000 for
  FedGLM: on the sign_conflict tuning cohort's validation split, FedCE-GLM on 1-Mb window
  burdens peaked at λ ≈ 300 and λ ≤ 30 sat on its flat, overfitting end. FedCE-GLM's path is
  the partially pooled grid of the shared part's λ 3–3,000 and the clusters' deviations' λ_c
  3–300 (``fedglm.l2_cluster``): a large λ_c is the global rare model, a small one
  independent clusters. The trials spread the knobs a path cannot: FedCE-GLM's number of
  clusters M ∈ {2, 3, 4} (no "auto": the joint system grows with M and is bounded by
  ``fedglm.max_features``) and, with top-k features only (:data:`TOP_K_AXES`), k ∈ {10, 30, 100}
  and FedCE-GLM's ranking (per cluster or the Bonferroni minimum with the pooled one). A GLM
  has as many trials as distinct configurations, at most B (FedGLM on burdens: one).
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError

__all__ = [
    "SHARED_AXES",
    "TOP_K_AXES",
    "LOGISTIC",
    "configurations",
    "configuration_overrides",
    "method_axes",
    "penalty_path",
    "tuned_as",
]

#: The L2-penalised logistic regression on [PRS, covariates, rare dosages] (a centralised
#: reference; not a strategy).
LOGISTIC = "logistic"

#: Optimiser settings every network-based method tries (the same B points for all).
SHARED_AXES: dict[str, list[Any]] = {
    "train.lr": [0.02, 0.05, 0.1, 0.2],
    "train.batch_size": [32, 64, 128],
    "train.local_epochs": [1, 2],
}

#: The logistic regression's knob (the strategies' own knobs are their ``tuning_axes``).
_LOGISTIC_AXES: dict[str, list[Any]] = {
    "logistic.C": [1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0]
}

#: The GLM axes that exist only with top-k features (``fedglm.features`` top_k, burden+top_k).
TOP_K_AXES = ("fedglm.top_k", "fedglm.selection")


def _registered(method: str) -> type | None:
    """The strategy class registered as ``method``, or None."""
    from rvfedprs.strategies import strategy_class, strategy_names

    return strategy_class(method) if method in strategy_names() else None


def method_axes(method: str) -> dict[str, list[Any]] | None:
    """``method``'s own knobs: its class's ``tuning_axes`` (None: no grid of its own)."""
    if method == LOGISTIC:
        return dict(_LOGISTIC_AXES)
    cls = _registered(method)
    if cls is None or cls.tuned_as is not None or cls.tuning_axes is None:
        return None
    return dict(cls.tuning_axes)


def tuned_as(method: str) -> str | None:
    """The method whose chosen configuration ``method`` takes (its class's ``tuned_as``)."""
    cls = _registered(method)
    return None if cls is None else cls.tuned_as


def penalty_path(method: str) -> dict[str, list[float]] | None:
    """An exact GLM's penalty path (its class's ``tuning_path``), None for the others."""
    cls = _registered(method)
    return None if cls is None or cls.tuning_path is None else dict(cls.tuning_path)


def _tuned_methods() -> list[str]:
    from rvfedprs.strategies import strategy_names

    return [name for name in strategy_names() if method_axes(name) is not None] + [LOGISTIC]


def __getattr__(name: str) -> Any:
    """The grids by method, read from the registered strategies each time they are asked for.

    ``METHOD_AXES`` (method → own knobs), ``GLM_PATHS`` (GLM → penalty path), ``GLMS`` and
    ``TUNED_AS`` (ablation → the method whose configuration it takes).
    """
    from rvfedprs.strategies import strategy_names

    if name == "METHOD_AXES":
        return {method: method_axes(method) for method in _tuned_methods()}
    if name == "GLM_PATHS":
        return {m: penalty_path(m) for m in strategy_names() if penalty_path(m) is not None}
    if name == "GLMS":
        return tuple(m for m in strategy_names() if penalty_path(m) is not None)
    if name == "TUNED_AS":
        return {m: tuned_as(m) for m in strategy_names() if tuned_as(m) is not None}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The order in which C values are tried: coarse to fine over the log grid (1, 1e-2, 1e-3, 10,
#: 0.1, 3e-3, 3, 0.3, 3e-2), so that any budget spans the range.
_LOGISTIC_ORDER = (6, 2, 0, 8, 4, 1, 7, 5, 3)


#: Knobs drawn as multiples of another: the configuration holds multiple × the other's value.
_MULTIPLES = {"train.cfl_eps2": "train.cfl_eps1"}


def _stable_seed(random_seed: int, word: str) -> np.random.Generator:
    return np.random.default_rng([int(random_seed), zlib.crc32(word.encode())])


def _shared_points(budget: int, random_seed: int) -> list[dict[str, Any]]:
    """The first ``budget`` points of a seeded, balanced order of the shared grid.

    Learning rates (the axis that matters most) are dealt out in turn, in a shuffled order;
    for each, the next point is the one of that rate whose other values (batch size, epochs)
    have come up least so far, ties broken by a seeded shuffle. Any prefix therefore tries
    every value of every axis about equally often.
    """
    names = list(SHARED_AXES)
    product = list(itertools.product(*(SHARED_AXES[n] for n in names)))
    if budget > len(product):
        raise ConfigError(
            f"tuning budget {budget} exceeds the {len(product)} points of the shared grid"
        )
    rng = _stable_seed(random_seed, "shared")
    remaining = [product[int(i)] for i in rng.permutation(len(product))]
    rates = [SHARED_AXES[names[0]][int(i)] for i in rng.permutation(len(SHARED_AXES[names[0]]))]
    used: dict[tuple[int, Any], int] = {}
    order = []
    while len(order) < budget:
        rate = rates[len(order) % len(rates)]
        candidates = [p for p in remaining if p[0] == rate]
        point = min(candidates, key=lambda p: _load(used, p))
        remaining.remove(point)
        for a in range(1, len(point)):
            used[(a, point[a])] = used.get((a, point[a]), 0) + 1
        order.append(point)
    return [dict(zip(names, point, strict=True)) for point in order]


def _load(used: Mapping[tuple[int, Any], int], point: tuple) -> tuple[int, list[int]]:
    """How often ``point``'s non-rate values have come up: in total, then axis by axis."""
    counts = [used.get((a, point[a]), 0) for a in range(1, len(point))]
    return sum(counts), counts


def _spread(values: Sequence[Any], budget: int, rng: np.random.Generator) -> list[Any]:
    """Blocks of shuffled ``values`` laid end to end: each prefix is balanced to within one."""
    blocks = [values[int(i)] for _ in range(-(-budget // len(values)))
              for i in rng.permutation(len(values))]  # fmt: skip
    return blocks[:budget]


def configurations(
    method: str, budget: int, *, random_seed: int = 0, glm_features: str | None = None
) -> list[dict[str, Any]]:
    """The first ``budget`` configurations ``method`` tries, in the order they are run.

    Configurations are prefix-consistent: a larger budget keeps the smaller budget's
    configurations and adds to them (so recorded trials stay valid).

    Parameters
    ----------
    method : str
        A registered strategy with a grid (its class's ``tuning_axes``), or ``"logistic"``.
    budget : int
        B ≥ 1, the same for every method.
    random_seed : int
        Seeds the order of the shared points (common to all methods) and the spread of each
        method's own values.
    glm_features : str, optional
        A GLM's ``fedglm.features``: the top-k axes (:data:`TOP_K_AXES`) only with top-k
        features.

    Returns
    -------
    list of dict
        Flat dotted-key configurations, all distinct (a GLM's: at most B, each with its whole
        penalty path, :data:`GLM_PATHS`).

    Raises
    ------
    ConfigError
        For an unknown method (an ablation tuned as another method included), or a budget the
        grid cannot fill with distinct configurations.
    """
    own = method_axes(method)
    if own is None:
        source = tuned_as(method)
        hint = f" (it takes {source!r}'s configuration)" if source is not None else ""
        raise ConfigError(f"no tuning grid for {method!r}{hint}; grids: {sorted(_tuned_methods())}")
    if budget < 1:
        raise ConfigError(f"tuning budget must be >= 1, got {budget}")
    if method == LOGISTIC:
        values = own["logistic.C"]
        if budget > len(values):
            raise ConfigError(f"tuning budget {budget} exceeds the {len(values)} values of C")
        return [{"logistic.C": values[i]} for i in _LOGISTIC_ORDER[:budget]]
    if penalty_path(method) is not None:
        return _glm_configurations(method, budget, random_seed, glm_features)
    out = _shared_points(budget, random_seed)
    for key, values in own.items():
        rng = _stable_seed(random_seed, f"{method}:{key}")
        for config, value in zip(out, _spread(values, budget, rng), strict=True):
            config[key] = value
    for config in out:
        for key, source in _MULTIPLES.items():
            if key in config:
                config[key] = round(config[key] * config[source], 6)
        if "fedce.top_k" in config:  # a filter must hold the reported set
            config["fedce.bloom_capacity"] = max(2000, int(config["fedce.top_k"]))
    return out


def _glm_configurations(
    method: str, budget: int, random_seed: int, features: str | None
) -> list[dict[str, Any]]:
    """A GLM's trials: its knobs spread over B, duplicates dropped, each with the whole path."""
    from rvfedprs.training.glm import TOP_K_FEATURES

    axes = {key: values for key, values in (method_axes(method) or {}).items()
            if features in TOP_K_FEATURES or key not in TOP_K_AXES}  # fmt: skip
    out: list[dict[str, Any]] = [{} for _ in range(budget)]
    for key, values in axes.items():
        rng = _stable_seed(random_seed, f"{method}:{key}")
        for config, value in zip(out, _spread(values, budget, rng), strict=True):
            config[key] = value
    distinct: list[dict[str, Any]] = []
    for config in out:
        if config not in distinct:
            distinct.append(config)
    return [{**config, **(penalty_path(method) or {})} for config in distinct]


def configuration_overrides(configuration: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"train.lr": 0.1}`` → ``{"train": {"lr": 0.1}}`` (configuration sections)."""
    out: dict[str, dict[str, Any]] = {}
    for key, value in configuration.items():
        section, _, name = key.partition(".")
        if not name:
            raise ConfigError(f"configuration key {key!r} is not 'section.option'")
        out.setdefault(section, {})[name] = value
    return out
