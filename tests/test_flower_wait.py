"""A launcher's wait for its Flower run ends as soon as a process the run cannot outlive exits.

The launcher starts the SuperLink (and, for ``flower-sim``, the Ray head the simulation joins):
when one of them dies the run cannot finish, and the wait (``wait_status``) must say so at once,
naming the process, its exit status and its log, rather than wait ``flower.timeout`` (3600 s).
A process whose loss the run survives (a SuperNode: a lost site) does not end the wait.
"""

from __future__ import annotations

import sys
import time

import pytest

from rvfedprs.federation.flower.processes import FlowerProcesses, FlowerRunError, flower_env
from rvfedprs.federation.flower.submit import wait_status


def test_the_wait_ends_as_soon_as_a_process_the_run_needs_exits(tmp_path):
    procs = FlowerProcesses(logs=tmp_path / "logs", env=flower_env(tmp_path / "home"))
    try:
        procs.start("supernode-a", [sys.executable, "-c", "pass"])  # a lost site: not vital
        head = procs.start("ray", [sys.executable, "-c", "import time; time.sleep(1); exit(7)"])
        procs.vital["ray"] = "the Ray head"
        started = time.monotonic()
        with pytest.raises(FlowerRunError) as raised:
            wait_status(tmp_path / "status.json", procs, procs.logs, 3600.0)
        waited = time.monotonic() - started
    finally:
        procs.stop()
    assert str(raised.value) == (
        f"the Ray head (ray, pid {head.pid}) exited with status 7 during the run; "
        f"see {procs.logs / 'ray.log'}"
    )
    assert 0.5 < waited < 30  # while it ran the wait went on; then it ended, not at 3600 s


def test_the_wait_echoes_the_serverapps_lines_as_they_come(tmp_path, caplog):
    """The ServerApp's round and stage lines reach the launcher's terminal while it waits."""
    import json
    import logging
    import threading

    from rvfedprs.federation.flower.job import SERVER_LOG_FILE

    status, log = tmp_path / "status.json", tmp_path / SERVER_LOG_FILE
    log.write_text("10:00:00 an earlier run's line\n")

    def serverapp():
        for line in ("fedavg round 1: training loss 0.4801", "fedavg round 2: training loss 0.47"):
            time.sleep(0.4)
            with open(log, "a") as handle:
                handle.write(f"10:00:01 {line}\n")
        with open(log, "a") as handle:
            handle.write("10:00:02 half a li")  # not yet a line: kept for the next look
        time.sleep(0.4)
        status.write_text(json.dumps({"status": "completed", "run_id": "7"}))

    writer = threading.Thread(target=serverapp)
    with caplog.at_level(logging.INFO, logger="rvfedprs.federation.flower.submit"):
        writer.start()
        done = wait_status(status, None, tmp_path, 60.0, run_id="7")
        writer.join()
    assert done["status"] == "completed"
    echoed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ServerApp: ")]
    assert echoed == [
        "ServerApp: 10:00:01 fedavg round 1: training loss 0.4801",
        "ServerApp: 10:00:01 fedavg round 2: training loss 0.47",
    ]
