"""flower-sim on a Ray cluster started apart from the run (``flower.ray_address``).

A Ray head is started on this machine by the test, as a cluster's would be (its own processes,
fixed ports, a private temp dir; stopped by its process group at the end, nobody else's Ray
touched). A 2-round FedAvg over 3 tiny sites then runs with ``flower.ray_address`` naming it:
the simulation must join that head (its ClientApp actors are in the head's actor table, under
the simulation's job) rather than start a private one, and give the in-process engine's weights.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _flower_processes import processes_using  # noqa: E402
from _genomic_runs import run_flower, run_inprocess  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.flower.processes import (  # noqa: E402
    FlowerProcesses,
    flower_env,
    start_ray_head,
)
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import training_config  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402

pytestmark = pytest.mark.slow

SEED = 5
ROUNDS = 2

# What the cluster's head knows of its jobs and actors (the GCS tables; no dashboard needed).
CLUSTER_STATE = """
import json, sys
import ray
from ray._private import state
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
jobs = {job["JobID"]: job for job in state.jobs()}
print(json.dumps([
    {"class": actor["ActorClassName"], "job": jobs[actor["JobID"]]}
    for actor in state.state.actor_table(None).values()
]))
"""


def test_flower_sim_joins_a_separately_started_ray_head(tmp_path):
    paths = write_federation(
        tmp_path,
        n_clients=3,
        n_clusters=3,
        samples_per_client=60,
        private_per_cluster=5,
        n_shared=6,
        causal_private=2,
        causal_shared=2,
    )
    federation = load_federation(paths["data"])
    # its own FLWR_HOME in the environment marks every process of this head, the actors too
    home = tmp_path / "ray-head" / "home"
    head = FlowerProcesses(logs=tmp_path / "ray-head", env=flower_env(home))
    try:
        address, _ = start_ray_head(head)
        config = load_config(
            None,
            overrides={
                "train": {
                    "validation_fraction": 0,
                    "strategy": "fedavg",
                    "rounds": ROUNDS,
                    "seed": SEED,
                },
                "model": {"start_from_floor": False},
                "flower": {"ray_address": address},
            },
        )
        strategy = strategy_from_config("fedavg", config)
        on_ray = run_flower(
            "flower-sim",
            federation=federation,
            strategy=strategy,
            config=config,
            rounds=ROUNDS,
            random_seed=SEED,
            out=tmp_path / "sim",
            timeout=300,
        )
        state = subprocess.run(
            [sys.executable, "-c", CLUSTER_STATE, address],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert state.returncode == 0, state.stderr[-3000:]
        actors = json.loads(state.stdout.strip().splitlines()[-1])
    finally:
        head.stop()
    # the run joined this head: Flower's ClientApp actors ran on it, and no head of its own
    client_actors = [a for a in actors if a["class"] == "ClientAppActor"]
    assert client_actors, actors
    for actor in client_actors:  # under the simulation's job, finished with the run
        assert "flwr-simulation" in actor["job"]["Entrypoint"] and actor["job"]["IsDead"]
    assert not list((tmp_path / "sim" / "flower" / "logs").glob("ray*.log"))
    # the head and everything it ran are gone
    assert processes_using(home) == []

    reference = run_inprocess(
        federation,
        strategy_from_config("fedavg", config),
        rounds=ROUNDS,
        model_config=config["model"],
        training=training_config(config, federation),
        random_seed=SEED,
    )
    for client in federation.client_ids:
        want = reference.strategy.parameters_for(client)
        got = on_ray.strategy.parameters_for(client)
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert [e["round"] for e in on_ray.history] == list(range(1, ROUNDS + 1))
