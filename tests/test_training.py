import numpy as np
import pytest
import scipy.sparse as sp
import torch
from _sgd_reference import dense_sgd
from sklearn.metrics import roc_auc_score

from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, get_parameters
from rvfedprs.training import (
    ClientData,
    LocalTrainingConfig,
    evaluate,
    local_update,
    select_influential,
)

P = 120


def _client(
    n=300, seed=0, causal=(3,), effect=4.0, carried=range(60), carriers=(3, 15), n_covariates=0
):
    """Random carriers of the first 60 variants only; `causal` ones raise the risk."""
    rng = np.random.default_rng(seed)
    carried = np.asarray(list(carried))
    rare = sp.lil_matrix((n, P), dtype=np.float32)
    for j in carried:
        rows = rng.choice(n, size=rng.integers(*carriers), replace=False)
        for r in rows:
            rare[r, j] = 1.0
    rare = rare.tocsr()
    prs = rng.normal(size=n).astype(np.float32)
    liab = 0.8 * prs + effect * np.asarray(rare[:, list(causal)].sum(axis=1)).ravel() - 1.0
    covariates = None
    if n_covariates:
        covariates = rng.normal(size=(n, n_covariates)).astype(np.float32)
        liab = liab + covariates @ np.linspace(0.5, -0.5, n_covariates)
    y = (rng.random(n) < 1 / (1 + np.exp(-liab))).astype(np.float32)
    return ClientData("c0", np.array([f"s{i}" for i in range(n)]), prs, rare, y, covariates)


def _dense_reference(model, data, config, seed, reference=None):
    """Plain dense SGD on the whole model with the proximal term through autograd."""
    return dense_sgd(model, data, config, seed, reference=reference or get_parameters(model))


@pytest.mark.parametrize(
    "cfg",
    [
        LocalTrainingConfig(epochs=2, lr=0.1, momentum=0.9, batch_size=64, proximal_mu=0.0),
        LocalTrainingConfig(
            epochs=2, lr=0.1, momentum=0.5, batch_size=50, proximal_mu=0.5, weight_decay=0.01
        ),
    ],
    ids=["plain-sgd", "prox-and-weight-decay"],
)
@pytest.mark.parametrize("n_covariates", [0, 2], ids=["prs-only", "with-covariates"])
def test_local_update_equals_dense_sgd_reference(cfg, n_covariates):
    data = _client(n_covariates=n_covariates)
    start = TwoPathwayModel(P, n_covariates=n_covariates, random_seed=1)
    # a reference away from the start so the proximal pull acts on every column
    rng = np.random.default_rng(9)
    reference = {
        k: (v + rng.normal(scale=0.1, size=v.shape)).astype(np.float32)
        for k, v in get_parameters(start).items()
    }
    model_a = TwoPathwayModel(P, n_covariates=n_covariates, random_seed=1)
    res = local_update(model_a, data, cfg, reference=reference, random_seed=5)
    model_b = TwoPathwayModel(P, n_covariates=n_covariates, random_seed=1)
    expected = _dense_reference(model_b, data, cfg, 5, reference=reference)
    for name, value in expected.items():
        np.testing.assert_allclose(res.parameters[name], value, rtol=1e-4, atol=2e-5)
    # the non-carried columns moved only when the proximal term / weight decay act
    not_carried = np.arange(60, P)
    moved = not np.allclose(
        res.parameters["rare.input.weight"][:, not_carried],
        get_parameters(start)["rare.input.weight"][:, not_carried],
    )
    assert moved == (cfg.proximal_mu > 0)
    assert res.steps == cfg.epochs * int(np.ceil(data.n_samples / cfg.batch_size))


def test_proximal_gradient_is_analytic():
    """One full-batch step: w1(μ) = w1(0) − lr·μ·(w0 − w_ref) on every parameter."""
    data = _client(n=80)
    w0 = get_parameters(TwoPathwayModel(P, random_seed=2))
    rng = np.random.default_rng(1)
    ref = {k: (v + rng.normal(size=v.shape)).astype(np.float32) for k, v in w0.items()}
    out = {}
    for mu in (0.0, 0.3):
        model = TwoPathwayModel(P, random_seed=2)
        cfg = LocalTrainingConfig(epochs=1, lr=0.2, momentum=0.0, batch_size=80, proximal_mu=mu)
        out[mu] = local_update(model, data, cfg, reference=ref, random_seed=0).parameters
    for name in w0:
        np.testing.assert_allclose(
            out[0.0][name] - out[0.3][name], 0.2 * 0.3 * (w0[name] - ref[name]), atol=1e-5
        )


