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
