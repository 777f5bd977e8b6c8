"""`rvfedprs train` and `rvfedprs evaluate` from the command line: metrics, checkpoints,
provenance, overrides, and bad input exiting 2 by name (`rvfedprs mia`: test_mia_command.py)."""

import json

import pytest
import yaml
from _federation_fixtures import write_federation

from rvfedprs.cli import main

KEYS = {
    "strategy",
    "seed",
    "auc",
    "auprc",
    "carrier_auc",
    "client_auc",
    "client_auc_mean",
    "client_auc_std",
    "clusters",
    "history",
    "ari",
}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    paths = write_federation(
        root,
        n_clients=6,
        n_clusters=3,
        samples_per_client=150,
        private_per_cluster=15,
        n_shared=12,
        seed=4,
    )
    config = {
        "model": {"common_hidden": [4], "rare_hidden": [8]},
        "train": {"data": str(paths["data"]), "rounds": 2, "batch_size": 32, "progress": False},
        "fedce": {"top_k": 15, "n_clusters": "auto"},
        "evaluate": {"truth": str(paths["truth"]), "samples": str(paths["samples"])},
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return root, path, paths


def test_train_fedce_writes_metrics_checkpoints_provenance(setup, capsys):
    root, config, paths = setup
    out = root / "fedce"
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--strategy",
                "fedce",
                "--out",
                str(out),
                "--seed",
                "7",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert KEYS <= set(metrics)
    assert metrics["strategy"] == "fedce" and metrics["seed"] == 7
    assert set(metrics["client_auc"]) == set(paths["clusters"])
    assert metrics["ari"] == pytest.approx(1.0)  # planted clusters recovered from the filters
    assert [h["round"] for h in metrics["history"]] == [1, 2]
    assert 0 <= metrics["auc"] <= 1 and 0 <= metrics["carrier_auc"] <= 1
    assert metrics["history"][-1]["auc"] == pytest.approx(metrics["auc"])
    # train.keep_checkpoints defaults to 1: only the latest round's checkpoint is kept
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["round_002.pt"]
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["seed"] == 7 and provenance["parameters"]["train"]["strategy"] == "fedce"
    assert any(k.endswith("rare_dosages.npz") for k in provenance["inputs"])
    # evaluate recomputes the same metrics from the last checkpoint
    again = root / "evaluated"
    assert (
        main(
            [
                "evaluate",
                "--checkpoint",
                str(out / "checkpoints" / "round_002.pt"),
                "--out",
                str(again),
            ]
        )
        == 0
    )
    recomputed = json.loads((again / "metrics.json").read_text())
    for key in ("auc", "auprc", "carrier_auc", "client_auc", "clusters", "ari", "prs_metrics"):
        assert recomputed[key] == metrics[key], key
    # what PRS papers report, per client and pooled
    assert set(metrics["prs_metrics"]["clients"]) == set(paths["clusters"])
    assert {"r2_nagelkerke", "r2_liability", "or_top_decile"} <= set(
        metrics["prs_metrics"]["pooled"]
    )


def test_train_fedavg_and_rounds_override(setup):
    root, config, _ = setup
    out = root / "fedavg"
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--strategy",
                "fedavg",
                "--out",
                str(out),
                "--seed",
                "7",
                "--rounds",
                "1",
            ]
        )
        == 0
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["clusters"].values()) == {0}
    assert metrics["ari"] is None  # FedAvg forms no clusters: ARI not applicable
    assert len(metrics["history"]) == 1


def test_bad_input_exits_2_with_a_clear_message(setup, capsys, tmp_path):
    root, config, _ = setup
    assert (
        main(["train", "--config", str(config), "--strategy", "fedcee", "--out", str(tmp_path)])
        == 2
    )
    assert "strategy 'fedcee' unknown; choose from" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "--config",
                str(config),
                "--data",
                str(tmp_path / "none"),
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "missing" in capsys.readouterr().err
    assert main(["evaluate", "--checkpoint", str(tmp_path / "x.pt"), "--out", str(tmp_path)]) == 2
    assert "checkpoint not found" in capsys.readouterr().err
