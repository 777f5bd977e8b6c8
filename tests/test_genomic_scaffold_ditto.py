"""SCAFFOLD and Ditto on the genomic client: sparse local SGD vs dense SGD, engine runs."""

import numpy as np
import pytest
import scipy.sparse as sp
from _federation_fixtures import write_federation
from _genomic_runs import run_inprocess
from _sgd_reference import dense_sgd

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.seeds import client_seed
from rvfedprs.genomic.client import ClientContext, fit_client
from rvfedprs.genomic.data import load_federation
from rvfedprs.genomic.task import initial_parameters
from rvfedprs.model import TwoPathwayModel, get_parameters, set_parameters
from rvfedprs.strategies import FitInstruction, get_strategy
from rvfedprs.strategies.ditto import LAMBDA_KEY, PERSONAL_KEY, PERSONAL_PREFIX
from rvfedprs.strategies.scaffold import CORRECTION_KEY
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update

P = 80
# random w^0 (no floor start): the round-1 oracle below starts from initial_parameters
MODEL = {"common_hidden": [4], "rare_hidden": [8], "dropout": 0.0, "start_from_floor": False}
SGD = LocalTrainingConfig(epochs=1, lr=0.05, momentum=0.0, batch_size=32)
TRAIN = LocalTrainingConfig(epochs=1, lr=0.05, momentum=0.0, batch_size=32)


def _client(n=150, seed=0, carried=40):
    """Carriers of the first ``carried`` variants only (the rest are never carried)."""
    rng = np.random.default_rng(seed)
    rare = sp.lil_matrix((n, P), dtype=np.float32)
    for j in range(carried):
        rare[rng.choice(n, size=rng.integers(3, 12), replace=False), j] = 1.0
    rare = rare.tocsr()
    prs = rng.normal(size=n).astype(np.float32)
    liab = 0.8 * prs + 3.0 * np.asarray(rare[:, [2]].todense()).ravel() - 1.0
    y = (rng.random(n) < 1 / (1 + np.exp(-liab))).astype(np.float32)
    return ClientData("c0", np.array([f"s{i}" for i in range(n)]), prs, rare, y)


def _noise_like(params, scale, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.normal(scale=scale, size=v.shape).astype(np.float32) for k, v in params.items()}


@pytest.mark.parametrize(
    "cfg",
    [
        LocalTrainingConfig(epochs=2, lr=0.1, momentum=0.0, batch_size=40),
        LocalTrainingConfig(
            epochs=2, lr=0.1, momentum=0.5, batch_size=50, proximal_mu=0.3, weight_decay=0.01
        ),
    ],
    ids=["plain-sgd", "momentum-prox-decay"],
)
def test_corrected_local_update_equals_dense_sgd_with_correction(cfg):
    data = _client()
    w0 = get_parameters(TwoPathwayModel(P, random_seed=1))
    correction = _noise_like(w0, 0.05, seed=3)
    reference = {k: v + _noise_like({k: v}, 0.1, seed=4)[k] for k, v in w0.items()}
    model = TwoPathwayModel(P, random_seed=1)
    res = local_update(model, data, cfg, reference=reference, correction=correction, random_seed=7)
    dense = TwoPathwayModel(P, random_seed=1)
    expected = dense_sgd(dense, data, cfg, 7, reference=reference, correction=correction)
    for name, value in expected.items():
        np.testing.assert_allclose(res.parameters[name], value, rtol=1e-4, atol=3e-5, err_msg=name)
    # the correction moved the uncarried columns, which no data gradient reaches
    uncarried = np.arange(40, P)
    w_in = "rare.input.weight"
    assert not np.allclose(res.parameters[w_in][:, uncarried], w0[w_in][:, uncarried])
    if cfg.momentum == 0 and cfg.proximal_mu == 0 and cfg.weight_decay == 0:
        drift = w0[w_in][:, uncarried] - cfg.lr * res.steps * correction[w_in][:, uncarried]
        np.testing.assert_allclose(res.parameters[w_in][:, uncarried], drift, atol=1e-6)


