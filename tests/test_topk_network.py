"""Networks on the top-k variants' dosages (issue 29: model.rare_input top_k, burden+top_k).

The run's warm start — the floor's federated Newton fit — also carries the sites' score sums and
chooses the k variants with the largest score statistic under the floor; every network of the
run (server, sites, evaluation, checkpoints) then reads their dosages. Oracle: the floor fitted
by scikit-learn on the pooled training data and each variant's efficient score test computed
there with numpy (its variance a Schur complement of the pooled information, independent of the
sites' sums); the run must choose exactly the k largest, and its network must start with the
floor's predictions.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from _genomic_runs import run_flower, run_inprocess  # noqa: E402
from _score_oracle import pooled_score_test, ranking  # noqa: E402

from rvfedprs.burden import burden_from_config  # noqa: E402
from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.evaluation.selection import split_validation  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint  # noqa: E402
from rvfedprs.federation.seeds import derive_seed, initial_seed  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, training_config  # noqa: E402
from rvfedprs.model import (  # noqa: E402
    model_from_config,
    rare_feature_names,
    set_parameters,
)
from rvfedprs.run import evaluate_checkpoint, train  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.training import to_torch_sparse  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402

K = 6
BURDEN = {"window_bp": 200, "max_maf": 0.05, "weights": "flat"}
# 30-bit quantisation on [-0.25, 0.25]: the floor's and score sums are exact to ~1e-9 per entry
SECAGG_EXACT = {"enabled": True, "quantization_bits": 30, "modulus_bits": 62,
                "clipping_range": 0.25}  # fmt: skip


@pytest.fixture(scope="module")
def federation_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("topk_network")
    return write_federation(root, n_clients=4, n_clusters=2, covariates=("age",))["data"]


@pytest.fixture(scope="module")
def oracle(federation_dir):
    """The pooled floor, the pooled score test's ranking (top K) and the federation."""
    federation = load_federation(federation_dir)
    floor, statistic = pooled_score_test(pool_clients(federation.train))
    order = ranking(statistic)
    assert statistic[order[K - 1]] > statistic[order[K]] * (1 + 1e-6)  # a clear top K
    return {"floor": floor, "top": order[:K], "federation": federation}


def _config(data, strategy="fedavg", rare_input="top_k", **sections):
    train_section = {"data": str(data), "strategy": strategy, "rounds": 2, "seed": 1,
                     "progress": False, "validation_fraction": 0}  # fmt: skip
    model = {"rare_input": rare_input, "top_k": K, "rare_hidden": [16]}
    model.update(sections.pop("model", {}))
    return validate_config({"train": train_section, "model": model, **sections})


def _logits(model_config, parameters, data) -> np.ndarray:
    model = model_from_config(data.rare.shape[1], model_config, initialise=False)
    set_parameters(model, parameters)
    model.eval()
    with torch.no_grad():
        return model(torch.as_tensor(data.prs), to_torch_sparse(data.rare),
                     covariates=torch.as_tensor(data.covariates)).numpy()  # fmt: skip


def test_fedavg_on_top_k_reads_the_pooled_score_tests_top_variants(federation_dir, oracle,
                                                                   tmp_path):  # fmt: skip
    result = train(_config(federation_dir), tmp_path / "run")
    record = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    chosen = record["model_config"]["rare_projection"]["top_k"]
    assert chosen == oracle["top"]  # the pooled score test's top K, largest statistic first
    assert record["floor"]["top_k"] == oracle["top"] and record["floor"]["converged"]
    np.testing.assert_allclose(record["floor"]["coef"], oracle["floor"], atol=1e-6)
    federation = oracle["federation"]
    for client in federation.client_ids:  # one first-layer column per chosen variant
        assert result.strategy.parameters_for(client)["rare.input.weight"].shape == (16, K)
    keys = rare_feature_names(record["model_config"], federation.variant_keys)
    assert keys == [federation.variant_keys[j] for j in oracle["top"]]
    # the network starts at the floor: its logits are the floor's on every test sample
    settings = {"n_rare": federation.n_rare, "model": record["model_config"],
                "floor": record["floor"]}  # fmt: skip
    start = GenomicTask().initial_parameters(settings, initial_seed(1))
    test = pool_clients(federation.test)
    floor_logits = glm_design(test, "floor") @ np.asarray(record["floor"]["coef"])
    np.testing.assert_allclose(_logits(record["model_config"], start, test), floor_logits,
                               atol=1e-4)  # fmt: skip
    # the reported AUC is the trained network's on the chosen variants, as evaluate finds it
    again = evaluate_checkpoint(latest_checkpoint(tmp_path / "run"), tmp_path / "eval")
    assert again["auc"] == pytest.approx(result.metrics["auc"], abs=1e-12)
    assert [e["auc"] for e in result.history][-1] == pytest.approx(result.metrics["auc"])


def test_fedce_on_burdens_and_top_k_trains_and_its_checkpoint_evaluates(federation_dir, oracle,
                                                                       tmp_path):  # fmt: skip
    config = _config(federation_dir, "fedce", "burden+top_k", burden=BURDEN,
                     fedce={"n_clusters": 2, "top_k": 5})  # fmt: skip
    result = train(config, tmp_path / "run")
    record = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    burden = burden_from_config(federation_dir, validate_config({"burden": BURDEN})["burden"])
    projection = record["model_config"]["rare_projection"]
    assert projection["top_k"] == oracle["top"] and projection["features"] == burden.regions
    federation = oracle["federation"]
    model = model_from_config(federation.n_rare, record["model_config"])
    expected = np.hstack([burden.matrix.toarray(), np.eye(federation.n_rare)[:, oracle["top"]]])
    np.testing.assert_array_equal(model.projection.toarray(), expected)
    names = rare_feature_names(record["model_config"], federation.variant_keys)
    assert names == burden.regions + [federation.variant_keys[j] for j in oracle["top"]]
    width = burden.n_regions + K
    for client in federation.client_ids:
        assert result.strategy.parameters_for(client)["rare.input.weight"].shape == (16, width)
    again = evaluate_checkpoint(latest_checkpoint(tmp_path / "run"), tmp_path / "eval")
    assert again["auc"] == pytest.approx(result.metrics["auc"], abs=1e-12)


