"""Strategies build themselves from their configuration: one registry, no chain of names.

``strategy_from_config`` looks the name up and lets the class read its own sections
(``Strategy.from_config``); the imaging task goes through the same registry with its section's
options.
"""

from __future__ import annotations

import inspect
import json
from importlib import resources

import numpy as np
import pytest

import rvfedprs.strategies as strategies
from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError
from rvfedprs.imaging.task import IMAGING_STRATEGIES, strategy_for
from rvfedprs.strategies import (
    DISTANCE_STRATEGIES,
    STRATEGY_NAMES,
    glm_section,
    strategy_class,
    strategy_from_config,
)

_CLIENTS = ["a", "b", "c"]
_DISTANCE = np.array([[0.0, 0.2, 0.5], [0.2, 0.0, 0.4], [0.5, 0.4, 0.0]])


def _context(name: str) -> dict:
    return (
        {"distance": _DISTANCE, "distance_clients": _CLIENTS} if name in DISTANCE_STRATEGIES else {}
    )


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_every_registered_name_builds_from_a_default_config(name):
    # SCAFFOLD needs plain local SGD, the one default it refuses (train.momentum is 0.9)
    config = validate_config({"train": {"momentum": 0.0}})
    strategy = strategy_from_config(name, config, **_context(name))
    assert type(strategy) is strategy_class(name)


class _Renamed(strategies.strategy_class("fedavg")):
    """FedAvg under a new name: a strategy a researcher adds."""


def test_a_strategy_added_to_the_registry_is_built_by_name(monkeypatch):
    """One registry entry makes a new strategy buildable: no chain of names to extend."""
    monkeypatch.setitem(strategies._REGISTRY, "my_fedavg", f"{__name__}:_Renamed")
    assert strategies.strategy_class("my_fedavg") is _Renamed
    built = strategy_from_config("my_fedavg", validate_config({}))
    assert type(built) is _Renamed
    with pytest.raises(ConfigError, match="'my_fedavgg' unknown"):
        strategies.strategy_class("my_fedavgg")


def test_an_unknown_name_is_named_with_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        strategy_from_config("fedcee", validate_config({}))
    message = str(err.value)
    assert "'fedcee'" in message
    assert all(repr(name) in message for name in STRATEGY_NAMES)


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


def test_imaging_runs_a_subset_of_the_registry_named_by_its_schema():
    schema = json.loads(
        (resources.files("rvfedprs") / "schemas" / "imaging.schema.json").read_text()
    )
    assert sorted(schema["properties"]["strategies"]["items"]["enum"]) == sorted(IMAGING_STRATEGIES)
    assert set(IMAGING_STRATEGIES) <= set(STRATEGY_NAMES)


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
