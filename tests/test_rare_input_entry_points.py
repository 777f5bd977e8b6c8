"""Every entry point takes every ``model.rare_input`` (dosages, burden, top_k, burden+top_k).

A burden network reads the burden map of ``train.data``; a top-k one reads the dosages of the
variants the run's warm start (the floor's federated Newton rounds) chooses, so whatever scores
or probes a network must build it from the run settings after that warm start. Here: a tuning
trial's early stopping, the distance probes (euclidean, ot; jaccard refuses a top-k input by
name) and, slow, a consortium study. Oracle of the start: every network begins at the floor,
so its first validation predictions are the pooled unpenalised PRS + covariates logistic fit's
(scikit-learn on the trial's training samples).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs import similarity  # noqa: E402
from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.genomic.distance import genomic_distance  # noqa: E402
from rvfedprs.model import model_from_config, set_parameters  # noqa: E402
from rvfedprs.protocol import run_trial, three_way_split  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.similarity.ot import section_options  # noqa: E402
from rvfedprs.training import to_torch_sparse  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402

K = 5
BURDEN = {"window_bp": 200, "max_maf": 0.05, "weights": "flat"}


@pytest.fixture(scope="module")
def federation_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("rare_inputs")
    return write_federation(root, n_clients=4, n_clusters=2, samples_per_client=150,
                            covariates=("age",))["data"]  # fmt: skip


@pytest.fixture(scope="module")
def protocol_data(federation_dir):
    return three_way_split(load_federation(federation_dir), 0.25, random_seed=3)


def _config(data, rare_input: str, **sections) -> dict:
    model = {"rare_input": rare_input, "rare_hidden": [8]}
    if "top_k" in rare_input:
        model["top_k"] = K
    return validate_config({"train": {"validation_fraction": 0, "data": str(data),
                                      "progress": False, "seed": 1},
                            "model": model, "burden": BURDEN, **sections})  # fmt: skip


@pytest.mark.parametrize("rare_input", ["burden", "top_k"])
def test_a_tuning_trial_stops_early_on_the_network_of_its_rare_input(
    federation_dir, protocol_data, rare_input
):
    data = protocol_data
    trial, fitted = run_trial(data, "fedavg", {"train.lr": 0.1},
                              base_config=_config(federation_dir, rare_input), max_rounds=2,
                              patience=None, random_seed=1, keep_predictions=True)  # fmt: skip
    assert trial.rounds_run == 2 and len(trial.validation_aucs) == 2
    # round 0, the start, is the floor fitted on the trial's training samples
    fit = pool_clients(data.fit.train)
    floor = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    floor.fit(glm_design(fit, "floor").toarray()[:, 1:], fit.y.astype(int))
    coef = np.concatenate([floor.intercept_, floor.coef_.ravel()])
    start = fitted.validation_predictions[0]
    for client, held in data.validation.items():
        expected = expit(glm_design(held, "floor") @ coef)
        np.testing.assert_allclose(start[client], expected, atol=1e-4, err_msg=client)
    # the fitted predictor serves the kept round's models through the same network
    best = fitted.validation_predictions[trial.best_round]
    again = fitted.predict(data.validation)
    for client in data.client_ids:
        np.testing.assert_array_equal(again[client], best[client], err_msg=client)


@pytest.fixture(scope="module")
def top_k_round(federation_dir, tmp_path_factory):
    """One FedAvg round of `rvfedprs train` on top-k variants: what the distance probe trains."""
    config = _config(federation_dir, "top_k")
    config["train"].update(strategy="fedavg", rounds=1)
    out = tmp_path_factory.mktemp("top_k_round")
    result = train(config, out)
    record = load_checkpoint(latest_checkpoint(out))
    return config, result, record["model_config"]


@pytest.mark.parametrize("method", ["euclidean", "ot"])
def test_the_distance_probe_reads_the_variants_its_round_chose(federation_dir, top_k_round,
                                                               method):  # fmt: skip
    """The probe is the run's first FedAvg round; its embeddings are of the top-k network."""
    config, trained, model_config = top_k_round
    federation = load_federation(federation_dir)
    matrix, ids = genomic_distance(config, federation, method, seed=1)
    assert len(model_config["rare_projection"]["top_k"]) == K
    model = model_from_config(federation.n_rare, model_config, initialise=False)
    set_parameters(model, trained.strategy.parameters_for(ids[0]))
    model.eval()
    embeddings, labels = [], []
    with torch.no_grad():
        for client in ids:
            data = federation.train[client]
            h = model.embed(torch.as_tensor(data.prs), to_torch_sparse(data.rare),
                            covariates=torch.as_tensor(data.covariates))  # fmt: skip
            embeddings.append(h.numpy().astype(np.float64))
            labels.append(data.y.astype(np.int64))
    options = config["distance"]
    if method == "euclidean":
        expected = similarity.compute(
            "euclidean", embeddings, n_components=options["n_components"], random_seed=1
        )
    else:
        expected = similarity.compute("ot", embeddings, labels, **section_options(options),
                                      random_seed=1)  # fmt: skip
    np.testing.assert_allclose(matrix, expected, rtol=0, atol=1e-9)
    assert matrix.shape == (4, 4) and np.all(np.isfinite(matrix))


@pytest.mark.parametrize("rare_input", ["top_k", "burden+top_k"])
def test_jaccard_refuses_a_top_k_input_by_name(federation_dir, rare_input):
    federation = load_federation(federation_dir)
    config = _config(federation_dir, rare_input)
    with pytest.raises(ConfigError, match=rf"distance method 'jaccard' cannot probe a network "
                       rf"with model.rare_input '{re.escape(rare_input)}'.*chosen by the run's "
                       "federated floor fit"):  # fmt: skip
        genomic_distance(config, federation, "jaccard", seed=1)


@pytest.mark.slow  # the cohort's per-site folders come from the Snakemake workflow
def test_a_study_trains_and_evaluates_a_top_k_network(study_inputs, tmp_path):
    """The sites evaluate every round, and at the end, the network of the chosen variants."""
    from test_snakemake import SMALL_COHORT

    from rvfedprs.config import load_config
    from rvfedprs.study.run import run_study_config

    out = tmp_path / "study"
    config = load_config(None, overrides={
        **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
        "train": {"rounds": 2, "seed": 3, "compare": ["fedavg"], "progress": False,
                  "validation_fraction": 0},
        "model": {"rare_input": "top_k", "top_k": K, "rare_hidden": [8]},
        "evaluate": {"truth": None, "samples": None},
        "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out)},
    })  # fmt: skip
    summary = run_study_config(config, scoring_file=study_inputs / "cohort" / "scores" /
                               "PGS_sim.txt.gz", samplesheet=study_inputs / "sites" /
                               "samplesheet.tsv")  # fmt: skip
    assert summary["left_out"] == {} and summary["runs"]["fedavg"]["evaluation_failures"] == {}
    record = load_checkpoint(latest_checkpoint(out / "train" / "fedavg"))
    chosen = record["model_config"]["rare_projection"]["top_k"]
    assert len(chosen) == K and record["floor"]["top_k"] == chosen
    assert record["strategy_state"]["parameters"]["rare.input.weight"].shape == (8, K)
    metrics = json.loads((out / "train" / "fedavg" / "metrics.json").read_text())
    assert [e["round"] for e in metrics["history"]] == [1, 2]
    # the final evaluation scores the last round's models with the same network
    assert metrics["auc"] == metrics["history"][-1]["auc"] == summary["runs"]["fedavg"]["auc"]
    assert 0 < metrics["auc"] < 1
