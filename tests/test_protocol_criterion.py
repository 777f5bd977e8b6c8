"""The protocol's selection criterion (issue 29.6): validation AUC or validation log-loss."""

import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import log_loss, roc_auc_score

from rvfedprs.config import validate_config
from rvfedprs.evaluation.selection import BestRound, check_criterion, is_better
from rvfedprs.genomic.data import load_federation
from rvfedprs.protocol import run_trial, three_way_split, tune
from rvfedprs.protocol.analysis import best_baselines
from rvfedprs.protocol.tuning import Trial, trial_key
from tests._federation_fixtures import write_federation

BASE = validate_config({"train": {"progress": False}, "model": {"rare_hidden": [8]}})


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    info = write_federation(tmp_path_factory.mktemp("criterion"), n_clients=4, n_clusters=2,
                            samples_per_client=150, covariates=("age",))  # fmt: skip
    return three_way_split(load_federation(info["data"]), 0.25, random_seed=3)


def _pooled(data, predictions):
    clients = sorted(data.validation)
    y = np.concatenate([data.validation[c].y for c in clients])
    return y, np.concatenate([predictions[c] for c in clients])


def test_a_trial_chosen_by_log_loss_keeps_the_round_of_the_lowest_validation_log_loss(data):
    # lr 0.5: rounds that overshoot, so the log-loss moves and its minimum is a real choice
    trial, fitted = run_trial(data, "fedavg", {"train.lr": 0.5}, base_config=BASE, max_rounds=4,
                              patience=None, random_seed=1, criterion="log_loss",
                              keep_predictions=True)  # fmt: skip
    rounds = sorted(fitted.validation_predictions)
    assert rounds == list(range(5))  # the start (the floor fit) and four rounds
    # the oracle: sklearn's log-loss and AUC of every round's kept validation probabilities
    losses, aucs = [], []
    for r in rounds:
        y, p = _pooled(data, fitted.validation_predictions[r])
        losses.append(log_loss(y, p, labels=[0, 1]))
        aucs.append(roc_auc_score(y, p))
    np.testing.assert_allclose(trial.validation_log_losses, losses[1:], rtol=1e-9)
    np.testing.assert_allclose(trial.validation_aucs, aucs[1:], rtol=1e-12)
    best = int(np.argmin(losses))
    assert trial.criterion == "log_loss" and trial.best_round == best
    assert trial.validation_log_loss == pytest.approx(losses[best], rel=1e-9)
    assert trial.validation_auc == pytest.approx(aucs[best], rel=1e-12)
    assert trial.score == pytest.approx(-losses[best])
    # the kept models are that round's
    y, p = _pooled(data, fitted.predict(data.validation))
    np.testing.assert_allclose(p, _pooled(data, fitted.validation_predictions[best])[1])
    # the same run chosen on AUC keeps the round of the highest AUC (round 0 wins ties)
    by_auc, _ = run_trial(data, "fedavg", {"train.lr": 0.5}, base_config=BASE, max_rounds=4,
                          patience=None, random_seed=1)  # fmt: skip
    assert by_auc.best_round == int(np.argmax(aucs))
    assert by_auc.validation_log_losses == pytest.approx(trial.validation_log_losses)


def test_early_stopping_on_log_loss_counts_rounds_without_a_lower_loss(data):
    trial, _ = run_trial(data, "fedavg", {"train.lr": 0.5}, base_config=BASE, max_rounds=30,
                         patience=2, random_seed=1, criterion="log_loss")  # fmt: skip
    assert trial.rounds_run < 30 and trial.rounds_run == trial.best_round + 2
    kept = trial.validation_log_loss
    after = trial.validation_log_losses[trial.best_round :]
    assert all(loss >= kept for loss in after)


