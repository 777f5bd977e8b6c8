"""The ServerApp's main loop: faults, minimum replies, status file, resume.

The Grid here is an in-process transport: it hands each message to the real ClientApp (the same
object Flower runs in a SuperNode) with one persistent Context per node, and lets a test drop,
corrupt or fail one client's reply. The processes themselves are exercised in
test_flower_engines.py.
"""

from __future__ import annotations

import itertools
import json
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from uuid import uuid4

import numpy as np
import pytest
from flwr.app import Context, Error, Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _genomic_runs import run_inprocess  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.checkpoints import load_checkpoint  # noqa: E402
from rvfedprs.federation.flower import client_app, server_app  # noqa: E402
from rvfedprs.federation.flower.job import write_job  # noqa: E402
from rvfedprs.federation.flower.records import (  # noqa: E402
    parameters_to_record,
    record_to_parameters,
)
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.training import LocalTrainingConfig  # noqa: E402

SEED = 5


class LocalGrid(Grid):
    """Delivers messages to the real ClientApp in this process; ``tamper`` may alter replies.

    Like Flower's grids, ``push_messages`` gives each message an id and ``pull_messages`` hands
    over (once) the replies that have arrived for the ids asked about. ``tamper(client_id,
    message, reply)`` returns the reply to deliver, or None to drop it (the server then waits
    out its timeout); ``delay(client_id, message)`` gives the seconds after the push at which
    the reply arrives (None: at once). ``asks[group]`` holds the seconds after that group's push
    at which each ask for its replies came.
    """

    def __init__(
        self,
        nodes: dict[int, dict],
        tamper: Callable | None = None,
        delay: Callable | None = None,
    ) -> None:
        TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
        self.contexts = {
            node: Context(
                run_id=1, node_id=node, node_config=cfg, state=RecordDict(), run_config={}
            )
            for node, cfg in nodes.items()
        }
        self.tamper = tamper
        self.delay = delay
        self.sent: list[Message] = []
        self.replies: dict[tuple[str, str], Message] = {}
        self.outbox: dict[str, tuple[float, Message]] = {}  # message id → (arrival, reply)
        self.asks: dict[str, list[float]] = {}
        self._pushes: dict[str, tuple[str, float]] = {}  # message id → (group, push end)

    def set_run(self, run_id):  # noqa: D102
        pass

    @property
    def run(self):  # noqa: D102
        raise NotImplementedError

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # noqa: D102
        return Message(content, dst_node_id=dst_node_id, message_type=message_type)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return list(self.contexts)

    def push_messages(self, messages):  # noqa: D102
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid4())  # as Flower's grids do
            ids.append(msg.metadata.message_id)
            self.sent.append(msg)
            context = self.contexts[msg.metadata.dst_node_id]
            client = str(context.node_config["client-id"])
            try:
                reply = client_app.app(msg, context)
            except Exception as exc:  # what Flower's ClientApp runner turns into an Error
                reply = Message(Error(2, f"{type(exc).__name__}: {exc}"), reply_to=msg)
            if self.tamper is not None:
                reply = self.tamper(client, msg, reply)
            if reply is not None:
                self.replies[(client, msg.metadata.group_id)] = reply
                late = 0.0 if self.delay is None else self.delay(client, msg) or 0.0
                self.outbox[msg.metadata.message_id] = (late, reply)
        pushed = time.monotonic()
        for msg in messages:
            self._pushes[msg.metadata.message_id] = (msg.metadata.group_id, pushed)
            if msg.metadata.message_id in self.outbox:
                late, reply = self.outbox[msg.metadata.message_id]
                self.outbox[msg.metadata.message_id] = (pushed + late, reply)
        return ids

    def pull_messages(self, message_ids):  # noqa: D102
        now = time.monotonic()
        message_ids = list(message_ids)
        if message_ids:
            group, pushed = self._pushes[message_ids[0]]
            self.asks.setdefault(group, []).append(now - pushed)
        arrived = [i for i in message_ids if i in self.outbox and self.outbox[i][0] <= now]
        return [self.outbox.pop(i)[1] for i in arrived]

    def send_and_receive(self, messages, *, timeout=None):  # noqa: D102
        raise NotImplementedError("the transport pushes and pulls itself")


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    root = tmp_path_factory.mktemp("fed")
    paths = write_federation(
        root,
        n_clients=3,
        n_clusters=3,
        samples_per_client=90,
        private_per_cluster=8,
        n_shared=9,
        causal_private=3,
        causal_shared=3,
    )
    return load_federation(paths["data"])


def _config(fed, name="fedavg", rounds=2, **sections):
    return load_config(
        None,
        overrides={
            "train": {
                "validation_fraction": 0,
                "strategy": name,
                "rounds": rounds,
                "seed": SEED,
                "data": str(fed.data_dir),
            },
            "fedce": {"n_clusters": 2},
            # the tests count and tamper with training messages; the floor's GLM rounds before
            # them are tested in test_fedglm and on flower-sim
            "model": {"start_from_floor": False},
            **sections,
        },
    )


