"""The Flower engines from the launching side: one job, any task, simulation or deployment.

``flower-sim``: a Ray head (or an existing Ray cluster, ``flower.ray_address``), a SuperLink in
simulation mode and ``flwr run APP --federation-config num-supernodes=N``; the simulation engine
runs the ClientApps on Ray. ``flower-deploy``: a SuperLink and one ``flower-supernode`` per site,
each with its own node configuration so that it reads only its own site's files; then
``flwr run``. Both bind to 127.0.0.1 on free ports, use a private ``FLWR_HOME`` under
``OUT/flower/``, install nothing at run time and log every process to ``OUT/flower/logs/``. With
``flower.superlink`` set (a real deployment), ``flower-deploy`` starts nothing: it submits the
job to that SuperLink (TLS with ``flower.root_certificates``) and waits for the status file,
which the ServerApp must be able to write (run the command on the SuperLink's machine or share
``OUT``).

:func:`run_job` writes the job, launches it and rebuilds each run's result from its checkpoints;
:func:`flower_session` starts the processes once for several jobs. The task fronts
(:mod:`rvfedprs.genomic.engine`, :mod:`rvfedprs.imaging.flower`) say what the nodes read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.checkpoints import prune_checkpoints
from rvfedprs.federation.flower.job import write_job
from rvfedprs.federation.flower.submit import collect, launch
from rvfedprs.federation.flower.superlink import LocalSuperLink, local_options, start_local
from rvfedprs.federation.result import RunResult
from rvfedprs.federation.rounds import RoundCallback
from rvfedprs.strategies.base import Strategy

__all__ = [
    "FlowerRun",
    "flower_engine",
    "check_flower_settings",
    "flower_session",
    "submit_job",
    "run_job",
]

log = logging.getLogger(__name__)

#: The run configuration keys of the Flower App (``app.toml``): every job sets all of them.
RUN_CONFIG_KEYS = ("job-file", "data-dir", "bloom-key-file")


@dataclass
class FlowerRun:
    """One strategy run of a Flower job, as the launcher sees it.

    Attributes
    ----------
    spec : mapping
        What the ServerApp builds the run from: ``strategy``, ``out`` and the task's options.
    strategy : Strategy or None
        A fresh copy of the same strategy, restored from the run's final checkpoint on return.
        None when the ServerApp's own program builds it (a consortium study, after its counts
        stage) and the launcher collects no result.
    evaluate_round : callable, optional
        ``f(strategy, round)`` on the strategy restored from each round's checkpoint; merged
        into the history, as the in-process engine's callback.
    keep_checkpoints : int, optional
        Checkpoints kept after the evaluation (None or 0: all).
    """

    spec: Mapping[str, Any]
    strategy: Strategy | None
    evaluate_round: RoundCallback | None = None
    keep_checkpoints: int | None = None


def flower_engine(engine: str, superlink: LocalSuperLink | None = None) -> bool:
    """True for ``flower-sim``; raises ConfigError for a non-Flower engine or a wrong link."""
    if engine not in ("flower-sim", "flower-deploy"):
        raise ConfigError(f"engine {engine!r} is not a Flower engine (flower-sim, flower-deploy)")
    simulation = engine == "flower-sim"
    if superlink is not None and superlink.simulation != simulation:
        raise ConfigError(f"engine {engine!r} needs a SuperLink with simulation={simulation}")
    return simulation


def _remote(settings: Mapping[str, Any], simulation: bool) -> str | None:
    """The remote SuperLink of ``flower.superlink`` (a ConfigError with flower-sim)."""
    remote = settings.get("superlink")
    if remote and simulation:
        raise ConfigError(
            f"flower.superlink ({remote!r}) applies to engine flower-deploy only; "
            "flower-sim always runs on a SuperLink it starts itself"
        )
    return remote


def check_flower_settings(
    engine: str, flower: Mapping[str, Any] | None, superlink: LocalSuperLink | None = None
) -> tuple[bool, str | None]:
    """(simulation?, remote SuperLink or None), checked before anything is read or started.

    Raises
    ------
    ConfigError
        For a non-Flower engine, a SuperLink of the other mode, or a remote SuperLink with
        ``flower-sim``.
    """
    simulation = flower_engine(engine, superlink)
    remote = _remote(dict(flower or {}), simulation)
    return simulation, remote if superlink is None else None


@contextmanager
def flower_session(
    engine: str,
    work: str | Path,
    *,
    nodes: Mapping[str, Mapping[str, str]],
    flower: Mapping[str, Any] | None = None,
    certificates: str | Path | None = None,
    node_keys: Mapping[str, str | Path] | None = None,
):
    """The Flower processes of several jobs, started once.

    ``flower-sim``: a Ray head (or ``flower.ray_address``) and a simulation SuperLink;
    ``flower-deploy``: a SuperLink and one SuperNode per entry of ``nodes``, TLS and SuperNode
    authentication with ``certificates`` and ``node_keys`` as in
    :func:`~rvfedprs.federation.flower.superlink.start_local`. With ``flower.superlink`` set
    (``flower-deploy`` only) nothing is started and None is yielded: every job is submitted to
    that SuperLink.

    Yields
    ------
    LocalSuperLink or None
        Every process is stopped when the block exits, however it exits.
    """
    settings = dict(flower or {})
    simulation, remote = check_flower_settings(engine, settings)
    if remote:
        yield None
        return
    with start_local(
        work,
        simulation=simulation,
        nodes=None if simulation else nodes,
        certificates=certificates,
        node_keys=node_keys,
        **local_options(settings),
    ) as link:
        yield link


def submit_job(
    engine: str,
    *,
    task: str,
    config: Mapping[str, Any],
    runs: Sequence[FlowerRun],
    rounds: int,
    random_seed: int,
    out: str | Path,
    n_sites: int,
    nodes: Mapping[str, Mapping[str, str]],
    run_config: Mapping[str, str] | None = None,
    task_settings: Mapping[str, Any] | None = None,
    flower: Mapping[str, Any] | None = None,
    superlink: LocalSuperLink | None = None,
    resume: bool = False,
    min_replies: int | None = None,
    round_timeout: float | None = None,
    timeout: float | None = None,
    expected_nodes: int | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write a job of ``task``, run it on Flower and return its final status (the summary).

    Parameters
    ----------
    engine : {"flower-sim", "flower-deploy"}
    task : str
        A registered task name.
    config : mapping
        The validated configuration the ServerApp builds the strategies from.
    runs : sequence of FlowerRun
        One per strategy, run one after another in one Flower run.
    rounds, random_seed : int
    out : str or Path
        The job's folder: ``flower/`` (job, app, logs, status).
    n_sites : int
        Simulated SuperNodes (``flower-sim``).
    nodes : mapping
        Label → node configuration of each SuperNode (``flower-deploy`` started here).
    run_config : mapping, optional
        Values of the App's run configuration besides ``job-file`` (simulation: ``data-dir``,
        ``bloom-key-file``).
    task_settings : mapping, optional
        The task's job-level settings (sent with the setup request).
    flower : mapping, optional
        The ``flower`` section: defaults of ``min_replies``, ``round_timeout``, ``timeout``,
        ``node_wait``, a running ``superlink`` (``flower-deploy``) or ``ray_address``.
    superlink : LocalSuperLink, optional
        Submit to this running SuperLink (:func:`flower_session`) instead of starting one.
    resume : bool
        Continue every run from its latest checkpoint (a study: from its saved state), after
        waiting for a run of this job the SuperLink still has going
        (:func:`~rvfedprs.federation.flower.submit.launch`).
    min_replies, round_timeout, timeout : optional
        Given here they win over the ``flower`` section (``timeout``: the whole job, default
        3600 s).
    expected_nodes : int, optional
        SuperNodes to wait for before the setup step (default: one per site).
    extra : mapping, optional
        More entries of the job (:func:`~rvfedprs.federation.flower.job.write_job`).

    Returns
    -------
    dict
        The job's final status: what the ServerApp's program returned, ``status`` and ``time``.

    Raises
    ------
    ConfigError
        For a non-Flower engine, a SuperLink of the other mode, a pooled strategy or a remote
        SuperLink with ``flower-sim``.
    FlowerRunError
        When a process fails to start, the job fails (the ServerApp's error is quoted), or the
        deadline passes. Every process started here is stopped before this returns or raises.
    """
    simulation, remote = check_flower_settings(engine, flower, superlink)
    for run in runs:
        if run.strategy is not None and run.strategy.pooled:
            raise ConfigError(
                f"strategy {run.spec['strategy']!r} pools every client's data and cannot run "
                "on Flower; use --engine inprocess"
            )
    names = [run.spec["strategy"] for run in runs]
    if len(set(names)) != len(names):
        raise ConfigError(f"the runs of one Flower job need distinct strategies, got {names}")
    settings = dict(flower or {})
    min_replies = settings.get("min_replies") if min_replies is None else min_replies
    round_timeout = settings.get("round_timeout") if round_timeout is None else round_timeout
    timeout = float(settings.get("timeout") or 3600.0) if timeout is None else float(timeout)
    out = Path(out).resolve()
    work = out / "flower"
    work.mkdir(parents=True, exist_ok=True)
    (work / "status.json").unlink(missing_ok=True)
    expected = n_sites if expected_nodes is None else expected_nodes
    job = write_job(
        work / "job.json",
        task=task,
        config=config,
        runs=[run.spec for run in runs],
        rounds=rounds,
        seed=random_seed,
        out=out,
        expected_clients=expected,
        resume=resume,
        min_replies=min_replies,
        round_timeout=round_timeout,
        reply_poll_seconds=settings.get("reply_poll_seconds"),
        node_wait=float(settings.get("node_wait") or 60.0),
        task_settings=task_settings,
        extra=extra,
    )
    values = {key: "" for key in RUN_CONFIG_KEYS}
    values.update(run_config or {})
    values["job-file"] = str(job)
    status = launch(
        simulation,
        work,
        values,
        n_clients=n_sites,
        nodes=None if simulation else nodes,
        superlink=superlink,
        remote=remote,
        settings=settings,
        timeout=timeout,
        ray_address=settings.get("ray_address"),
        resume=resume,
    )
    for who, why in status.get("setup_failures", {}).items():
        log.warning("%s was left out of the run: %s", who, why)
    return status


