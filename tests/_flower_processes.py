"""Shared by the Flower engine tests: process checks, the deployment's test certificates, its
site nodes, and a node killed where the test hook froze it."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from rvfedprs.federation.flower.processes import pid_running, pids_with_env
from rvfedprs.federation.freeze import freeze_file, reached_file

REPO = Path(__file__).resolve().parents[1]


#: True while a pid runs (a zombie counts as gone).
alive = pid_running


def processes_using(home: Path) -> list[int]:
    """Pids of live processes whose environment names ``home`` as FLWR_HOME."""
    return [pid for pid in pids_with_env(f"FLWR_HOME={home}") if pid_running(pid)]


def wait_frozen(asked: Path, going: Callable[[], bool], timeout: float) -> bool:
    """Wait until the site that the freeze file ``asked`` names says it is frozen there
    (:mod:`rvfedprs.federation.freeze`); False after ``timeout`` s or once ``going()`` (the
    job still runs) is false without it."""
    reached = reached_file(asked)
    deadline = time.monotonic() + timeout
    while not reached.exists() and going() and time.monotonic() < deadline:
        time.sleep(0.1)
    return reached.exists()


def in_thread(target, done: dict, *args, **kwargs) -> threading.Thread:
    """Run ``target`` in a daemon thread; ``done["result"]`` or ``done["error"]`` when it ends."""

    def call() -> None:
        try:
            done["result"] = target(*args, **kwargs)
        except BaseException as exc:  # re-raised or checked in the test's thread
            done["error"] = exc

    runner = threading.Thread(target=call, daemon=True)
    runner.start()
    return runner


def kill_frozen(freeze: Path, site: str, step: str, pids: dict, runner, kills: dict) -> None:
    """Wait until ``site`` is frozen at ``step``, kill its SuperNode, then let the frozen
    ClientApp go (its answer has nowhere to go: its node is dead); ``kills[site]``: whether it
    was reached."""
    asked = freeze_file(freeze, site, step)
    reached = wait_frozen(asked, runner.is_alive, timeout=600)
    if reached:
        os.kill(pids[f"supernode-{site}"], signal.SIGKILL)
    kills[site] = reached
    asked.unlink(missing_ok=True)


def make_certificates(certs: Path, sites: Iterable[str]) -> None:
    """``scripts/make_test_certificates.sh``: a CA, the SuperLink's certificate and a key pair
    per site under ``certs/keys/<site>``."""
    args = [a for label in sites for a in ("--site", label)]
    made = subprocess.run(
        ["bash", str(REPO / "scripts" / "make_test_certificates.sh"), str(certs), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr


def site_nodes(
    inputs: Mapping, sites: Iterable[str], sites_dir: Path, node_dir: Path
) -> dict[str, dict[str, str]]:
    """``supernode-<site>`` → the node configuration of each of ``sites``: its own site
    configuration only (``node_dir/<site>/site.yaml``, its outputs under ``sites_dir/<site>``),
    as ``rvfedprs site`` gives a study's node."""
    from rvfedprs.study.run import write_site_config

    return {
        f"supernode-{s}": {
            "site-config": str(
                write_site_config(inputs[s], sites_dir / s, node_dir / s / "site.yaml")
            )
        }
        for s in sites
    }
