"""A site's exchange cost: a query imports no torch; warm ClientApps give the in-process model.

- A ``setup`` query handled by the real ClientApp (``client_app.app``, as ``flwr-clientapp``
  calls it) in a fresh interpreter answers with the site's moments and leaves torch unimported
  (a cold ClientApp process pays for every module it imports, on every message).
- A real loopback deployment (SuperLink and two SuperNodes, ``flower.clientapp: warm``): each
  message's ClientApp is forked by the node's warm executor (its log names every fork, and
  Flower's ``flwr-clientapp`` is never started), the model equals the in-process run's, and
  every process is gone afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _flower_processes import alive, processes_using  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.federation.flower.processes import (  # noqa: E402
    FlowerProcesses,
    executor_argv,
    flower_env,
    start_supernode,
)
from rvfedprs.federation.flower.supernode import (  # noqa: E402
    NODE_HEARTBEAT_SECONDS,
    NODE_POLL_SECONDS,
)
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.engine import plan as genomic_plan  # noqa: E402
from rvfedprs.plan import run as run_plan  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: One query message through the ClientApp in a fresh interpreter; prints what it imported.
QUERY = r"""
import json, sys
from flwr.app import Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from rvfedprs.federation.flower.client_app import app
from rvfedprs.federation.flower.records import content_to_payload, request_to_content
from rvfedprs.federation.task import Request

TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
content = request_to_content(Request("setup", {}), {"task": "genomic"})
message = Message(content, dst_node_id=1, message_type="query")
context = Context(run_id=1, node_id=1, state=RecordDict(), run_config={},
                  node_config={"data-dir": sys.argv[1], "client-id": sys.argv[2]})
reply = app(message=message, context=context)
heavy = sorted(m for m in ("torch", "opacus", "sklearn") if m in sys.modules)
print(json.dumps({"payload": content_to_payload(reply.content)[1], "modules": heavy}))
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("warm")
    return write_federation(
        root, n_clients=2, n_clusters=2, samples_per_client=60, private_per_cluster=10, n_shared=18
    )["data"]


def test_a_query_message_imports_no_torch(data):
    client = load_federation(data).client_ids[0]
    done = subprocess.run(
        [sys.executable, "-c", QUERY, str(data), client],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["modules"] == []
    site = load_federation(data, clients=[client])
    assert answer["payload"]["n"] == site.train[client].n_samples
    assert answer["payload"]["n-rare"] == site.n_rare


def test_clientapp_mode_checked_and_executor_command(tmp_path):
    procs = FlowerProcesses(logs=tmp_path / "logs", env=flower_env(tmp_path / "home"))
    with pytest.raises(ConfigError, match=r"clientapp must be one of .*'hot'"):
        start_supernode(procs, "node", ["true"], port=1, clientapp="hot")
    assert procs.procs == {}
    with pytest.raises(ConfigError, match=r"flower.clientapp"):
        load_config(None, overrides={"flower": {"clientapp": "hot"}})
    argv = executor_argv("127.0.0.1:9094", parent_pid=42)
    assert argv[1:] == ["-m", "rvfedprs.federation.flower.warm_clientapp",
                        "--runtime-api-address", "127.0.0.1:9094", "--insecure",
                        "--parent-pid", "42"]  # fmt: skip


@pytest.mark.slow
def test_warm_deployment_equals_inprocess(data, tmp_path):
    federation = load_federation(data)
    config = load_config(
        None,
        overrides={
            "train": {
                "validation_fraction": 0,
                "strategy": "fedavg",
                "rounds": 2,
                "seed": 3,
                "data": str(data),
            },
            "model": {"start_from_floor": False},
            "flower": {"clientapp": "warm", "timeout": 900},
        },
    )
    runs = {
        engine: run_plan(
            replace(genomic_plan(config, tmp_path / engine, data=federation), engine=engine)
        )
        for engine in ("inprocess", "flower-deploy")
    }
    for client in federation.client_ids:
        want = runs["inprocess"].strategy.parameters_for(client)
        have = runs["flower-deploy"].strategy.parameters_for(client)
        for key in want:
            np.testing.assert_allclose(have[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)

    flower = tmp_path / "flower-deploy" / "flower"
    pids = json.loads((flower / "logs" / "processes.json").read_text())
    for client in federation.client_ids:
        log = (flower / "logs" / f"supernode-{client}-clientapp.log").read_text()
        # setup + 2 rounds' training, at least, each in a child of the warm executor
        assert log.count("ClientApp forked") >= 3, log[-2000:]
        assert f"supernode-{client}-clientapp" in pids
        node_log = (flower / "logs" / f"supernode-{client}.log").read_text()
        assert "flwr-clientapp" not in node_log  # a cold node's ClientApps log there
        # the node ran through the launcher at flower.node_poll_seconds (the default)
        assert f"SuperNode waits capped at {NODE_POLL_SECONDS:g} s" in node_log
        assert f"heartbeat every {NODE_HEARTBEAT_SECONDS:g} s" in node_log
    assert [pid for pid in pids.values() if alive(pid)] == []
    assert processes_using(flower / "home") == []
