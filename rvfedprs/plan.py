"""Run a :class:`~rvfedprs.federation.plan.RunPlan` on its engine, whichever task it trains.

The one call every entry point makes to train: ``rvfedprs train`` (:func:`rvfedprs.run.train`),
tuning trials, shadow federations, distance probes, imaging runs and the experiment drivers.
The task (:func:`rvfedprs.tasks.get_task`) turns the plan into its in-process sites and run
settings, or into its Flower nodes; the server loop is the same on every engine
(:func:`rvfedprs.federation.rounds.serve`), so a fixed seed gives the same model everywhere.
"""

from __future__ import annotations

from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.plan import Privacy, RunPlan, enabled_secagg
from rvfedprs.federation.result import RunResult
from rvfedprs.tasks import get_task

__all__ = ["Privacy", "RunPlan", "enabled_secagg", "run"]


def run(plan: RunPlan, *, client_state: dict[str, dict[str, Any]] | None = None) -> RunResult:
    """Train ``plan.strategy`` for ``plan.rounds`` rounds on ``plan.engine``.

    Parameters
    ----------
    plan : RunPlan
    client_state : dict, optional
        Per-client persistent state, filled in place (with DP: each client's accountant, so
        ``epsilon()`` is the cumulative ε it spent); restored in place on a resume.

    Returns
    -------
    RunResult

    Raises
    ------
    ConfigError
        For a pooled strategy on a Flower engine, Flower settings that do not fit the engine,
        or a task that cannot run the plan (named).
    """
    task = get_task(plan.task)
    job = {
        "seed": int(plan.seed),
        "rounds": int(plan.rounds),
        "resume": bool(plan.resume),
        "min_replies": plan.min_replies,
    }
    config = plan.job_config()
    if config is not None:
        job["config"] = config
    if plan.engine == "inprocess":
        from rvfedprs.federation.inprocess import InProcessTransport
        from rvfedprs.federation.rounds import RunSpec, serve

        transport = InProcessTransport(task, task.plan_sites(plan))
        spec = RunSpec(
            plan.strategy,
            out=plan.out,
            evaluate_round=plan.evaluate_round,
            keep_checkpoints=plan.keep_checkpoints,
        )
        settings = task.plan_settings(plan)
        return serve(
            task, transport, [spec], job, settings, client_state=client_state,
            progress=plan.progress,
        )[0]  # fmt: skip
    return _run_flower(task, plan, client_state)


def _run_flower(task, plan: RunPlan, client_state) -> RunResult:
    """A Flower simulation or deployment of ``plan``: every node reads its own site's data."""
    from rvfedprs.federation.flower.engine import FlowerRun, check_flower_settings, run_job

    check_flower_settings(plan.engine, plan.flower, plan.superlink)  # before anything is read
    if plan.strategy.pooled:
        raise ConfigError(
            f"strategy {plan.strategy.name!r} pools every client's data and cannot run on "
            "Flower; use --engine inprocess"
        )
    if plan.out is None:
        raise ConfigError(f"a {plan.engine} run needs an output folder (its flower/ files)")
    spec = {**dict(plan.strategy_spec), "out": str(plan.out)}
    run = FlowerRun(spec, plan.strategy, plan.evaluate_round, plan.keep_checkpoints)
    return run_job(
        plan.engine,
        task=task.name,
        config=plan.job_config(),
        runs=[run],
        rounds=int(plan.rounds),
        random_seed=int(plan.seed),
        out=plan.out,
        flower=plan.flower,
        superlink=plan.superlink,
        resume=plan.resume,
        min_replies=plan.min_replies,
        round_timeout=plan.round_timeout,
        timeout=plan.timeout,
        expected_nodes=plan.expected_nodes,
        client_state=client_state,
        **task.plan_nodes(plan),
    )[0]
