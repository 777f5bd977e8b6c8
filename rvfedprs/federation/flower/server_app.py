"""The Flower ServerApp: the server side of a job, on Flower's Grid.

The run configuration names a job file (``job-file``, JSON written by
:func:`~rvfedprs.federation.flower.job.write_job`): the task's registered name, the validated
rvfedprs configuration, the runs (one strategy and output folder each), rounds, seed and fault
settings. The ServerApp runs the same server loop as the in-process engine
(:func:`~rvfedprs.federation.rounds.negotiate` then :func:`~rvfedprs.federation.rounds.serve`)
over a :class:`~rvfedprs.federation.flower.transport.FlowerTransport` — the task's program,
:func:`~rvfedprs.federation.rounds.run_job`; it names no task.

Clients that fail, time out or send malformed replies are logged by name and left out of the
round (recorded in the history under ``failed``); the job stops when fewer than
``min_replies`` remain. The outcome goes to ``<job out>/flower/status.json``, with the Flower
run's id (``run_id``) — ``flwr run`` itself always exits 0, so the launcher reads this file to
know whether the job worked, and knows a status left by another run of the same job for what it
is.

Flower (1.41) never restarts a ServerApp: one that dies (killed, out of memory) stops sending
heartbeats, and the SuperLink marks its run ``finished:failed`` ("No heartbeat received from the
task") within 60 s. A job submitted again with ``resume`` (``rvfedprs study --resume``) reads the
study's state and the runs' checkpoints and continues from the last completed stage and round.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.flower.job import SERVER_LOG_FILE, read_job, write_status
from rvfedprs.federation.flower.transport import REPLY_POLL_SECONDS, FlowerTransport
from rvfedprs.federation.rounds import run_job
from rvfedprs.tasks import get_task

__all__ = ["app", "run_server"]

log = logging.getLogger(__name__)

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point: read the job named by the run config and run it; always write a status."""
    job_file = str(context.run_config.get("job-file", ""))
    if not job_file:
        raise RuntimeError("run config 'job-file' is empty; start runs with rvfedprs train")
    job = read_job(job_file)
    run_id = str(context.run_id)
    handler = _log_to_folder(job["out"])
    try:
        summary = run_server(grid, job, run_id=run_id)
    except BaseException as exc:
        log.error("the run failed: %s: %s", type(exc).__name__, exc)
        logging.getLogger("rvfedprs").removeHandler(handler)
        write_status(
            job["out"],
            "failed",
            run_id=run_id,
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )
        raise
    logging.getLogger("rvfedprs").removeHandler(handler)
    write_status(job["out"], "completed", run_id=run_id, **summary)


def _log_to_folder(out: str) -> logging.Handler:
    """Send rvfedprs' INFO lines to ``OUT/flower/serverapp.log``, which the launcher echoes."""
    folder = Path(out) / "flower"
    folder.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(folder / SERVER_LOG_FILE, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    handler.setLevel(logging.INFO)
    root = logging.getLogger("rvfedprs")
    root.addHandler(handler)
    if root.getEffectiveLevel() > logging.INFO:
        root.setLevel(logging.INFO)
    return handler


def run_server(grid: Grid, job: Mapping[str, Any], *, run_id: str | None = None) -> dict[str, Any]:
    """Run the job on ``grid``: :func:`~rvfedprs.federation.rounds.run_job` over Flower.

    Returns the summary written to the status file; ``run_id`` (the Flower run's) goes into
    every status written on the way.

    Raises
    ------
    RuntimeError
        When too few nodes connect or reply (fewer than ``job["min_replies"]``), or a run's
        strategy pools the clients' data.
    """
    task = get_task(job["task"])
    write_status(job["out"], "running", run_id=run_id, round=0)
    transport = FlowerTransport(
        grid,
        task,
        timeout=job.get("round_timeout"),
        reply_poll=job.get("reply_poll_seconds") or REPLY_POLL_SECONDS,
        expected=int(job["expected_clients"]),
        node_wait=float(job["node_wait"]),
        site_nodes=job.get("site_nodes"),  # the registered keys' nodes: who may be which site
    )

    def on_round(index: int, entry: Mapping[str, Any]) -> None:
        progress = {"run": index, "round": entry["round"], "loss": entry["loss"]}
        write_status(job["out"], "running", run_id=run_id, **progress)
        name = job["runs"][index]["strategy"] if index < len(job.get("runs", [])) else index
        failed = entry.get("failed") or {}
        log.info("%s round %s: training loss %.4f%s", name, entry["round"], entry["loss"],
                 f"; left out {sorted(failed)}" if failed else "")  # fmt: skip

    try:
        return run_job(task, transport, job, on_round=on_round)
    except ConfigError as exc:  # a pooled strategy: refused by the transport
        raise RuntimeError(str(exc)) from None
