"""In-process, Flower simulation and a real Flower deployment give the same model.

One small synthetic federation (3 clients), FedAvg and FedCE, 2 rounds, fixed seed: one
flower-sim and one flower-deploy run per strategy, sharing one SuperLink per engine (the
deployment's SuperLink and SuperNodes are started once for both strategies). The deployment is a
real SuperLink and 3 SuperNodes on 127.0.0.1 (insecure), plus a fourth SuperNode that claims a
client nobody has: it must be reported and left out while the others train. Every process is
stopped by its id when the module's fixture ends, and the test checks they are gone. Last,
``rvfedprs train --engine flower-sim`` run as a command fails cleanly when no client can answer
in time.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.data import load_federation  # noqa: E402
from rvfedprs.federation.flower.launch import (  # noqa: E402
    client_nodes,
    run_flower,
    start_local,
)
from rvfedprs.federation.inprocess import load_checkpoint, run_inprocess  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.training import LocalTrainingConfig  # noqa: E402

pytestmark = pytest.mark.slow

SEED = 11
ROUNDS = 2
STRATEGIES = ("fedavg", "fedce")


def _config(name: str, data: Path) -> dict:
    return load_config(
        None,
        overrides={
            "train": {"strategy": name, "rounds": ROUNDS, "seed": SEED, "data": str(data)},
            "fedce": {"n_clusters": 2},
        },
    )


def _training(config: dict) -> LocalTrainingConfig:
    t = config["train"]
    return LocalTrainingConfig(
        epochs=t["local_epochs"],
        lr=t["lr"],
        momentum=t["momentum"],
        batch_size=t["batch_size"],
        pos_weight=t["pos_weight"],
        weight_decay=t["weight_decay"],
    )


def _processes_using(home: Path) -> list[int]:
    """Pids of live processes whose environment names ``home`` as FLWR_HOME."""
    needle = f"FLWR_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and _alive(int(entry.name)):
                found.append(int(entry.name))
        except (PermissionError, FileNotFoundError, ProcessLookupError):
            continue
    return found


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0): read its state
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("flower")
    paths = write_federation(
        root,
        n_clients=3,
        n_clusters=3,
        samples_per_client=120,
        private_per_cluster=10,
        n_shared=12,
        causal_private=3,
    )
    federation = load_federation(paths["data"])
    out: dict = {"federation": federation, "root": root}
    for name in STRATEGIES:
        config = _config(name, paths["data"])
        out[("inprocess", name)] = run_inprocess(
            federation,
            strategy_from_config(name, config),
            rounds=ROUNDS,
            model_config=config["model"],
            training=_training(config),
            random_seed=SEED,
            out=root / f"inprocess-{name}",
        )

    nodes = client_nodes(paths["data"], federation.client_ids)
    nodes["supernode-ghost"] = {"data-dir": str(paths["data"]), "client-id": "ghost"}
    pids: list[int] = []
    with start_local(root / "deploy", simulation=False, nodes=nodes) as link:
        pids += list(link.processes.pids().values())
        for name in STRATEGIES:
            config = _config(name, paths["data"])
            out[("flower-deploy", name)] = run_flower(
                "flower-deploy",
                federation=federation,
                strategy=strategy_from_config(name, config),
                config=config,
                rounds=ROUNDS,
                random_seed=SEED,
                out=root / f"deploy-{name}",
                superlink=link,
                expected_nodes=4,
                min_replies=3,
                timeout=240,
            )
    with start_local(root / "sim", simulation=True) as link:
        pids += list(link.processes.pids().values())
        for name in STRATEGIES:
            config = _config(name, paths["data"])
            out[("flower-sim", name)] = run_flower(
                "flower-sim",
                federation=federation,
                strategy=strategy_from_config(name, config),
                config=config,
                rounds=ROUNDS,
                random_seed=SEED,
                out=root / f"sim-{name}",
                superlink=link,
                timeout=300,
            )
    out["pids"] = pids
    out["homes"] = [(root / "deploy" / "home").resolve(), (root / "sim" / "home").resolve()]
    out["data"] = paths["data"]
    return out


@pytest.mark.parametrize("engine", ["flower-sim", "flower-deploy"])
@pytest.mark.parametrize("name", STRATEGIES)
def test_same_weights_and_metrics_as_inprocess(runs, engine, name):
    reference, other = runs[("inprocess", name)], runs[(engine, name)]
    for client in runs["federation"].client_ids:
        want = reference.strategy.parameters_for(client)
        got = other.strategy.parameters_for(client)
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert [e["round"] for e in other.history] == list(range(1, ROUNDS + 1))
    np.testing.assert_allclose(
        [e["loss"] for e in other.history], [e["loss"] for e in reference.history], rtol=1e-6
    )
    assert other.strategy.clusters() == reference.strategy.clusters()
    # the checkpoints are the in-process engine's format, loadable by the same function
    record = load_checkpoint(other.checkpoints[-1])
    assert record["round"] == ROUNDS and record["client_ids"] == runs["federation"].client_ids


def test_ghost_node_reported_and_left_out(runs):
    status = (runs["root"] / "deploy-fedavg" / "flower" / "status.json").read_text()
    assert "ghost" in status and "not listed" in status
    assert "completed" in status


def test_every_process_stopped(runs):
    assert len(runs["pids"]) == 1 + 4 + 1  # deploy SuperLink + 4 SuperNodes, sim SuperLink
    assert [pid for pid in runs["pids"] if _alive(pid)] == []
    # nor any child (ServerApp, ClientApps, simulation backend) of theirs
    assert [pid for home in runs["homes"] for pid in _processes_using(home)] == []


def test_cli_flower_sim_failure_is_reported_and_cleaned_up(runs, tmp_path):
    config = tmp_path / "config.yaml"
    # a round timeout no client can meet: the setup gets no reply, the run cannot go on
    config.write_text("flower:\n  round_timeout: 0.001\n  timeout: 240\n")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "rvfedprs", "train", "--config", str(config)]
    argv += ["--data", str(runs["data"]), "--strategy", "fedavg", "--engine", "flower-sim"]
    argv += ["--rounds", "1", "--seed", "3", "--out", str(out), "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "rvfedprs train: error: the Flower run failed" in done.stderr
    assert "only 0 of 3 clients answered the setup (min_replies=3)" in done.stderr
    status = json.loads((out / "flower" / "status.json").read_text())
    assert status["status"] == "failed"
    assert not (out / "metrics.json").exists()
    started = json.loads((out / "flower" / "logs" / "processes.json").read_text())
    assert list(started) == ["superlink"]
    assert [pid for pid in started.values() if _alive(pid)] == []
    assert _processes_using((out / "flower" / "home").resolve()) == []
    address = (out / "flower" / "home" / "config.toml").read_text().split('address = "')[1]
    assert not _listening(address.split('"')[0])


def test_cli_impossible_min_replies_refused_before_any_process(runs, tmp_path, capsys):
    from rvfedprs.cli import main

    config = tmp_path / "config.yaml"
    config.write_text("flower:\n  min_replies: 5\n")
    argv = ["train", "--config", str(config), "--data", str(runs["data"]), "--engine"]
    argv += ["flower-sim", "--rounds", "1", "--seed", "1", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "min_replies must be in [1, 3] (the number of clients), got 5" in err
    assert not (tmp_path / "out" / "flower" / "logs").exists()
