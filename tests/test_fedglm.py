"""The exact federated GLM and the floor every network starts from (issue 29, SPEC §4 and §7).

Oracle: scikit-learn's ``LogisticRegression`` (newton-cholesky, tight tolerance) on the pooled
training data, with ``C = 1/l2`` (``C = inf`` unpenalised) for ``penalize: all``; for the
default ``penalize: rare`` (the floor's coefficients unpenalised), which scikit-learn cannot
express, scipy's trust-region Newton on the pooled penalised log-loss written out here with
numpy. The federated Newton fit must equal it to 1e-6 in the clear and under secure
aggregation, and the network parameters it is served as must predict what the oracle predicts.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.burden import burden_from_config  # noqa: E402
from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.exceptions import ConfigError  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.model import (  # noqa: E402
    TwoPathwayModel,
    get_parameters,
    linear_parameters,
    model_from_config,
    set_parameters,
)
from rvfedprs.outcomes import BINARY  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.strategies import get_strategy  # noqa: E402
from rvfedprs.training import to_torch_sparse  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402

logistic_sums = BINARY.glm_sums

# 30-bit quantisation on [-0.25, 0.25] (the statistics are far inside it): the sums are exact to
# ~1e-9 per entry, the coefficients to ~3e-7
SECAGG_EXACT = {
    "enabled": True,
    "quantization_bits": 30,
    "modulus_bits": 62,
    "clipping_range": 0.25,
}


@pytest.fixture(scope="module")
def federation_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("glm")
    return write_federation(root, n_clients=4, n_clusters=2, covariates=("age", "sex"))["data"]


def _sklearn(pooled, features: str, l2: float, burden=None) -> np.ndarray:
    x = glm_design(pooled, features, burden if features == "burden" else None)[:, 1:]
    c = np.inf if l2 == 0 else 1.0 / l2
    model = LogisticRegression(C=c, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    model.fit(x, pooled.y.astype(int))
    return np.concatenate([model.intercept_, model.coef_.ravel()])


def _scipy_oracle(x, y: np.ndarray, penalty: np.ndarray) -> np.ndarray:
    """argmin of Σ log(1 + e^{xβ}) − y·xβ + ½ Σ λ_j β_j² (x with its intercept column)."""
    x = sp.csr_matrix(x)

    def objective(beta):
        z = x @ beta
        return float(np.sum(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(penalty * beta**2))

    def gradient(beta):
        return x.T @ (expit(x @ beta) - y) + penalty * beta

    def hessian(beta):
        p = expit(x @ beta)
        return (x.T @ sp.diags(p * (1 - p)) @ x).toarray() + np.diag(penalty)

    fit = minimize(objective, np.zeros(x.shape[1]), jac=gradient, hess=hessian,
                   method="trust-exact", options={"gtol": 1e-9})  # fmt: skip
    beta = fit.x
    for _ in range(3):  # trust-exact may stop at float precision short of gtol: polish
        beta = beta - np.linalg.solve(hessian(beta), gradient(beta))
    assert np.abs(gradient(beta)).max() < 1e-9, fit.message
    return beta


def _rare_penalty(width: int, n_floor: int, l2: float) -> np.ndarray:
    """λ on the rare columns only (the first ``n_floor`` — intercept, PRS, covariates — free)."""
    penalty = np.full(width, l2)
    penalty[:n_floor] = 0.0
    return penalty


def _train(data: Path, out: Path, **sections):
    config = validate_config(
        {
            "train": {
                "validation_fraction": 0,
                "data": str(data),
                "strategy": "fedglm",
                "rounds": 30,
                "seed": 3,
                "progress": False,
            },
            **sections,
        }
    )
    return train(config, out)


def _network_logits(parameters, data) -> np.ndarray:
    model = TwoPathwayModel(data.rare.shape[1], n_covariates=data.n_covariates, initialise=False)
    set_parameters(model, parameters)
    model.eval()
    with torch.no_grad():
        out = model(
            torch.as_tensor(data.prs),
            torch.as_tensor(data.rare.toarray()),
            covariates=torch.as_tensor(data.covariates),
        )
    return out.numpy().astype(np.float64)


def _collapsed_network_logits(coef, features, burden, top, data) -> np.ndarray:
    """A network whose specialist reads ``features`` (model.rare_input), started from a GLM's
    coefficients on them (its rare coefficients are the first layer's, one per feature)."""
    chosen = {"burden": None if burden is None else burden.to_config(), "top_k": top}
    config = {"rare_input": features, "rare_projection": chosen, "n_covariates": data.n_covariates}
    model = model_from_config(data.rare.shape[1], config, random_seed=2)
    width = 2 + data.n_covariates
    start = linear_parameters(get_parameters(model), intercept=float(coef[0]),
                              common_coef=coef[1:width], rare_coef=coef[width:])  # fmt: skip
    set_parameters(model, start)
    model.eval()
    with torch.no_grad():
        out = model(torch.as_tensor(data.prs), to_torch_sparse(data.rare),
                    covariates=torch.as_tensor(data.covariates))  # fmt: skip
    return out.numpy().astype(np.float64)


def test_logistic_sums_match_autograd():
    rng = np.random.default_rng(0)
    x = sp.random(50, 6, density=0.4, random_state=1, format="csr") + sp.eye(50, 6)
    y = (rng.random(50) < 0.3).astype(float)
    beta = rng.normal(size=6)
    loss, gradient, hessian = logistic_sums(x, y, beta)
    b = torch.tensor(beta, requires_grad=True)
    xt = torch.tensor(x.toarray())
    f = torch.nn.functional.binary_cross_entropy_with_logits(
        xt @ b, torch.tensor(y), reduction="sum"
    )
    (g,) = torch.autograd.grad(f, b, create_graph=True)
    h = torch.stack([torch.autograd.grad(g[i], b, retain_graph=True)[0] for i in range(6)])
    assert loss == pytest.approx(float(f), rel=1e-12)
    np.testing.assert_allclose(gradient, g.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hessian, h.numpy(), rtol=1e-10, atol=1e-12)


BURDEN = {"window_bp": 100, "max_maf": 0.05}


@pytest.mark.parametrize(
    ("features", "l2"), [("floor", 0.0), ("dosages", 1.0), ("dosages", 5.0), ("burden", 0.5)]
)
def test_fedglm_equals_pooled_sklearn(federation_dir, tmp_path, features, l2):
    result = _train(federation_dir, tmp_path, burden=BURDEN,
                    fedglm={"features": features, "l2": l2, "penalize": "all"})  # fmt: skip
    federation = load_federation(federation_dir)
    burden = burden_from_config(federation_dir, validate_config({"burden": BURDEN})["burden"])
    expected = _sklearn(pool_clients(federation.train), features, l2, burden.matrix)
    strategy = result.strategy
    assert strategy.converged
    np.testing.assert_allclose(strategy.coef, expected, rtol=0, atol=1e-6)
    # Newton converges in a handful of rounds; the run stops there, not at train.rounds
    assert len(result.history) == strategy.iterations < 15
    # the network it is served as has the GLM's logit
    test = pool_clients(federation.test)
    logits = _network_logits(strategy.parameters_for("client00"), test)
    design = glm_design(test, features, burden.matrix if features == "burden" else None)
    np.testing.assert_allclose(logits, design @ expected, atol=2e-4)
    if features == "burden":  # a network reading the burdens (model.rare_input), from the GLM
        network = _collapsed_network_logits(strategy.coef, "burden", burden, None, test)
        np.testing.assert_allclose(network, design @ expected, atol=2e-4)


def test_fedglm_under_secure_aggregation(federation_dir, tmp_path):
    result = _train(
        federation_dir, tmp_path, fedglm={"features": "dosages", "l2": 1.0}, secagg=SECAGG_EXACT
    )
    pooled = pool_clients(load_federation(federation_dir).train)
    x = glm_design(pooled, "dosages")
    expected = _scipy_oracle(x, pooled.y, _rare_penalty(x.shape[1], 2 + pooled.n_covariates, 1.0))
    assert result.strategy.converged
    np.testing.assert_allclose(result.strategy.coef, expected, rtol=0, atol=1e-6)
    # every round was a secure sum over all four sites
    assert all(len(e["secagg"]["model"]) == 4 for e in result.history)


@pytest.mark.parametrize(("features", "l2"), [("dosages", 5.0), ("burden", 50.0)])
def test_fedglm_leaves_the_floor_unpenalised_by_default(federation_dir, tmp_path, features, l2):
    result = _train(federation_dir, tmp_path, fedglm={"features": features, "l2": l2},
                    burden=BURDEN)  # fmt: skip
    federation = load_federation(federation_dir)
    burden = burden_from_config(federation_dir, validate_config({"burden": BURDEN})["burden"])
    pooled = pool_clients(federation.train)
    x = glm_design(pooled, features, burden.matrix if features == "burden" else None)
    n_floor = 2 + pooled.n_covariates
    expected = _scipy_oracle(x, pooled.y, _rare_penalty(x.shape[1], n_floor, l2))
    assert result.strategy.penalize == "rare" and result.strategy.converged
    np.testing.assert_allclose(result.strategy.coef, expected, rtol=0, atol=1e-6)
    # as λ grows the fit tends to the floor (not to an intercept-only model, as under 'all')
    big = _train(federation_dir, tmp_path / "big", fedglm={"features": features, "l2": 1e7},
                 burden=BURDEN)  # fmt: skip
    floor = _sklearn(pooled, "floor", 0.0)
    np.testing.assert_allclose(big.strategy.coef[:n_floor], floor, atol=1e-3)
    assert np.abs(big.strategy.coef[n_floor:]).max() < 1e-3


def test_fedglm_refuses_too_many_features(federation_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"more than max_features 10 .*fedglm.features: top_k"):
        _train(federation_dir, tmp_path, fedglm={"features": "dosages", "max_features": 10})
    # the advice fits the features: with burden already set, not "use burden"
    with pytest.raises(ConfigError, match=r"fewer, larger burden regions") as said:
        _train(federation_dir, tmp_path / "b", fedglm={"features": "burden", "max_features": 3},
               burden=BURDEN)  # fmt: skip
    assert "features: burden," not in str(said.value)
    with pytest.raises(ConfigError, match=r"lower fedglm.top_k \(now 30\)"):
        _train(federation_dir, tmp_path / "k", fedglm={"max_features": 10})  # the defaults


def test_fedglm_rejects_bad_options():
    with pytest.raises(ConfigError, match="l2 must be a finite number >= 0, got -1"):
        get_strategy("fedglm", l2=-1.0)
    with pytest.raises(ConfigError, match="features 'genes' unknown"):
        get_strategy("fedglm", features="genes")
    with pytest.raises(ConfigError, match="features 'burden' needs a burden map"):
        get_strategy("fedglm", features="burden")
    with pytest.raises(ConfigError, match="penalize 'prs' unknown"):
        get_strategy("fedglm", penalize="prs")


def test_linear_parameters_give_the_linear_logit():
    rng = np.random.default_rng(4)
    for common, rare in [((16,), (64,)), ((8, 4), (6, 3, 2))]:
        model = TwoPathwayModel(30, n_covariates=2, common_hidden=common, rare_hidden=rare,
                                random_seed=1)  # fmt: skip
        template = get_parameters(model)
        c, r = rng.normal(size=3), rng.normal(size=30)
        prs, cov = rng.normal(size=40), rng.normal(size=(40, 2))
        a = (rng.random((40, 30)) < 0.1) * 2.0
        for rare_coef in (r, None):
            set_parameters(model, linear_parameters(template, intercept=-0.7, common_coef=c,
                                                    rare_coef=rare_coef))  # fmt: skip
            with torch.no_grad():
                out = model(torch.tensor(prs, dtype=torch.float32),
                            torch.tensor(a, dtype=torch.float32),
                            covariates=torch.tensor(cov, dtype=torch.float32)).numpy()  # fmt: skip
            expected = -0.7 + np.column_stack([prs, cov]) @ c
            if rare_coef is not None:
                expected = expected + a @ r
            np.testing.assert_allclose(out, expected, atol=1e-5)
    with pytest.raises(ValueError, match="layer 'common.fc0' has 1 unit"):
        small = get_parameters(TwoPathwayModel(5, common_hidden=(1,), random_seed=0))
        linear_parameters(small, intercept=0.0, common_coef=[1.0])


def test_training_starts_at_the_floor(federation_dir, tmp_path):
    """Round 0 is the floor exactly; one round of FedAvg does not fall below it."""
    federation = load_federation(federation_dir)
    floor_coef = _sklearn(pool_clients(federation.train), "floor", 0.0)
    test = pool_clients(federation.test)
    floor_auc = roc_auc_score(test.y, glm_design(test, "floor") @ floor_coef)
    config = validate_config(
        {
            "train": {
                "validation_fraction": 0,
                "data": str(federation_dir),
                "strategy": "fedavg",
                "rounds": 1,
                "seed": 5,
                "progress": False,
            }
        }  # fmt: skip
    )
    result = train(config, tmp_path / "fedavg")
    # the floor the run started from is the pooled unpenalised fit
    from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint

    record = load_checkpoint(latest_checkpoint(tmp_path / "fedavg"))
    np.testing.assert_allclose(record["floor"]["coef"], floor_coef, atol=1e-6)
    assert record["floor"]["converged"]
    assert result.history[0]["auc"] >= floor_auc - 0.02
    # and without the floor start, the same run starts from PyTorch's random initialisation
    config["model"]["start_from_floor"] = False
    plain = train(config, tmp_path / "plain")
    assert "floor" not in load_checkpoint(latest_checkpoint(tmp_path / "plain"))
    assert plain.history[0]["auc"] != result.history[0]["auc"]


# --- FedCE-GLM: per-cluster rare effects on pooled evidence -----------------------------------
@pytest.fixture(scope="module")
def clustered(tmp_path_factory):
    root = tmp_path_factory.mktemp("fedce_glm")
    return write_federation(root, n_clients=6, n_clusters=2, covariates=("age",), seed=4)


def _joint_oracle(data_dir: Path, strategy, l2: float, penalize: str, design=None) -> np.ndarray:
    """The pooled joint design's fit: common columns, then rare columns per cluster.

    scikit-learn for ``penalize: all``; scipy's Newton with the common part free for ``rare``.
    ``design(data)``: a client's GLM design (default: on the dosages).
    """
    federation = load_federation(data_dir)
    labels = sorted(strategy.rare)
    blocks, ys = [], []
    for client in sorted(federation.train):
        data = federation.train[client]
        x = glm_design(data, "dosages") if design is None else design(data)
        width = 2 + data.n_covariates
        rare = x[:, width:]
        empty = sp.csr_matrix(rare.shape)
        mine = strategy.assignment[client]
        blocks.append(sp.hstack([x[:, 1:width], *[rare if m == mine else empty for m in labels]]))
        ys.append(data.y)
    x, y = sp.vstack(blocks).tocsr(), np.concatenate(ys)
    if penalize == "rare":
        n_floor = 2 + federation.train[sorted(federation.train)[0]].n_covariates
        ones = sp.csr_matrix(np.ones((x.shape[0], 1)))
        return _scipy_oracle(sp.hstack([ones, x]), y, _rare_penalty(x.shape[1] + 1, n_floor, l2))
    model = LogisticRegression(C=1.0 / l2, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    model.fit(x, y.astype(int))
    return np.concatenate([model.intercept_, model.coef_.ravel()])


@pytest.mark.parametrize(("secagg", "penalize"), [(False, "all"), (False, "rare"), (True, "rare")])
def test_fedce_glm_equals_the_pooled_fit_with_per_cluster_rare_effects(
    clustered, tmp_path, secagg, penalize
):
    sections = {"fedglm": {"features": "dosages", "l2": 1.0, "penalize": penalize},
                "fedce": {"n_clusters": 2}}  # fmt: skip
    if secagg:
        sections["secagg"] = SECAGG_EXACT
    config = validate_config(
        {
            "train": {
                "validation_fraction": 0,
                "data": str(clustered["data"]),
                "strategy": "fedce_glm",
                "rounds": 30,
                "seed": 3,
                "progress": False,
            },
            "evaluate": {"samples": str(clustered["samples"]), "truth": str(clustered["truth"])},
            **sections,
        }  # fmt: skip
    )
    result = train(config, tmp_path)
    strategy = result.strategy
    assert strategy.converged and len(result.history) < 20
    assert result.metrics["ari"] == pytest.approx(1.0)  # the true clusters, from the filters
    got = np.concatenate([strategy.common, *[strategy.rare[m] for m in sorted(strategy.rare)]])
    np.testing.assert_allclose(got, _joint_oracle(clustered["data"], strategy, 1.0, penalize),
                               atol=1e-6)  # fmt: skip
    if secagg:  # one secure sum per cluster, never a single site's statistics
        assert all(len(members) >= 3 for e in result.history for members in e["secagg"].values())
    _assert_serves_cluster_models(strategy, clustered["data"])


def _assert_serves_cluster_models(strategy, data_dir: Path, design=None) -> None:
    """Each site is served its cluster's GLM as a network with the same logit on its test rows.

    ``design(data)``: the GLM's design (default: the dosages).
    """
    federation = load_federation(data_dir)
    for client in federation.client_ids:
        data = federation.test[client]
        coef = np.concatenate([strategy.common, strategy.rare[strategy.assignment[client]]])
        logits = _network_logits(strategy.parameters_for(client), data)
        x = glm_design(data, "dosages") if design is None else design(data)
        np.testing.assert_allclose(logits, x @ coef, atol=2e-4)


# --- top-k variants by score test under the floor ---------------------------------------------
def _pooled_score_test(pooled, floor_coef):
    """U_j and the efficient V_j on the pooled data, each V_j as a Schur complement.

    V_j = 1 / [(X_jᵀ W X_j)⁻¹]_jj for X_j = [Z, a_j]: the information of a_j's coefficient
    with the floor's (intercept, PRS, covariates) as nuisance — an oracle independent of the
    sites' (U, S, C) sums.
    """
    z = glm_design(pooled, "floor").toarray()
    a = pooled.rare.toarray().astype(np.float64)
    p = expit(z @ floor_coef)
    w = p * (1 - p)
    score = a.T @ (pooled.y - p)
    variance = np.zeros(a.shape[1])
    for j in range(a.shape[1]):
        x = np.column_stack([z, a[:, j]])
        info = x.T @ (x * w[:, None])
        variance[j] = 1.0 / np.linalg.pinv(info)[-1, -1] if a[:, j].any() else 0.0
    return score, variance


def _pooled_ranking(score, variance, k):
    statistic = np.where(variance > 1e-9, score**2 / np.where(variance > 1e-9, variance, 1), 0)
    return sorted(range(score.size), key=lambda j: (-statistic[j], j))[:k]


def test_site_score_sums_add_up_to_the_pooled_score_test(federation_dir):
    """Σ over sites of (U, S, C), with the pooled floor Hessian, gives the pooled U and V."""
    from rvfedprs.strategies.top_variants import score_test, top_variants
    from rvfedprs.training.glm import score_sums

    federation = load_federation(federation_dir)
    pooled = pool_clients(federation.train)
    floor = _sklearn(pooled, "floor", 0.0)
    sums = [score_sums(glm_design(d, "floor"), d.rare, d.y, floor)
            for d in federation.train.values()]  # fmt: skip
    u, s, c = (np.sum([site[i] for site in sums], axis=0) for i in range(3))
    _, _, hessian = logistic_sums(glm_design(pooled, "floor"), pooled.y, floor)
    score, variance = score_test(u, s, c, hessian)
    expected_score, expected_variance = _pooled_score_test(pooled, floor)
    np.testing.assert_allclose(score, expected_score, atol=1e-9)
    np.testing.assert_allclose(variance, expected_variance, rtol=1e-8, atol=1e-9)
    assert (variance < s - 1e-9).all()  # the projection matters: V is not the naive S
    for k in (1, 7, score.size):
        assert top_variants(score, variance, k).tolist() == _pooled_ranking(score, variance, k)


def test_top_variants_break_ties_by_column_and_refuse_bad_k():
    from rvfedprs.strategies.top_variants import top_variants

    score = np.array([1.0, -2.0, 2.0, 0.0, 1.0])
    variance = np.array([1.0, 1.0, 1.0, 0.0, 1.0])  # column 3: nobody carries it
    assert top_variants(score, variance, 5).tolist() == [1, 2, 0, 4, 3]
    with pytest.raises(ValueError, match=r"top_k must be in \[0, 5\] .*got 6"):
        top_variants(score, variance, 6)


def _top_k_oracle(federation_dir, strategy, features, l2, penalize, burden_section):
    """The pooled fit on [1, PRS, covariates, (burdens,) top-k dosages] and its design."""
    federation = load_federation(federation_dir)
    pooled = pool_clients(federation.train)
    section = validate_config({"burden": burden_section})["burden"]
    burden = burden_from_config(federation_dir, section)
    floor = _sklearn(pooled, "floor", 0.0)
    score, variance = _pooled_score_test(pooled, floor)
    top = _pooled_ranking(score, variance, strategy.top_k)

    def design(data):
        return glm_design(data, features, burden.matrix, top)

    x = design(pooled)
    if penalize == "all":
        model = LogisticRegression(C=1.0 / l2, solver="newton-cholesky", tol=1e-12, max_iter=1000)
        model.fit(x[:, 1:], pooled.y.astype(int))
        coef = np.concatenate([model.intercept_, model.coef_.ravel()])
    else:
        coef = _scipy_oracle(x, pooled.y, _rare_penalty(x.shape[1], 2 + pooled.n_covariates, l2))
    return {"coef": coef, "top": top, "score": score, "variance": variance, "floor": floor,
            "design": design, "federation": federation}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize(
    ("features", "penalize", "secagg"),
    [("burden+top_k", "rare", False), ("top_k", "all", False), ("burden+top_k", "rare", True)],
)
def test_fedglm_top_k_equals_the_pooled_fit(federation_dir, tmp_path, features, penalize, secagg):
    # under secure aggregation flat weights keep the burdens' statistics inside the clipping
    # range (Beta(1, 25) weights reach ~20)
    burden = {**BURDEN, "weights": "flat"} if secagg else BURDEN
    sections = {
        "burden": burden,
        "fedglm": {"features": features, "top_k": 6, "l2": 2.0, "penalize": penalize},
    }
    if secagg:
        sections["secagg"] = SECAGG_EXACT
    result = _train(federation_dir, tmp_path, **sections)
    strategy = result.strategy
    oracle = _top_k_oracle(federation_dir, strategy, features, 2.0, penalize, burden)
    # the floor's rounds carried the score sums: the pooled U, V at the floor, the pooled top 6
    screen = strategy.screen
    np.testing.assert_allclose(screen.floor, oracle["floor"], atol=1e-6)
    atol = 1e-5 if secagg else 1e-7
    np.testing.assert_allclose(screen.score, oracle["score"], atol=atol)
    np.testing.assert_allclose(screen.variance, oracle["variance"], atol=atol)
    assert strategy.top.tolist() == oracle["top"]
    assert strategy.summary()["top_k"] == oracle["top"]
    # then the whole GLM, equal to the pooled fit on [PRS, covariates, (burdens,) top-k dosages]
    assert strategy.converged and len(result.history) == strategy.iterations < 25
    np.testing.assert_allclose(strategy.coef, oracle["coef"], rtol=0, atol=1e-6)
    if secagg:
        assert all(len(e["secagg"]["model"]) == 4 for e in result.history)
    # served as network parameters on the dosages, with the GLM's logit
    test = pool_clients(oracle["federation"].test)
    logits = _network_logits(strategy.parameters_for("client00"), test)
    np.testing.assert_allclose(logits, oracle["design"](test) @ oracle["coef"], atol=2e-4)
    # and as a network whose specialist reads the same collapsed features (model.rare_input)
    burden_map = burden_from_config(federation_dir, validate_config({"burden": burden})["burden"])
    network = _collapsed_network_logits(strategy.coef, features, burden_map,
                                        strategy.top.tolist(), test)  # fmt: skip
    np.testing.assert_allclose(network, oracle["design"](test) @ oracle["coef"], atol=2e-4)


def test_fedglm_top_k_refuses_bad_values(federation_dir, tmp_path):
    with pytest.raises(ConfigError, match="fedglm.top_k 500 is more than the federation's 90 rare"):
        _train(federation_dir, tmp_path, fedglm={"features": "top_k", "top_k": 500})
    with pytest.raises(ConfigError, match="top_k must be an integer >= 0, got -2"):
        get_strategy("fedglm", features="top_k", top_k=-2)
    with pytest.raises(ConfigError, match="-2"):
        validate_config({"fedglm": {"features": "top_k", "top_k": -2}})
    with pytest.raises(ConfigError, match="features 'burden\\+top_k' needs a burden map"):
        get_strategy("fedglm", features="burden+top_k", top_k=3)
    with pytest.raises(ConfigError, match="features 'top_k' need top_k >= 1 variants, got top_k 0"):
        get_strategy("fedglm", features="top_k", top_k=0)
    assert get_strategy("fedglm").top_k == 30  # the defaults: 30 top-k variants
    assert get_strategy("fedglm", features="dosages").top_k == 0
    with pytest.raises(ConfigError, match="top_k 4 is used only by features"):
        get_strategy("fedglm", features="dosages", top_k=4)


@pytest.mark.slow
@pytest.mark.parametrize("secagg", [False, True])
def test_fedce_glm_with_burdens_and_top_k_equals_the_pooled_fit(clustered, tmp_path, secagg):
    """The top k chosen once on the pooled floor's scores; per-cluster burdens + top-k after."""
    burden_section = {"window_bp": 200, "max_maf": 0.05, "weights": "flat"}
    config = validate_config(
        {
            "train": {"validation_fraction": 0, "data": str(clustered["data"]),
                      "strategy": "fedce_glm", "rounds": 40, "seed": 3, "progress": False},
            "evaluate": {"samples": str(clustered["samples"]), "truth": str(clustered["truth"])},
            "fedglm": {"features": "burden+top_k", "top_k": 5, "l2": 3.0},
            "fedce": {"n_clusters": 2},
            "burden": burden_section,
        }
    )  # fmt: skip
    if secagg:
        config = validate_config({**config, "secagg": SECAGG_EXACT})
    result = train(config, tmp_path)
    strategy = result.strategy
    # the floor's screen starts at the floor the run started from (float32): a round or two
    assert strategy.converged and strategy.offset == strategy.screen.iterations >= 1
    assert result.metrics["ari"] == pytest.approx(1.0)
    federation = load_federation(clustered["data"])
    pooled = pool_clients(federation.train)
    floor = _sklearn(pooled, "floor", 0.0)
    top = _pooled_ranking(*_pooled_score_test(pooled, floor), 5)
    assert strategy.top.tolist() == top
    burden = burden_from_config(
        clustered["data"], validate_config({"burden": burden_section})["burden"]
    )

    def design(data):
        return glm_design(data, "burden+top_k", burden.matrix, top)

    got = np.concatenate([strategy.common, *[strategy.rare[m] for m in sorted(strategy.rare)]])
    np.testing.assert_allclose(got, _joint_oracle(clustered["data"], strategy, 3.0, "rare", design),
                               atol=1e-6)  # fmt: skip
    if secagg:  # the floor's rounds one sum over all six sites, then one per cluster
        sizes = [sorted(len(m) for m in e["secagg"].values()) for e in result.history]
        assert sizes[: strategy.offset] == [[6]] * strategy.offset
        assert all(min(s) >= 3 for s in sizes)
    for client in federation.client_ids:
        data = federation.test[client]
        coef = np.concatenate([strategy.common, strategy.rare[strategy.assignment[client]]])
        logits = _network_logits(strategy.parameters_for(client), data)
        np.testing.assert_allclose(logits, design(data) @ coef, atol=2e-4)


@pytest.mark.slow
def test_fedglm_top_k_resumes_in_the_floor_rounds(federation_dir, tmp_path):
    """A run stopped before the top k were chosen resumes from its checkpoint to the same fit."""

    def config(rounds):
        return validate_config({
            "train": {"validation_fraction": 0, "data": str(federation_dir), "strategy": "fedglm",
                      "rounds": rounds, "seed": 3, "progress": False},
            "fedglm": {"features": "top_k", "top_k": 4, "l2": 2.0},
        })  # fmt: skip

    whole = train(config(30), tmp_path / "whole").strategy
    part = train(config(1), tmp_path / "part").strategy  # the screen starts at the floor
    assert part.screening and part.top is None and part.iterations == 1
    resumed = train(config(30), tmp_path / "part", resume=True).strategy
    assert resumed.converged and resumed.top.tolist() == whole.top.tolist()
    np.testing.assert_allclose(resumed.coef, whole.coef, rtol=0, atol=1e-12)
    assert resumed.iterations == whole.iterations
