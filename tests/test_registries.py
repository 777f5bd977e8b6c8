"""One list of names per concept, one registration per addition, one default per option.

Every list of names a user can type (strategies, engines, distance methods, tasks, presets)
lives in one registry. The configuration accepts a strategy name because the strategy registry
holds it (the schemas name the registry, ``x-choices``, rather than copy its names), so that
registering a class is the only step that makes a new strategy usable; the other schemas' enums
equal their registries. ``strategy_from_config`` looks the name up and lets the class read its
own sections (``Strategy.from_config``); the imaging task goes through the same registry with
its section's options; its tuning grid is its class's ``tuning_axes``. A strategy built with its
bare constructor equals the one the configuration's defaults build.
"""

from __future__ import annotations

import inspect
import json
from importlib import resources

import numpy as np
import pytest

from rvfedprs import similarity
from rvfedprs.config import config_schema, preset_names, validate_config
from rvfedprs.exceptions import ConfigError
from rvfedprs.federation import ENGINES
from rvfedprs.imaging.task import IMAGING_STRATEGIES, strategy_for
from rvfedprs.protocol import grids
from rvfedprs.protocol.grids import configurations
from rvfedprs.strategies import (
    DISTANCE_STRATEGIES,
    STRATEGY_NAMES,
    get_strategy,
    glm_section,
    register_strategy,
    strategy_class,
    strategy_from_config,
    strategy_names,
    unregister_strategy,
)
from rvfedprs.strategies.fedavg import FedAvg
from rvfedprs.tasks import TASK_NAMES, get_task

_CLIENTS = ["a", "b", "c"]


_DISTANCE = np.array([[0.0, 0.2, 0.5], [0.2, 0.0, 0.4], [0.5, 0.4, 0.0]])


def _schema(name: str) -> dict:
    return json.loads((resources.files("rvfedprs") / "schemas" / f"{name}.schema.json").read_text())


def _prop(schema: dict, path: str) -> dict:
    node = schema
    for key in path.split("/"):
        node = node["properties"][key] if key != "items" else node["items"]
    return node


def _context(name: str) -> dict:
    return (
        {"distance": _DISTANCE, "distance_clients": _CLIENTS} if name in DISTANCE_STRATEGIES else {}
    )


# --- the configuration reads the registries -------------------------------------------------
@pytest.mark.parametrize(
    ("path", "registry"),
    [
        ("train/strategy", STRATEGY_NAMES),
        ("train/compare/items", STRATEGY_NAMES),
        ("paper_evaluation/strategies/items", STRATEGY_NAMES),
        ("train/engine", ENGINES),
        ("imaging/engine", ENGINES),
        ("distance/method", similarity.METHODS),
        ("pipeline/cohort/simulate_preset", preset_names()),
    ],
)
def test_the_configuration_accepts_exactly_each_registry(path, registry):
    assert sorted(_prop(config_schema(), path)["enum"]) == sorted(registry)


def test_no_schema_file_copies_the_strategy_names():
    for name in ("train", "paper_evaluation"):
        text = (resources.files("rvfedprs") / "schemas" / f"{name}.schema.json").read_text()
        assert '"fedce_carried"' not in text, name  # a name only the registry lists


def test_imaging_lists_are_subsets_of_the_registries():
    imaging = _schema("imaging")
    assert sorted(_prop(imaging, "strategies/items")["enum"]) == sorted(IMAGING_STRATEGIES)
    assert set(IMAGING_STRATEGIES) <= set(STRATEGY_NAMES)
    assert set(_prop(imaging, "distance_method")["enum"]) <= set(similarity.METHODS)


class _HalfStep(FedAvg):
    """FedAvg with a server step of 1/2: a strategy a researcher adds."""

    name = "half_step"
    tuning_axes = {"train.server_lr": [0.5, 1.0]}

    def server_update(self, server_round, average):
        return {k: 0.5 * (self.parameters[k] + v) for k, v in average.items()}


def test_one_registration_makes_a_strategy_valid_everywhere_and_unregistering_undoes_it():
    config = {"train": {"strategy": "half_step", "compare": ["fedavg", "half_step"]}}
    with pytest.raises(ConfigError, match=r"'train.strategy': 'half_step' is not allowed"):
        validate_config(config)
    register_strategy("half_step", _HalfStep)
    try:
        assert strategy_names()[-1] == "half_step"
        validated = validate_config(config)
        built = strategy_from_config(validated["train"]["strategy"], validated)
        assert type(built) is _HalfStep and type(get_strategy("half_step")) is _HalfStep
        with pytest.raises(ConfigError, match="'half_step' is already registered"):
            register_strategy("half_step", FedAvg)
        # its tuning grid: the shared axes, and its own knob spread over the budget
        trials = configurations("half_step", 4)
        assert [t["train.lr"] for t in trials] == [
            t["train.lr"] for t in configurations("fedavg", 4)
        ]
        assert sorted(t["train.server_lr"] for t in trials) == [0.5, 0.5, 1.0, 1.0]
        assert "half_step" in grids.METHOD_AXES  # read from the registry each time
    finally:
        unregister_strategy("half_step")
    assert "half_step" not in strategy_names()
    with pytest.raises(ConfigError, match="no tuning grid for 'half_step'"):
        configurations("half_step", 4)
    with pytest.raises(ConfigError, match=r"'train.compare.1': 'half_step' is not allowed"):
        validate_config(config)