def _nodes(fed) -> dict[int, dict]:
    return {
        100 + i: {"data-dir": str(fed.data_dir), "client-id": c}
        for i, c in enumerate(fed.client_ids)
    }


def _job(fed, out, *, name="fedavg", rounds=2, resume=False, min_replies=None, **sections):
    path = write_job(
        out / "job.json",
        config=_config(fed, name, rounds, **sections),
        strategy=name,
        rounds=rounds,
        seed=SEED,
        out=out,
        expected_clients=len(fed.client_ids),
        resume=resume,
        min_replies=min_replies,
        round_timeout=0.5,
        node_wait=1,
    )
    return json.loads(path.read_text())


def _inprocess(fed, out, name="fedavg", rounds=2):
    config = _config(fed, name, rounds)
    t = config["train"]
    return run_inprocess(
        fed,
        strategy_from_config(name, config),
        rounds=rounds,
        model_config=config["model"],
        training=LocalTrainingConfig(
            epochs=t["local_epochs"],
            lr=t["lr"],
            momentum=t["momentum"],
            batch_size=t["batch_size"],
            pos_weight=t["pos_weight"],
            weight_decay=t["weight_decay"],
        ),
        random_seed=SEED,
        out=out,
    )


def _global(out, round_):
    return load_checkpoint(out / "checkpoints" / f"round_{round_:03d}.pt")


def test_server_loop_matches_inprocess(fed, tmp_path):
    server_app.run_server(LocalGrid(_nodes(fed)), _job(fed, tmp_path / "flower", name="fedce"))
    reference = _inprocess(fed, tmp_path / "inprocess", name="fedce")
    got = _global(tmp_path / "flower", 2)
    for client in fed.client_ids:
        want = reference.strategy.parameters_for(client)
        strategy = strategy_from_config("fedce", _config(fed, "fedce"))
        strategy.load_state_dict(got["strategy_state"])
        for key, value in strategy.parameters_for(client).items():
            np.testing.assert_allclose(value, want[key], rtol=1e-6, atol=1e-7)
    assert got["history"][-1]["loss"] == pytest.approx(reference.history[-1]["loss"], rel=1e-9)


def test_server_loop_with_covariates_matches_inprocess(tmp_path):
    # each node standardises its own covariates with the federated moments of the setup step
    paths = write_federation(
        tmp_path / "data", n_clients=3, samples_per_client=80, covariates=("age", "pc1")
    )
    cov = load_federation(paths["data"])
    server_app.run_server(LocalGrid(_nodes(cov)), _job(cov, tmp_path / "flower"))
    config = _config(cov)
    t = config["train"]
    reference = run_inprocess(
        cov,
        strategy_from_config("fedavg", config),
        rounds=2,
        model_config=cov.model_config(config["model"]),
        training=LocalTrainingConfig(
            epochs=t["local_epochs"],
            lr=t["lr"],
            momentum=t["momentum"],
            batch_size=t["batch_size"],
            pos_weight=t["pos_weight"],
            weight_decay=t["weight_decay"],
        ),
        random_seed=SEED,
    )
    got = _global(tmp_path / "flower", 2)
    assert got["model_config"]["n_covariates"] == 2
    want = reference.strategy.parameters_for(cov.client_ids[0])
    for key, value in got["strategy_state"]["parameters"].items():
        np.testing.assert_allclose(value, want[key], rtol=1e-6, atol=1e-7, err_msg=key)


def _corrupt(victim: str, how: str):
    def tamper(client, msg, reply):
        if client != victim or msg.metadata.message_type != "train":
            return reply
        if how == "drop":
            return None
        if how == "raise":
            return Message(Error(2, "RuntimeError: disk on fire"), reply_to=msg)
        content = reply.content
        params = record_to_parameters(content.array_records["parameters"])
        name = sorted(params)[0]
        if how == "nan":
            params[name].flat[0] = np.nan
        elif how == "shape":
            params[name] = params[name][..., :-1]
        content["parameters"] = parameters_to_record(params)
        if how == "no-bloom":
            del content.config_records["meta"]["bloom-bits"]
        return reply

    return tamper


