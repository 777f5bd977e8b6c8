"""Secure aggregation on real Flower engines gives the in-process engine's model.

One small synthetic federation (4 clients), FedAvg and FedCE with ``secagg.enabled``, one round,
fixed seed, against the in-process engine: both on flower-sim, FedCE (whose backbone sum is
FedAvg's) on flower-deploy — a SuperLink and 4 SuperNodes on 127.0.0.1, each SuperNode holding
its site's secrets in ``context.state`` across the protocol's messages. The ServerApp's faults
and dropouts are exercised on the in-process Grid in ``test_secagg_training.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _flower_processes import alive  # noqa: E402
from _genomic_runs import run_flower, run_inprocess  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.flower.superlink import start_local  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import client_nodes, training_config  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402

pytestmark = pytest.mark.slow

SEED = 13
ROUNDS = 1
STRATEGIES = ("fedavg", "fedce")
ENGINES = ("flower-sim", "flower-deploy")
#: Which strategies each engine runs (a deployment starts a ClientApp process per message).
RUNS = {"flower-sim": STRATEGIES, "flower-deploy": ("fedce",)}


def _config(name: str, data: Path) -> dict:
    return load_config(
        None,
        overrides={
            "train": {
                "validation_fraction": 0,
                "strategy": name,
                "rounds": ROUNDS,
                "seed": SEED,
                "data": str(data),
            },
            "fedce": {"n_clusters": 2},
            "secagg": {"enabled": True},
            # the floor's secure fit is tested in-process (test_fedglm); here, no extra exchanges
            "model": {"start_from_floor": False},
        },
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("secagg-flower")
    data = write_federation(
        root,
        n_clients=4,
        n_clusters=2,
        samples_per_client=100,
        private_per_cluster=10,
        n_shared=10,
        causal_private=3,
    )["data"]
    federation = load_federation(data)
    out: dict = {"federation": federation, "pids": []}
    for name in STRATEGIES:
        config = _config(name, data)
        out["inprocess", name] = run_inprocess(
            federation,
            strategy_from_config(name, config),
            rounds=ROUNDS,
            model_config=config["model"],
            training=training_config(config, federation),
            random_seed=SEED,
            config=config,
        )
    nodes = client_nodes(data, federation.client_ids)
    for engine in ENGINES:
        simulation = engine == "flower-sim"
        with start_local(
            root / engine,
            simulation=simulation,
            nodes=None if simulation else nodes,
            clientapp="warm",  # deployment nodes as sites run them
        ) as link:
            out["pids"] += list(link.processes.pids().values())
            for name in RUNS[engine]:
                config = _config(name, data)
                out[engine, name] = run_flower(
                    engine,
                    federation=federation,
                    strategy=strategy_from_config(name, config),
                    config=config,
                    rounds=ROUNDS,
                    random_seed=SEED,
                    out=root / f"{engine}-{name}",
                    superlink=link,
                    timeout=600,
                )
    return out


@pytest.mark.parametrize(("engine", "name"), [(e, n) for e in ENGINES for n in RUNS[e]])
def test_secure_rounds_give_the_inprocess_model(runs, engine, name):
    reference, other = runs["inprocess", name], runs[engine, name]
    assert other.history[0]["secagg"] == reference.history[0]["secagg"]
    assert "failed" not in other.history[0]
    assert other.strategy.clusters() == reference.strategy.clusters()
    for client in runs["federation"].client_ids:
        want = reference.strategy.parameters_for(client)
        got = other.strategy.parameters_for(client)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-6, atol=1e-7, err_msg=key)
    assert other.history[0]["loss"] == pytest.approx(reference.history[0]["loss"], rel=1e-9)


def test_every_process_stopped(runs):
    assert runs["pids"] and [pid for pid in runs["pids"] if alive(pid)] == []
