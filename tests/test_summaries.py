"""Federated evaluation summaries: pooled metrics from per-site histograms vs the exact ones."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from rvfedprs.evaluation.summaries import (
    histogram_auc,
    merge_histograms,
    pooled_metrics,
    site_summary,
    tie_bound,
)


def _sites(seed=0, n_sites=4):
    rng = np.random.default_rng(seed)
    out = {}
    for k in range(n_sites):
        n = int(rng.integers(150, 400))
        y = (rng.random(n) < 0.12).astype(int)
        logit = -2.2 + 0.9 * y + rng.normal(0, 0.6 + 0.1 * k, n) + 0.3 * k
        carriers = rng.random(n) < 0.15
        out[f"site{k}"] = (y, 1 / (1 + np.exp(-logit)), carriers)
    return out


def test_pooled_auc_matches_the_exact_pooled_value_within_the_tie_bound():
    sites = _sites()
    summaries = {s: site_summary(y, p, carriers=c) for s, (y, p, c) in sites.items()}
    got = pooled_metrics(summaries)
    y = np.concatenate([v[0] for v in sites.values()])
    p = np.concatenate([v[1] for v in sites.values()])
    c = np.concatenate([v[2] for v in sites.values()])
    exact = roc_auc_score(y, p)
    assert abs(got["auc"] - exact) <= got["auc_tie_bound"] + 1e-12
    assert abs(got["auc"] - exact) < 1e-3
    assert got["auprc"] == pytest.approx(average_precision_score(y, p), abs=1e-3)
    assert abs(got["carrier_auc"] - roc_auc_score(y[c], p[c])) < 1e-3
    assert got["n_carriers"] == int(c.sum())
    for s, (ys, ps, _) in sites.items():  # every site's own AUC is exact
        assert got["client_auc"][s] == pytest.approx(roc_auc_score(ys, ps), rel=1e-12)


def test_coarse_bins_err_by_no_more_than_the_bound_and_the_bound_is_not_vacuous():
    y, p, _ = _sites(1)["site0"]
    part = site_summary(y, p, bins=8)["histogram"]
    cases, controls = merge_histograms([part])
    error = abs(histogram_auc(cases, controls) - roc_auc_score(y, p))
    bound = tie_bound(cases, controls)
    assert 0 < error <= bound < 0.5


def test_histograms_hold_counts_not_samples():
    y, p, _ = _sites(2)["site1"]
    h = site_summary(y, p)["histogram"]
    assert set(h) == {"bins", "cases", "controls"}
    assert int(h["cases"].sum()) == int(y.sum()) and int(h["controls"].sum()) == int((1 - y).sum())
    assert np.all(np.diff(h["bins"]) > 0)


def test_one_class_gives_nan_not_an_error():
    y = np.zeros(10, int)
    s = site_summary(y, np.linspace(0.1, 0.9, 10))
    assert np.isnan(s["auc"]) and np.isnan(pooled_metrics({"a": s})["auc"])
