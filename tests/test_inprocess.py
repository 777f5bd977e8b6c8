import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import torch
from _federation_fixtures import write_federation
from _genomic_runs import run_inprocess
from sklearn.linear_model import LogisticRegression

from rvfedprs.bloom import BloomSpec, contains
from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.genomic.client import ClientContext, fit_client
from rvfedprs.genomic.data import combine_moments, load_federation, pool_clients, prs_moments
from rvfedprs.genomic.task import initial_parameters
from rvfedprs.model import TwoPathwayModel, linear_parameters, set_parameters
from rvfedprs.strategies import FitInstruction, get_strategy
from rvfedprs.training import LocalTrainingConfig, local_update

MODEL = {"common_hidden": [4], "rare_hidden": [8], "dropout": 0.0}
TRAIN = LocalTrainingConfig(epochs=1, lr=0.05, momentum=0.9, batch_size=32)


@pytest.fixture(scope="module")
def fed_paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("fed")
    return write_federation(
        root, n_clients=4, n_clusters=2, samples_per_client=120, private_per_cluster=15, n_shared=10
    )


@pytest.fixture(scope="module")
def federation(fed_paths):
    return load_federation(fed_paths["data"])


def _equal(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_federated_prs_standardisation_matches_pooled_numpy(fed_paths, federation):
    raw = []
    for c in federation.client_ids:
        s = pd.read_parquet(fed_paths["data"] / "clients" / c / "samples.parquet")
        raw.append(s.loc[s["split"] == "train", "prs"].to_numpy())
    pooled = np.concatenate(raw)
    mean, sd = combine_moments(prs_moments(x) for x in raw)
    assert mean == pytest.approx(pooled.mean()) and sd == pytest.approx(pooled.std())
    train_prs = np.concatenate([federation.train[c].prs for c in federation.client_ids])
    assert train_prs.mean() == pytest.approx(0, abs=1e-5)
    assert train_prs.std() == pytest.approx(1, abs=1e-4)
    n_test = sum(federation.test[c].n_samples for c in federation.client_ids)
    assert len(pooled) + n_test == 4 * 120


def test_covariates_standardised_with_federated_moments(tmp_path):
    paths = write_federation(
        tmp_path, n_clients=3, samples_per_client=80, covariates=("age", "pc1")
    )
    federation = load_federation(paths["data"])
    assert federation.covariate_names == ("age", "pc1")
    raw = []
    for c in federation.client_ids:
        s = pd.read_parquet(paths["data"] / "clients" / c / "samples.parquet")
        raw.append(s.loc[s["split"] == "train", ["age", "pc1"]].to_numpy())
    pooled = np.concatenate(raw)
    np.testing.assert_allclose(federation.covariate_mean, pooled.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(federation.covariate_sd, pooled.std(axis=0), rtol=1e-12)
    train = np.concatenate([federation.train[c].covariates for c in federation.client_ids])
    np.testing.assert_allclose(train.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(train.std(axis=0), 1, atol=1e-4)
    assert federation.model_config({})["n_covariates"] == 2
    # a covariate the model uses: training on it moves the backbone's covariate weights
    config = federation.model_config({"common_hidden": [4], "rare_hidden": [8]})
    result = run_inprocess(
        federation,
        get_strategy("fedavg"),
        rounds=1,
        model_config=config,
        training=LocalTrainingConfig(epochs=1, lr=0.1, momentum=0.0, batch_size=32),
        random_seed=3,
    )
    w = result.strategy.parameters_for(federation.client_ids[0])["common.fc0.weight"]
    w0 = initial_parameters(federation.n_rare, config, 3)["common.fc0.weight"]
    assert w.shape == w0.shape == (4, 3)
    assert not np.allclose(w[:, 1:], w0[:, 1:])  # the covariate inputs were trained


def test_data_errors_name_the_value(fed_paths, tmp_path):
    import shutil

    data = tmp_path / "results"
    shutil.copytree(fed_paths["data"], data)
    shutil.rmtree(data / "clients" / "client03")
    with pytest.raises(
        InputDataError, match="client 'client03' listed in .*clients.tsv has no folder"
    ):
        load_federation(data)
    shutil.copytree(fed_paths["data"] / "clients" / "client03", data / "clients" / "client03")
    x = sp.load_npz(data / "clients" / "client01" / "rare_dosages.npz")
    sp.save_npz(
        data / "clients" / "client01" / "rare_dosages.npz", sp.hstack([x, x[:, :1]]).tocsr()
    )
    with pytest.raises(
        InputDataError,
        match="client 'client01': .* has 41 rare-variant columns but rare_variants.tsv lists 40",
    ):
        load_federation(data)
    sp.save_npz(data / "clients" / "client01" / "rare_dosages.npz", x)
    samples = pd.read_parquet(data / "clients" / "client02" / "samples.parquet")
    samples.loc[samples["split"] == "train", "phenotype"] = 0
    samples.to_parquet(data / "clients" / "client02" / "samples.parquet")
    with pytest.raises(
        InputDataError, match="client 'client02' has no cases in its training split"
    ):
        load_federation(data)
    with pytest.raises(InputDataError, match="missing .*rare_variants.tsv"):
        load_federation(tmp_path / "nowhere")


def test_fit_client_applies_proximal_mu_and_returns_bloom_bits(federation):
    w0 = initial_parameters(federation.n_rare, MODEL, 0)
    context = ClientContext(federation.train["client00"], federation.variant_keys, MODEL, TRAIN)
    plain = fit_client(FitInstruction(w0, {}), context, random_seed=5)
    again = fit_client(FitInstruction(w0, {}), context, random_seed=5)
    _equal(plain.parameters, again.parameters)
    assert plain.bloom_bits is None and plain.n_samples == federation.train["client00"].n_samples
    prox = fit_client(FitInstruction(w0, {"proximal_mu": 5.0}), context, random_seed=5)
    d_plain = np.linalg.norm(plain.parameters["common.fc0.weight"] - w0["common.fc0.weight"])
    d_prox = np.linalg.norm(prox.parameters["common.fc0.weight"] - w0["common.fc0.weight"])
    assert d_prox < d_plain  # the proximal term pulls towards w^t
    config = {
        "bloom": {"capacity": 100, "error_rate": 0.01},
        "top_k": 5,
        "relative_threshold": None,
    }
    result = fit_client(FitInstruction(w0, config), context, random_seed=5)
    spec = BloomSpec(100, 0.01)
    model = TwoPathwayModel(federation.n_rare, common_hidden=(4,), rare_hidden=(8,))
    set_parameters(model, w0)
    infl = local_update(model, context.data, TRAIN, influence=True, random_seed=5).influence
    top = np.argsort(-infl, kind="stable")[:5]
    assert all(contains(result.bloom_bits, federation.variant_keys[j], spec) for j in top)
    never = np.flatnonzero(infl == 0)
    assert never.size > 0  # the other cluster's private variants: nobody here carries them
    hits = sum(contains(result.bloom_bits, federation.variant_keys[j], spec) for j in never)
    assert hits <= 2  # only false positives


def test_fedavg_with_one_client_equals_local_training(federation):
    one = type(federation)(
        federation.data_dir,
        federation.variant_keys,
        {"client00": federation.train["client00"]},
        {"client00": federation.test["client00"]},
        federation.prs_mean,
        federation.prs_sd,
    )
    run = run_inprocess(
        one, get_strategy("fedavg"), rounds=2, model_config=MODEL, training=TRAIN, random_seed=3
    )
    model = TwoPathwayModel(federation.n_rare, common_hidden=(4,), rare_hidden=(8,))
    # w^0: the initial network started at the floor, the unpenalised logistic fit on the PRS
    data = federation.train["client00"]
    floor = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12)
    floor.fit(data.prs.reshape(-1, 1).astype(np.float64), data.y.astype(int))
    start = linear_parameters(
        initial_parameters(federation.n_rare, MODEL, 3),
        intercept=float(floor.intercept_[0]),
        common_coef=floor.coef_.ravel(),
        trainable=True,
    )
    set_parameters(model, start)
    for rnd in (1, 2):
        local_update(
            model, federation.train["client00"], TRAIN, random_seed=derive_seed(3, rnd, "client00")
        )
    expected = {k: v.detach().numpy() for k, v in model.named_parameters()}
    for k, v in run.strategy.parameters_for("client00").items():
        np.testing.assert_allclose(v, expected[k], rtol=1e-6, atol=1e-7)


def test_deterministic_for_a_seed_and_resume_equals_uninterrupted(federation, tmp_path):
    kw = {"rounds": 3, "model_config": MODEL, "training": TRAIN, "random_seed": 11}
    full = run_inprocess(
        federation, get_strategy("fedce", top_k=10, n_clusters=2), out=tmp_path / "a", **kw
    )
    again = run_inprocess(federation, get_strategy("fedce", top_k=10, n_clusters=2), **kw)
    for c in federation.client_ids:
        _equal(full.strategy.parameters_for(c), again.strategy.parameters_for(c))
    assert [p.name for p in full.checkpoints] == ["round_001.pt", "round_002.pt", "round_003.pt"]
    # interrupted after two rounds, keeping only the latest checkpoint, then resumed
    part = tmp_path / "b"
    cut = run_inprocess(
        federation,
        get_strategy("fedce", top_k=10, n_clusters=2),
        out=part,
        keep_checkpoints=1,
        **{**kw, "rounds": 2},
    )
    assert [p.name for p in cut.checkpoints] == ["round_002.pt"]
    assert sorted(p.name for p in (part / "checkpoints").iterdir()) == ["round_002.pt"]
    assert latest_checkpoint(part).name == "round_002.pt"
    resumed = run_inprocess(
        federation, get_strategy("fedce", top_k=10, n_clusters=2), out=part, resume=True, **kw
    )
    assert [h["round"] for h in resumed.history] == [1, 2, 3]
    for c in federation.client_ids:
        _equal(full.strategy.parameters_for(c), resumed.strategy.parameters_for(c))
    other = run_inprocess(
        federation, get_strategy("fedce", top_k=10, n_clusters=2), **{**kw, "random_seed": 12}
    )
    assert not np.array_equal(
        other.strategy.parameters_for("client00")["head.weight"],
        full.strategy.parameters_for("client00")["head.weight"],
    )
    with pytest.raises(InputDataError, match="run with seed 11, not 12"):
        run_inprocess(
            federation,
            get_strategy("fedce", top_k=10),
            out=part,
            resume=True,
            **{**kw, "random_seed": 12},
        )


def test_checkpoint_loads_with_weights_only_and_holds_the_ensemble(federation, tmp_path):
    run = run_inprocess(
        federation,
        get_strategy("fedce", top_k=10, n_clusters=2),
        rounds=1,
        model_config=MODEL,
        training=TRAIN,
        random_seed=1,
        out=tmp_path,
    )
    raw = torch.load(run.checkpoints[0], weights_only=True)
    assert raw["round"] == 1 and raw["strategy_name"] == "fedce"
    record = load_checkpoint(run.checkpoints[0])
    state = record["strategy_state"]
    assert set(state["specialists"]) == {"0", "1"}
    assert all(k.startswith("common.") for k in state["backbone"])
    assert isinstance(state["backbone"]["common.fc0.weight"], np.ndarray)
    assert record["clusters"] == run.strategy.clusters()
    with pytest.raises(InputDataError, match="checkpoint not found"):
        load_checkpoint(tmp_path / "nope.pt")


def test_centralized_trains_one_pooled_client_and_local_keeps_models(federation):
    pooled = pool_clients(federation.train)
    assert pooled.n_samples == sum(d.n_samples for d in federation.train.values())
    central = run_inprocess(
        federation,
        get_strategy("centralized"),
        rounds=1,
        model_config=MODEL,
        training=TRAIN,
        random_seed=2,
    )
    assert central.strategy.client_ids == ["pooled"]
    _equal(central.strategy.parameters_for("client00"), central.strategy.parameters_for("client03"))
    local = run_inprocess(
        federation,
        get_strategy("local"),
        rounds=1,
        model_config=MODEL,
        training=TRAIN,
        random_seed=2,
    )
    assert not np.array_equal(
        local.strategy.parameters_for("client00")["head.weight"],
        local.strategy.parameters_for("client01")["head.weight"],
    )
