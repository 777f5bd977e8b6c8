"""The genomic task's run plan: a validated configuration → a :class:`RunPlan`.

:func:`plan` is the genomic task's planner (``GenomicTask.planner``): it loads the per-client
inputs (or takes a loaded :class:`~rvfedprs.genomic.data.Federation`), builds the strategy from
its configuration section (with its client distance matrix where it needs one) and reads the
privacy settings (secure aggregation, DP-SGD, the Bloom key), so that every run of one
configuration — ``rvfedprs train``, a tuning trial, a shadow federation — trains the same way.
:func:`rvfedprs.plan.run` runs the plan on any engine.

:func:`run_inprocess` and :func:`run_flower` remain for tests and scripts that hold a loaded
federation and explicit optimiser settings; both build a plan and call
:func:`rvfedprs.plan.run`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation import ENGINES
from rvfedprs.federation.plan import Privacy, RunPlan, enabled_secagg
from rvfedprs.federation.result import RunResult
from rvfedprs.federation.rounds import RoundCallback
from rvfedprs.genomic.data import Federation, load_federation
from rvfedprs.genomic.task import GenomicTask, genomic_settings
from rvfedprs.plan import run
from rvfedprs.provenance import draw_seed
from rvfedprs.strategies.base import Strategy
from rvfedprs.training import LocalTrainingConfig

__all__ = ["plan", "run_inprocess", "run_flower", "genomic_settings"]


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
    from rvfedprs.genomic.distance import strategy_distance
    from rvfedprs.strategies import strategy_class, strategy_from_config

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
        model=federation.model_config(config["model"]),
        config=config,
        out=None if out is None else Path(out),
        keep_checkpoints=section["keep_checkpoints"],
        validation_fraction=float(section["validation_fraction"] or 0.0),
    )


def run_inprocess(
    federation: Federation,
    strategy: Strategy,
    *,
    rounds: int,
    model_config: Mapping[str, Any],
    training: LocalTrainingConfig,
    random_seed: int,
    out: str | Path | None = None,
    resume: bool = False,
    bloom_key: bytes | None = None,
    dp: Mapping[str, float] | None = None,
    client_state: dict[str, dict[str, Any]] | None = None,
    evaluate_round: RoundCallback | None = None,
    config: Mapping[str, Any] | None = None,
    keep_checkpoints: int | None = None,
    min_replies: int | None = None,
    progress: bool = False,
) -> RunResult:
    """Run ``rounds`` rounds of ``strategy`` on a loaded ``federation`` in this process.

    The plan's fields, given one by one (see :class:`~rvfedprs.federation.plan.RunPlan`);
    secure aggregation follows ``config``'s ``secagg`` section. ``client_state`` is filled in
    place (with ``dp``: every client's cumulative accountant).

    Returns
    -------
    RunResult
    """
    privacy = Privacy(enabled_secagg(config), dp, bloom_key)
    return run(
        RunPlan(
            task=GenomicTask.name,
            data=federation,
            strategy=strategy,
            rounds=rounds,
            seed=random_seed,
            privacy=privacy,
            model=model_config,
            training=training,
            config=config,
            out=None if out is None else Path(out),
            resume=resume,
            keep_checkpoints=keep_checkpoints,
            evaluate_round=evaluate_round,
            progress=progress,
            min_replies=min_replies,
        ),
        client_state=client_state,
    )


def run_flower(
    engine: str,
    *,
    federation: Federation,
    strategy: Strategy,
    config: Mapping[str, Any],
    rounds: int,
    random_seed: int,
    out: str | Path,
    resume: bool = False,
    bloom_key_file: str | None = None,
    evaluate_round: RoundCallback | None = None,
    min_replies: int | None = None,
    round_timeout: float | None = None,
    timeout: float | None = None,
    superlink=None,
    expected_nodes: int | None = None,
    client_state: dict[str, dict[str, Any]] | None = None,
    distance: Mapping[str, Any] | None = None,
) -> RunResult:
    """Run ``strategy`` over ``federation`` on Flower; returns what :func:`run_inprocess` does.

    Every node reads its own client's folder under ``federation.data_dir``; the server
    derives the run settings from the clients' setup reports. ``distance`` (``matrix``,
    ``clients``) is the client distance matrix of a distance-aware strategy.

    Returns
    -------
    RunResult
    """
    spec: dict[str, Any] = {"strategy": config["train"]["strategy"]}
    if distance is not None:
        spec["distance"] = dict(distance)
    privacy = Privacy(enabled_secagg(config), bloom_key_file=bloom_key_file or None)
    return run(
        RunPlan(
            task=GenomicTask.name,
            data=federation,
            strategy=strategy,
            rounds=rounds,
            seed=random_seed,
            strategy_spec=spec,
            privacy=privacy,
            engine=engine,
            flower=config.get("flower"),
            superlink=superlink,
            config=config,
            out=Path(out),
            resume=resume,
            keep_checkpoints=config["train"].get("keep_checkpoints"),
            evaluate_round=evaluate_round,
            min_replies=min_replies,
            round_timeout=round_timeout,
            timeout=timeout,
            expected_nodes=expected_nodes,
        ),
        client_state=client_state,
    )
