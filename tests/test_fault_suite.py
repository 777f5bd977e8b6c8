"""A SuperNode killed mid-round: a secure-aggregation run completes on the sites left, naming it.

A real deployment on 127.0.0.1 — a SuperLink and five SuperNodes, one per site of a small
synthetic federation — trains FedAvg for two rounds with ``secagg.enabled`` and
``min_replies: 3``. As soon as one SuperNode receives round 1's ``train`` message, that process
(and only it, by the pid the launcher recorded) is killed with SIGKILL. The run must complete
every round on the four sites left, name the killed site in each round's record (``failed``,
so never in a secure sum) and in the job's status — once the SuperLink has missed its
heartbeats, with the SuperLink's own "Node Unavailable" error — write the checkpoint of every
round, and leave no process of the deployment behind once the deployment is stopped.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _flower_processes import alive, processes_using, wait_for_line  # noqa: E402
from _genomic_runs import run_flower  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint  # noqa: E402
from rvfedprs.federation.flower.superlink import start_local  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import client_nodes  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402

pytestmark = pytest.mark.slow

SEED = 17
ROUNDS = 2
SITES = 5
MIN_REPLIES = 3
#: Seconds an exchange waits for its replies: long enough for a ClientApp to start on a loaded
#: 2-core host, short enough that the killed node is given up quickly.
ROUND_TIMEOUT = 75.0
VICTIM = "client02"
#: Why a killed node's site failed: the SuperLink's error reply for a node whose heartbeats
#: stopped (once it has noticed), or no reply within the exchange's timeout (before it has).
UNAVAILABLE = "error 5: Error: Node Unavailable"
TIMED_OUT = f"no reply within {ROUND_TIMEOUT} s"
#: What a SuperNode logs when round 1's training request reaches it.
ROUND_ONE_TRAIN = re.compile(r"\[RUN \d+, ROUND 1\]\s*\n.*Receiving: train message")


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault")
    data = write_federation(
        root,
        n_clients=SITES,
        n_clusters=1,
        samples_per_client=80,
        private_per_cluster=5,
        n_shared=6,
        causal_private=2,
        causal_shared=2,
    )["data"]
    federation = load_federation(data)
    config = load_config(
        None,
        overrides={
            "train": {
                "strategy": "fedavg",
                "rounds": ROUNDS,
                "seed": SEED,
                "data": str(data),
                "keep_checkpoints": 0,  # every round's, to check each was written
            },
            "secagg": {"enabled": True},
            "model": {"start_from_floor": False},
        },
    )
    out: dict = {"root": root, "clients": federation.client_ids, "run": root / "run"}
    done: dict = {}

    def train(link) -> None:
        try:
            done["result"] = run_flower(
                "flower-deploy",
                federation=federation,
                strategy=strategy_from_config("fedavg", config),
                config=config,
                rounds=ROUNDS,
                random_seed=SEED,
                out=out["run"],
                superlink=link,
                expected_nodes=SITES,
                min_replies=MIN_REPLIES,
                round_timeout=ROUND_TIMEOUT,
                timeout=500,
            )
        except BaseException as exc:  # re-raised in the test's thread
            done["error"] = exc

    victim = f"supernode-{VICTIM}"
    with start_local(
        root / "deploy", simulation=False, nodes=client_nodes(data, federation.client_ids)
    ) as link:
        pids = link.processes.pids()
        out["pids"] = list(pids.values())
        runner = threading.Thread(target=train, args=(link,), daemon=True)
        runner.start()
        log = root / "deploy" / "logs" / f"{victim}.log"
        out["reached"] = wait_for_line(log, ROUND_ONE_TRAIN, timeout=400, while_alive=runner)
        if out["reached"]:
            os.kill(pids[victim], signal.SIGKILL)
            out["others_alive"] = [alive(p) for label, p in pids.items() if label != victim]
        runner.join(timeout=600)
        out["victim_alive"] = alive(pids[victim])
    if "error" in done:
        raise done["error"]
    assert out["reached"], f"{victim} never received round 1's train message"
    assert "result" in done, "the run had not finished 600 s after the node was killed"
    out["result"] = done["result"]
    out["home"] = (root / "deploy" / "home").resolve()
    return out


def test_the_run_completes_every_round_on_the_sites_left(killed):
    result = killed["result"]
    assert not killed["victim_alive"] and all(killed["others_alive"])
    assert [e["round"] for e in result.history] == list(range(1, ROUNDS + 1))
    kept = [c for c in killed["clients"] if c != VICTIM]
    for entry in result.history:
        # the killed site is named, and every secure sum is over the four sites left
        assert list(entry["failed"]) == [VICTIM], entry
        assert re.search(f"{UNAVAILABLE}|{TIMED_OUT}", entry["failed"][VICTIM]), entry
        assert all(sorted(sites) == kept for sites in entry["secagg"].values()), entry
        assert VICTIM not in json.dumps(entry.get("secagg_faults", {}))
    # by round 2 the SuperLink has noticed the missing heartbeats and answers for the node
    assert re.search(UNAVAILABLE, result.history[-1]["failed"][VICTIM])
    status = json.loads((killed["run"] / "flower" / "status.json").read_text())
    assert status["status"] == "completed"
    assert status["failures"] == {str(e["round"]): e["failed"] for e in result.history}


def test_every_rounds_checkpoint_names_the_killed_site(killed):
    for server_round in range(1, ROUNDS + 1):
        record = load_checkpoint(checkpoint_path(killed["run"], server_round))
        assert record["round"] == server_round
        assert VICTIM in record["history"][server_round - 1]["failed"]


def test_no_process_of_the_deployment_is_left(killed):
    assert len(killed["pids"]) == 1 + SITES  # the SuperLink and the SuperNodes
    assert [pid for pid in killed["pids"] if alive(pid)] == []
    assert processes_using(killed["home"]) == []
