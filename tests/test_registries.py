"""One list of names per concept, and one default per option.

Every list of names a user can type (strategies, engines, distance methods, tasks, presets,
attacks) lives in one registry; the JSON schemas' enums must equal it. A strategy built with its
bare constructor must equal the one the configuration's defaults build.
"""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from rvfedprs import similarity
from rvfedprs.config import preset_names, validate_config
from rvfedprs.federation import ENGINES
from rvfedprs.strategies import (
    DISTANCE_STRATEGIES,
    STRATEGY_NAMES,
    get_strategy,
    strategy_from_config,
)
from rvfedprs.tasks import TASK_NAMES, get_task


def _schema(name: str) -> dict:
    return json.loads((resources.files("rvfedprs") / "schemas" / f"{name}.schema.json").read_text())


def _prop(schema: dict, path: str) -> dict:
    node = schema
    for key in path.split("/"):
        node = node["properties"][key] if key != "items" else node["items"]
    return node


@pytest.mark.parametrize(
    ("schema", "path", "registry"),
    [
        ("train", "strategy", STRATEGY_NAMES),
        ("train", "compare/items", STRATEGY_NAMES),
        ("paper_evaluation", "strategies/items", STRATEGY_NAMES),
        ("train", "engine", ENGINES),
        ("imaging", "engine", ENGINES),
        ("distance", "method", similarity.METHODS),
        ("pipeline", "cohort/simulate_preset", preset_names()),
    ],
)
def test_schema_enums_equal_their_registry(schema, path, registry):
    assert sorted(_prop(_schema(schema), path)["enum"]) == sorted(registry)


def test_imaging_lists_are_subsets_of_the_registries():
    imaging = _schema("imaging")
    assert set(_prop(imaging, "strategies/items")["enum"]) <= set(STRATEGY_NAMES)
    assert set(_prop(imaging, "distance_method")["enum"]) <= set(similarity.METHODS)


def test_every_registered_name_builds():
    for name in similarity.METHODS:
        assert similarity.get_method(name).name == name
    for name in TASK_NAMES:
        assert get_task(name).name == name


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
