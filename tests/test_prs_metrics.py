"""Incremental R² and top-decile odds ratio against independent fits and known values."""

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression, LogisticRegression

from rvfedprs.evaluation.prs_metrics import (
    incremental_r2,
    liability_factor,
    logistic_loglik,
    nagelkerke_r2,
    observed_r2,
    top_decile_or,
)


def _data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    cov = rng.normal(size=(n, 2))
    score = rng.normal(size=n)
    eta = -2.0 + 0.8 * score + 0.5 * cov[:, 0]
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    return y, score, cov


def test_logistic_loglik_equals_an_unpenalised_sklearn_fit():
    y, score, cov = _data()
    X = np.column_stack([np.ones_like(score), cov, score])
    fit = LogisticRegression(penalty=None, tol=1e-12, max_iter=10_000).fit(X[:, 1:], y)
    p = fit.predict_proba(X[:, 1:])[:, 1]
    want = float(np.sum(y * np.log(p) + (1 - y) * np.log1p(-p)))
    assert logistic_loglik(X, y) == pytest.approx(want, abs=1e-6)


def test_observed_r2_equals_least_squares():
    y, score, cov = _data(seed=1)
    X = np.column_stack([np.ones_like(score), cov, score])
    want = LinearRegression().fit(X[:, 1:], y).score(X[:, 1:], y)
    assert observed_r2(X, y) == pytest.approx(want, rel=1e-10)


def test_liability_factor_at_half_prevalence_is_pi_over_two():
    assert liability_factor(0.5, 0.5) == pytest.approx(np.pi / 2, rel=1e-12)


def test_incremental_r2_positive_for_an_informative_score_and_zero_for_noise():
    y, score, cov = _data(seed=2)
    good = incremental_r2(y, score, cov, prevalence=0.1)
    noise = incremental_r2(y, np.random.default_rng(5).normal(size=y.size), cov)
    assert good["r2_nagelkerke"] > 0.05 and good["r2_liability"] > good["r2_observed"] > 0.02
    assert abs(noise["r2_nagelkerke"]) < 0.005 and abs(noise["r2_observed"]) < 0.005
    # the Nagelkerke increment is the difference of two Nagelkerke R² against the intercept
    n = y.size
    ll0 = logistic_loglik(np.ones((n, 1)), y)
    full = nagelkerke_r2(logistic_loglik(np.column_stack([np.ones(n), cov, score]), y), ll0, n)
    null = nagelkerke_r2(logistic_loglik(np.column_stack([np.ones(n), cov]), y), ll0, n)
    assert good["r2_nagelkerke"] == pytest.approx(full - null, rel=1e-12)


def test_top_decile_or_counts_the_two_by_two_table():
    score = np.arange(100.0)
    y = np.zeros(100, int)
    y[95:] = 1  # 5 of the top 10 are cases
    y[:9] = 1  # 9 of the other 90
    got = top_decile_or(y, score)
    assert got["or_top_decile"] == pytest.approx((5 / 5) / (9 / 81))
    assert got["or_top_decile_lo"] < got["or_top_decile"] < got["or_top_decile_hi"]


def test_federation_metrics_pool_the_clients():
    import scipy.sparse as sp

    from rvfedprs.evaluation.prs_metrics import federation_prs_metrics, prs_metrics
    from rvfedprs.training import ClientData

    clients, predictions = {}, {}
    for k in range(3):
        y, score, cov = _data(n=400, seed=10 + k)
        clients[f"c{k}"] = ClientData(
            f"c{k}", np.arange(400).astype(str), score, sp.csr_matrix((400, 2)), y, cov
        )
        predictions[f"c{k}"] = 1 / (1 + np.exp(-(score * 0.8 - 2)))
    got = federation_prs_metrics(predictions, clients)
    logit = {c: np.log(p / (1 - p)) for c, p in predictions.items()}
    want = prs_metrics(
        np.concatenate([clients[c].y for c in sorted(clients)]),
        np.concatenate([logit[c] for c in sorted(clients)]),
        np.concatenate([clients[c].covariates for c in sorted(clients)]),
    )
    assert got["pooled"] == pytest.approx(want)
    assert got["clients"]["c1"] == pytest.approx(
        prs_metrics(clients["c1"].y, logit["c1"], clients["c1"].covariates)
    )


def test_one_class_gives_nan():
    assert np.isnan(incremental_r2(np.zeros(20), np.arange(20.0))["r2_observed"])
    assert np.isnan(top_decile_or(np.ones(20, int), np.arange(20.0))["or_top_decile"])
