"""The Flower ServerApp: the strategy's side of the federation, on Flower's Grid.

The run configuration names a job file (``job-file``, JSON written by
:func:`~rvfedprs.federation.flower.launch.write_job`) holding the validated rvfedprs
configuration, the strategy name, rounds, seed, output folder and fault settings. The main loop:

1. wait for the expected SuperNodes, send each a ``query`` (setup) and learn its client id and
   its share of the federated PRS moments and case count;
2. every round: ``strategy.configure_fit`` → one ``train`` message per node, carrying that
   client's own (for FedCE: its cluster's personalised) model → ``grid.send_and_receive`` →
   decode and check each reply (:func:`~rvfedprs.federation.flower.records.reply_to_fit_result`)
   → :func:`~rvfedprs.federation.rounds.finish_round` (aggregation and checkpoint, shared with
   the in-process engine).

Clients that fail, time out or send malformed replies are logged by name and left out of the
round (recorded in the history under ``failed``); the run stops when fewer than ``min_replies``
remain. The outcome goes to ``OUT/flower/status.json`` — ``flwr run`` itself always exits 0, so
the launcher reads this file to know whether the run worked.

DP-SGD (config section ``dp``): the run settings carry σ, C and δ; every client keeps its one
accountant in ``context.state`` and returns its state (``meta["dp-state"]``, JSON; counts and
settings only, nothing about the data) with each reply. The server keeps those states in its
checkpoints, hands each client its own back in the run settings (``dp_state``) so that a resumed
run on fresh nodes stays cumulative, and reports every client's ε (``epsilon_clients``). A reply
without a valid state is rejected with the client named.

A job with ``task: imaging`` (:func:`run_imaging_server`) runs the imaging benchmark's
strategies instead, one after another, with the same setup check and round loop.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

__all__ = [
    "app",
    "run_server",
    "run_imaging_server",
    "imaging_run_settings",
    "write_status",
    "read_job",
    "dp_settings",
]

log = logging.getLogger(__name__)

app = ServerApp()

STATUS_FILE = "status.json"


def read_job(path: str | Path) -> dict[str, Any]:
    """The job written by the launcher (see :func:`launch.write_job`)."""
    from rvfedprs.exceptions import ConfigError

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"run config job-file: {path} not found")
    return json.loads(path.read_text())


def write_status(out: str | Path, status: str, **fields: Any) -> Path:
    """Write ``OUT/flower/status.json`` atomically: ``{"status": ..., **fields}``."""
    folder = Path(out) / "flower"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STATUS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"status": status, "time": time.time(), **fields}, indent=2))
    tmp.replace(path)
    return path


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point: read the job named by the run config and run it; always write a status."""
    job_file = str(context.run_config.get("job-file", ""))
    if not job_file:
        raise RuntimeError("run config 'job-file' is empty; start runs with rvfedprs train")
    job = read_job(job_file)
    try:
        summary = run_server(grid, job)
    except BaseException as exc:
        write_status(
            job["out"],
            "failed",
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )
        raise
    write_status(job["out"], "completed", **summary)


def dp_settings(config: Mapping[str, Any]) -> dict[str, float] | None:
    """σ, C, δ sent to the clients when ``dp.enabled``, else None."""
    dp = config.get("dp") or {}
    if not dp.get("enabled", False):
        return None
    return {
        "noise_multiplier": float(dp["noise_multiplier"]),
        "max_grad_norm": float(dp["max_grad_norm"]),
        "delta": float(dp["delta"]),
    }


def _dp_state_of(reply: Message, client: str):
    """The client's DPState from its reply (raises MalformedReplyError naming the client)."""
    from rvfedprs.federation.flower.records import MalformedReplyError
    from rvfedprs.training.dp import DPState

    meta = reply.content.config_records.get("meta")
    raw = None if meta is None else meta.get("dp-state")
    if raw is None:
        raise MalformedReplyError(
            f"client {client!r} sent a malformed reply: DP is on and no 'dp-state' came back"
        )
    try:
        return DPState.from_state_dict(json.loads(str(raw)))
    except (ValueError, KeyError, TypeError) as exc:
        raise MalformedReplyError(
            f"client {client!r} sent a malformed reply: unreadable 'dp-state' ({exc})"
        ) from None


