"""A SuperLink started here waits ``flower.serverapp_patience_seconds`` for a ServerApp's heartbeat.

Flower's own SuperLink fails a run after 60 s without one (2 × 30 s), which a loaded 2-core
machine can starve. The launcher patches the task state's patience; this checks the lease Flower's
own in-memory task state gives a running task after the patch, the launcher's command line and
its refusals.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

pytest.importorskip("flwr", reason="the Flower engines need flwr")

from flwr.supercore.corestate import in_memory_corestate  # noqa: E402
from flwr.supercore.date import now  # noqa: E402
from flwr.supercore.object_store import ObjectStoreFactory  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.federation.flower import superlink_launcher as launcher  # noqa: E402


class _TaskState(in_memory_corestate.InMemoryCoreState):
    """Flower's in-memory task state; the two message methods it leaves abstract are unused."""

    def get_node_id(self, *args, **kwargs):  # pragma: no cover - not called
        raise NotImplementedError

    def store_message_and_object_tree(self, *args, **kwargs):  # pragma: no cover
        raise NotImplementedError


def _lease_after_heartbeat() -> timedelta:
    state = _TaskState(ObjectStoreFactory().store())
    task = state.create_task("serverapp", run_id=1)
    assert state.claim_task(task) and state.activate_task(task)
    before = now()
    assert state.acknowledge_task_heartbeat(task)
    return state.task_token_store[task].active_until - before


@pytest.fixture
def flowers_own_patience(monkeypatch):
    for name in launcher.PATIENCE_MODULES:  # the patch is undone after the test
        module = __import__(name, fromlist=["_"])
        monkeypatch.setattr(module, launcher.PATIENCE_NAME, module.HEARTBEAT_PATIENCE)


def test_a_patched_task_state_keeps_a_running_serverapp_for_the_patience(flowers_own_patience):
    assert launcher.flowers_patience() == 60
    assert _lease_after_heartbeat() == pytest.approx(
        timedelta(seconds=60), abs=timedelta(seconds=1)
    )
    assert launcher.patch_serverapp_patience(300) == 300.0
    assert _lease_after_heartbeat() == pytest.approx(
        timedelta(seconds=300), abs=timedelta(seconds=1)
    )


def test_the_superlink_command_uses_the_launcher_only_for_a_longer_patience():
    plain = launcher.superlink_argv(None, ["--insecure"])
    assert plain[0].endswith("flower-superlink") and plain[1:] == ["--insecure"]
    assert launcher.superlink_argv(60, ["--insecure"]) == plain
    longer = launcher.superlink_argv(180, ["--insecure"])
    assert longer[:3] == [sys.executable, "-m", launcher.__name__]
    assert longer[3:] == ["--patience-seconds", "180.0", "--", "--insecure"]
    with pytest.raises(ValueError, match=r"at least Flower's own 60 s, got 30"):
        launcher.superlink_argv(30, ["--insecure"])


def test_the_launcher_refuses_a_short_patience_by_name():
    done = subprocess.run(
        [sys.executable, "-m", launcher.__name__, "--patience-seconds", "5", "--", "--insecure"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "serverapp_patience_seconds must be at least Flower's own 60 s, got 5.0" in done.stderr


def test_the_configuration_default_and_its_bounds():
    assert load_config(None)["flower"]["serverapp_patience_seconds"] == 180
    assert (
        load_config(None, overrides={"flower": {"serverapp_patience_seconds": None}})["flower"][
            "serverapp_patience_seconds"
        ]
        is None
    )
    with pytest.raises(ConfigError, match="serverapp_patience_seconds"):
        load_config(None, overrides={"flower": {"serverapp_patience_seconds": 30}})
