"""The genomic task's run plan: a validated configuration → a :class:`RunPlan`.

:func:`plan` is the genomic task's planner (``GenomicTask.planner``): it loads the per-client
inputs (or takes a loaded :class:`~rvfedprs.genomic.data.Federation`), builds the strategy from
its configuration section (with its client distance matrix where it needs one) and reads the
privacy settings (secure aggregation, DP-SGD, the Bloom key), so that every run of one
configuration — ``rvfedprs train``, a tuning trial, a shadow federation — trains the same way.
:func:`rvfedprs.plan.run` runs the plan on any engine; a caller with a loaded federation and
its own optimiser settings builds the :class:`~rvfedprs.federation.plan.RunPlan` itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation import ENGINES
from rvfedprs.federation.plan import Privacy, RunPlan
from rvfedprs.genomic.data import Federation, load_federation
from rvfedprs.genomic.task import GenomicTask, genomic_settings, network_model_config
from rvfedprs.provenance import draw_seed
from rvfedprs.strategies.base import Strategy

__all__ = ["plan", "genomic_settings"]


def plan(
    config: Mapping[str, Any],
    out: str | Path | None = None,
    *,
    data: Federation | None = None,
    strategy: Strategy | None = None,
) -> RunPlan:
    """The run plan of a validated configuration's ``train`` section.

    Parameters
    ----------
    config : mapping
        A validated configuration (:func:`rvfedprs.config.load_config`). ``train.seed`` None
        draws a seed (set in the plan's copy of the configuration).
    out : str or Path, optional
        The run's output folder (checkpoints; ``flower/`` on a Flower engine).
    data : Federation, optional
        A loaded federation (default: ``train.data`` is loaded).
    strategy : Strategy, optional
        A strategy built by the caller (default: ``train.strategy`` from its configuration
        section, with the client distance matrix ``strategies.distance`` names).

    Returns
    -------
    RunPlan
        In-process runs get no progress bar (set ``progress`` with :func:`dataclasses.replace`);
        the training settings are derived from the data when the run starts.

    Raises
    ------
    ConfigError, InputDataError
        For an unknown strategy or engine, or unusable inputs (named).
    """
    from rvfedprs.strategies import DISTANCE_STRATEGIES, strategy_class, strategy_from_config

    config = {**config, "train": dict(config["train"])}
    section = config["train"]
    name = section["strategy"]
    if strategy is None:
        strategy_class(name)  # an unknown name or engine fails before anything is loaded
    if section["engine"] not in ENGINES:
        raise ConfigError(f"engine {section['engine']!r} unknown; choose from {list(ENGINES)}")
    spec: dict[str, Any] = {"strategy": name if strategy is None else strategy.name}
    privacy = Privacy.from_config(config)
    section["seed"] = seed = draw_seed(section["seed"])
    federation = load_federation(section["data"]) if data is None else data
    if strategy is None:
        distance = {}
        if name in DISTANCE_STRATEGIES:  # the distance probes train a network (torch)
            from rvfedprs.genomic.distance import strategy_distance

            distance = strategy_distance(name, config, federation, seed)
        strategy = strategy_from_config(name, config, **distance)
        if distance:
            spec["distance"] = {
                "matrix": distance["distance"].tolist(),
                "clients": list(distance["distance_clients"]),
            }
    return RunPlan(
        task=GenomicTask.name,
        data=federation,
        strategy=strategy,
        rounds=int(section["rounds"]),
        seed=seed,
        strategy_spec=spec,
        privacy=privacy,
        engine=section["engine"],
        flower=config.get("flower"),
        model=network_model_config(federation.model_config(config["model"]), config),
        config=config,
        out=None if out is None else Path(out),
        keep_checkpoints=section["keep_checkpoints"],
    )
