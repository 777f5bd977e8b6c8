"""Genomic run plans from explicit arguments, for tests that hold a loaded federation.

The library builds a plan from a configuration (:func:`rvfedprs.genomic.engine.plan`); these
build one from a loaded :class:`~rvfedprs.genomic.data.Federation` and explicit optimiser
settings, field by field (:class:`~rvfedprs.federation.plan.RunPlan`), and run it with
:func:`rvfedprs.plan.run`, as every entry point does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rvfedprs.federation.plan import Privacy, RunPlan, enabled_secagg
from rvfedprs.federation.result import RunResult
from rvfedprs.federation.rounds import RoundCallback
from rvfedprs.genomic.data import Federation
from rvfedprs.genomic.task import GenomicTask
from rvfedprs.plan import run
from rvfedprs.strategies.base import Strategy
from rvfedprs.training import LocalTrainingConfig

__all__ = ["run_inprocess", "run_flower"]


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