def test_a_strategy_registered_by_its_import_path_is_imported_on_first_use():
    register_strategy("half_step_path", f"{__name__}:_HalfStep")
    try:
        assert strategy_class("half_step_path") is _HalfStep
    finally:
        unregister_strategy("half_step_path")


def test_registration_refuses_what_is_not_a_strategy_and_built_ins_stay():
    with pytest.raises(ConfigError, match="must look like 'module:Class'"):
        register_strategy("broken", "no_colon_here")
    with pytest.raises(ConfigError, match="is not a Strategy subclass"):
        register_strategy("broken", dict)
    with pytest.raises(ConfigError, match="'fedavg' is not a registered addition"):
        unregister_strategy("fedavg")
    assert "broken" not in strategy_names() and "fedavg" in strategy_names()


# --- every registered name builds -----------------------------------------------------------
def test_every_registered_distance_and_task_builds():
    for name in similarity.METHODS:
        assert similarity.get_method(name).name == name
    for name in TASK_NAMES:
        assert get_task(name).name == name


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_registered_strategy_builds_from_a_default_config(name):
    # SCAFFOLD needs plain local SGD, the one default it refuses (train.momentum is 0.9)
    config = validate_config({"train": {"momentum": 0.0}})
    strategy = strategy_from_config(name, config, **_context(name))
    assert type(strategy) is strategy_class(name)


def test_an_unknown_name_is_named_with_the_valid_ones():
    with pytest.raises(ConfigError, match=r"strategy 'fedcee' unknown; choose from \[.*'fedce'"):
        get_strategy("fedcee")
    with pytest.raises(ConfigError) as err:
        strategy_from_config("fedcee", validate_config({}))
    message = str(err.value)
    assert "'fedcee'" in message
    assert all(repr(name) in message for name in STRATEGY_NAMES)


def _attributes(strategy) -> dict:
    return {
        k: (v.tolist() if isinstance(v, np.ndarray) else v)
        for k, v in vars(strategy).items()
        if not k.startswith("_")
    }


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in STRATEGY_NAMES
        if n not in DISTANCE_STRATEGIES and n not in ("scaffold", "fedsvrg")
    ],
)
def test_constructor_defaults_equal_the_schema_defaults(name):
    # the bare constructor and the configuration's defaults give the same strategy
    assert _attributes(get_strategy(name)) == _attributes(
        strategy_from_config(name, validate_config({}))
    )


def test_the_glm_strategies_take_every_fedglm_option_their_constructor_accepts():
    config = validate_config({"fedglm": {"l2": 2.5, "tol": 1e-6, "max_features": 7}})
    for name in ("fedglm", "fedce_glm"):
        strategy = strategy_from_config(name, config)
        accepted = inspect.signature(type(strategy)).parameters
        section = glm_section(config)  # top_k null resolved: 30 with the default top_k features
        assert config["fedglm"]["top_k"] is None and section["top_k"] == 30
        passed = {key: value for key, value in section.items() if key in accepted}
        assert {"l2", "tol", "max_features"} <= set(passed)
        assert {key: getattr(strategy, key) for key in passed} == passed


def test_strategy_from_config_passes_options():
    config = validate_config({"train": {"proximal_mu": 0.2, "server_lr": 0.3}})
    assert strategy_from_config("fedprox", config).proximal_mu == 0.2
    assert strategy_from_config("fedadam", config).server_lr == 0.3


# --- imaging: a subset of the registry, with its own section --------------------------------
@pytest.mark.parametrize("name", IMAGING_STRATEGIES)
def test_every_imaging_strategy_builds_from_the_imaging_section(name):
    section = validate_config({})["imaging"]
    strategy = strategy_for(name, section, **_context(name))
    assert type(strategy) is strategy_class(name)


def test_imaging_options_reach_the_strategies():
    section = validate_config(
        {"imaging": {"proximal_mu": 0.25, "fedatt_step": 0.4, "ditto_lambda": 0.6, "omega": 0.5}}
    )["imaging"]
    assert strategy_for("fedprox", section).proximal_mu == 0.25
    assert strategy_for("fedatt", section).step == 0.4
    assert strategy_for("ditto", section).lam == 0.6
    assert strategy_for("fedavg_w", section, **_context("fedavg_w")).omega == 0.5


def test_imaging_refuses_a_registered_strategy_its_clients_cannot_run():
    section = validate_config({})["imaging"]
    with pytest.raises(ConfigError) as err:
        strategy_for("fedce", section)
    message = str(err.value)
    assert "'fedce'" in message
    assert all(repr(name) in message for name in IMAGING_STRATEGIES)
    with pytest.raises(ConfigError, match="'nope'"):
        strategy_for("nope", section)
