"""In-process, Flower simulation and a real Flower deployment give the same model.

One small synthetic federation (3 clients), FedAvg and FedCE, 2 rounds, fixed seed: one
flower-sim and one flower-deploy run per strategy, sharing one SuperLink per engine (the
deployment's SuperLink and SuperNodes are started once for both strategies).

The deployment is a real SuperLink and 3 SuperNodes on 127.0.0.1 over **TLS with SuperNode
authentication**, with credentials made by ``scripts/make_test_certificates.sh``: the SuperLink
serves the certificate signed by the script's CA, every SuperNode's public key is registered
with ``flwr supernode register`` and each SuperNode authenticates with its private key. A fourth
(registered) SuperNode claims a client nobody has: it must be reported and left out while the
others train; a fifth SuperNode with a key that was never registered must be refused.

The simulation also runs FedAvg with DP-SGD (``dp.enabled``), whose cumulative ε per client and
weights must equal the in-process engine's. Every process is stopped by its id when the module's
fixture ends, and the test checks they are gone. Last, ``rvfedprs train --engine flower-sim`` run
as a command fails cleanly when no client can answer in time.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _flower_processes import alive, make_certificates, processes_using  # noqa: E402
from _genomic_runs import run_flower, run_inprocess  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.checkpoints import load_checkpoint  # noqa: E402
from rvfedprs.federation.flower.superlink import start_local  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import client_nodes  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.training import LocalTrainingConfig  # noqa: E402
from rvfedprs.training.dp import dp_settings  # noqa: E402

pytestmark = pytest.mark.slow

SEED = 11
ROUNDS = 2
STRATEGIES = ("fedavg", "fedce")
#: scikit-learn's penalty (every coefficient but the intercept), so that it is the oracle
GLM = {"features": "dosages", "l2": 1.0, "penalize": "all"}
DP = {"enabled": True, "noise_multiplier": 1.1, "max_grad_norm": 1.0, "batch_size": 16}


def _config(name: str, data: Path, **sections) -> dict:
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
            # no floor fit before training: on a deployment every exchange starts a ClientApp
            # (~15 s on a loaded 2-core host); the GLM's Newton rounds over Flower are tested by
            # test_fedglm_on_flower_equals_pooled_sklearn
            "model": {"start_from_floor": False},
            **sections,
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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tls_handshake(address: str, ca: Path) -> dict:
    """Verify the server's certificate chain against ``ca`` (hostname 127.0.0.1)."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            return {"version": tls.version(), "subject": tls.getpeercert()["subject"]}