def test_zero_correction_is_plain_sgd():
    data = _client(seed=1)
    w0 = get_parameters(TwoPathwayModel(P, random_seed=2))
    zeros = {k: np.zeros_like(v) for k, v in w0.items()}
    a = local_update(TwoPathwayModel(P, random_seed=2), data, SGD, correction=zeros, random_seed=1)
    b = local_update(TwoPathwayModel(P, random_seed=2), data, SGD, random_seed=1)
    for name in w0:
        np.testing.assert_array_equal(a.parameters[name], b.parameters[name])


def test_bad_correction_is_named():
    data = _client()
    model = TwoPathwayModel(P, random_seed=0)
    w0 = get_parameters(model)
    bad = dict(w0)
    bad["head.bias"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(ValueError, match="correction 'head.bias' has shape"):
        local_update(model, data, SGD, correction=bad, random_seed=0)
    with pytest.raises(ValueError, match="correction tensor names differ"):
        local_update(model, data, SGD, correction={"head.bias": w0["head.bias"]}, random_seed=0)


def _context(data, training=SGD):
    return ClientContext(
        data=data,
        variant_keys=[f"1:{j}:A:G" for j in range(P)],
        model_config=MODEL,
        training=training,
    )


def _w0():
    model = TwoPathwayModel(P, common_hidden=(4,), rare_hidden=(8,), dropout=0.0, random_seed=5)
    return get_parameters(model)


def test_fit_client_applies_the_scaffold_correction_and_reports_steps():
    data = _client(seed=2)
    w0 = _w0()
    correction = _noise_like(w0, 0.02, seed=8)
    res = fit_client(
        FitInstruction(w0, {CORRECTION_KEY: correction}), _context(data), random_seed=11
    )
    model = TwoPathwayModel(P, common_hidden=(4,), rare_hidden=(8,), random_seed=0)
    set_parameters(model, w0)
    direct = local_update(model, data, SGD, correction=correction, random_seed=11)
    for name in w0:
        np.testing.assert_array_equal(res.parameters[name], direct.parameters[name])
    assert res.metrics["local_steps"] == direct.steps == int(np.ceil(150 / 32))
    assert res.metrics["lr"] == SGD.lr


def test_fit_client_refuses_scaffold_with_momentum():
    data = _client()
    w0 = _w0()
    ctx = _context(data, LocalTrainingConfig(momentum=0.9, batch_size=32))
    zeros = {k: np.zeros_like(v) for k, v in w0.items()}
    with pytest.raises(ConfigError, match=r"momentum is 0\.9.*train\.momentum: 0"):
        fit_client(FitInstruction(w0, {CORRECTION_KEY: zeros}), ctx, random_seed=0)


def test_fit_client_ditto_personal_step():
    data = _client(seed=3)
    w_global = _w0()
    personal = {k: v + _noise_like({k: v}, 0.2, seed=9)[k] for k, v in w_global.items()}
    lam = 0.5
    res = fit_client(
        FitInstruction(w_global, {PERSONAL_KEY: personal, LAMBDA_KEY: lam}),
        _context(data),
        random_seed=21,
    )
    plain = fit_client(FitInstruction(w_global, {}), _context(data), random_seed=21)
    own = {k[len(PERSONAL_PREFIX) :]: v for k, v in res.parameters.items() if "/" in k}
    assert sorted(own) == sorted(w_global)
    for name in w_global:  # the global update is untouched by the personal step
        np.testing.assert_array_equal(res.parameters[name], plain.parameters[name])
    # oracle: dense SGD from v_k on f_k(v) + λ/2‖v − w^t‖², no correction
    zeros = {k: np.zeros_like(v) for k, v in w_global.items()}
    dense = TwoPathwayModel(P, common_hidden=(4,), rare_hidden=(8,), random_seed=0)
    set_parameters(dense, personal)
    cfg = LocalTrainingConfig(epochs=1, lr=SGD.lr, momentum=0.0, batch_size=32, proximal_mu=lam)
    expected = dense_sgd(dense, data, cfg, 22, reference=w_global, correction=zeros)
    for name, value in expected.items():
        np.testing.assert_allclose(own[name], value, rtol=1e-4, atol=3e-5, err_msg=name)
    # the proximal pull moved v_k's uncarried columns towards w^t
    w_in = "rare.input.weight"
    gap_before = np.abs(personal[w_in][:, 40:] - w_global[w_in][:, 40:]).sum()
    gap_after = np.abs(own[w_in][:, 40:] - w_global[w_in][:, 40:]).sum()
    assert gap_after < gap_before
    assert np.isfinite(res.metrics["personal_loss"])


def test_ditto_personal_without_lambda_is_an_error():
    data = _client()
    w0 = _w0()
    with pytest.raises(ValueError, match="ditto_lambda"):
        fit_client(FitInstruction(w0, {PERSONAL_KEY: w0}), _context(data), random_seed=0)


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    root = tmp_path_factory.mktemp("fed")
    paths = write_federation(
        root, n_clients=4, n_clusters=2, samples_per_client=120, private_per_cluster=15, n_shared=10
    )
    return load_federation(paths["data"])


def _run(federation, name, rounds, **options):
    return run_inprocess(
        federation,
        get_strategy(name, **options),
        rounds=rounds,
        model_config=MODEL,
        training=TRAIN,
        random_seed=3,
    ).strategy


def test_scaffold_two_rounds_inprocess(federation):
    scaffold1 = _run(federation, "scaffold", 1)
    scaffold2 = _run(federation, "scaffold", 2)
    fedavg2 = _run(federation, "fedavg", 2)
    names = list(scaffold2.parameters)
    # round 1 oracle: c = c_k = 0, so x¹ = x⁰ + η_g·mean_k(y_k − x⁰) = uniform mean of the y_k
    w0 = initial_parameters(federation.n_rare, MODEL, 3)
    ys = [
        fit_client(
            FitInstruction(w0, {}),
            ClientContext(
                data=federation.train[c],
                variant_keys=federation.variant_keys,
                model_config=MODEL,
                training=TRAIN,
            ),
            random_seed=client_seed(3, 1, c),
        ).parameters
        for c in federation.client_ids
    ]
    for n in names:
        expected = np.mean([y[n].astype(np.float64) for y in ys], axis=0)
        np.testing.assert_allclose(scaffold1.parameters[n], expected, rtol=1e-5, atol=1e-6)
    # the control variates are learnt: every c_k non-zero, and c = mean_k c_k (full participation)
    for c in federation.client_ids:
        assert any(np.abs(scaffold2.c_clients[c][n]).max() > 0 for n in names)
    for n in names:
        mean_ck = np.mean([scaffold2.c_clients[c][n] for c in federation.client_ids], axis=0)
        np.testing.assert_allclose(scaffold2.c[n], mean_ck, atol=1e-9)
        assert np.all(np.isfinite(scaffold2.parameters[n]))
    # round 2 used the corrections: the global model differs from FedAvg's
    assert any(
        not np.allclose(scaffold2.parameters[n], fedavg2.parameters[n], atol=1e-6) for n in names
    )


def test_ditto_two_rounds_inprocess(federation):
    ditto = _run(federation, "ditto", 2, lam=0.1)
    fedavg = _run(federation, "fedavg", 2)
    names = list(fedavg.parameters)
    # Ditto's global model follows FedAvg exactly (same seeds)
    for n in names:
        np.testing.assert_allclose(ditto.global_parameters()[n], fedavg.parameters[n], atol=1e-6)
    # every client has its own personal model, distinct from the global one and each other
    personal = [ditto.parameters_for(c) for c in federation.client_ids]
    for p in personal:
        assert sorted(p) == sorted(names)
        assert not np.allclose(p["head.weight"], fedavg.parameters["head.weight"])
    assert not np.allclose(personal[0]["head.weight"], personal[1]["head.weight"])
