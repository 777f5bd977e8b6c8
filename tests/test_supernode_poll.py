"""The SuperNode launcher that shortens Flower's wait between asks for messages and its heartbeat.

The patch target must exist in the pinned Flower (a module-level ``time`` in
``flwr.supernode.start_client_internal``), and the real node loop, connected to a real
SuperLink, must then wait at most the cap between asks for messages (Flower's own idle wait is
3 s) and declare the patched heartbeat interval, which the SuperLink records; the shim must cap
waits and pass everything else to ``time``, a Flower without the target must fail the launcher
by name, and the launcher must reach Flower's own ``flower-supernode`` with the remaining
arguments. A killed node must then be taken for lost (offline) while the others stay online.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from rvfedprs.config import load_config
from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.flower.identity import list_nodes
from rvfedprs.federation.flower.processes import flower_env, free_port
from rvfedprs.federation.flower.superlink import start_local, write_connection
from rvfedprs.federation.flower.supernode import (
    HEARTBEAT_MODULES,
    NODE_HEARTBEAT_SECONDS,
    NODE_POLL_SECONDS,
    PATCHED_MODULE,
    CappedSleep,
    flower_entry_point,
    heartbeat_range,
    main,
    patch_node_heartbeat,
    patch_node_poll,
    supernode_argv,
)

ROOT = Path(__file__).resolve().parents[1]


def test_the_patch_target_exists_in_the_pinned_flower():
    pinned = re.search(r"^flwr==(\S+)$", (ROOT / "constraints.txt").read_text(), re.M)
    assert pinned is not None and version("flwr") == pinned.group(1)
    module = importlib.import_module(PATCHED_MODULE)
    assert module.time is time  # what the launcher replaces
    assert callable(flower_entry_point())


#: The real SuperNode loop in a fresh interpreter, connected to a SuperLink, its waits patched as
#: the launcher patches them (or not: cap "none"); every wait it asks of the clock is recorded
#: and the loop is stopped at the ``calls``-th.
NODE_LOOP = r"""
import json, sys, time

from flwr.supercore.object_store.object_store_factory import ObjectStoreFactory
from flwr.supernode import start_client_internal as loop
from flwr.supernode.nodestate.nodestate_factory import NodeStateFactory

from rvfedprs.federation.flower.supernode import patch_node_heartbeat, patch_node_poll

address, port, cap, heartbeat, calls = sys.argv[1:]
if cap != "none":
    patch_node_poll(float(cap))
if heartbeat != "none":
    patch_node_heartbeat(float(heartbeat))
asked, real_sleep = [], time.sleep


class Stop(Exception):
    pass


def recording(seconds):
    asked.append(seconds)
    if len(asked) >= int(calls):
        raise Stop
    real_sleep(seconds)


time.sleep = recording  # the clock the loop (through the shim, when patched) waits on
start = time.monotonic()
try:
    loop.start_client_internal(
        state_factory=NodeStateFactory(ObjectStoreFactory()), server_address=address,
        node_config={}, insecure=True, isolation="process",
        runtime_api_address=f"127.0.0.1:{port}",
    )
except Stop:
    pass
