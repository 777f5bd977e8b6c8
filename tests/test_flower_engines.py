"""In-process, Flower simulation and a real Flower deployment give the same model.

One small synthetic federation (3 clients), FedAvg and FedCE, 2 rounds, fixed seed. The
deployment is a real SuperLink and 3 SuperNodes on 127.0.0.1 (insecure), plus a fourth SuperNode
that claims a client nobody has: it must be reported and left out while the others train. Every
process is stopped by its id when the module's fixture ends, and the test checks they are gone.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.data import load_federation  # noqa: E402
from rvfedprs.federation.flower.launch import (  # noqa: E402
    FlowerRunError,
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
        # Requiring every node's reply makes the ghost fatal: the run must fail, clearly.
        config = _config("fedavg", paths["data"])
        try:
            run_flower(
                "flower-deploy",
                federation=federation,
                strategy=strategy_from_config("fedavg", config),
                config=config,
                rounds=1,
                random_seed=SEED,
                out=root / "deploy-strict",
                superlink=link,
                expected_nodes=4,
                min_replies=4,
                timeout=120,
            )
            out["strict_error"] = None
        except FlowerRunError as exc:
            out["strict_error"] = str(exc)
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


def test_too_few_replies_fails_the_run_clearly(runs):
    error = runs["strict_error"]
    assert error is not None, "a run that cannot reach min_replies must fail"
    assert "3 of 4 clients answered the setup" in error and "min_replies=4" in error


def test_every_process_stopped(runs):
    assert len(runs["pids"]) == 1 + 4 + 1  # deploy SuperLink + 4 SuperNodes, sim SuperLink
    assert [pid for pid in runs["pids"] if _alive(pid)] == []
