"""Run a :class:`~rvfedprs.federation.plan.RunPlan` on its engine, whichever task it trains.

The one call every entry point makes to train: ``rvfedprs train`` (:func:`rvfedprs.run.train`),
tuning trials, shadow federations, distance probes, imaging runs, the study coordinator and
the experiment drivers. The task (:func:`rvfedprs.tasks.get_task`) turns the plan into its
in-process sites and run settings, or into its Flower nodes; the server loop is the same on
every engine (:func:`rvfedprs.federation.rounds.serve`), so a fixed seed gives the same model
everywhere. A coordinator that has set up its sites already (the study's, on any engine) hands
:func:`run` its open transport and the settings it derived. :func:`run_plans` runs several
plans of one federation in one job (one Flower job: the processes start once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.plan import Privacy, RunPlan, enabled_secagg
from rvfedprs.federation.result import RunResult
from rvfedprs.federation.task import Transport
from rvfedprs.tasks import get_task

__all__ = ["Privacy", "RunPlan", "enabled_secagg", "run", "run_plans"]

#: ``f(run_index, entry)`` after every round run in this process (status files, logging).
OnRound = Callable[[int, dict[str, Any]], None]

#: The fields every plan of one job shares (:func:`run_plans`).
JOB_FIELDS = (
    "task", "data", "rounds", "seed", "privacy", "engine", "flower", "superlink", "model",
    "training", "config", "resume", "min_replies", "round_timeout", "timeout", "expected_nodes",
)  # fmt: skip


def run(
    plan: RunPlan,
    *,
    client_state: dict[str, dict[str, Any]] | None = None,
    transport: Transport | None = None,
    settings: Mapping[str, Any] | None = None,
    on_round: OnRound | None = None,
) -> RunResult:
    """Train ``plan.strategy`` for ``plan.rounds`` rounds on ``plan.engine``.

    Parameters
    ----------
    plan : RunPlan
    client_state : dict, optional
        Per-client persistent state, filled in place (with DP: each client's accountant, so
        ``epsilon()`` is the cumulative ε it spent); restored in place on a resume.
    transport : Transport, optional
        Sites a coordinator has set up already, on whatever engine opened them: the rounds run
        over it in this process and ``plan.engine`` opens nothing.
    settings : mapping, optional
        The run settings every site receives (with ``transport``: those the coordinator
        derived from its sites' replies, their declared sample counts included; default: the
        task's :meth:`~Task.plan_settings`, with the counts the sites declare in their
        ``setup`` reports: :func:`~rvfedprs.federation.rounds.declare_samples`).
    on_round : callable, optional
        ``f(run_index, entry)`` after every round run in this process.

    Returns
    -------
    RunResult

    Raises
    ------
    ConfigError
        For a pooled strategy on a Flower engine, Flower settings that do not fit the engine,
        or a task that cannot run the plan (named).
    """
    return run_plans(
        [plan], client_state=client_state, transport=transport, settings=settings,
        on_round=on_round,
    )[0]  # fmt: skip


def run_plans(
    plans: Sequence[RunPlan],
    *,
    out: str | Path | None = None,
    client_state: dict[str, dict[str, Any]] | None = None,
    transport: Transport | None = None,
    settings: Mapping[str, Any] | None = None,
    on_round: OnRound | None = None,
) -> list[RunResult]:
    """Run ``plans`` one after another in one job; each result equals :func:`run`'s.

    The plans differ only in their strategy and its outputs (``strategy``, ``strategy_spec``,
    ``out``, ``keep_checkpoints``, ``evaluate_round``, ``progress``); every other field
    (:data:`JOB_FIELDS`) is the job's. On Flower the processes start once for all of them.

    Parameters
    ----------
    plans : sequence of RunPlan
    out : str or Path, optional
        The job's folder (``flower/`` on a Flower engine); default: the first plan's ``out``.
    client_state, transport, settings, on_round
        As :func:`run`; ``client_state`` is the first plan's.

    Returns
    -------
    list of RunResult
        One per plan, in order.

    Raises
    ------
    ConfigError
        For no plans, plans that differ in a job field (named), or as :func:`run`.
    """
    if not plans:
        raise ConfigError("run_plans needs at least one run plan")
    first = plans[0]
    for other in plans[1:]:
        differ = [f for f in JOB_FIELDS if not _same(getattr(other, f), getattr(first, f))]
        if differ:
            raise ConfigError(f"run plans of one job differ in {differ}; run them one by one")
    task = get_task(first.task)
    if transport is None and first.engine != "inprocess":
        return _run_flower(task, plans, Path(out) if out is not None else first.out, client_state)
    from rvfedprs.federation.rounds import RunSpec, declare_samples, open_sites, serve

    job = {
        "seed": int(first.seed),
        "rounds": int(first.rounds),
        "resume": bool(first.resume),
        "min_replies": first.min_replies,
    }
    config = first.job_config()
    if config is not None:
        job["config"] = config
    if transport is None:
        from rvfedprs.federation.inprocess import InProcessTransport

        transport = InProcessTransport(task, task.plan_sites(first))
    specs = [
        RunSpec(
            plan.strategy,
            out=plan.out,
            evaluate_round=plan.evaluate_round,
            keep_checkpoints=plan.keep_checkpoints,
        )
        for plan in plans
    ]
    if settings is None:  # this process's own sites: their setup reports fix the counts
        reports, transport, _ = open_sites(task, transport, job)
        settings = declare_samples(task, task.plan_settings(first), reports)
    return serve(
        task, transport, specs, job, settings, client_state=client_state, on_round=on_round,
        progress=any(plan.progress for plan in plans),
    )  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    """One object, or equal values (arrays, which compare element by element, only the former)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except ValueError:  # mappings of arrays: not one value
        return False


def _run_flower(task, plans: Sequence[RunPlan], out: Path | None, client_state) -> list[RunResult]:
    """A Flower simulation or deployment of ``plans``: every node reads its own site's data."""
    from rvfedprs.federation.flower.engine import FlowerRun, check_flower_settings, run_job

    first = plans[0]
    check_flower_settings(first.engine, first.flower, first.superlink)  # before anything is read
    for plan in plans:
        if plan.strategy.pooled:
            raise ConfigError(
                f"strategy {plan.strategy.name!r} pools every client's data and cannot run on "
                "Flower; use --engine inprocess"
            )
        if plan.out is None:
            raise ConfigError(f"a {plan.engine} run needs an output folder (its flower/ files)")
    runs = [
        FlowerRun(
            {**dict(plan.strategy_spec), "out": str(plan.out)},
            plan.strategy,
            plan.evaluate_round,
            plan.keep_checkpoints,
        )
        for plan in plans
    ]
    return run_job(
        first.engine,
        task=task.name,
        config=first.job_config(),
        runs=runs,
        rounds=int(first.rounds),
        random_seed=int(first.seed),
        out=out,
        flower=first.flower,
        superlink=first.superlink,
        resume=first.resume,
        min_replies=first.min_replies,
        round_timeout=first.round_timeout,
        timeout=first.timeout,
        expected_nodes=first.expected_nodes,
        client_state=client_state,
        **task.plan_nodes(first),
    )