print(json.dumps({"asked": asked, "seconds": time.monotonic() - start}))
"""


@pytest.fixture(scope="module")
def superlink(tmp_path_factory):
    root = tmp_path_factory.mktemp("superlink")
    with start_local(root / "deploy", simulation=False, nodes={}) as link:
        write_connection(root / "ctl", link.address)
        yield link, flower_env(root / "ctl")


def _node_loop(link, cap, heartbeat, calls) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", NODE_LOOP, link.address, str(free_port()), cap, heartbeat,
         str(calls)],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_patched_node_loop_asks_for_messages_at_the_cap_and_declares_its_heartbeat(superlink):
    link, env = superlink
    before = {n["node_id"] for n in list_nodes(env)}
    flowers_own = _node_loop(link, "none", "none", 1)
    assert flowers_own["asked"] == [3]  # idle, Flower's node waits 3 s before asking again
    patched = _node_loop(link, "0.05", "12", 8)
    assert patched["asked"] == [0.05] * 8  # every idle wait capped, none left uncapped
    assert patched["seconds"] < 3
    joined = [n for n in list_nodes(env) if n["node_id"] not in before]
    assert sorted(n["heartbeat_interval"] for n in joined) == [12.0, 30.0]  # patched, Flower's


def test_the_shim_caps_every_wait_and_delegates_the_rest(monkeypatch):
    module = importlib.import_module(PATCHED_MODULE)
    monkeypatch.setattr(module, "time", time)  # restored after the test
    capped = patch_node_poll(0.05)
    assert module.time is capped and capped.poll == 0.05
    monotonic, clock = time.monotonic, time.time
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)  # the waits the shim asks of the clock
    module.time.sleep(3)  # Flower's idle wait
    module.time.sleep(0.5)  # its reply poll
    module.time.sleep(0.02)  # a shorter wait is kept
    assert slept == [0.05, 0.05, 0.02]
    assert module.time.monotonic is monotonic and module.time.time is clock
    assert patch_node_poll(0.1).poll == 0.1  # patching again replaces the cap
    for bad in (0, -1, float("nan"), True, "0.25"):
        with pytest.raises(ValueError, match="positive number of seconds"):
            CappedSleep(bad)


def test_a_flower_without_the_target_fails_by_name(monkeypatch, capsys):
    module = importlib.import_module(PATCHED_MODULE)
    monkeypatch.delattr(module, "time")  # as a Flower that no longer imports time there
    message = rf"Flower {re.escape(version('flwr'))}: {PATCHED_MODULE} has no module-level 'time'"
    with pytest.raises(RuntimeError, match=message):
        patch_node_poll(0.25)
    with pytest.raises(SystemExit) as stop:
        main(["--poll-seconds", "0.25", "--", "--insecure"])
    assert stop.value.code == 2
    assert "has no module-level 'time'" in capsys.readouterr().err
    monkeypatch.setattr("rvfedprs.federation.flower.supernode.ENTRY_POINT", ("flwr", "nothing"))
    with pytest.raises(RuntimeError, match=r"entry point flwr.nothing not found"):
        flower_entry_point()


def test_the_command_and_the_setting():
    fast = supernode_argv(0.25, ["--insecure", "--superlink", "h:1"])
    assert fast == [sys.executable, "-m", "rvfedprs.federation.flower.supernode",
                    "--poll-seconds", "0.25", "--", "--insecure", "--superlink", "h:1"]  # fmt: skip
    for flowers_own in (None, 3, 3.0):
        argv = supernode_argv(flowers_own, ["--insecure"])
        assert Path(argv[0]).name == "flower-supernode" and argv[1:] == ["--insecure"]
    with pytest.raises(ValueError, match="got -1"):
        supernode_argv(-1, [])
    assert load_config(None)["flower"]["node_poll_seconds"] == NODE_POLL_SECONDS
    assert (
        load_config(None, overrides={"flower": {"node_poll_seconds": None}})["flower"][
            "node_poll_seconds"
        ]
        is None
    )
    for bad in (0, 5, "fast"):
        with pytest.raises(ConfigError, match="node_poll_seconds"):
            load_config(None, overrides={"flower": {"node_poll_seconds": bad}})


def test_the_launcher_runs_flowers_own_supernode():
    """``--help`` after ``--`` reaches flower-supernode's own parser, in a fresh interpreter."""
    done = subprocess.run(
        [*supernode_argv(0.25, ["--help"])], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: flower-supernode")
    assert "--superlink" in done.stdout


# --- the heartbeat interval ----------------------------------------------------------------


def test_the_heartbeat_target_exists_in_the_pinned_flower():
    from flwr.common import constant

    assert (
        heartbeat_range()
        == (10.0, 1800.0)
        == (
            constant.HEARTBEAT_MIN_INTERVAL,
            constant.HEARTBEAT_MAX_INTERVAL,
        )
    )
    assert constant.HEARTBEAT_PATIENCE == 2  # a node is lost after two intervals without one
    for name in HEARTBEAT_MODULES:
        module = importlib.import_module(name)
        assert module.HEARTBEAT_DEFAULT_INTERVAL == 30  # Flower's own
    # that setting it reaches what a node declares: the node loop test above


def test_the_heartbeat_patch_sets_both_modules_and_refuses_what_the_superlink_would(monkeypatch):
    modules = [importlib.import_module(name) for name in HEARTBEAT_MODULES]
    for module in modules:
        monkeypatch.setattr(module, "HEARTBEAT_DEFAULT_INTERVAL", 30)  # restored after
    assert patch_node_heartbeat(12) == 12.0
    assert [m.HEARTBEAT_DEFAULT_INTERVAL for m in modules] == [12.0, 12.0]
    for bad in (9.9, 1801, True, "10", float("nan")):
        with pytest.raises(ValueError, match=rf"in \[10, 1800\] .*got {re.escape(repr(bad))}"):
            patch_node_heartbeat(bad)
    assert [m.HEARTBEAT_DEFAULT_INTERVAL for m in modules] == [12.0, 12.0]  # untouched
    monkeypatch.delattr(modules[1], "HEARTBEAT_DEFAULT_INTERVAL")  # a Flower without it
    with pytest.raises(RuntimeError, match=rf"{HEARTBEAT_MODULES[1]} has no HEARTBEAT_DEFAULT_"):
        patch_node_heartbeat(10)
    assert modules[0].HEARTBEAT_DEFAULT_INTERVAL == 12.0  # nothing half set


def test_the_heartbeat_command_and_setting(capsys):
    only = supernode_argv(None, ["--insecure"], 10)
    assert only[1:] == ["-m", "rvfedprs.federation.flower.supernode", "--heartbeat-seconds",
                        "10.0", "--", "--insecure"]  # fmt: skip
    assert Path(supernode_argv(3, ["--insecure"], 30)[0]).name == "flower-supernode"
    with pytest.raises(ValueError, match="got 5"):
        supernode_argv(0.25, [], 5)
    with pytest.raises(SystemExit) as stop:
        main(["--heartbeat-seconds", "4", "--", "--insecure"])
    assert stop.value.code == 2 and "got 4.0" in capsys.readouterr().err
    assert load_config(None)["flower"]["node_heartbeat_seconds"] == NODE_HEARTBEAT_SECONDS == 10
    flowers_own = load_config(None, overrides={"flower": {"node_heartbeat_seconds": None}})
    assert flowers_own["flower"]["node_heartbeat_seconds"] is None
    for bad in (5, 3600, "often"):
        with pytest.raises(ConfigError, match="node_heartbeat_seconds"):
            load_config(None, overrides={"flower": {"node_heartbeat_seconds": bad}})


@pytest.mark.slow
def test_a_real_superlink_records_the_interval_and_takes_a_killed_node_for_lost(tmp_path):
    """Two SuperNodes on loopback at a 10 s heartbeat (Flower's own: 30 s): the SuperLink's
    Control API lists both with that interval; one killed is listed offline, the other not."""
    import signal

    nodes = {f"supernode-{s}": {"client-id": s} for s in ("a", "b")}
    with start_local(tmp_path / "deploy", simulation=False, nodes=nodes) as link:
        write_connection(tmp_path / "ctl", link.address)
        env = flower_env(tmp_path / "ctl")
        deadline = time.monotonic() + 120
        listing = list_nodes(env)
        while sum(n["status"] == "online" for n in listing) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            listing = list_nodes(env)
        assert sorted(n["status"] for n in listing) == ["online", "online"], listing
        assert [n["heartbeat_interval"] for n in listing] == [NODE_HEARTBEAT_SECONDS] * 2
        logs = link.processes.logs
        assert "heartbeat every 10 s" in (logs / "supernode-a.log").read_text()
        killed = {n["node_id"] for n in listing}
        os.kill(link.processes.pids()["supernode-a"], signal.SIGKILL)
        # which id was a's: the one that goes offline (bounded wait: Flower's own would be 60 s)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            listing = list_nodes(env)
            if any(n["status"] == "offline" for n in listing):
                break
            time.sleep(1)
        statuses = sorted(n["status"] for n in listing)
        assert statuses == ["offline", "online"], listing
        assert {n["node_id"] for n in listing} == killed
