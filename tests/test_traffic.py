"""Every run reports its traffic: bytes per message type and seconds, per step and per round.

The byte counts are checked against an oracle: the messages a small in-process run exchanged,
recorded as they pass, encoded here with the functions the Flower transport sends them with
(:mod:`rvfedprs.federation.flower.records`) and serialised with Flower's protobuf.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from flwr.common.serde import recorddict_to_proto  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.flower.records import (  # noqa: E402
    fit_result_to_content,
    instruction_to_content,
    payload_to_content,
    request_to_content,
)
from rvfedprs.federation.inprocess import InProcessTransport  # noqa: E402
from rvfedprs.federation.metering import COUNTS, Traffic, metered  # noqa: E402
from rvfedprs.federation.rounds import RunSpec, serve  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.engine import genomic_settings  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.strategies import get_strategy  # noqa: E402
from rvfedprs.training import LocalTrainingConfig  # noqa: E402

MODEL = {"common_hidden": [4], "rare_hidden": [8], "dropout": 0.0}
TRAINING = LocalTrainingConfig(epochs=1, lr=0.05, momentum=0.9, batch_size=32)


def _size(content) -> int:
    """The oracle: the protobuf Flower puts on the wire for a message's content."""
    return len(recorddict_to_proto(content).SerializeToString())


class RecordingTransport(InProcessTransport):
    """The in-process engine, keeping every message it delivered (the oracle's input)."""

    def __init__(self, task, sites):
        super().__init__(task, sites)
        self.sent: list[int] = []
        self.received: list[int] = []

    def subset(self, client_ids):
        out = RecordingTransport(self.task, {c: self.sites[c] for c in client_ids})
        out.step_state = {c: self.step_state[c] for c in client_ids}
        out.sent, out.received = self.sent, self.received
        return out

    def query(self, requests, settings):
        replies, failures = super().query(requests, settings)
        self.sent += [_size(request_to_content(r, settings)) for r in requests.values()]
        self.received += [_size(payload_to_content(c, p)) for c, p in replies.items()]
        return replies, failures

    def fit(self, server_round, instructions, seeds, settings, client_state):
        self.sent += [
            _size(instruction_to_content(i, server_round=server_round, seed=seeds[c], run=settings))
            for c, i in instructions.items()
        ]
        results, failures = super().fit(server_round, instructions, seeds, settings, client_state)
        self.received += [
            _size(fit_result_to_content(r, self.task.export_state(client_state[c])))
            for c, r in results.items()
        ]
        return results, failures


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("traffic")
    paths = write_federation(
        root, n_clients=3, n_clusters=2, samples_per_client=80, private_per_cluster=6, n_shared=6
    )
    return paths["data"]


def test_byte_counts_equal_the_flower_encoding_of_every_message(data):
    federation = load_federation(data)
    task = GenomicTask()
    recording = RecordingTransport(task, sites_of(federation))
    transport = metered(recording, task)
    job = {"seed": 3, "rounds": 2, "resume": False}
    reports, _ = transport.open({"task": task.name})  # the setup step
    assert sorted(reports) == federation.client_ids
    settings = genomic_settings(federation, model_config=MODEL, training=TRAINING)
    result = serve(task, transport, [RunSpec(get_strategy("fedavg"))], job, settings)[0]

    table = transport.traffic.table()
    assert table["total"]["bytes_sent"] == sum(recording.sent) > 0
    assert table["total"]["bytes_received"] == sum(recording.received) > 0
    assert table["total"]["messages"] == len(recording.sent) == len(recording.received)
    assert table["setup"]["messages"] == 3 and table["fit"]["messages"] >= 2 * 3
    # the run's table is the exchanges after the setup; each round's is in its history entry
    run = result.metrics["traffic"]
    assert run["total"]["bytes_sent"] == sum(recording.sent[3:])
    rounds = [entry["traffic"]["fit"] for entry in result.history]
    assert [r["messages"] for r in rounds] == [3, 3]
    assert sum(r["bytes_received"] for r in rounds) <= run["fit"]["bytes_received"]
    assert all(r["seconds"] > 0 for r in rounds)


def test_metrics_json_carries_the_traffic_table(data, tmp_path):
    config = load_config(
        None,
        overrides={
            "train": {
                "validation_fraction": 0,
                "strategy": "fedavg",
                "rounds": 2,
                "seed": 5,
                "data": str(data),
            },
            "model": {**MODEL, "start_from_floor": False},
        },
    )
    train(config, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    traffic = metrics["traffic"]
    assert list(traffic) == ["fit", "total"]  # no floor fit: training rounds only
    assert traffic["fit"]["messages"] == 2 * 3
    assert set(traffic["total"]) == set(COUNTS)
    assert traffic["total"]["bytes_sent"] == traffic["fit"]["bytes_sent"] > 0
    for entry in metrics["history"]:
        assert entry["traffic"]["fit"]["messages"] == 3
        assert entry["traffic"]["fit"]["bytes_received"] > 0


def test_traffic_table_sums_per_step_from_a_mark():
    traffic = Traffic()
    traffic.add("setup", 10, 20, 2, 0.5)
    start = traffic.mark()
    traffic.add("fit", 100, 200, 2, 1.0)
    traffic.add("evaluate", 1, 2, 2, 0.25)
    traffic.add("fit", 100, 200, 2, 1.0)
    assert traffic.table()["total"] == {
        "messages": 8, "bytes_sent": 211, "bytes_received": 422, "seconds": 2.75
    }  # fmt: skip
    since = traffic.table(start)
    assert list(since) == ["fit", "evaluate", "total"]
    assert since["fit"] == {"messages": 4, "bytes_sent": 200, "bytes_received": 400, "seconds": 2.0}
