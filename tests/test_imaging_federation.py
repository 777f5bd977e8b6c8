"""Imaging client hooks (FedProx, SCAFFOLD, Ditto), the run loop, distances and the CLI."""

import json

import numpy as np
import pytest
from test_imaging import REAL, _write_npz

from rvfedprs.imaging.client import ImagingTrainingConfig, fit_imaging_client
from rvfedprs.imaging.engine import evaluate_clients, initial_cnn_parameters
from rvfedprs.imaging.federation import ImagingFederation, build_federation
from rvfedprs.imaging.loader import load_medmnist
from rvfedprs.plan import RunPlan, run
from rvfedprs.strategies import FitInstruction, get_strategy
from rvfedprs.strategies.ditto import PERSONAL_PREFIX
from rvfedprs.strategies.scaffold import CORRECTION_KEY


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    path = _write_npz(tmp_path_factory.mktemp("img") / "x.npz", n=(90, 15, 15))
    d = load_medmnist(path)
    return build_federation(
        d.pooled(),
        2,
        n_clients=3,
        alpha=1.0,
        random_seed=0,
        training=ImagingTrainingConfig(batch_size=4, lr=0.05),
    )


def test_client_hooks(clients):
    c = clients["client_1"]
    w0 = initial_cnn_parameters(clients, 0)
    plain = fit_imaging_client(FitInstruction(w0, {}), c, random_seed=1)
    again = fit_imaging_client(FitInstruction(w0, {}), c, random_seed=1)
    assert all(np.array_equal(plain.parameters[k], again.parameters[k]) for k in w0)
    assert plain.metrics["local_steps"] > 2  # the proximal term acts from the second step on
    assert plain.metrics["local_steps"] == int(np.ceil(len(c.train) / 4))
    # a zero correction is plain SGD; a constant correction shifts each bias by -lr·steps·g
    zero = {k: np.zeros_like(v) for k, v in w0.items()}
    same = fit_imaging_client(FitInstruction(w0, {CORRECTION_KEY: zero}), c, random_seed=1)
    np.testing.assert_allclose(same.parameters["fc2.bias"], plain.parameters["fc2.bias"], atol=1e-6)
    shift = dict(zero, **{"fc2.bias": np.full_like(w0["fc2.bias"], 0.5)})
    moved = fit_imaging_client(FitInstruction(w0, {CORRECTION_KEY: shift}), c, random_seed=1)
    assert not np.allclose(moved.parameters["fc2.bias"], plain.parameters["fc2.bias"])
    # a huge proximal term keeps the model at w^t
    prox = fit_imaging_client(FitInstruction(w0, {"proximal_mu": 9.0}), c, random_seed=1)
    d_prox = np.linalg.norm(prox.parameters["fc1.weight"] - w0["fc1.weight"])
    d_plain = np.linalg.norm(plain.parameters["fc1.weight"] - w0["fc1.weight"])
    assert d_prox < d_plain
    ditto = fit_imaging_client(
        FitInstruction(w0, {"ditto_lambda": 0.1, "ditto_personal": w0}), c, random_seed=1
    )
    assert all(PERSONAL_PREFIX + k in ditto.parameters for k in w0)


@pytest.mark.parametrize("name", ["fedavg", "fedsvrg", "fedatt", "ditto"])
def test_strategies_run_and_learn(clients, name):
    s = get_strategy(name)
    r = run(RunPlan(task="imaging", data=ImagingFederation(clients), strategy=s, rounds=2, seed=0))
    assert len(r.history) == 2 and np.isfinite(r.history[-1]["loss"])
    assert r.history[-1]["loss"] < r.history[0]["loss"]
    metrics = evaluate_clients(s, clients)
    assert set(metrics) == set(clients) and all(0 <= m["accuracy"] <= 1 for m in metrics.values())


def test_distances_on_imaging(clients):
    from rvfedprs.imaging.distances import imaging_distance

    for method in ("emd", "euclidean", "ot"):
        d, ids = imaging_distance(clients, method, random_seed=0)
        assert ids == sorted(clients) and d.shape == (3, 3)
        np.testing.assert_allclose(d, d.T)
        assert np.all(np.diag(d) == 0) and np.all(d[~np.eye(3, dtype=bool)] > 0)


