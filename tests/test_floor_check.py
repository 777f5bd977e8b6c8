"""simulations/rvfedprs_paper/floor_check.py: chosen models against the PRS-only floor."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from _federation_fixtures import write_federation
from sklearn.metrics import roc_auc_score

from rvfedprs.cli import main as cli_main
from rvfedprs.exceptions import InputDataError

SCRIPT = Path(__file__).resolve().parents[1] / "simulations" / "rvfedprs_paper" / "floor_check.py"


def _module():
    spec = importlib.util.spec_from_file_location("rvfedprs_paper_floor_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


floor_check = _module()


def _selection(chosen: float, floor: float | None, picked: int = 3) -> dict:
    return {
        "selection": {
            "selected_round": picked,
            "validation_auc": chosen,
            "floor_validation_auc": floor,
            "validation_aucs": [0.5, 0.55, chosen, 0.5],
        }
    }


def test_validation_row_flags_a_model_below_the_floor_and_the_markdown_says_so():
    ok = floor_check.validation_row("fedavg", _selection(0.61, 0.60))
    bad = floor_check.validation_row("fedce", _selection(0.58, 0.60))
    assert not ok["below_floor"] and ok["validation_delta"] == pytest.approx(0.01)
    assert bad["below_floor"] and bad["rounds"] == 4
    extra = {"test_auc": 0.6, "test_auc_se": 0.01, "floor_test_auc": 0.6,
             "floor_test_auc_se": 0.01, "test_delta": 0.0, "test_delta_low": -0.01,
             "test_delta_high": 0.01, "test_delta_p": 1.0, "wall_s": 1.0}  # fmt: skip
    text = floor_check.to_markdown(pd.DataFrame([{**ok, **extra}, {**bad, **extra}]))
    assert "**fedce is below the floor on validation** (0.5800 < 0.6000)" in text
    assert "fedavg is below" not in text


def test_validation_row_refuses_a_run_without_a_validation_choice_or_floor():
    with pytest.raises(InputDataError, match="fedavg: metrics.json has no 'selection'"):
        floor_check.validation_row("fedavg", {"auc": 0.6})
    with pytest.raises(InputDataError, match="local: the floor was not scored"):
        floor_check.validation_row("local", _selection(0.6, None))


@pytest.mark.slow
def test_a_trained_and_evaluated_run_is_checked_against_the_floor(tmp_path, monkeypatch):
    paths = write_federation(tmp_path, n_clients=3, samples_per_client=200)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"train": {"validation_fraction": 0.2, "seed": 3}}))
    monkeypatch.chdir(tmp_path)
    run_dir = Path("results/train/fedavg")
    train = ["train", "--config", str(config), "--strategy", "fedavg", "--rounds", "2",
             "--data", str(paths["data"]), "--out", str(run_dir), "--no-progress"]  # fmt: skip
    assert cli_main(train) == 0
    checkpoint = sorted((run_dir / "checkpoints").glob("round_*.pt"))[-1]
    assert cli_main(["evaluate", "--checkpoint", str(checkpoint),
                     "--out", "results/evaluate/fedavg"]) == 0  # fmt: skip
    assert floor_check.main(["--workdir", ".", "--strategies", "fedavg", "--out", "check"]) == 0
    row = pd.read_csv("check/floor_check.tsv", sep="\t").iloc[0]
    assert row["validation_auc"] >= row["floor_validation_auc"]
    predictions = pd.read_parquet("results/evaluate/fedavg/predictions.parquet")
    assert row["test_auc"] == pytest.approx(roc_auc_score(predictions["y"], predictions["p"]),
                                            abs=1e-4)  # fmt: skip
    assert row["test_delta"] == pytest.approx(row["test_auc"] - row["floor_test_auc"], abs=1e-4)
    assert np.isfinite(row["floor_test_auc_se"]) and row["floor_test_auc"] > 0.5
    assert (
        "No chosen model is below the floor on validation."
        in Path("check/floor_check.md").read_text()
    )
