"""The imaging benchmark on Flower gives the in-process engine's models and metrics.

A small synthetic MedMNIST-format file (8×8 images, 2 classes, 120 images, 3 Dirichlet clients),
FedAvg and Ditto (stateful: the personal models v_k live on the server and travel with every
round), 2 rounds, fixed seed:

- ``rvfedprs imaging --engine flower-sim`` (a Ray head and a simulation SuperLink; each node's
  partition-id picks its client) must write the per-client metrics of every round that
  ``--engine inprocess`` writes;
- ``flower-deploy`` — a real SuperLink and one SuperNode per client on 127.0.0.1, over TLS with
  SuperNode authentication; each SuperNode's node config names its file and client and it
  rebuilds only that client's split — must give the in-process weights for every client
  (Ditto: the personal models) and the same training losses. A fourth SuperNode naming a
  client the partition lacks is reported and left out while the others train.

Both strategies share one Flower run per engine. Every Flower process is stopped when a run
ends, and the test checks they are gone. Bad input (an unknown engine, a node that names no file
or a client the partition lacks, a Flower engine without an output folder) fails with a clear
error before any process starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr", reason="the Flower engines need flwr")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _flower_processes import alive, make_certificates, processes_using  # noqa: E402
from test_imaging import _write_npz  # noqa: E402

from rvfedprs.cli import main  # noqa: E402
from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.imaging.benchmark import run_benchmark  # noqa: E402
from rvfedprs.imaging.engine import evaluate_clients  # noqa: E402
from rvfedprs.imaging.federation import benchmark_data, federation_from_section  # noqa: E402
from rvfedprs.imaging.loader import load_medmnist  # noqa: E402
from rvfedprs.imaging.plan import plan  # noqa: E402
from rvfedprs.plan import run, run_plans  # noqa: E402

pytestmark = pytest.mark.slow

SEED = 7
ROUNDS = 2
STRATEGIES = ("fedavg", "ditto")
SECTION = {
    "n_clients": 3,
    "alpha": 1.0,
    "rounds": ROUNDS,
    "strategies": list(STRATEGIES),
    "batch_size": 8,
    "seed": SEED,
    "torch_threads": 1,
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return _write_npz(tmp_path_factory.mktemp("img") / "mini.npz", n=(90, 15, 15))


@pytest.fixture(scope="module")
def config_file(data, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "imaging.yaml"
    path.write_text(json.dumps({"imaging": {**SECTION, "data": str(data)}}))  # JSON is YAML
    return path


def _cli(config_file: Path, out: Path, engine: str) -> dict:
    argv = ["imaging", "--config", str(config_file), "--engine", engine, "--out", str(out)]
    assert main(argv) == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.fixture(scope="module")
def cli_runs(config_file, tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    return {e: _cli(config_file, root / e, e) for e in ("inprocess", "flower-sim")} | {"root": root}


def test_cli_flower_sim_same_metrics_as_inprocess(cli_runs):
    want, got = cli_runs["inprocess"], cli_runs["flower-sim"]
    assert got["config"]["engine"] == "flower-sim" and want["config"]["engine"] == "inprocess"
    assert got["clients"] == want["clients"]  # the nodes rebuilt the same partition
    assert [(r["strategy"], r["round"]) for r in got["history"]] == [
        (s, t) for s in STRATEGIES for t in range(1, ROUNDS + 1)
    ]
    assert len(got["history"]) == len(want["history"])
    for a, b in zip(got["history"], want["history"], strict=True):
        assert (a["strategy"], a["round"]) == (b["strategy"], b["round"])
        assert sorted(a["per_client"]) == ["client_1", "client_2", "client_3"]
        for client, metrics in b["per_client"].items():
            for name, value in metrics.items():
                if value is None:  # NaN (a one-class test split) is written as null
                    assert a["per_client"][client][name] is None
                else:
                    assert a["per_client"][client][name] == pytest.approx(
                        value, rel=1e-5, abs=1e-6
                    ), (a["strategy"], a["round"], client, name)
    # Ditto's personal models differ from FedAvg's global one: the comparison has teeth
    last = {r["strategy"]: r for r in want["history"] if r["round"] == ROUNDS}
    assert last["ditto"]["log_loss"] != pytest.approx(last["fedavg"]["log_loss"], rel=1e-3)


def test_cli_flower_sim_stopped_every_process(cli_runs):
    out = cli_runs["root"] / "flower-sim"
    started = json.loads((out / "flower" / "logs" / "processes.json").read_text())
    assert list(started)[0] == "ray" and list(started)[-1] == "superlink"
    assert [pid for pid in started.values() if alive(pid)] == []
    assert processes_using((out / "flower" / "home").resolve()) == []
    # one Flower run for the fold, both strategies; only each one's last checkpoint is kept
    status = json.loads((out / "flower-runs" / "fold0" / "flower" / "status.json").read_text())
    assert status["status"] == "completed" and sorted(status["runs"]) == sorted(STRATEGIES)
    for name in STRATEGIES:
        kept = sorted(
            p.name for p in (out / "flower-runs" / "fold0" / name / "checkpoints").iterdir()
        )
        assert kept == [f"round_{ROUNDS:03d}.pt"]


@pytest.fixture(scope="module")
def deploy(data, tmp_path_factory):
    from dataclasses import replace

    from rvfedprs.federation.flower.superlink import start_local
    from rvfedprs.imaging.task import imaging_nodes

    root = tmp_path_factory.mktemp("deploy")
    config = load_config(None, overrides={"imaging": {**SECTION, "data": str(data)}})
    section = config["imaging"]
    dataset = load_medmnist(data)
    clients = federation_from_section(
        benchmark_data(dataset, section, SEED), dataset.n_classes, section, random_seed=SEED
    )
    out = {"clients": clients}
    for name in STRATEGIES:
        out["inprocess", name] = run(
            plan(config, clients=clients, strategy=name, seed=SEED, engine="inprocess")
        )
    nodes = imaging_nodes(data, sorted(clients))
    certs = root / "certs"
    # a fourth (registered) SuperNode names a client the partition does not have
    nodes["supernode-ghost"] = {"data-file": str(data), "client-id": "client_9"}
    make_certificates(certs, nodes)
    keys = {label: certs / "keys" / label for label in nodes}
    with start_local(
        root / "session", simulation=False, nodes=nodes, certificates=certs, node_keys=keys
    ) as link:
        out["pids"] = list(link.processes.pids().values())
        plans = [
            replace(
                plan(
                    config,
                    root / "run" / name,
                    clients=clients,
                    strategy=name,
                    seed=SEED,
                    engine="flower-deploy",
                    data_file=data,
                ),
                superlink=link,
                expected_nodes=4,
                min_replies=3,
                timeout=400,
            )
            for name in STRATEGIES
        ]
        results = run_plans(plans, out=root / "run")
    for name, result in zip(STRATEGIES, results, strict=True):
        out["flower-deploy", name] = result
    out["root"] = root
    return out


@pytest.mark.parametrize("name", STRATEGIES)
def test_deploy_same_weights_and_metrics_as_inprocess(deploy, name):
    reference, other = deploy["inprocess", name], deploy["flower-deploy", name]
    clients = deploy["clients"]
    for client in sorted(clients):
        want = reference.strategy.parameters_for(client)
        got = other.strategy.parameters_for(client)
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    assert [e["round"] for e in other.history] == list(range(1, ROUNDS + 1))
    np.testing.assert_allclose(
        [e["loss"] for e in other.history], [e["loss"] for e in reference.history], rtol=1e-6
    )
    want_m = evaluate_clients(reference.strategy, clients)
    got_m = evaluate_clients(other.strategy, clients)
    for client in want_m:
        np.testing.assert_allclose(
            [got_m[client][k] for k in sorted(want_m[client])],
            [want_m[client][k] for k in sorted(want_m[client])],
            rtol=1e-5,
            atol=1e-6,
        )


def test_deploy_ghost_node_reported_and_left_out(deploy):
    status = json.loads((deploy["root"] / "run" / "flower" / "status.json").read_text())
    assert status["status"] == "completed"
    assert status["client_ids"] == ["client_1", "client_2", "client_3"]
    (why,) = status["setup_failures"].values()
    assert "client-id 'client_9' is not a client of this imaging run" in why


def test_deploy_ditto_personal_models_are_per_client(deploy):
    ditto = deploy["flower-deploy", "ditto"].strategy
    fedavg = deploy["flower-deploy", "fedavg"].strategy
    a, b = ditto.parameters_for("client_1"), ditto.parameters_for("client_2")
    assert not np.allclose(a["fc2.weight"], b["fc2.weight"])  # one personal model per client
    g = fedavg.parameters_for("client_1")
    assert not np.allclose(a["fc2.weight"], g["fc2.weight"])


def test_deploy_over_tls_with_authenticated_nodes_and_cleaned_up(deploy):
    logs = deploy["root"] / "session" / "logs"
    superlink = (logs / "superlink.log").read_text()
    assert "running on https://127.0.0.1" in superlink
    assert superlink.count("[Fleet.ActivateNode] Activated node_id=") == 4
    assert (logs / "register.log").read_text().count("flwr supernode register") == 4
    node = (logs / "supernode-client_2.log").read_text()
    assert "Start `flwr-clientapp` process" in node
    assert [pid for pid in deploy["pids"] if alive(pid)] == []
    assert processes_using((deploy["root"] / "session" / "home").resolve()) == []


# --------------------------------------------------------------------------- bad input


def test_unknown_engine_is_a_config_error(config_file, data, tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"'imaging.engine': 'flower' is not allowed"):
        load_config(None, overrides={"imaging": {"engine": "flower"}})
    argv = ["imaging", "--config", str(config_file), "--engine", "ray", "--out", str(tmp_path)]
    assert main(argv) == 2
    assert "imaging.engine 'ray' unknown; choose from ['inprocess'" in capsys.readouterr().err
    section = load_config(None, overrides={"imaging": {**SECTION, "data": str(data)}})["imaging"]
    with pytest.raises(ConfigError, match="imaging.engine 'flwr' unknown"):
        run_benchmark(load_medmnist(data), section, random_seed=SEED, engine="flwr")
    with pytest.raises(ConfigError, match="engine 'flower-sim' needs an output folder"):
        run_benchmark(load_medmnist(data), section, random_seed=SEED, engine="flower-sim")
    assert not (tmp_path / "flower").exists()


def test_flower_sim_refuses_a_remote_superlink_before_any_process(data, tmp_path):
    from rvfedprs.imaging.engine import imaging_session

    with pytest.raises(ConfigError, match="applies to engine flower-deploy only"):
        with imaging_session(
            "flower-sim",
            tmp_path / "flower",
            data_file=data,
            client_ids=["client_1"],
            flower={"superlink": "10.0.0.1:9093"},
        ):
            pass
    assert not (tmp_path / "flower").exists()


def test_node_that_names_no_file_or_a_missing_client_is_refused(data):
    from flwr.app import Context, RecordDict

    from rvfedprs.imaging.task import ImagingTask

    task = ImagingTask()

    def imaging_local(context, run):  # what the ClientApp does for a node
        return task.open_site(task.locate(context.node_config, context.run_config, run), run)

    def load_imaging_client(data_file, client_id, run):
        return task.open_site({"data-file": str(data_file), "client-id": client_id}, run)

    section = load_config(None, overrides={"imaging": {**SECTION, "data": str(data)}})["imaging"]
    run = {
        "imaging": section,
        "seed": SEED,
        "fold": None,
        "class_counts": None,
        "data": str(data),
        "client_ids": ["client_1", "client_2", "client_3"],
    }

    def context(node_config):
        return Context(
            run_id=1, node_id=1, node_config=node_config, state=RecordDict(), run_config={}
        )

    with pytest.raises(ConfigError, match="node config has client-id but no data-file"):
        imaging_local(context({"client-id": "client_1"}), run)
    with pytest.raises(ConfigError, match=r"client-id 'client_9' is not a client .*client_3"):
        imaging_local(context({"client-id": "client_9", "data-file": str(data)}), run)
    with pytest.raises(ConfigError, match=r"client-id 'client_9' is not a client .*client_3"):
        load_imaging_client(data, "client_9", run)  # the partition itself has no such client
    with pytest.raises(ConfigError, match="partition-id 3 out of range: 3 imaging clients"):
        imaging_local(context({"partition-id": 3}), run)
    # partition-id i is the i-th client, rebuilt exactly as the launcher's federation
    own = imaging_local(context({"partition-id": 1}), run)
    dataset = load_medmnist(data)
    ref = federation_from_section(
        benchmark_data(dataset, section, SEED), dataset.n_classes, section, random_seed=SEED
    )["client_2"]
    assert own.client_id == "client_2"
    np.testing.assert_array_equal(own.train.images, ref.train.images)
    np.testing.assert_array_equal(own.test.labels, ref.test.labels)