def run_job(
    engine: str,
    *,
    runs: Sequence[FlowerRun],
    rounds: int,
    random_seed: int,
    client_state: dict[str, dict[str, Any]] | None = None,
    **options: Any,
) -> list[RunResult]:
    """Run a training job on Flower; return what the in-process engine does, per run.

    :func:`submit_job` with ``runs`` (their ``spec``), then each run's result rebuilt from its
    checkpoints (``evaluate_round`` applied to every round's), its checkpoints pruned to
    ``keep_checkpoints``; ``client_state`` is refilled in place with the first run's site state
    as the server last saw it, its ``metrics["traffic"]`` with the server's traffic table
    (:meth:`~rvfedprs.federation.metering.Traffic.table`; a single run's holds the setup too).
    ``options`` are :func:`submit_job`'s.
    """
    status = submit_job(engine, runs=runs, rounds=rounds, random_seed=random_seed, **options)
    traffic = status.get("run_traffic") or [status.get("traffic")]  # one run: the job's
    results = []
    for index, run in enumerate(runs):
        folder = Path(run.spec["out"])
        result = collect(
            folder,
            run.strategy,
            rounds,
            random_seed,
            run.evaluate_round,
            client_state if index == 0 else None,
        )
        if run.keep_checkpoints:  # the server kept every round's for the evaluation above
            prune_checkpoints(folder / "checkpoints", run.keep_checkpoints)
            result.checkpoints = [p for p in result.checkpoints if p.exists()]
        if index < len(traffic) and traffic[index] is not None:
            result.metrics["traffic"] = traffic[index]
        results.append(result)
    return results
