"""Paired AUC comparison: DeLong against its O(mn) definition and sklearn, bootstrap sanity."""

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import roc_auc_score

from rvfedprs.evaluation.paired import (
    auc_standard_error,
    delong_test,
    paired_bootstrap,
    paired_table,
)
from rvfedprs.exceptions import InputDataError


def _naive_delong(y, a, b):
    """DeLong's variance of AUC(a) − AUC(b) from the pairwise kernel, straight from the paper."""
    comps = []
    for s in (a, b):
        pos, neg = s[y == 1], s[y == 0]
        psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
        comps.append((psi.mean(), psi.mean(axis=1), psi.mean(axis=0)))
    m, n = (y == 1).sum(), (y == 0).sum()
    s10 = np.cov(np.stack([comps[0][1], comps[1][1]]))
    s01 = np.cov(np.stack([comps[0][2], comps[1][2]]))
    cov = s10 / m + s01 / n
    return comps[0][0], comps[1][0], cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_delong_matches_pairwise_definition_and_sklearn(seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(300) < 0.2).astype(int)
    a = y * 1.0 + rng.normal(size=300)
    b = np.round(y * 0.5 + rng.normal(size=300), 1)  # ties
    result = delong_test(y, a, b)
    auc_a, auc_b, var = _naive_delong(y, a, b)
    assert result.auc_a == pytest.approx(roc_auc_score(y, a), abs=1e-12)
    assert result.auc_b == pytest.approx(roc_auc_score(y, b), abs=1e-12)
    assert result.auc_a == pytest.approx(auc_a) and result.auc_b == pytest.approx(auc_b)
    assert result.se == pytest.approx(np.sqrt(var), rel=1e-9)
    assert result.difference == pytest.approx(auc_a - auc_b)


def test_delong_detects_a_better_model_and_not_a_copy():
    rng = np.random.default_rng(3)
    y = (rng.random(2000) < 0.3).astype(int)
    noise = rng.normal(size=2000)
    strong, weak = 1.2 * y + noise, 0.6 * y + noise
    assert delong_test(y, strong, weak).p_value < 1e-6
    same = delong_test(y, strong, strong.copy())
    assert same.difference == 0 and same.p_value == 1.0


def test_bootstrap_interval_covers_and_agrees_with_delong_se():
    rng = np.random.default_rng(4)
    y = (rng.random(400) < 0.25).astype(int)
    a = [0.8 * y + rng.normal(size=400) for _ in range(3)]
    b = [0.4 * y + rng.normal(size=400) for _ in range(3)]
    boot = paired_bootstrap(y, a, b, n_boot=1500, random_seed=1)
    full = np.mean([roc_auc_score(y, s) for s in a]) - np.mean([roc_auc_score(y, s) for s in b])
    assert boot["difference"] == pytest.approx(full, abs=1e-12)
    assert boot["ci_low"] < full < boot["ci_high"]
    assert boot["ci_low"] > 0 and boot["p_not_greater"] < 0.025
    # one seed: the bootstrap interval width ~ 2 × 1.96 × DeLong's SE
    one = paired_bootstrap(y, a[:1], b[:1], n_boot=1500, random_seed=2)
    width = one["ci_high"] - one["ci_low"]
    assert width == pytest.approx(2 * 1.96 * delong_test(y, a[0], b[0]).se, rel=0.2)


def _predictions(rng, y, carrier, strength):
    return pd.DataFrame(
        {
            "client": ["c1"] * len(y),
            "sample_id": [f"s{i:03d}" for i in range(len(y))],
            "y": y,
            "p": strength * y + rng.normal(size=len(y)),
            "carrier": carrier,
        }
    )


def test_paired_table_carriers_vs_reference_and_errors():
    rng = np.random.default_rng(5)
    y = (rng.random(500) < 0.3).astype(int)
    carrier = rng.random(500) < 0.4
    preds = {
        "fedavg": {s: _predictions(rng, y, carrier, 0.3) for s in range(3)},
        "fedce": {s: _predictions(rng, y, carrier, 1.5) for s in range(3)},
    }
    table = paired_table(preds, reference="fedavg", subset="carrier", n_boot=300)
    row = table.iloc[0]
    assert row.strategy == "fedce" and row.n_samples == carrier.sum()
    assert row.n_cases == y[carrier].sum() and row.n_seeds == 3
    assert row.ci_low > 0 and row.seeds_better == 3 and row.delong_p_max < 0.01
    with pytest.raises(InputDataError, match="reference strategy 'local' has no predictions"):
        paired_table(preds, reference="local")
    shuffled = {**preds, "fedce": {0: preds["fedce"][0].iloc[::-1].reset_index(drop=True)}}
    with pytest.raises(InputDataError, match="different samples"):
        paired_table(shuffled, reference="fedavg")
    with pytest.raises(InputDataError, match="both cases and controls"):
        delong_test(np.zeros(5), np.arange(5), np.arange(5))


def test_paired_table_names_a_subset_without_cases():
    rng = np.random.default_rng(6)
    y = (rng.random(200) < 0.3).astype(int)
    carrier = (rng.random(200) < 0.2) & (y == 0)  # no carrier is a case
    preds = {name: {0: _predictions(rng, y, carrier, 1.0)} for name in ("fedavg", "fedce")}
    with pytest.raises(InputDataError, match=r"subset 'carrier' has 0 cases among \d+ test"):
        paired_table(preds, reference="fedavg", subset="carrier", n_boot=50)
    assert paired_table(preds, reference="fedavg", subset="all", n_boot=50).shape[0] == 1


@pytest.mark.parametrize("seed", range(3))
def test_auc_standard_error_matches_delongs_definition(seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(60) < 0.4).astype(int)
    s = np.round(rng.normal(size=60) + y, 1)  # ties included
    pos, neg = s[y == 1], s[y == 0]
    kernel = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = kernel.mean(axis=1), kernel.mean(axis=0)
    expected = np.sqrt(v10.var(ddof=1) / len(pos) + v01.var(ddof=1) / len(neg))
    assert auc_standard_error(y, s) == pytest.approx(expected)
    assert np.isnan(auc_standard_error(np.array([1, 0, 0]), np.array([0.3, 0.1, 0.2])))