def test_the_choice_under_secure_aggregation_is_the_same(federation_dir, oracle, tmp_path):
    """The floor's and score sums go through the secure sums; the same top K come out."""
    config = _config(federation_dir, secagg=SECAGG_EXACT)
    result = train(config, tmp_path / "run")
    record = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert record["model_config"]["rare_projection"]["top_k"] == oracle["top"]
    np.testing.assert_allclose(record["floor"]["coef"], oracle["floor"], atol=1e-5)
    assert all("secagg" in entry for entry in result.history)


@pytest.mark.slow
def test_flower_simulation_equals_the_in_process_run(federation_dir, oracle, tmp_path):
    from rvfedprs.federation.flower.superlink import start_local

    config = _config(federation_dir)
    federation = oracle["federation"]
    expected = run_inprocess(
        federation, strategy_from_config("fedavg", config), rounds=2,
        model_config=federation.model_config(config["model"]),
        training=training_config(config, federation), random_seed=1, config=config,
        out=tmp_path / "inprocess",
    )  # fmt: skip
    with start_local(tmp_path / "sim", simulation=True) as link:
        simulated = run_flower("flower-sim", federation=federation,
                               strategy=strategy_from_config("fedavg", config), config=config,
                               rounds=2, random_seed=1, out=tmp_path / "sim-run",
                               superlink=link, timeout=300)  # fmt: skip
    for folder in ("inprocess", "sim-run"):
        record = load_checkpoint(latest_checkpoint(tmp_path / folder))
        assert record["model_config"]["rare_projection"]["top_k"] == oracle["top"]
    got, want = simulated.strategy.parameters, expected.strategy.parameters
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=1e-6, err_msg=name)


def test_a_resumed_run_ends_where_an_uninterrupted_one_does(federation_dir, tmp_path):
    """The warm start runs again on resume and chooses the same variants for the saved model."""

    def config(rounds):
        out = _config(federation_dir)
        out["train"].update(rounds=rounds, keep_checkpoints=0)
        return out

    full = train(config(3), tmp_path / "full")
    train(config(2), tmp_path / "part")
    resumed = train(config(3), tmp_path / "part", resume=True)
    want, got = full.strategy.parameters, resumed.strategy.parameters
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert resumed.metrics["auc"] == full.metrics["auc"]


def test_the_validation_choice_scores_the_network_on_the_chosen_variants(federation_dir,
                                                                         tmp_path):  # fmt: skip
    """train.validation_fraction: every round, and the start (the floor), scored on validation
    with the network the warm start chose, not the configuration's (which has no variants)."""
    config = _config(federation_dir)
    config["train"].update(validation_fraction=0.25, rounds=3)
    result = train(config, tmp_path / "run")
    chosen = result.metrics["selection"]
    assert chosen["selected_round"] in range(4) and len(chosen["validation_aucs"]) == 3
    assert chosen["validation_auc"] == max([chosen["floor_validation_auc"],
                                            *chosen["validation_aucs"]])  # fmt: skip
    record = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert len(record["model_config"]["rare_projection"]["top_k"]) == K
    # round 0 is the network at the floor (fitted on the training split less validation):
    # its validation AUC is the floor's, pooled over the clients' held-out samples
    federation = load_federation(federation_dir)
    _, held = split_validation(federation, 0.25, random_seed=derive_seed(1, "validation"))
    validation = pool_clients(held)
    floor_logits = glm_design(validation, "floor") @ np.asarray(record["floor"]["coef"])
    floor_auc = roc_auc_score(validation.y, floor_logits)
    assert chosen["floor_validation_auc"] == pytest.approx(floor_auc, abs=1e-9)
    # the chosen models are what the metrics and `rvfedprs evaluate` report
    assert record["selected"]["round"] == chosen["selected_round"]
    again = evaluate_checkpoint(latest_checkpoint(tmp_path / "run"), tmp_path / "eval")
    assert again["auc"] == pytest.approx(result.metrics["auc"], abs=1e-12)


def test_bad_top_k_settings_are_refused_by_name(federation_dir, tmp_path):
    no_floor = _config(federation_dir, model={"start_from_floor": False})
    with pytest.raises(ConfigError, match=r"model.rare_input 'top_k' needs "
                       r"model.start_from_floor: true, got false"):  # fmt: skip
        train(no_floor, tmp_path / "a")
    with pytest.raises(ConfigError, match=r"set model.top_k to an integer >= 1, got 0"):
        train(_config(federation_dir, model={"top_k": 0}), tmp_path / "b")
    with pytest.raises(ConfigError, match=r"model.top_k 6 is used only by model.rare_input "
                       r"\['top_k', 'burden\+top_k'\], not 'burden'"):  # fmt: skip
        train(_config(federation_dir, rare_input="burden", burden=BURDEN), tmp_path / "c")
    with pytest.raises(ConfigError, match="model.top_k 500 is more than the federation's 90 rare"):
        train(_config(federation_dir, model={"top_k": 500}), tmp_path / "d")
    with pytest.raises(ConfigError, match="-1"):
        validate_config({"model": {"rare_input": "top_k", "top_k": -1}})