def test_tune_on_log_loss_chooses_the_lowest_and_keeps_trials_apart(data, tmp_path):
    common = {"out": tmp_path, "base_config": BASE, "data_key": "cohort", "max_rounds": 4,
              "patience": 2, "random_seed": 1, "budget": 3}  # fmt: skip
    by_loss = tune(data, "fedavg", criterion="log_loss", **common)
    assert by_loss.chosen.validation_log_loss == min(t.validation_log_loss for t in by_loss.trials)
    by_auc = tune(data, "fedavg", **common)
    assert by_auc.chosen.validation_auc == max(t.validation_auc for t in by_auc.trials)
    # separate records: the AUC keys are the keys trials had before the criterion existed
    assert not {t.key for t in by_loss.trials} & {t.key for t in by_auc.trials}
    assert len(list(tmp_path.rglob("trial.json"))) == 6
    for t in by_auc.trials:
        payload = {"method": "fedavg", "configuration": t.configuration, "base": BASE,
                   "data": "cohort", "max_rounds": 4, "patience": 2, "seed": 1}  # fmt: skip
        assert t.key == trial_key(payload)
    record = json.loads((tmp_path / "fedavg" / by_loss.chosen.key / "trial.json").read_text())
    assert record["criterion"] == "log_loss" and len(record["validation_log_losses"]) >= 1
    table = pd.read_csv(tmp_path / "fedavg" / "tuning.tsv", sep="\t")  # the last tune's
    assert set(table["criterion"]) == {"auc"} and table["validation_log_loss"].notna().all()
    again = tune(data, "fedavg", criterion="log_loss", refit=False, **common)  # from records
    assert again.chosen.key == by_loss.chosen.key and again.chosen.criterion == "log_loss"


def test_an_unknown_criterion_is_named(data, tmp_path):
    with pytest.raises(ValueError, match=r"unknown selection criterion 'brier'.*'log_loss'"):
        check_criterion("brier")
    with pytest.raises(ValueError, match=r"'carrier_auc'"):
        run_trial(data, "fedavg", {}, base_config=BASE, max_rounds=1, patience=None,
                  random_seed=1, criterion="carrier_auc")  # fmt: skip
    with pytest.raises(ValueError, match=r"'AUC'"):
        tune(data, "fedavg", out=tmp_path, base_config=BASE, data_key="x", max_rounds=1,
             patience=None, random_seed=1, budget=1, criterion="AUC")  # fmt: skip
    with pytest.raises(ValueError, match=r"'loss'"):
        BestRound(data.validation, data.n_rare, {}, criterion="loss")
    assert not list(tmp_path.iterdir())  # nothing trained


def test_is_better_orients_each_criterion_and_never_prefers_nan():
    assert is_better("auc", 0.6, 0.5) and not is_better("auc", 0.5, 0.6)
    assert is_better("log_loss", 0.5, 0.6) and not is_better("log_loss", 0.6, 0.5)
    assert not is_better("auc", 0.6, 0.6)  # the earliest is kept on a tie
    assert not is_better("auc", float("nan"), 0.5) and is_better("log_loss", 0.7, float("nan"))


def test_old_records_read_back_as_auc_trials():
    old = {"method": "fedavg", "configuration": {"train.lr": 0.1}, "key": "k",
           "validation_auc": 0.61, "best_round": 2, "rounds_run": 4,
           "validation_aucs": [0.5, 0.61, 0.6, 0.59]}  # fmt: skip
    trial = Trial.from_json(old)
    assert trial.criterion == "auc" and trial.score == 0.61
    assert np.isnan(trial.validation_log_loss) and trial.validation_log_losses == []
    again = Trial.from_json(json.loads(json.dumps(trial.to_json())))  # NaN written as null
    assert again.criterion == "auc" and again.validation_aucs == old["validation_aucs"]
    assert np.isnan(again.validation_log_loss)


def test_best_baselines_choose_on_the_column_asked():
    validation = pd.DataFrame({"scenario": "s", "cohort": "c00", "method": ["fedavg", "local"],
                               "validation_auc": [0.60, 0.58],
                               "selection_score": [-0.70, -0.65]})  # fmt: skip
    assert best_baselines(validation, ["fedavg", "local"])["method"].tolist() == ["fedavg"]
    by_loss = best_baselines(validation, ["fedavg", "local"], score="selection_score")
    assert by_loss["method"].tolist() == ["local"]
    assert by_loss["selection_score"].tolist() == [-0.65]
