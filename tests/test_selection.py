"""Validation-based round selection (rvfedprs/evaluation/selection.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _genomic_runs import run_inprocess  # noqa: E402

from rvfedprs.evaluation import predict_clients  # noqa: E402
from rvfedprs.evaluation.selection import BestRound, split_validation  # noqa: E402
from rvfedprs.exceptions import InputDataError  # noqa: E402
from rvfedprs.genomic.client import build_model  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.training import LocalTrainingConfig  # noqa: E402

MODEL = {"common_hidden": [4], "rare_hidden": [8], "dropout": 0.0}
TRAINING = LocalTrainingConfig(epochs=1, lr=0.2, momentum=0.9, batch_size=16)


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    paths = write_federation(
        tmp_path_factory.mktemp("selection"), n_clients=3, n_clusters=3, samples_per_client=120
    )
    return load_federation(paths["data"])


def test_split_is_stratified_disjoint_seeded_and_loses_nobody(federation):
    fit, validation = split_validation(federation, 0.25, random_seed=5)
    again, _ = split_validation(federation, 0.25, random_seed=5)
    other, _ = split_validation(federation, 0.25, random_seed=6)
    for c, data in federation.train.items():
        held, kept = validation[c], fit.train[c]
        assert set(held.sample_ids).isdisjoint(kept.sample_ids)
        assert sorted([*held.sample_ids, *kept.sample_ids]) == sorted(data.sample_ids)
        for label in (0, 1):
            n = int((data.y == label).sum())
            assert int((held.y == label).sum()) == round(0.25 * n)
        # rows travel together: a held sample keeps its own PRS, phenotype and dosages
        index = {s: i for i, s in enumerate(data.sample_ids)}
        rows = [index[s] for s in held.sample_ids]
        np.testing.assert_array_equal(held.prs, data.prs[rows])
        np.testing.assert_array_equal(held.y, data.y[rows])
        assert (held.rare != data.rare[rows]).nnz == 0
        np.testing.assert_array_equal(again.train[c].sample_ids, kept.sample_ids)
    assert any(
        not np.array_equal(other.train[c].sample_ids, fit.train[c].sample_ids)
        for c in federation.client_ids
    )
    assert fit.test is federation.test


def test_bad_fraction_and_too_few_cases_are_named(federation):
    with pytest.raises(InputDataError, match="validation fraction must be in"):
        split_validation(federation, 0.7, random_seed=0)
    too_few = r"client \w+: \d+ training (cases|controls) cannot give"
    with pytest.raises(InputDataError, match=too_few):
        split_validation(federation, 0.001, random_seed=0)


def test_best_round_keeps_the_models_of_the_best_validation_auc(federation):
    fit, validation = split_validation(federation, 0.2, random_seed=1)
    config = {"fedavg": {}, "train": {}}
    tracker = BestRound(validation, fit.n_rare, MODEL)
    snapshots = []

    def evaluate_round(strategy, server_round):
        row = tracker(strategy, server_round)
        snapshots.append({c: dict(strategy.parameters_for(c)) for c in fit.client_ids})
        return row

    result = run_inprocess(fit, strategy_from_config("centralized", config), rounds=6,
                           model_config=MODEL, training=TRAINING, random_seed=3,
                           evaluate_round=evaluate_round)  # fmt: skip
    # oracle: sklearn AUC of every round's models on the pooled validation samples
    model = build_model(fit.n_rare, MODEL)
    y = np.concatenate([validation[c].y for c in sorted(validation)])
    aucs = []
    for snap in snapshots:
        p = predict_clients(snap.__getitem__, validation, model)
        aucs.append(roc_auc_score(y, np.concatenate([p[c] for c in sorted(validation)])))
    np.testing.assert_allclose(tracker.values, aucs, rtol=1e-12)
    assert [h["validation_auc"] for h in result.history] == tracker.values
    best = int(np.argmax(aucs))
    assert tracker.best_round == best + 1 and tracker.best_value == pytest.approx(aucs[best])
    for c in fit.client_ids:
        for name, value in snapshots[best][c].items():
            np.testing.assert_array_equal(tracker.parameters_for(c)[name], value)
    # the kept models are copies, not views that later rounds overwrite
    if best + 1 < len(snapshots):
        last = result.strategy.parameters_for(fit.client_ids[0])
        assert any(
            not np.array_equal(tracker.parameters_for(fit.client_ids[0])[k], last[k]) for k in last
        )


def test_the_floor_is_a_candidate_and_wins_when_no_round_beats_it(tmp_path):
    """The engine shows BestRound the starting model (the floor); a bad run returns it."""
    from sklearn.linear_model import LogisticRegression

    from rvfedprs.genomic.data import pool_clients

    # a strong PRS and no rare effect: nothing to learn beyond the floor
    paths = write_federation(tmp_path, n_clients=3, n_clusters=3, samples_per_client=150,
                             prs_effect=1.5, rare_effect=0.0)  # fmt: skip
    federation = load_federation(paths["data"])
    fit, validation = split_validation(federation, 0.2, random_seed=1)
    tracker = BestRound(validation, fit.n_rare, MODEL)
    diverging = LocalTrainingConfig(epochs=3, lr=40.0, momentum=0.9, batch_size=8)
    run_inprocess(fit, strategy_from_config("fedavg", {"fedavg": {}, "train": {}}), rounds=3,
                  model_config=MODEL, training=diverging, random_seed=3, evaluate_round=tracker,
                  config={"train": {"update_norm_factor": None}})  # fmt: skip  # diverges
    pooled, held = pool_clients(fit.train), pool_clients(validation)
    floor = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12)
    floor.fit(pooled.prs.reshape(-1, 1).astype(np.float64), pooled.y.astype(int))
    expected = roc_auc_score(held.y, floor.decision_function(held.prs.reshape(-1, 1)))
    assert tracker.start_value == pytest.approx(expected, abs=1e-9)
    assert len(tracker.values) == 3 and max(tracker.values) < tracker.start_value
    assert tracker.best_round == 0 and tracker.best_value == tracker.start_value
    kept = predict_clients(tracker.parameters_for, validation, build_model(fit.n_rare, MODEL))
    score = np.concatenate([kept[c] for c in sorted(validation)])
    assert roc_auc_score(held.y, score) == pytest.approx(expected, abs=1e-9)


def test_train_reports_the_round_chosen_on_validation_or_the_floor(tmp_path):
    from rvfedprs.config import validate_config
    from rvfedprs.run import train

    paths = write_federation(tmp_path, n_clients=3, n_clusters=3, samples_per_client=150,
                             prs_effect=1.5, rare_effect=0.0)  # fmt: skip
    section = {"data": str(paths["data"]), "strategy": "fedavg", "rounds": 3, "seed": 2,
               "progress": False, "validation_fraction": 0.25, "lr": 40.0, "local_epochs": 3,
               "batch_size": 8, "update_norm_factor": None}  # fmt: skip  # diverges on purpose
    metrics = train(validate_config({"train": section}), tmp_path / "run").metrics
    chosen = metrics["selection"]
    assert chosen["selected_round"] == 0 and chosen["chose_floor"]
    assert len(chosen["validation_aucs"]) == 3
    assert max(chosen["validation_aucs"]) < chosen["floor_validation_auc"]
    # the reported model is the floor: on a PRS-only federation it ranks as the PRS does
    assert metrics["auc"] == pytest.approx(metrics["prs_only_auc"], abs=1e-12)
    assert [e["round"] for e in metrics["history"]] == [1, 2, 3]


def test_evaluate_scores_the_models_chosen_on_validation(tmp_path):
    """The final checkpoint keeps the chosen models: `rvfedprs evaluate` reports those."""
    from rvfedprs.config import validate_config
    from rvfedprs.federation.checkpoints import latest_checkpoint
    from rvfedprs.run import evaluate_checkpoint, train

    paths = write_federation(tmp_path, n_clients=3, n_clusters=3, samples_per_client=150)
    section = {"data": str(paths["data"]), "strategy": "local", "rounds": 4, "seed": 2,
               "progress": False, "validation_fraction": 0.25, "lr": 0.5}  # fmt: skip
    trained = train(validate_config({"train": section}), tmp_path / "run").metrics
    again = evaluate_checkpoint(latest_checkpoint(tmp_path / "run"),
                                tmp_path / "eval")  # fmt: skip
    assert again["round"] == trained["selection"]["selected_round"]
    assert again["selection"]["selected_round"] == trained["selection"]["selected_round"]
    assert again["auc"] == pytest.approx(trained["auc"], abs=1e-12)
    assert again["client_auc"] == pytest.approx(trained["client_auc"], abs=1e-12)