@pytest.mark.parametrize(
    ("how", "strategy", "reason"),
    [
        ("nan", "fedavg", "NaN/inf values"),
        ("shape", "fedavg", "has shape"),
        ("no-bloom", "fedce", "asked for a Bloom filter and none came back"),
        ("raise", "fedavg", "disk on fire"),
        ("drop", "fedavg", "no reply within 0.5 s"),
    ],
)
def test_faulty_client_is_named_and_the_rest_aggregated(fed, tmp_path, how, strategy, reason):
    victim = fed.client_ids[1]
    grid = LocalGrid(_nodes(fed), tamper=_corrupt(victim, how))
    job = _job(fed, tmp_path, name=strategy, rounds=1, min_replies=2)
    summary = server_app.run_server(grid, job)
    failed = summary["failures"][1]
    assert list(failed) == [victim] and reason in failed[victim]
    if how not in ("raise", "drop"):
        assert f"client {victim!r} sent a malformed reply" in failed[victim]
    record = _global(tmp_path, 1)
    assert record["history"][0]["failed"] == failed
    if strategy == "fedavg":  # oracle: n_k-weighted mean of the two good replies
        good = [c for c in fed.client_ids if c != victim]
        replies = [grid.replies[(c, "1")] for c in good]
        n = [r.content.metric_records["metrics"]["num-examples"] for r in replies]
        for key, value in record["strategy_state"]["parameters"].items():
            stack = [
                record_to_parameters(r.content.array_records["parameters"])[key] for r in replies
            ]
            np.testing.assert_allclose(value, np.average(stack, axis=0, weights=n), rtol=1e-6)


@pytest.mark.parametrize(("late", "kept"), [(0.3, True), (2.0, False)])
def test_replies_are_pulled_every_reply_poll_until_the_timeout(fed, tmp_path, late, kept):
    """A reply arriving within the timeout is taken at the next ask; a later one is named lost."""
    victim = fed.client_ids[1]

    def delay(client, msg):
        return late if client == victim and msg.metadata.message_type == "train" else None

    grid = LocalGrid(_nodes(fed), delay=delay)
    job = {**_job(fed, tmp_path, rounds=1, min_replies=2), "reply_poll_seconds": 0.05}
    summary = server_app.run_server(grid, job)
    failed, asks = summary["failures"].get(1, {}), grid.asks["1"]
    if kept:  # asked again every 0.05 s until it came
        assert failed == {} and len(asks) >= 3 and late <= asks[-1] < 0.5
    else:  # waited out the 0.5 s timeout (the last ask at it), not the reply's 2 s
        assert list(failed) == [victim] and "no reply within 0.5 s" in failed[victim]
        assert 0.5 <= asks[-1] < 1.0 and len(asks) >= 3
    assert all(b - a < 0.5 for a, b in itertools.pairwise(asks))  # no 3 s waits


def test_reply_poll_setting_is_checked():
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.federation.flower.transport import REPLY_POLL_SECONDS

    assert load_config(None)["flower"]["reply_poll_seconds"] == REPLY_POLL_SECONDS
    for bad in (0, -1, 5, "fast"):
        with pytest.raises(ConfigError, match="reply_poll_seconds"):
            load_config(None, overrides={"flower": {"reply_poll_seconds": bad}})
    with pytest.raises(ConfigError, match="reply_poll_seconds must be > 0 seconds, got 0"):
        write_job(
            "unused.json",
            config={},
            strategy="fedavg",
            rounds=1,
            seed=1,
            out=".",
            expected_clients=1,
            reply_poll_seconds=0,
        )


def test_too_few_replies_fails_and_status_says_why(fed, tmp_path):
    victim = fed.client_ids[0]
    grid = LocalGrid(_nodes(fed), tamper=_corrupt(victim, "raise"))
    _job(fed, tmp_path, rounds=1)  # min_replies defaults to every client
    job_file = tmp_path / "job.json"
    context = Context(
        run_id=1,
        node_id=1,
        node_config={},
        state=RecordDict(),
        run_config={"job-file": str(job_file)},
    )
    with pytest.raises(RuntimeError, match=r"round 1: 2 of 3 clients replied \(min_replies=3\)"):
        server_app.main(grid, context)
    status = json.loads((tmp_path / "flower" / "status.json").read_text())
    assert status["status"] == "failed" and victim in status["error"]


def test_setup_failure_of_unknown_client_is_reported(fed, tmp_path):
    nodes = _nodes(fed)
    nodes[999] = {"data-dir": str(fed.data_dir), "client-id": "ghost"}
    job = _job(fed, tmp_path, rounds=1)
    job["expected_clients"] = 4
    summary = server_app.run_server(LocalGrid(nodes), job)
    assert summary["client_ids"] == fed.client_ids
    assert "ghost" in summary["setup_failures"]["node 999"]