def _plain_http(address: str) -> bytes:
    """What a plain-HTTP request to the SuperLink's port gets back (b"" when cut off)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        raw.settimeout(10)
        try:
            return raw.recv(200)
        except (TimeoutError, ConnectionResetError):
            return b""


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0


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

    # DP-SGD in-process, as `rvfedprs train` runs it (one accountant per client, dp.batch_size)
    config = _config("fedavg", paths["data"], dp=DP)
    out["dp-state", "inprocess"] = {}
    out[("inprocess", "fedavg-dp")] = run_inprocess(
        federation,
        strategy_from_config("fedavg", config),
        rounds=ROUNDS,
        model_config=config["model"],
        training=replace(_training(config), batch_size=DP["batch_size"]),
        random_seed=SEED,
        out=root / "inprocess-fedavg-dp",
        dp=dp_settings(config["dp"]),
        client_state=out["dp-state", "inprocess"],
    )

    nodes = client_nodes(paths["data"], federation.client_ids)
    nodes["supernode-ghost"] = {"data-dir": str(paths["data"]), "client-id": "ghost"}
    certs = root / "certs"
    make_certificates(certs, [*nodes, "intruder"])
    keys = {label: certs / "keys" / label for label in nodes}
    pids: list[int] = []
    with start_local(
        root / "deploy",
        simulation=False,
        nodes=nodes,
        certificates=certs,
        node_keys=keys,
        clientapp="warm",  # as sites run them; Flower's cold path: test_imaging_flower, identity
    ) as link:
        # a SuperNode whose key was never registered: the SuperLink must refuse it
        link.processes.start(
            "supernode-intruder",
            [
                "flower-supernode",
                "--root-certificates",
                str(certs / "ca.crt"),
                "--auth-supernode-private-key",
                str(certs / "keys" / "intruder"),
                "--superlink",
                link.address,
                "--port",
                str(_free_port()),
                "--max-retries",
                "2",
                "--node-config",
                f"data-dir='{paths['data']}' client-id='{federation.client_ids[0]}'",
            ],
        )
        out["tls"] = _tls_handshake(link.address, certs / "ca.crt")
        out["plain-http"] = _plain_http(link.address)
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
        # the exact federated GLM on a deployment (issue 29): Newton rounds until converged
        config = _config("fedglm", paths["data"], fedglm=GLM)
        out[("flower-deploy", "fedglm")] = run_flower(
            "flower-deploy",
            federation=federation,
            strategy=strategy_from_config("fedglm", config),
            config=config,
            rounds=20,
            random_seed=SEED,
            out=root / "deploy-fedglm",
            superlink=link,
            expected_nodes=4,
            min_replies=3,
            timeout=600,  # ~7 Newton rounds, a ClientApp start each
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
        config = _config("fedavg", paths["data"], dp=DP)
        out["dp-state", "flower-sim"] = {}
        out[("flower-sim", "fedavg-dp")] = run_flower(
            "flower-sim",
            federation=federation,
            strategy=strategy_from_config("fedavg", config),
            config=config,
            rounds=ROUNDS,
            random_seed=SEED,
            out=root / "sim-fedavg-dp",
            superlink=link,
            timeout=300,
            client_state=out["dp-state", "flower-sim"],
        )
        # the exact federated GLM through the ClientApp (issue 29): Newton rounds until converged
        config = _config("fedglm", paths["data"], fedglm=GLM)
        out[("flower-sim", "fedglm")] = run_flower(
            "flower-sim",
            federation=federation,
            strategy=strategy_from_config("fedglm", config),
            config=config,
            rounds=20,
            random_seed=SEED,
            out=root / "sim-fedglm",
            superlink=link,
            timeout=300,
        )
    out["intruder-log"] = (root / "deploy" / "logs" / "supernode-intruder.log").read_text()
    out["certs"] = certs
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
    # the traffic table (issue 30.6): the setup, then every round's messages, whose replies
    # carry what the in-process engine's carried, byte for byte
    traffic = other.metrics["traffic"]
    assert traffic["setup"]["messages"] == 3 and traffic["fit"]["messages"] == 3 * ROUNDS
    received = [
        [e["traffic"]["fit"]["bytes_received"] for e in r.history] for r in (other, reference)
    ]
    assert received[0] == received[1] and min(received[0]) > 0
    # the checkpoints are the in-process engine's format, loadable by the same function
    record = load_checkpoint(other.checkpoints[-1])
    assert record["round"] == ROUNDS and record["client_ids"] == runs["federation"].client_ids


@pytest.mark.parametrize("engine", ["flower-sim", "flower-deploy"])
def test_fedglm_on_flower_equals_pooled_sklearn(runs, engine):
    from sklearn.linear_model import LogisticRegression

    from rvfedprs.genomic.data import pool_clients
    from rvfedprs.training.glm import glm_design

    pooled = pool_clients(runs["federation"].train)
    x = glm_design(pooled, "dosages")[:, 1:]
    oracle = LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    oracle.fit(x, pooled.y.astype(int))
    expected = np.concatenate([oracle.intercept_, oracle.coef_.ravel()])
    result = runs[(engine, "fedglm")]
    assert result.strategy.converged and len(result.history) < 20  # stopped when converged
    np.testing.assert_allclose(result.strategy.coef, expected, rtol=0, atol=1e-6)


def test_ghost_node_reported_and_left_out(runs):
    status = (runs["root"] / "deploy-fedavg" / "flower" / "status.json").read_text()
    assert "ghost" in status and "not listed" in status
    assert "completed" in status


def test_deployment_speaks_tls_with_the_scripts_certificate(runs):
    assert runs["tls"]["version"] in ("TLSv1.2", "TLSv1.3")
    assert ((("commonName", "rvfedprs SuperLink"),)) in runs["tls"]["subject"]
    assert not runs["plain-http"].startswith(b"HTTP/")  # no plain-HTTP answer on the port
    log = (runs["root"] / "deploy" / "logs" / "superlink.log").read_text()
    assert "insecure" not in log.lower() and "running on https://127.0.0.1" in log
    assert "SuperNode authentication is disabled" not in log


def test_registered_supernodes_authenticate_and_an_unregistered_one_is_refused(runs):
    registered = (runs["root"] / "deploy" / "logs" / "register.log").read_text()
    assert registered.count("flwr supernode register") == 4
    status = json.loads((runs["root"] / "deploy-fedavg" / "flower" / "status.json").read_text())
    assert status["client_ids"] == runs["federation"].client_ids  # the 3 real ones trained
    assert len(status["setup_failures"]) == 1  # the ghost; the intruder never got a node id
    assert "ghost" in json.dumps(status["setup_failures"])
    assert "intruder" not in json.dumps(status)
    assert "Failed to activate SuperNode" in runs["intruder-log"]
    superlink = (runs["root"] / "deploy" / "logs" / "superlink.log").read_text()
    assert superlink.count("[Fleet.ActivateNode] Activated node_id=") == 4
    assert "ApiError:2004] Attempted to register SuperNode with public key" in superlink


def test_dp_through_the_client_app_equals_inprocess(runs):
    reference = runs["dp-state", "inprocess"]
    got = runs["dp-state", "flower-sim"]
    clients = runs["federation"].client_ids
    assert sorted(got) == clients
    for c in clients:
        want, have = reference[c]["dp"], got[c]["dp"]
        assert have.rounds == want.rounds == ROUNDS  # one accountant, extended every round
        assert have.accountant.history == want.accountant.history
        assert have.epsilon() == pytest.approx(want.epsilon(), rel=1e-9)
        assert have.epsilon() > 0
    # the server checkpoints every client's accountant; train.keep_checkpoints (default 1)
    # leaves only the last round's checkpoint once the launcher has evaluated every round
    folder = runs["root"] / "sim-fedavg-dp" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == [f"round_{ROUNDS:03d}.pt"]
    last = load_checkpoint(folder / f"round_{ROUNDS:03d}.pt")
    assert last["client_state"][clients[0]]["dp"]["state"]["rounds"] == ROUNDS
    status = json.loads((runs["root"] / "sim-fedavg-dp" / "flower" / "status.json").read_text())
    assert status["epsilon_clients"] == pytest.approx(
        {c: reference[c]["dp"].epsilon() for c in clients}
    )
    # the noise is seeded by the client's round seed: the same noisy weights on both engines
    for c in clients:
        want = runs[("inprocess", "fedavg-dp")].strategy.parameters_for(c)
        have = runs[("flower-sim", "fedavg-dp")].strategy.parameters_for(c)
        for key in want:
            np.testing.assert_allclose(have[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    # and they are not the noiseless model
    plain = runs[("inprocess", "fedavg")].strategy.parameters_for(clients[0])
    noisy = runs[("flower-sim", "fedavg-dp")].strategy.parameters_for(clients[0])
    assert max(float(np.abs(plain[k] - noisy[k]).max()) for k in plain) > 1e-3


def test_every_process_stopped(runs):
    # deploy: SuperLink + 4 SuperNodes + the refused one; sim: Ray head(s) + SuperLink
    assert len(runs["pids"]) >= 1 + 4 + 1 + 2
    assert [pid for pid in runs["pids"] if alive(pid)] == []
    # nor any child (ServerApp, ClientApps, simulation backend) of theirs
    assert [pid for home in runs["homes"] for pid in processes_using(home)] == []


@pytest.fixture(scope="module")
def small_data(tmp_path_factory) -> Path:
    """A 3-client federation of its own, so that the command-line tests can run alone (-k cli)."""
    root = tmp_path_factory.mktemp("cli")
    return write_federation(
        root,
        n_clients=3,
        n_clusters=3,
        samples_per_client=60,
        private_per_cluster=8,
        n_shared=9,
        causal_private=3,
        causal_shared=3,
    )["data"]


def test_cli_flower_sim_failure_is_reported_and_cleaned_up(small_data, tmp_path):
    config = tmp_path / "config.yaml"
    # a round timeout no client can meet: the setup gets no reply, the run cannot go on
    config.write_text("flower:\n  round_timeout: 0.001\n  timeout: 240\n")
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "rvfedprs", "train", "--config", str(config)]
    argv += ["--data", str(small_data), "--strategy", "fedavg", "--engine", "flower-sim"]
    argv += ["--rounds", "1", "--seed", "3", "--out", str(out), "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "rvfedprs train: error: the Flower run failed" in done.stderr
    assert "only 0 of 3 clients answered the setup (min_replies=3)" in done.stderr
    status = json.loads((out / "flower" / "status.json").read_text())
    assert status["status"] == "failed"
    assert not (out / "metrics.json").exists()
    started = json.loads((out / "flower" / "logs" / "processes.json").read_text())
    # a Ray head (tried again, as ray-2, ..., if its start timed out) and the SuperLink
    assert list(started)[0] == "ray" and list(started)[-1] == "superlink"
    assert [pid for pid in started.values() if alive(pid)] == []
    assert processes_using((out / "flower" / "home").resolve()) == []
    address = (out / "flower" / "home" / "config.toml").read_text().split('address = "')[1]
    assert not _listening(address.split('"')[0])


def test_cli_impossible_min_replies_refused_before_any_process(small_data, tmp_path, capsys):
    from rvfedprs.cli import main

    config = tmp_path / "config.yaml"
    config.write_text("flower:\n  min_replies: 5\n")
    argv = ["train", "--config", str(config), "--data", str(small_data), "--engine"]
    argv += ["flower-sim", "--rounds", "1", "--seed", "1", "--out", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "min_replies must be in [1, 3] (the number of clients), got 5" in err
    assert not (tmp_path / "out" / "flower" / "logs").exists()
