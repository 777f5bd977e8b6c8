"""Tuning trials train with the privacy settings of the run they choose for (issue 28)."""

import json

import numpy as np
import pandas as pd
import pytest

import rvfedprs.plan
import rvfedprs.protocol.tuning as tuning
import rvfedprs.run
from rvfedprs.config import deep_merge, validate_config
from rvfedprs.genomic.data import load_federation
from rvfedprs.genomic.task import GenomicTask
from rvfedprs.protocol import three_way_split, tune
from rvfedprs.protocol.grids import LOGISTIC, configuration_overrides
from rvfedprs.protocol.tuning import PLAIN, privacy_settings
from rvfedprs.run import train
from tests._federation_fixtures import write_federation

ROUNDS = 3


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    root = tmp_path_factory.mktemp("tuning_privacy")
    info = write_federation(root, n_clients=4, n_clusters=2, samples_per_client=120)
    key = root / "bloom.key"
    key.write_text("a shared secret of the four clients\n")
    base = validate_config({
        "train": {"progress": False, "data": str(info["data"]), "rounds": ROUNDS},
        "model": {"rare_hidden": [8]},
        "secagg": {"enabled": True, "min_clients": 3},
        "dp": {"enabled": True, "noise_multiplier": 1.5, "batch_size": 32},
        "fedce": {"bloom_key_file": str(key)},
    })  # fmt: skip
    return {**info, "key": key, "base": base}


@pytest.fixture(scope="module")
def data(cohort):
    return three_way_split(load_federation(cohort["data"]), 0.25, random_seed=3)


def _spy(monkeypatch, module) -> list[dict]:
    """Record what every run plan ``module`` runs (:func:`rvfedprs.plan.run`) trains with."""
    calls, real = [], rvfedprs.plan.run

    def spy(plan, **kwargs):
        calls.append({
            "strategy": plan.strategy.name,
            "secagg": plan.job_config()["secagg"] if plan.job_config() else None,
            "dp": plan.privacy.dp,
            "bloom_key": plan.privacy.bloom_key,
            "batch_size": GenomicTask().plan_settings(plan)["training"]["batch_size"],
        })  # fmt: skip
        return real(plan, **kwargs)

    monkeypatch.setattr(module, "run", spy)
    return calls


def test_a_trial_and_the_run_it_chooses_for_carry_the_same_privacy(
    cohort, data, tmp_path, monkeypatch
):
    base = cohort["base"]
    trials = _spy(monkeypatch, tuning)
    tuned = tune(data, "fedce", out=tmp_path / "tuning", base_config=base, data_key="c",
                 max_rounds=ROUNDS, patience=None, random_seed=1, budget=2)  # fmt: skip
    chosen = tuned.chosen
    assert len(trials) == 2
    record = json.loads((tmp_path / "tuning" / "fedce" / chosen.key / "trial.json").read_text())
    assert record["privacy"]["secagg"]["enabled"] is True
    assert record["privacy"]["dp"]["noise_multiplier"] == 1.5
    assert record["privacy"]["dp"]["batch_size"] == 32
    assert record["privacy"]["bloom_key_file"] == str(cohort["key"])
    assert record["epsilon"] > 0  # the clients' accountants were stepped: DP-SGD ran
    table = pd.read_csv(tmp_path / "tuning" / "fedce" / "tuning.tsv", sep="\t")
    assert all(json.loads(p)["dp"] is not None for p in table["privacy"])

    # the run it chooses for: `rvfedprs train` on the base configuration with the choice
    final = validate_config(deep_merge(base, configuration_overrides(chosen.configuration)))
    final["train"].update(strategy="fedce", seed=1)
    runs = _spy(monkeypatch, rvfedprs.run)
    result = train(final, tmp_path / "final")
    provenance = json.loads((tmp_path / "final" / "provenance.json").read_text())
    assert privacy_settings(provenance["parameters"]) == record["privacy"]
    assert result.metrics["epsilon"] > 0
    # what was handed to the engine: the same secure aggregation, DP, key and DP batch size
    trial_call = trials[[t.key for t in tuned.trials].index(chosen.key)]
    assert runs == [trial_call]
    assert trial_call["bloom_key"] == cohort["key"].read_bytes().strip()
    assert trial_call["secagg"]["enabled"] and trial_call["dp"] is not None


def test_a_record_without_privacy_is_rerun_not_reused(cohort, data, tmp_path, caplog):
    def run():
        return tune(data, "fedavg", out=tmp_path, base_config=cohort["base"], data_key="c",
                    max_rounds=2, patience=None, random_seed=1, budget=1)  # fmt: skip

    first = run().chosen
    path = tmp_path / "fedavg" / first.key / "trial.json"
    old = json.loads(path.read_text())
    del old["privacy"], old["epsilon"]  # as written before trials carried privacy settings
    path.write_text(json.dumps(old))
    again = run().chosen
    assert "re-running" in caplog.text
    assert json.loads(path.read_text())["privacy"] == first.privacy != PLAIN
    assert again.validation_auc == pytest.approx(first.validation_auc)
    assert np.isfinite(again.epsilon)


def test_plain_trials_record_no_privacy_and_logistic_records_what_it_left_out(
    cohort, data, tmp_path
):
    plain = validate_config({"train": {"progress": False}, "model": {"rare_hidden": [8]}})
    trial, _ = tuning.run_trial(data, "fedavg", {"train.lr": 0.2}, base_config=plain,
                                max_rounds=1, patience=None, random_seed=1)  # fmt: skip
    assert trial.privacy == PLAIN and np.isnan(trial.epsilon)
    tuned = tune(data, LOGISTIC, out=tmp_path, base_config=cohort["base"], data_key="c",
                 max_rounds=1, patience=None, random_seed=1, budget=2)  # fmt: skip
    assert tuned.chosen.privacy == {**PLAIN, "not_applied": ["bloom_key_file", "dp", "secagg"]}
    table = pd.read_csv(tmp_path / LOGISTIC / "tuning.tsv", sep="\t")
    assert all("not_applied" in json.loads(p) for p in table["privacy"])