def test_influence_zero_for_non_carried_and_highest_for_causal():
    data = _client(n=600, causal=(3,), effect=3.0, carriers=(20, 40))
    model = TwoPathwayModel(P, random_seed=0)
    cfg = LocalTrainingConfig(epochs=3, lr=0.05, momentum=0.9, batch_size=200)
    res = local_update(model, data, cfg, influence=True, random_seed=1)
    infl = res.influence
    assert infl.shape == (P,)
    assert np.all(infl[60:] == 0.0)  # exact zero where nobody carries the variant
    assert np.all(infl[:60] > 0)
    # the planted causal variant's carriers share one residual sign, so its column gradient
    # does not cancel: highest influence per carrier, and among the top 3 overall
    carriers = np.asarray((data.rare != 0).sum(axis=0)).ravel()[:60]
    per_carrier = infl[:60] / carriers
    assert int(np.argmax(per_carrier)) == 3
    assert per_carrier[3] > 1.5 * np.median(per_carrier)
    assert 3 in select_influential(infl, top_k=3)
    assert set(select_influential(infl)) == set(range(60))


def test_fixed_seed_is_reproducible_and_seeds_differ():
    data = _client()
    cfg = LocalTrainingConfig(epochs=1, lr=0.1, momentum=0.9, batch_size=32)
    runs = []
    for seed in (11, 11, 12):
        model = TwoPathwayModel(P, dropout=0.3, random_seed=4)
        runs.append(local_update(model, data, cfg, influence=True, random_seed=seed))
    for name in runs[0].parameters:
        assert np.array_equal(runs[0].parameters[name], runs[1].parameters[name])
    assert np.array_equal(runs[0].influence, runs[1].influence)
    assert runs[0].loss == runs[1].loss
    assert not np.array_equal(runs[0].parameters["head.weight"], runs[2].parameters["head.weight"])


def test_training_improves_auc_and_evaluate_matches_forward():
    train, test = _client(n=800, seed=1), _client(n=400, seed=2)
    model = TwoPathwayModel(P, random_seed=0)
    before = roc_auc_score(test.y, evaluate(model, test))
    cfg = LocalTrainingConfig(epochs=15, lr=0.05, momentum=0.9, batch_size=64)
    res = local_update(model, train, cfg, random_seed=0)
    probs = evaluate(model, test, batch_size=64)
    assert probs.shape == (400,) and np.all((probs > 0) & (probs < 1))
    after = roc_auc_score(test.y, probs)
    assert after > 0.7 and after > before + 0.1
    prs, rare, _ = test.batch(sparse=False)
    with torch.no_grad():
        np.testing.assert_allclose(probs, torch.sigmoid(model(prs, rare)).numpy(), atol=1e-6)
    assert 0 < res.loss < 0.7


def test_pos_weight_changes_the_loss():
    data = _client()
    cfg = dict(epochs=1, lr=0.01, momentum=0.0, batch_size=300)
    losses = [
        local_update(
            TwoPathwayModel(P, random_seed=0),
            data,
            LocalTrainingConfig(**cfg, pos_weight=w),
            random_seed=0,
        ).loss
        for w in (None, 3.0)
    ]
    assert losses[1] > losses[0]


def test_client_without_carriers_trains():
    data = _client(carried=[])
    model = TwoPathwayModel(P, random_seed=0)
    w0 = get_parameters(model)["rare.input.weight"]
    res = local_update(
        model, data, LocalTrainingConfig(batch_size=100), influence=True, random_seed=0
    )
    assert np.all(res.influence == 0)
    assert np.array_equal(res.parameters["rare.input.weight"], w0)
    assert select_influential(res.influence, top_k=3).size == 0


def test_select_influential():
    infl = np.array([0.0, 5.0, 1.0, 5.0, 0.2, 0.0, 3.0])
    np.testing.assert_array_equal(select_influential(infl), [1, 3, 6, 2, 4])
    np.testing.assert_array_equal(select_influential(infl, top_k=2), [1, 3])
    np.testing.assert_array_equal(select_influential(infl, relative_threshold=0.5), [1, 3, 6])
    np.testing.assert_array_equal(select_influential(infl, top_k=2, relative_threshold=0.1), [1, 3])
    assert select_influential(np.zeros(4), top_k=2).size == 0
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        select_influential(infl, top_k=0)
    with pytest.raises(ValueError, match="relative_threshold must be in"):
        select_influential(infl, relative_threshold=1.5)
    with pytest.raises(ValueError, match="non-negative"):
        select_influential(-infl)


def test_client_data_validation():
    rare = sp.csr_matrix(np.zeros((3, 4), dtype=np.float32))
    ids = np.array(["a", "b", "c"])
    with pytest.raises(InputDataError, match="client c9: y has 2 entries for 3 samples"):
        ClientData("c9", ids, np.zeros(3), rare, np.zeros(2))
    with pytest.raises(InputDataError, match=r"phenotype must be 0/1, found \[2.\]"):
        ClientData("c9", ids, np.zeros(3), rare, np.array([0, 1, 2]))
    with pytest.raises(InputDataError, match="must be a scipy sparse matrix"):
        ClientData("c9", ids, np.zeros(3), np.zeros((3, 4)), np.zeros(3))
    data = ClientData("c9", ids, np.zeros(3), rare, np.zeros(3))
    with pytest.raises(InputDataError, match="4 rare variants, model expects 5"):
        local_update(TwoPathwayModel(5), data, LocalTrainingConfig(), random_seed=0)
    with pytest.raises(ValueError, match="LocalTrainingConfig.lr = -1"):
        LocalTrainingConfig(lr=-1)