def _wait_for_nodes(grid: Grid, expected: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= expected or time.monotonic() > deadline:
            return nodes
        time.sleep(0.2)


def _exchange(
    grid: Grid, contents: Mapping[int, RecordDict], message_type: str, group: str, timeout
) -> dict[int, Message]:
    messages = [
        Message(content, dst_node_id=node, message_type=message_type, group_id=group)
        for node, content in contents.items()
    ]
    replies = grid.send_and_receive(messages, timeout=timeout)
    return {reply.metadata.src_node_id: reply for reply in replies}


def _error_reason(reply: Message) -> str:
    reason = (reply.error.reason or "").strip().splitlines()
    return f"error {reply.error.code}: {reason[-1] if reason else 'no reason given'}"


def _setup(
    grid: Grid,
    nodes: Iterable[int],
    timeout,
    request: Mapping[str, Any] | None = None,
) -> tuple[dict[str, int], dict, dict]:
    """Ask every node who it is (and what it reports); returns (client→node, reports, fails).

    ``request`` adds entries to the setup message's ``setup`` ConfigRecord (the imaging task
    sends ``task`` and ``run``). A report is the reply's ``moments`` MetricRecord (the genomic
    client's (n, Σx, Σx², n_cases)) or, without one, its ``sizes`` record.
    """
    contents = {
        node: RecordDict({"setup": ConfigRecord({"step": "setup", **(request or {})})})
        for node in nodes
    }
    replies = _exchange(grid, contents, MessageType.QUERY, "setup", timeout)
    client_node: dict[str, int] = {}
    reports: dict[str, Any] = {}
    failures: dict[str, str] = {}
    for node in contents:
        reply = replies.get(node)
        if reply is None:
            failures[f"node {node}"] = f"no setup reply within {timeout} s"
            continue
        if reply.has_error():
            failures[f"node {node}"] = _error_reason(reply)
            continue
        client = str(reply.content.config_records["meta"]["client-id"])
        if client in client_node:
            raise RuntimeError(
                f"nodes {client_node[client]} and {node} both claim client {client!r}"
            )
        records = reply.content.metric_records
        client_node[client] = node
        reports[client] = records["moments"] if "moments" in records else records.get("sizes")
    return client_node, reports, failures


def _moments(report) -> tuple[int, float, float, float]:
    """(n, Σx, Σx², n_cases) of a genomic client's setup report."""
    return (
        int(report["n"]),
        float(report["sum"]),
        float(report["sumsq"]),
        float(report["n-cases"]),
    )


def run_server(grid: Grid, job: Mapping[str, Any]) -> dict[str, Any]:
    """Run the federated job on ``grid``; returns a summary for the status file.

    Raises
    ------
    RuntimeError
        When too few nodes connect or reply (fewer than ``job["min_replies"]``).
    """
    if job.get("task", "genomic") == "imaging":
        return run_imaging_server(grid, job)
    if job.get("task", "genomic") != "genomic":
        raise RuntimeError(f"job task {job['task']!r} unknown (genomic, imaging)")
    from rvfedprs.federation.data import combine_moments
    from rvfedprs.federation.rounds import RunSetup, begin_run
    from rvfedprs.federation.settings import local_training_config
    from rvfedprs.run import dp_training
    from rvfedprs.strategies import strategy_from_config

    config = job["config"]
    name = job["strategy"]
    rounds = int(job["rounds"])
    seed = int(job["seed"])
    timeout = job.get("round_timeout")
    write_status(job["out"], "running", round=0)

    nodes = _wait_for_nodes(grid, int(job["expected_clients"]), float(job["node_wait"]))
    client_node, reports, setup_failures = _setup(grid, nodes, timeout)
    client_ids = _checked_setup(job, client_node, setup_failures)
    moments = {c: _moments(reports[c]) for c in client_ids}
    mean, sd = combine_moments(moments[c][:3] for c in client_ids)
    n_all = sum(moments[c][0] for c in client_ids)
    n_cases = sum(moments[c][3] for c in client_ids)
    training = local_training_config(config["train"], n_samples=n_all, n_cases=n_cases)
    training = dp_training(config, training)  # dp.batch_size, as in-process
    run_settings = {
        "training": dataclasses.asdict(training),
        "model": dict(config["model"]),
        "prs_mean": mean,
        "prs_sd": sd,
    }
    dp = dp_settings(config)
    if dp is not None:
        run_settings["dp"] = dp
    # The server's copy of each client's persistent state (the DP accountant): checkpointed,
    # restored on resume and handed back to the client.
    client_state: dict[str, dict[str, Any]] = {c: {} for c in client_ids}
    strategy = strategy_from_config(name, config)
    if strategy.pooled:
        raise RuntimeError(f"strategy {name!r} pools the clients' data and cannot run on Flower")
    setup = RunSetup(
        client_ids,
        n_rare=int(job["n_rare"]),
        model_config=config["model"],
        random_seed=seed,
        out=job["out"],
        checkpoint_extra={"config": config, "strategy_name": name},
        keep_checkpoints=None,  # the launcher evaluates every round's checkpoint, then prunes
    )
    start, history = begin_run(
        strategy, setup, resume=bool(job.get("resume", False)), client_state=client_state
    )
    log.info("clients %s; rounds %d..%d", client_ids, start + 1, rounds)
    _run_rounds(
        grid,
        job,
        strategy,
        setup,
        client_node,
        run_settings,
        start=start,
        history=history,
        client_state=client_state,
        dp=dp,
    )
    summary = _summary(job, client_ids, setup_failures, history)
    if dp is not None:
        summary["epsilon_clients"] = {
            c: s["dp"].epsilon() for c, s in sorted(client_state.items()) if "dp" in s
        }
    return summary


def imaging_run_settings(job: Mapping[str, Any]) -> dict[str, Any]:
    """What an imaging client needs to rebuild its own split and train (sent every round).

    ``task``, the ``imaging`` section (partition, local training), ``seed`` (the partition's
    and subsample's), ``fold``, ``class_counts``, ``data`` (the MedMNIST file, for nodes whose
    node config names none) and ``client_ids`` (simulation: partition-id i is the i-th).
    """
    task = job["task_settings"]
    return {
        "task": "imaging",
        "imaging": dict(job["config"]["imaging"]),
        "seed": int(job["seed"]),
        "fold": task.get("fold"),
        "class_counts": task.get("class_counts"),
        "data": task["data"],
        "client_ids": list(task["client_ids"]),
    }


def run_imaging_server(grid: Grid, job: Mapping[str, Any]) -> dict[str, Any]:
    """Run an imaging job (``job["task"] == "imaging"``) on ``grid``; returns the summary.

    One setup (which node is which client), then each of ``task_settings.runs`` in turn: a
    strategy from :func:`rvfedprs.imaging.benchmark.strategy_for` (the in-process benchmark's),
    initialised with the CNN seeded by ``derive_seed(seed, 0)`` of the job's shape
    (``task_settings.model``), run for ``job["rounds"]`` rounds by the genomic loop
    (:func:`_run_rounds`; checkpoints in the run's own ``out``): every client trains with
    :func:`rvfedprs.imaging.client.fit_imaging_client` on its node.

    Raises
    ------
    RuntimeError
        When too few nodes connect or reply (fewer than ``job["min_replies"]``).
    """
    import numpy as np

    from rvfedprs.federation.inprocess import derive_seed
    from rvfedprs.federation.rounds import RunSetup
    from rvfedprs.imaging.benchmark import strategy_for
    from rvfedprs.imaging.client import build_cnn, get_cnn_parameters

    config = job["config"]
    task = job["task_settings"]
    seed = int(job["seed"])
    timeout = job.get("round_timeout")
    write_status(job["out"], "running", round=0)
    run_settings = imaging_run_settings(job)
    nodes = _wait_for_nodes(grid, int(job["expected_clients"]), float(job["node_wait"]))
    request = {"task": "imaging", "run": json.dumps(run_settings)}
    client_node, _, setup_failures = _setup(grid, nodes, timeout, request)
    client_ids = _checked_setup(job, client_node, setup_failures)
    shape = task["model"]
    summary = _summary(job, client_ids, setup_failures, [])
    summary["runs"] = {}
    for index, spec in enumerate(task["runs"]):
        name = spec["strategy"]
        distance = spec.get("distance")
        strategy = strategy_for(
            name,
            config["imaging"],
            distance=None if distance is None else np.asarray(distance["matrix"], np.float64),
            distance_clients=None if distance is None else distance["clients"],
        )
        if strategy.pooled:
            raise RuntimeError(f"strategy {name!r} pools the clients' data; not on Flower")
        cnn = build_cnn(
            int(shape["in_channels"]),
            int(shape["n_classes"]),
            int(shape["image_size"]),
            derive_seed(seed, 0),
        )
        strategy.initialize(get_cnn_parameters(cnn), client_ids)
        setup = RunSetup(
            client_ids,
            n_rare=0,
            model_config=shape,
            random_seed=seed,
            out=spec["out"],
            checkpoint_extra={"config": config, "strategy_name": name, "task": "imaging"},
            keep_checkpoints=None,  # the launcher evaluates every round's checkpoint
        )
        history: list[dict[str, Any]] = []
        log.info("imaging %s: clients %s; rounds 1..%d", name, client_ids, int(job["rounds"]))
        _run_rounds(
            grid,
            job,
            strategy,
            setup,
            client_node,
            {**run_settings, "strategy": name, "run_index": index},
            start=0,
            history=history,
            client_state={},
            dp=None,
        )
        summary["runs"][name] = _summary(job, client_ids, setup_failures, history)["failures"]
    return summary


def _checked_setup(
    job: Mapping[str, Any], client_node: Mapping[str, int], setup_failures: Mapping[str, str]
) -> list[str]:
    """The clients that answered the setup, sorted; raises when fewer than ``min_replies``."""
    min_replies = int(job.get("min_replies", 1))
    for who, why in setup_failures.items():
        log.warning("setup: %s left out: %s", who, why)
    if len(client_node) < min_replies:
        raise RuntimeError(
            f"only {len(client_node)} of {job['expected_clients']} clients answered the setup "
            f"(min_replies={min_replies}); failures: {setup_failures or 'nodes missing'}"
        )
    return sorted(client_node)


def _summary(job, client_ids, setup_failures, history) -> dict[str, Any]:
    return {
        "round": int(job["rounds"]),
        "client_ids": list(client_ids),
        "setup_failures": dict(setup_failures),
        "failures": {e["round"]: e["failed"] for e in history if "failed" in e},
    }


def _run_rounds(
    grid: Grid,
    job: Mapping[str, Any],
    strategy,
    setup,
    client_node: Mapping[str, int],
    run_settings: Mapping[str, Any],
    *,
    start: int,
    history: list[dict[str, Any]],
    client_state: dict[str, dict[str, Any]],
    dp: Mapping[str, float] | None,
) -> None:
    """Rounds ``start + 1 .. job["rounds"]``: send, collect, check, aggregate, checkpoint.

    The same loop for every task: the task's client settings travel in ``run_settings``.
    """
    from rvfedprs.federation.flower.records import (
        MalformedReplyError,
        instruction_to_content,
        reply_to_fit_result,
    )
    from rvfedprs.federation.rounds import client_seed, finish_round

    rounds = int(job["rounds"])
    seed = int(job["seed"])
    timeout = job.get("round_timeout")
    min_replies = int(job.get("min_replies", 1))
    client_ids = sorted(client_node)
    for server_round in range(start + 1, rounds + 1):
        instructions = strategy.configure_fit(server_round, client_ids)
        contents = {
            client_node[c]: instruction_to_content(
                instructions[c],
                server_round=server_round,
                seed=client_seed(seed, server_round, c),
                run=_client_run(run_settings, client_state.get(c, {})),
            )
            for c in client_ids
        }
        replies = _exchange(grid, contents, MessageType.TRAIN, str(server_round), timeout)
        results, failures = [], {}
        for c in client_ids:
            reply = replies.get(client_node[c])
            if reply is None:
                failures[c] = f"no reply within {timeout} s"
            elif reply.has_error():
                failures[c] = _error_reason(reply)
            else:
                try:
                    result = reply_to_fit_result(
                        reply.content,
                        client_id=c,
                        expected=instructions[c].parameters,
                        bloom=instructions[c].config.get("bloom"),
                    )
                    if dp is not None:
                        client_state.setdefault(c, {})["dp"] = _dp_state_of(reply, c)
                    results.append(result)
                except MalformedReplyError as exc:
                    failures[c] = str(exc)
        for c, why in failures.items():
            log.warning("round %d: client %r left out: %s", server_round, c, why)
        if len(results) < min_replies:
            raise RuntimeError(
                f"round {server_round}: {len(results)} of {len(client_ids)} clients replied "
                f"(min_replies={min_replies}); failures: {failures}"
            )
        entry, _ = finish_round(
            strategy,
            setup,
            server_round,
            results,
            history,
            failures=failures,
            client_state=client_state,
        )
        write_status(job["out"], "running", round=server_round, loss=entry["loss"])


def _client_run(run_settings: Mapping[str, Any], state: Mapping[str, Any]) -> dict[str, Any]:
    """The run settings for one client: with its DP accountant's state when the server has it."""
    if "dp" not in state:
        return dict(run_settings)
    return {**run_settings, "dp_state": state["dp"].state_dict()}
