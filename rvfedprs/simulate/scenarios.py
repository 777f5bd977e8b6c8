"""Named genetic architectures for the scenario map (issue #17, design §12).

``scenarios.yaml`` beside this module holds a ``base`` simulate section and, per scenario, a
description (the biology), the expectation (where FedCE should or should not help) and the
``simulate`` keys that differ from the base. A scenario is the base merged with those keys.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from rvfedprs.exceptions import ConfigError

__all__ = ["scenario_names", "scenario_info", "scenario_section", "simulate_scenario"]


@cache
def _scenarios() -> dict[str, Any]:
    text = (resources.files("rvfedprs") / "simulate" / "scenarios.yaml").read_text()
    return yaml.safe_load(text)


def scenario_names() -> tuple[str, ...]:
    """Names of the scenarios, in file order."""
    return tuple(_scenarios()["scenarios"])


def scenario_info(name: str) -> dict[str, str]:
    """``{"description": ..., "expectation": ...}`` of a scenario."""
    entry = _entry(name)
    return {"description": entry["description"], "expectation": entry["expectation"]}


def _entry(name: str) -> dict[str, Any]:
    scenarios = _scenarios()["scenarios"]
    if name not in scenarios:
        raise ConfigError(f"scenario {name!r} unknown; choose from {list(scenarios)}")
    return scenarios[name]


def scenario_section(name: str) -> dict[str, Any]:
    """The scenario's raw ``simulate`` section (base merged with its keys; not validated)."""
    from rvfedprs.config import deep_merge

    return deep_merge(_scenarios()["base"], _entry(name)["simulate"] or {})


def simulate_scenario(
    name: str,
    *,
    out: str | Path | None = None,
    random_seed: int | None = None,
    **options: Any,
):
    """Simulate one cohort of a scenario (:func:`rvfedprs.simulate.simulate_cohort`).

    Parameters
    ----------
    name : str
        One of :func:`scenario_names`.
    out : str or Path, optional
    random_seed : int, optional
        Independent cohorts of a scenario differ only in this seed.
    **options
        ``simulate`` keys merged over the scenario (e.g. ``samples_per_client=500``).

    Returns
    -------
    SimulatedCohort
    """
    from rvfedprs.config import deep_merge, validate_config
    from rvfedprs.simulate.cohort import run_simulation

    section = deep_merge(scenario_section(name), options)
    params = validate_config({"simulate": section})["simulate"]
    if out is None:
        import tempfile

        out = Path(tempfile.mkdtemp(prefix=f"rvfedprs-{name}-"))
    return run_simulation(params, out, random_seed=random_seed, origin={"scenario": name})
