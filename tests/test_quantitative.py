"""Quantitative traits end to end on the outcome object (rvfedprs/outcomes/, issue 39).

Oracles: numpy least squares written from the formulas for the federated linear floor and the
ridge GLMs, numpy's correlation for the validation R², statsmodels' OLS for the reported R²,
incremental R², partial correlation and β per SD.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.evaluation import predict_clients  # noqa: E402
from rvfedprs.evaluation.quantitative import score_metrics  # noqa: E402
from rvfedprs.evaluation.selection import split_validation, validation_split  # noqa: E402
from rvfedprs.exceptions import ConfigError, InputDataError  # noqa: E402
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint  # noqa: E402
from rvfedprs.genomic.client import build_model  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, trait_settings  # noqa: E402
from rvfedprs.outcomes import BINARY, QUANTITATIVE, outcome  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.strategies.fedglm import penalty_vector  # noqa: E402
from rvfedprs.training import ClientData  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402

FRACTION, SEED = 0.25, 11
SECAGG_EXACT = {"enabled": True, "quantization_bits": 30, "modulus_bits": 62,
                "clipping_range": 4.0}  # fmt: skip


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return write_federation(tmp_path_factory.mktemp("quantitative"), n_clients=4, n_clusters=2,
                            samples_per_client=200, covariates=("age", "pc1"),
                            kind="quantitative")  # fmt: skip


def _train(paths, out: Path, strategy: str = "fedglm", **sections):
    train_section = {"data": str(paths["data"]), "strategy": strategy, "rounds": 30, "seed": SEED,
                     "progress": False, "validation_fraction": 0, "keep_checkpoints": 1,
                     **sections.pop("train", {})}  # fmt: skip
    return train(validate_config({"train": train_section, **sections}), out)


# --- the outcome ------------------------------------------------------------------------------
def test_the_gaussian_sums_are_least_squares():
    rng = np.random.default_rng(0)
    x, y, beta = rng.normal(size=(50, 4)), rng.normal(size=50), rng.normal(size=4)
    loss, gradient, hessian = QUANTITATIVE.glm_sums(x, y, beta)
    residual = y - x @ beta
    assert loss == pytest.approx(0.5 * residual @ residual, rel=1e-12)
    np.testing.assert_allclose(gradient, -x.T @ residual, rtol=1e-12)
    np.testing.assert_allclose(hessian, x.T @ x, rtol=1e-12)


def test_validation_sums_give_the_pooled_r2_in_the_clear_and_summed_securely():
    rng = np.random.default_rng(1)
    parts = []
    for n in (40, 70, 55):
        y = (
            rng.normal(size=n) - 0.4
        )  # negative sums: summed securely as positive and negative parts
        parts.append((y, 0.5 * y + rng.normal(size=n) - 1.0))
    y = np.concatenate([a for a, _ in parts])
    p = np.concatenate([b for _, b in parts])
    expected = {"r2": np.corrcoef(y, p)[0, 1] ** 2, "mse": np.mean((y - p) ** 2)}
    clear = QUANTITATIVE.pooled_validation(
        {str(i): QUANTITATIVE.validation_summary(a, b, bins=0) for i, (a, b) in enumerate(parts)}
    )
    assert clear == pytest.approx(expected, abs=1e-12)
    held = [QUANTITATIVE.dense_validation(a, b, bins=0)["sums"] for a, b in parts]
    assert all(h.min() >= 0 for h in held)  # a secure sum takes non-negative integers
    summed = QUANTITATIVE.summed_validation({"sums": np.sum(held, axis=0)})
    assert summed == pytest.approx(expected, abs=1e-6)


def test_a_trait_is_stratified_by_quintile_and_checked_for_finite_values():
    y = np.random.default_rng(2).normal(size=103)
    strata = QUANTITATIVE.strata(y)
    assert sorted(np.bincount(strata)) == [20, 20, 21, 21, 21]
    assert np.all(np.diff(strata[np.argsort(y)]) >= 0)  # ordered as the trait
    with pytest.raises(InputDataError, match=r"client s1: a quantitative phenotype must be finite"):
        ClientData("s1", ["a", "b"], [0.0, 1.0], _empty(2), [1.5, np.nan], outcome="quantitative")
    with pytest.raises(InputDataError, match=r"phenotype must be 0/1, found \[2.5\]"):
        ClientData("s1", ["a", "b"], [0.0, 1.0], _empty(2), [1.0, 2.5])
    with pytest.raises(ConfigError, match=r"outcome kind 'survival' unknown"):
        outcome("survival")


def _empty(n):
    import scipy.sparse as sp

    return sp.csr_matrix((n, 3), dtype=np.float32)


# --- the data ---------------------------------------------------------------------------------
def test_the_trait_is_standardised_with_federated_training_moments(paths):
    federation = load_federation(paths["data"])
    assert federation.outcome == QUANTITATIVE
    raw = {c: pd.read_parquet(paths["data"] / "clients" / c / "samples.parquet")
           for c in federation.client_ids}  # fmt: skip
    train_y = np.concatenate([r.loc[r["split"] == "train", "phenotype"] for r in raw.values()])
    mean, sd = train_y.mean(), train_y.std()
    assert (federation.trait_mean, federation.trait_sd) == pytest.approx((mean, sd), rel=1e-12)
    for c in federation.client_ids:
        test_y = raw[c].loc[raw[c]["split"] == "test", "phenotype"].to_numpy()
        np.testing.assert_allclose(federation.test[c].y, (test_y - mean) / sd, atol=1e-5)
    pooled = pool_clients(federation.train).y
    assert (pooled.mean(), pooled.std()) == pytest.approx((0.0, 1.0), abs=1e-5)


def test_a_deployed_site_standardises_its_trait_as_the_pooled_run_does(paths):
    task = GenomicTask()
    federation = load_federation(paths["data"])
    sites = {c: task.open_site({"data-dir": str(paths["data"]), "client-id": c}, {})
             for c in federation.client_ids}  # fmt: skip
    reports = {c: task.setup_report(s, {}, {}) for c, s in sites.items()}
    trait = trait_settings(reports)
    assert trait["kind"] == "quantitative"
    assert (trait["mean"], trait["sd"]) == pytest.approx(
        (federation.trait_mean, federation.trait_sd), rel=1e-12
    )
    settings = {"prs_mean": federation.prs_mean, "prs_sd": federation.prs_sd,
                "covariate_mean": federation.covariate_mean,
                "covariate_sd": federation.covariate_sd, "outcome": trait}  # fmt: skip
    for c, site in sites.items():
        np.testing.assert_allclose(site.standardised(settings).y, federation.train[c].y, atol=1e-6)
    with pytest.raises(InputDataError, match=r"disagree on the phenotype's kind"):
        trait_settings({**reports, "other": {**reports[federation.client_ids[0]],
                                             "outcome": "binary"}})  # fmt: skip


# --- the exact federated linear models --------------------------------------------------------
def _least_squares(x, y, penalty) -> np.ndarray:
    x = x.toarray() if hasattr(x, "toarray") else np.asarray(x)
    return np.linalg.solve(x.T @ x + np.diag(penalty), x.T @ np.asarray(y, np.float64))


@pytest.mark.parametrize(
    ("features", "l2", "penalize", "secagg"),
    [("floor", 0.0, "all", False), ("dosages", 2.0, "all", False),
     ("dosages", 5.0, "rare", False), ("dosages", 5.0, "rare", True)],
)  # fmt: skip
def test_the_federated_linear_fit_equals_pooled_least_squares(paths, tmp_path, features, l2,
                                                             penalize, secagg):  # fmt: skip
    sections = {"fedglm": {"features": features, "l2": l2, "penalize": penalize}}
    if secagg:
        sections["secagg"] = SECAGG_EXACT
    result = _train(paths, tmp_path, **sections)
    pooled = pool_clients(load_federation(paths["data"]).train)
    x = glm_design(pooled, features)
    expected = _least_squares(x, pooled.y, penalty_vector(x.shape[1], l2, penalize,
                                                          pooled.n_covariates))  # fmt: skip
    assert result.strategy.converged
    np.testing.assert_allclose(
        result.strategy.coef, expected, rtol=0, atol=1e-6 if secagg else 1e-8
    )
    assert result.metrics["metric"] == "r2" and "auc" not in result.metrics


# --- the validation choice and the record -----------------------------------------------------
def _pooled_validation_r2(federation, record, spec) -> float:
    _, validation = split_validation(federation, FRACTION, random_seed=spec["seed"])
    strategy = strategy_from_config(record["strategy_name"], record["config"])
    strategy.load_state_dict(record["strategy_state"])
    p = predict_clients(
        strategy.parameters_for, validation, build_model(federation.n_rare, record["model_config"])
    )
    clients = sorted(validation)
    y = np.concatenate([validation[c].y for c in clients])
    return float(np.corrcoef(y, np.concatenate([p[c] for c in clients]))[0, 1] ** 2)


@pytest.mark.parametrize("secagg", [False, True])
def test_rounds_are_chosen_on_the_pooled_validation_r2(paths, tmp_path, secagg):
    sections = {"secagg": {"enabled": True}} if secagg else {}
    result = _train(paths, tmp_path, "fedavg", train={"rounds": 3, "lr": 0.05,
                                                      "validation_fraction": FRACTION,
                                                      "keep_checkpoints": 0},
                    **sections)  # fmt: skip
    federation = load_federation(paths["data"])
    spec = validation_split(FRACTION, SEED)
    for entry in result.history:
        record = load_checkpoint(checkpoint_path(tmp_path, entry["round"]))
        expected = _pooled_validation_r2(federation, record, spec)
        assert entry["validation_r2"] == pytest.approx(expected, abs=1e-6 if secagg else 1e-9)
    chosen = result.metrics["selection"]
    values = [chosen["floor_validation_r2"], *chosen["validation_r2s"]]
    assert chosen["selected_round"] == int(np.argmax(values))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["metric"] == "r2" and set(metrics["client_r2"]) == set(federation.client_ids)
    assert metrics["r2_lo"] <= metrics["r2"] <= metrics["r2_hi"]


def test_a_number_as_pos_weight_is_refused_for_a_trait(paths, tmp_path):
    with pytest.raises(ConfigError, match=r"pos_weight 2\.0 weighs cases.*quantitative"):
        _train(paths, tmp_path, "fedavg", train={"rounds": 1, "pos_weight": 2.0})


# --- the reported metrics ---------------------------------------------------------------------
def test_reported_r2s_equal_statsmodels_ols():
    rng = np.random.default_rng(3)
    n = 400
    c = rng.normal(size=(n, 2))
    s = 0.5 * c[:, 0] + rng.normal(size=n)
    y = 0.3 * s + 0.4 * c[:, 1] + rng.normal(size=n)
    m = score_metrics(y, s, c)
    null = sm.OLS(y, sm.add_constant(c)).fit()
    full = sm.OLS(y, sm.add_constant(np.column_stack([c, s]))).fit()
    assert m["null_r2"] == pytest.approx(null.rsquared, abs=1e-8)
    assert m["full_r2"] == pytest.approx(full.rsquared, abs=1e-8)
    assert m["incremental_r2"] == pytest.approx(full.rsquared - null.rsquared, abs=1e-8)
    simple = sm.OLS(y, sm.add_constant(s)).fit()
    assert m["r2"] == pytest.approx(simple.rsquared, abs=1e-8)
    scaled = sm.OLS(y, sm.add_constant(np.column_stack([c, (s - s.mean()) / s.std()]))).fit()
    assert m["beta_per_sd"] == pytest.approx(scaled.params[-1], abs=1e-8)
    resid_y = sm.OLS(y, sm.add_constant(c)).fit().resid
    resid_s = sm.OLS(s, sm.add_constant(c)).fit().resid
    assert m["partial_r"] == pytest.approx(np.corrcoef(resid_y, resid_s)[0, 1], abs=1e-8)
    assert m["incremental_r2"] == pytest.approx(m["partial_r"] ** 2 * (1 - m["null_r2"]), abs=1e-8)
    assert m["incremental_r2_lo"] < m["incremental_r2"] < m["incremental_r2_hi"]
    top = s >= np.quantile(s, 0.9)
    assert m["top_decile_difference"] == pytest.approx(y[top].mean() - y[~top].mean(), abs=1e-12)


def test_binary_outcome_keeps_the_logistic_sums():
    rng = np.random.default_rng(4)
    x, beta = rng.normal(size=(30, 3)), rng.normal(size=3)
    y = (rng.random(30) < 0.3).astype(float)
    loss, gradient, hessian = BINARY.glm_sums(x, y, beta)
    eta = x @ beta
    p = 1 / (1 + np.exp(-eta))
    assert loss == pytest.approx(np.sum(np.log1p(np.exp(eta)) - y * eta), rel=1e-12)
    np.testing.assert_allclose(gradient, x.T @ (p - y), rtol=1e-10)
    np.testing.assert_allclose(hessian, x.T @ np.diag(p * (1 - p)) @ x, rtol=1e-10)


@pytest.mark.slow
def test_flower_sim_chooses_and_scores_as_in_process(paths, tmp_path):
    runs = {}
    for engine in ("inprocess", "flower-sim"):
        runs[engine] = _train(paths, tmp_path / engine, "fedavg",
                              train={"rounds": 2, "lr": 0.05, "engine": engine,
                                     "validation_fraction": FRACTION})  # fmt: skip
    a, b = runs["inprocess"].metrics, runs["flower-sim"].metrics
    assert a["metric"] == b["metric"] == "r2"
    assert a["selection"]["selected_round"] == b["selection"]["selected_round"]
    np.testing.assert_allclose(a["selection"]["validation_r2s"], b["selection"]["validation_r2s"],
                               atol=1e-6)  # fmt: skip
    assert a["r2"] == pytest.approx(b["r2"], abs=1e-6)


def test_the_workflow_comparison_reports_r2(paths, tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
    from compare_strategies import main as compare

    runs = [_train(paths, tmp_path / "fedglm"),
            _train(paths, tmp_path / "fedavg", "fedavg", train={"rounds": 1})]  # fmt: skip
    table = compare([tmp_path / n / "metrics.json" for n in ("fedglm", "fedavg")], None,
                    tmp_path / "c.csv", tmp_path / "c.md", tmp_path / "c.png")  # fmt: skip
    assert list(table["strategy"]) == ["fedglm", "fedavg"]
    np.testing.assert_allclose(table["r2"], [r.metrics["r2"] for r in runs])
    text = (tmp_path / "c.md").read_text()
    assert "| strategy | R² [95% CI] | incremental R²" in text and "AUC" not in text
    assert (tmp_path / "c.png").stat().st_size > 0


def test_a_study_pools_its_sites_test_sums_into_the_pooled_metrics():
    from rvfedprs.evaluation.quantitative import pooled_test_metrics, test_summary

    rng = np.random.default_rng(6)
    summaries, pooled = {}, {"y": [], "p": [], "c": [], "prs": []}
    for i, n in enumerate((90, 120, 150)):
        c = rng.normal(size=(n, 2))
        p = rng.normal(size=n) + 0.3 * c[:, 0]
        y = 0.4 * p + 0.5 * c[:, 1] + rng.normal(size=n)
        prs = p + rng.normal(size=n)
        summaries[f"s{i}"] = test_summary(y, p, prs=prs, covariates=c)
        for key, value in zip(("y", "p", "c", "prs"), (y, p, c, prs), strict=True):
            pooled[key].append(value)
    y, p, c, prs = (np.concatenate(pooled[k]) for k in ("y", "p", "c", "prs"))
    got, expected = pooled_test_metrics(summaries), score_metrics(y, p, c)
    for key in ("r2", "r2_lo", "r2_hi", "null_r2", "full_r2", "incremental_r2",
                "incremental_r2_lo", "incremental_r2_hi", "partial_r", "mse"):  # fmt: skip
        assert got[key] == pytest.approx(expected[key], abs=1e-10), key
    assert got["prs_only_r2"] == pytest.approx(np.corrcoef(y, prs)[0, 1] ** 2, abs=1e-10)
    assert got["client_r2"]["s1"] == pytest.approx(
        np.corrcoef(pooled["y"][1], pooled["p"][1])[0, 1] ** 2, abs=1e-12
    )
    # each site's R² interval: Fisher's z of its correlation, n − 3 degrees of freedom
    r, n = np.corrcoef(pooled["y"][2], pooled["p"][2])[0, 1], 150
    ends = np.tanh(np.arctanh(r) + np.array([-1, 1]) * stats.norm.ppf(0.975) / np.sqrt(n - 3))
    np.testing.assert_allclose(got["client_r2_ci"]["s2"], np.sort(ends**2), rtol=1e-10)
    assert got["client_r2_ci"]["s2"][0] < got["client_r2"]["s2"] < got["client_r2_ci"]["s2"][1]


def test_dp_sgd_trains_a_trait_with_the_gaussian_loss(paths):
    import torch

    from rvfedprs.model import model_from_config
    from rvfedprs.training.config import LocalTrainingConfig
    from rvfedprs.training.data import to_torch_sparse
    from rvfedprs.training.dp import DPState, dp_local_update

    federation = load_federation(paths["data"])
    data = federation.train[federation.client_ids[0]]
    model = model_from_config(federation.n_rare, {"n_covariates": data.n_covariates},
                              random_seed=0)  # fmt: skip

    def loss() -> float:
        model.eval()
        with torch.no_grad():
            eta = model(torch.from_numpy(data.prs), to_torch_sparse(data.rare),
                        covariates=data.covariates_tensor())  # fmt: skip
        return float(QUANTITATIVE.loss(eta, torch.from_numpy(data.y)))

    before = loss()
    config = LocalTrainingConfig(epochs=3, lr=0.05, batch_size=32)
    dp = DPState(noise_multiplier=0.5, max_grad_norm=5.0)
    result = dp_local_update(model, data, config, dp, random_seed=1)
    assert np.isfinite(result.loss) and loss() < before  # ½(y − η)² went down under DP-SGD
    assert dp.epsilon() > 0


@pytest.mark.slow
def test_the_linear_floor_on_flower_sim_equals_pooled_least_squares(paths, tmp_path):
    result = _train(paths, tmp_path, train={"engine": "flower-sim"},
                    fedglm={"features": "dosages", "l2": 2.0, "penalize": "rare"})  # fmt: skip
    pooled = pool_clients(load_federation(paths["data"]).train)
    x = glm_design(pooled, "dosages")
    expected = _least_squares(x, pooled.y, penalty_vector(x.shape[1], 2.0, "rare",
                                                          pooled.n_covariates))  # fmt: skip
    np.testing.assert_allclose(result.strategy.coef, expected, rtol=0, atol=1e-8)


def test_a_run_folder_is_evaluated_from_its_latest_checkpoint(paths, tmp_path):
    from rvfedprs.run import evaluate_checkpoint

    result = _train(paths, tmp_path / "run")  # the linear fit converges long before round 30
    assert len(result.history) < 30
    again = evaluate_checkpoint(tmp_path / "run", tmp_path / "evaluated")
    assert again["round"] == len(result.history) and again["metric"] == "r2"
    assert again["r2"] == pytest.approx(result.metrics["r2"], abs=1e-12)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputDataError, match=r"holds no checkpoints/round_XXX.pt"):
        evaluate_checkpoint(tmp_path / "empty", tmp_path / "x")


def test_a_phenotype_that_is_not_a_number_is_named(tmp_path):
    info = write_federation(tmp_path, n_clients=2, n_clusters=2, samples_per_client=60,
                            kind="quantitative")  # fmt: skip
    path = info["data"] / "clients" / "client00" / "samples.parquet"
    table = pd.read_parquet(path)
    table["phenotype"] = table["phenotype"].astype(str)  # a sheet read as text
    table.loc[3, "phenotype"] = "abc"
    table.to_parquet(path, index=False)
    with pytest.raises(InputDataError, match=r"client 'client00': phenotype values \['abc'\]"):
        load_federation(info["data"])