def test_cli_imaging_and_distance(tmp_path):
    from rvfedprs.cli import main

    data = _write_npz(tmp_path / "x.npz", n=(90, 15, 15))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "imaging:\n  n_clients: 2\n  alpha: 1.0\n  rounds: 2\n  batch_size: 32\n"
        "  strategies: [fedavg, fedprox, fedsvrg, fedatt, local]\n  seed: 1\n"
        "distance:\n  method: emd\n"
    )
    assert (
        main(["imaging", "--config", str(cfg), "--data", str(data), "--out", str(tmp_path / "o")])
        == 0
    )
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert {r["strategy"] for r in metrics["history"]} == {
        "fedavg",
        "fedprox",
        "fedsvrg",
        "fedatt",
        "local",
    }
    assert (tmp_path / "o" / "table.md").read_text().count("fedprox") == 2  # rounds 1 and 2
    progress = (tmp_path / "o" / "progress.jsonl").read_text().splitlines()
    assert len(progress) == 5 * 2 and metrics["wall_s"] > 0  # 5 strategies x rounds 1, 2
    # --strategies / --rounds override the config; progress rows are streamed per eval round
    argv = ["imaging", "--config", str(cfg), "--data", str(data), "--out", str(tmp_path / "s")]
    assert main([*argv, "--strategies", "fedavg", "local", "--rounds", "1"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "s" / "progress.jsonl").read_text().splitlines()]
    assert [(r["strategy"], r["round"]) for r in rows] == [("fedavg", 1), ("local", 1)]
    assert main([*argv, "--strategies", "nosuch"]) == 2
    assert main([*argv, "--rounds", "0"]) == 2
    # --class-counts: a fixed (published) partition instead of the Dirichlet draw
    counts = tmp_path / "counts.tsv"
    counts.write_text("# comment\nclient\t0\t1\nclient_1\t20\t10\nclient_2\t5\t30\n")
    arg_c = [*argv[:-1], str(tmp_path / "c"), "--strategies", "fedavg", "--rounds", "1"]
    assert main([*arg_c, "--class-counts", str(counts)]) == 0
    fixed = json.loads((tmp_path / "c" / "metrics.json").read_text())
    info = fixed["clients"]["0"]
    assert {c: v["n_train"] + v["n_test"] for c, v in info.items()} == {
        "client_1": 30,
        "client_2": 35,
    }
    assert fixed["class_counts"] == [[20, 10], [5, 30]]
    assert fixed["n_unassigned"] == fixed["n_images"] - 65
    bad = tmp_path / "bad.tsv"
    bad.write_text("client\t0\t1\t2\nclient_1\t1\t1\t1\n")
    assert main([*arg_c, "--class-counts", str(bad)]) == 2
    assert main([*arg_c, "--class-counts", str(tmp_path / "none.tsv")]) == 2
    assert (
        main(["distance", "--config", str(cfg), "--data", str(data), "--out", str(tmp_path / "d")])
        == 0
    )
    lines = (tmp_path / "d" / "distance_emd.tsv").read_text().splitlines()
    assert lines[0].split("\t") == ["client", "client_1", "client_2"] and len(lines) == 3
    assert (tmp_path / "d" / "distance_emd.png").stat().st_size > 0
    assert (
        main(
            [
                "distance",
                "--method",
                "jaccard",
                "--config",
                str(cfg),
                "--data",
                str(data),
                "--out",
                str(tmp_path / "j"),
            ]
        )
        == 2
    )


def test_real_pneumoniamnist_loads():
    if not REAL.is_file():
        pytest.skip(f"real PneumoniaMNIST not available at {REAL}")
    d = load_medmnist(REAL)
    assert d.n_classes == 2
    assert {s: len(v) for s, v in d.splits.items()} == {"train": 4708, "val": 524, "test": 624}
    assert d.splits["train"].images.shape[1:] == (1, 28, 28)
