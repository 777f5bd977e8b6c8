"""The network's collapsed rare inputs (rvfedprs/model.py): burdens, chosen dosages, or both.

The projection R is fixed; the model takes dosages, applies R before its first layer, and must
give exactly what a plain network on the features ``a R`` gives — in the forward pass on dense
and sparse batches, and in local training (which runs on that twin).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.burden import burden_from_config  # noqa: E402
from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.model import (  # noqa: E402
    TwoPathwayModel,
    get_parameters,
    model_from_config,
    rare_projection,
    set_parameters,
)
from rvfedprs.run import evaluate_checkpoint, train  # noqa: E402
from rvfedprs.training import (  # noqa: E402
    ClientData,
    LocalTrainingConfig,
    local_update,
    to_torch_sparse,
)

P = 40


def _burden():
    """Three regions over the first 30 variants, uneven weights; variants 30..39 in none."""
    rows = np.arange(30)
    return sp.csr_matrix((1.0 + rows / 10.0, (rows, rows // 10)), shape=(P, 3))


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    rare = sp.random(n, P, density=0.08, format="csr", random_state=seed, dtype=np.float32)
    rare.data[:] = rng.integers(1, 3, size=rare.nnz)
    prs = rng.normal(size=n).astype(np.float32)
    y = (rng.random(n) < 1 / (1 + np.exp(-prs - rare[:, :10].sum(axis=1).A1))).astype(np.float32)
    return ClientData("c0", np.arange(n).astype(str), prs, rare, y)


def test_projection_is_the_burdens_then_the_chosen_columns():
    burden, top = _burden(), [35, 2, 17]
    r = rare_projection("burden+top_k", P, burden=burden, top=top).toarray()
    np.testing.assert_array_equal(r, np.hstack([burden.toarray(), np.eye(P)[:, top]]))
    assert rare_projection("dosages", P) is None
    assert rare_projection("top_k", P, top=top).shape == (P, 3)
    with pytest.raises(ValueError, match="rare input 'genes' unknown"):
        rare_projection("genes", P)
    with pytest.raises(ValueError, match="'burden' needs a burden map of 40 rows, got None"):
        rare_projection("burden", P)
    with pytest.raises(ValueError, match=r"'top_k' needs the chosen variants' columns .*\[3, 40\]"):
        rare_projection("top_k", P, top=[3, 40])


@pytest.mark.parametrize("rare_input", ["burden", "top_k", "burden+top_k"])
def test_model_on_collapsed_inputs_equals_a_network_on_the_features(rare_input):
    projection = rare_projection(rare_input, P, burden=_burden(), top=[35, 2, 17])
    model = TwoPathwayModel(P, rare_hidden=(8, 4), random_seed=3, projection=projection)
    assert model.n_rare == P and model.n_features == projection.shape[1]
    assert get_parameters(model)["rare.input.weight"].shape == (8, projection.shape[1])
    twin = model.feature_model()
    data = _data()
    prs = torch.from_numpy(data.prs)
    with torch.no_grad():
        expected = twin(prs, to_torch_sparse(model.rare_features(data.rare))).numpy()
        dense = model(prs, torch.from_numpy(data.rare.toarray())).numpy()
        coo = model(prs, to_torch_sparse(data.rare)).numpy()
        csr = model(prs, torch.from_numpy(data.rare.toarray()).to_sparse_csr()).numpy()
    np.testing.assert_allclose(dense, expected, atol=1e-5)
    np.testing.assert_allclose(coo, expected, atol=1e-5)
    np.testing.assert_allclose(csr, expected, atol=1e-5)
    with pytest.raises(ValueError, match="rare input has 3 columns, the model expects 40"):
        model(prs, torch.zeros(len(prs), 3))


def test_local_training_on_collapsed_inputs_is_the_feature_models():
    projection = rare_projection("burden+top_k", P, burden=_burden(), top=[35, 2])
    model = TwoPathwayModel(P, rare_hidden=(8,), random_seed=1, projection=projection)
    start = get_parameters(model)
    twin = model.feature_model()
    data = _data()
    config = LocalTrainingConfig(epochs=2, lr=0.1, batch_size=32)
    result = local_update(model, data, config, influence=True, random_seed=7)
    features = ClientData("c0", data.sample_ids, data.prs, model.rare_features(data.rare), data.y)
    expected = local_update(twin, features, config, influence=True, random_seed=7)
    for name, value in expected.parameters.items():
        np.testing.assert_array_equal(result.parameters[name], value)
        np.testing.assert_array_equal(get_parameters(model)[name], value)  # trained in place
    assert not np.array_equal(result.parameters["rare.input.weight"], start["rare.input.weight"])
    assert result.influence.shape == (5,) and (result.influence > 0).any()  # per feature


def test_model_config_builds_the_projection_from_the_run_choice():
    burden = sp.coo_matrix(_burden())
    chosen = {
        "burden": {"rows": burden.row.tolist(), "cols": burden.col.tolist(),
                   "weights": burden.data.tolist(), "shape": [P, 3]},
        "top_k": [5],
    }  # fmt: skip
    model = model_from_config(P, {"rare_input": "burden+top_k", "rare_projection": chosen})
    np.testing.assert_array_equal(
        model.projection.toarray(), np.hstack([_burden().toarray(), np.eye(P)[:, [5]]])
    )
    assert model_from_config(P, {}).projection is None  # the default reads the dosages
    with pytest.raises(ValueError, match="model.rare_input 'burden' needs the run's rare_proj"):
        model_from_config(P, {"rare_input": "burden"})


# --- runs: the networks train on the federation's burdens (model.rare_input: burden) ---------
@pytest.fixture(scope="module")
def federation_dir(tmp_path_factory):
    return write_federation(tmp_path_factory.mktemp("rare_inputs"), n_clients=4, n_clusters=2)


BURDEN = {"window_bp": 100, "max_maf": 0.05}


def _config(data, strategy, **sections):
    # validation_fraction 0: the reported models are the last round's, which the test reads
    train = {
        "data": str(data),
        "strategy": strategy,
        "rounds": 2,
        "seed": 1,
        "progress": False,
        "validation_fraction": 0,
    }
    return validate_config({"train": train, "model": {"rare_input": "burden"},
                            "burden": BURDEN, **sections})  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fedavg", "fedce"])
def test_networks_train_on_burdens_end_to_end(federation_dir, tmp_path, strategy):
    """Server, sites, evaluation and a checkpoint's evaluation all read the burdens."""
    config = _config(federation_dir["data"], strategy, fedce={"n_clusters": 2})
    result = train(config, tmp_path / "run")
    burden = burden_from_config(federation_dir["data"],
                                validate_config({"burden": BURDEN})["burden"])  # fmt: skip
    excluded = pd.read_csv(tmp_path / "run" / "burden_exclusions.tsv", sep="\t", dtype=str)
    assert excluded.values.tolist() == burden.excluded[["variant_key", "reason"]].values.tolist()
    record = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    chosen = record["model_config"]["rare_projection"]
    assert chosen["features"] == burden.regions
    federation = load_federation(federation_dir["data"])
    model = model_from_config(federation.n_rare, federation.model_config(record["model_config"]))
    np.testing.assert_array_equal(model.projection.toarray(), burden.matrix.toarray())
    # the trained first layer has one column per region, and the reported test AUC is that of
    # the network reading the burdens of the test dosages
    scores, labels = [], []
    for client in federation.client_ids:
        parameters = result.strategy.parameters_for(client)
        assert parameters["rare.input.weight"].shape[1] == burden.n_regions
        set_parameters(model, parameters)
        test = federation.test[client]
        with torch.no_grad():
            scores.append(model(torch.from_numpy(test.prs), to_torch_sparse(test.rare)).numpy())
        labels.append(test.y)
    auc = roc_auc_score(np.concatenate(labels), np.concatenate(scores))
    assert result.metrics["auc"] == pytest.approx(auc, abs=1e-6)
    again = evaluate_checkpoint(latest_checkpoint(tmp_path / "run"), tmp_path / "eval")
    assert again["auc"] == pytest.approx(result.metrics["auc"], abs=1e-9)


def test_the_glms_refuse_collapsed_network_inputs(federation_dir, tmp_path):
    with pytest.raises(ConfigError, match="model.rare_input must be dosages .*got 'burden'"):
        train(_config(federation_dir["data"], "fedglm"), tmp_path)
