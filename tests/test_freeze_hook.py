"""The test hook that stops a site before it answers a named step (rvfedprs.federation.freeze).

It must do nothing unless the node's environment names a folder holding ``<site>@<step>``; when
it does, the site must say it has reached the step and not answer while the file exists; and
the real Flower ClientApp, handed a real message, must stop there with the node's site id and
the step's name *before* it does the step: while frozen it has neither replied nor changed the
node's state (the fault suite kills nodes frozen there, and a resumed run must find the step
undone). Its training rounds freeze as ``train.<round>``, the warm start's as
``warm_start.<round>``.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.federation.flower.client_app import app  # noqa: E402
from rvfedprs.federation.flower.records import (  # noqa: E402
    content_to_payload,
    instruction_to_content,
    record_to_parameters,
    request_to_content,
)
from rvfedprs.federation.freeze import (  # noqa: E402
    FREEZE_DIR_ENV,
    freeze_file,
    freeze_if_asked,
    reached_file,
)
from rvfedprs.federation.task import WARM_START_RUN, Request  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import genomic_settings, initial_parameters, training_config  # noqa: E402
from rvfedprs.strategies.base import FitInstruction  # noqa: E402


def test_nothing_happens_unless_the_folder_asks_this_site_at_this_step(tmp_path, monkeypatch):
    monkeypatch.delenv(FREEZE_DIR_ENV, raising=False)
    (tmp_path / "site0@features").touch()
    assert freeze_if_asked("site0", "features") is False  # no folder named
    monkeypatch.setenv(FREEZE_DIR_ENV, str(tmp_path))
    assert freeze_if_asked("site1", "features") is False  # another site
    assert freeze_if_asked("site0", "moments") is False  # another step
    assert not list(tmp_path.glob("*.reached"))


def test_a_site_asked_is_frozen_until_released(tmp_path, monkeypatch):
    monkeypatch.setenv(FREEZE_DIR_ENV, str(tmp_path))
    asked = tmp_path / "site0@secagg.share"
    asked.touch()
    done: list[bool] = []
    frozen = threading.Thread(target=lambda: done.append(freeze_if_asked("site0", "secagg.share")))
    frozen.start()
    reached = tmp_path / "site0@secagg.share.reached"
    for _ in range(100):
        if reached.exists():
            break
        time.sleep(0.05)
    assert reached.exists()
    time.sleep(0.3)
    assert frozen.is_alive() and done == []  # it has not answered
    asked.unlink()
    frozen.join(timeout=5)
    assert done == [True]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    data = write_federation(
        tmp_path_factory.mktemp("freeze"),
        n_clients=2,
        n_clusters=2,
        samples_per_client=40,
        private_per_cluster=8,
        n_shared=6,
        causal_private=3,
        causal_shared=2,
    )["data"]
    return load_federation(data)


def _context(fed) -> Context:
    client = fed.client_ids[0]
    return Context(
        run_id=1,
        node_id=1,
        state=RecordDict(),
        run_config={},
        node_config={"data-dir": str(fed.data_dir), "client-id": client},
    )


def _frozen_call(asked: Path, call, context: Context):
    """Run ``call`` while ``asked`` exists: (alive, replies, node state) when frozen, replies."""
    asked.touch()
    replies: list = []
    thread = threading.Thread(target=lambda: replies.append(call()))
    thread.start()
    for _ in range(600):
        if reached_file(asked).exists():
            break
        time.sleep(0.05)
    assert reached_file(asked).exists(), f"never froze at {asked.name}"
    time.sleep(0.2)
    frozen = (thread.is_alive(), list(replies), list(context.state.config_records))
    asked.unlink()
    thread.join(timeout=120)
    assert not thread.is_alive()
    return frozen, replies


def test_the_clientapp_freezes_a_step_before_doing_it(site, tmp_path, monkeypatch):
    monkeypatch.setenv(FREEZE_DIR_ENV, str(tmp_path))
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    context = _context(site)
    client = site.client_ids[0]
    message = Message(
        request_to_content(Request("setup", {}), {"task": "genomic"}),
        dst_node_id=1,
        message_type="query",
    )
    asked = freeze_file(tmp_path, client, "setup")

    def call():
        return app(message=message, context=context)

    (alive, replied, state), replies = _frozen_call(asked, call, context)
    assert alive and replied == []
    assert state == []  # the step is not done while frozen
    assert content_to_payload(replies[0].content)[1]["n"] == site.train[client].n_samples
    assert list(context.state.config_records)  # and is done once let go
    # asked at another step, or another site at this one, it answers at once
    freeze_file(tmp_path, "someone_else", "setup").touch()
    assert content_to_payload(call().content)[1]["n"] == site.train[client].n_samples


@pytest.mark.parametrize(("run_index", "step"), [(0, "train.2"), (WARM_START_RUN, "warm_start.2")])
def test_the_clientapp_freezes_a_training_round_before_training(
    site, tmp_path, monkeypatch, run_index, step
):
    monkeypatch.setenv(FREEZE_DIR_ENV, str(tmp_path))
    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
    config = validate_config({"model": {"common_hidden": [4], "rare_hidden": [4]}})
    settings = genomic_settings(
        site, model_config=config["model"], training=training_config(config, site)
    )
    settings["run_index"] = run_index
    start = initial_parameters(site.n_rare, config["model"], 1)
    content = instruction_to_content(FitInstruction(start), server_round=2, seed=7, run=settings)
    message = Message(content, dst_node_id=1, message_type="train")
    context = _context(site)
    asked = freeze_file(tmp_path, site.client_ids[0], step)
    (alive, replied, state), replies = _frozen_call(
        asked, lambda: app(message=message, context=context), context
    )
    assert alive and replied == [] and state == []
    assert len(context.state.config_records) == 1  # the round's state, once let go
    trained = record_to_parameters(replies[0].content.array_records["parameters"])
    moved = [k for k in start if not np.array_equal(trained[k], start[k])]
    assert moved, "the round was not trained once let go"