def test_resume_continues_from_last_checkpoint(fed, tmp_path):
    server_app.run_server(LocalGrid(_nodes(fed)), _job(fed, tmp_path / "a", rounds=2))
    server_app.run_server(LocalGrid(_nodes(fed)), _job(fed, tmp_path / "b", rounds=1))
    grid = LocalGrid(_nodes(fed))
    server_app.run_server(grid, _job(fed, tmp_path / "b", rounds=2, resume=True))
    assert {m.metadata.group_id for m in grid.sent} == {"setup", "2"}  # round 1 not redone
    a, b = _global(tmp_path / "a", 2), _global(tmp_path / "b", 2)
    for key, value in a["strategy_state"]["parameters"].items():
        np.testing.assert_allclose(b["strategy_state"]["parameters"][key], value, rtol=1e-6)
    assert [e["round"] for e in b["history"]] == [1, 2]


def test_client_state_persists_in_context_state(fed):
    grid = LocalGrid(_nodes(fed))
    context = next(iter(grid.contexts.values()))
    client_app._save_state(context, {"dp": {"steps": 3}})
    assert client_app._load_state(context) == {"dp": {"steps": 3}}


DP = {"enabled": True, "noise_multiplier": 0.9, "max_grad_norm": 1.0, "batch_size": 16}


def test_dp_accountant_lives_in_context_state_and_survives_resume(fed, tmp_path):
    from rvfedprs.genomic.task import training_config
    from rvfedprs.training.dp import DPState, dp_settings

    # in-process oracle, as `rvfedprs train` runs DP
    config = _config(fed, rounds=2, dp=DP)
    state: dict = {}
    reference = run_inprocess(
        fed,
        strategy_from_config("fedavg", config),
        rounds=2,
        model_config=config["model"],
        training=training_config(config, fed, dp=True),
        random_seed=SEED,
        out=tmp_path / "inprocess",
        dp=dp_settings(config["dp"]),
        client_state=state,
    )
    want = {c: state[c]["dp"].epsilon() for c in fed.client_ids}
    assert all(e > 0 for e in want.values())

    # uninterrupted: every node's one accountant lives in its context.state over both rounds
    grid = LocalGrid(_nodes(fed))
    summary = server_app.run_server(grid, _job(fed, tmp_path / "a", rounds=2, dp=DP))
    assert summary["epsilon_clients"] == pytest.approx(want, rel=1e-9)
    for context in grid.contexts.values():
        kept = client_app._load_state(context)["dp"]
        client = str(context.node_config["client-id"])
        assert isinstance(kept, DPState) and kept.rounds == 2
        assert kept.accountant.history == state[client]["dp"].accountant.history
    assert (
        _global(tmp_path / "a", 1)["client_state"][fed.client_ids[0]]["dp"]["state"]["rounds"] == 1
    )

    # interrupted after round 1, resumed on fresh nodes (empty context.state): the server hands
    # each client its accountant back, so ε stays cumulative and the model is the same
    server_app.run_server(LocalGrid(_nodes(fed)), _job(fed, tmp_path / "b", rounds=1, dp=DP))
    fresh = LocalGrid(_nodes(fed))
    resumed = server_app.run_server(fresh, _job(fed, tmp_path / "b", rounds=2, resume=True, dp=DP))
    assert resumed["epsilon_clients"] == pytest.approx(want, rel=1e-9)
    handed_back = [m for m in fresh.sent if m.metadata.group_id == "2"]
    runs = [str(m.content.config_records["config"]["run"]) for m in handed_back]
    assert all("client_state" in run for run in runs)
    for b, a in ((_global(tmp_path / "b", 2), _global(tmp_path / "a", 2)),):
        for key, value in a["strategy_state"]["parameters"].items():
            np.testing.assert_allclose(b["strategy_state"]["parameters"][key], value, rtol=1e-6)
    for client in fed.client_ids:
        got = _global(tmp_path / "a", 2)["strategy_state"]["parameters"]
        for key, value in reference.strategy.parameters_for(client).items():
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


def test_dp_reply_without_accountant_state_is_rejected(fed, tmp_path):
    victim = fed.client_ids[2]

    def tamper(client, msg, reply):
        if client == victim and msg.metadata.message_type == "train":
            del reply.content.config_records["meta"]["client-state"]
        return reply

    grid = LocalGrid(_nodes(fed), tamper=tamper)
    summary = server_app.run_server(grid, _job(fed, tmp_path, rounds=1, min_replies=2, dp=DP))
    assert summary["failures"][1] == {
        victim: f"client {victim!r} sent a malformed reply: DP is on and no 'dp' state came back"
    }
    assert sorted(summary["epsilon_clients"]) == [c for c in fed.client_ids if c != victim]


def test_cli_refuses_pooled_strategy_on_flower(fed, tmp_path, capsys):
    from rvfedprs.cli import main

    argv = ["train", "--data", str(fed.data_dir), "--strategy", "centralized"]
    argv += ["--engine", "flower-sim", "--rounds", "1", "--seed", "1", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "strategy 'centralized' pools every client's data" in capsys.readouterr().err
    assert not (tmp_path / "flower" / "logs").exists()  # refused before any process started
