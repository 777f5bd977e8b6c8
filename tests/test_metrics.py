import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from rvfedprs.evaluation import Truth, carrier_masks, federation_metrics, load_truth
from rvfedprs.evaluation.metrics import (
    auprc,
    between_client_sd,
    calibration,
    causal_carrier_mask,
    client_auc_summary,
    cluster_ari,
    headline_gain_recovered,
    roc_auc,
    signal_share,
    true_client_clusters,
)
from rvfedprs.exceptions import InputDataError
from rvfedprs.training import ClientData


def _naive_auc(y, s):
    pos, neg = s[y == 1], s[y == 0]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def _naive_ap(y, s):
    order = np.argsort(-s, kind="stable")
    y = y[order]
    s = s[order]
    ap, tp = 0.0, 0
    # distinct thresholds: precision at each recall step
    thresholds = np.unique(s)[::-1]
    prev_recall = 0.0
    for t in thresholds:
        sel = s >= t
        tp = y[sel].sum()
        precision = tp / sel.sum()
        recall = tp / y.sum()
        ap += (recall - prev_recall) * precision
        prev_recall = recall
    return ap


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(4, 40))
def test_auc_and_auprc_against_naive(seed, n):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n)
    s = np.round(rng.normal(size=n), 1)  # ties included
    if y.min() == y.max():
        assert np.isnan(roc_auc(y, s))
        return
    assert roc_auc(y, s) == pytest.approx(_naive_auc(y, s))
    assert auprc(y, s) == pytest.approx(_naive_ap(y, s))


def test_degenerate_inputs():
    assert np.isnan(roc_auc([1, 1], [0.1, 0.2]))
    assert np.isnan(auprc([0, 0], [0.1, 0.2]))
    with pytest.raises(ValueError, match="y_true has 2 values but score has 3"):
        roc_auc([0, 1], [0.1, 0.2, 0.3])


def test_causal_carrier_mask_against_naive_loop():
    rng = np.random.default_rng(0)
    keys = [f"1:{i}:A:G" for i in range(12)]
    dense = (rng.random((50, 12)) < 0.15).astype(np.float32)
    clusters = rng.integers(0, 3, 50)
    truth = pd.DataFrame(
        {
            "variant_key": ["1:1:A:G", "1:5:A:G", "1:7:A:G", "1:9:A:G", "2:1:C:T", "1:3:A:G"],
            "kind": ["rare", "rare", "rare", "rare", "rare", "common"],
            "cluster": [0.0, 1.0, 1.0, 2.0, 0.0, np.nan],
        }
    )
    mask = causal_carrier_mask(sp.csr_matrix(dense), keys, clusters, truth)
    causal = {0: [1], 1: [5, 7], 2: [9]}
    naive = np.array([any(dense[i, j] > 0 for j in causal[clusters[i]]) for i in range(50)])
    np.testing.assert_array_equal(mask, naive)
    assert mask.any() and not mask.all()


def test_true_clusters_and_ari_invariant_to_label_permutation():
    samples = pd.DataFrame(
        {
            "sample_id": list("abcdef"),
            "client": ["c1", "c1", "c2", "c2", "c3", "c3"],
            "cluster": [0, 0, 1, 1, 1, 0],
        }
    )
    assert true_client_clusters(samples) == {"c1": "0", "c2": "1", "c3": "0"}
    truth = {"c1": 0, "c2": 1, "c3": 0, "c4": 1}
    assert cluster_ari({"c1": 5, "c2": 2, "c3": 5, "c4": 2}, truth) == pytest.approx(1.0)
    assert cluster_ari({"c1": 0, "c2": 0, "c3": 0, "c4": 0}, truth) == pytest.approx(0.0)


def test_summary_and_headline():
    mean, std = client_auc_summary({"a": 0.6, "b": 0.8, "c": float("nan")})
    assert mean == pytest.approx(0.7) and std == pytest.approx(0.1)
    assert headline_gain_recovered(0.79, 0.6, 0.8) == pytest.approx(0.95)


def _client(cid, y, n_rare=3):
    n = len(y)
    return ClientData(
        cid, [f"{cid}_{i}" for i in range(n)], np.zeros(n), sp.csr_matrix((n, n_rare)), y
    )


def test_federation_metrics_pools_and_restricts_to_carriers():
    test = {"a": _client("a", [0, 1, 0, 1]), "b": _client("b", [1, 0, 0])}
    pred = {"a": np.array([0.1, 0.9, 0.2, 0.3]), "b": np.array([0.4, 0.5, 0.05])}
    carriers = {"a": np.array([True, True, False, False]), "b": np.array([True, True, False])}
    m = federation_metrics(pred, test, carriers=carriers)
    y = np.array([0, 1, 0, 1, 1, 0, 0.0])
    p = np.concatenate([pred["a"], pred["b"]])
    assert m["auc"] == pytest.approx(_naive_auc(y, p))
    assert m["carrier_auc"] == pytest.approx(0.75) and m["n_carriers"] == 4
    assert m["client_auc"] == {"a": 1.0, "b": 0.5}
    assert m["client_auc_mean"] == pytest.approx(0.75)


def test_truth_loading_and_missing_samples(tmp_path):
    (tmp_path / "samples.tsv").write_text("sample_id\tpopulation\tcluster\tclient\na_0\tp\t0\ta\n")
    (tmp_path / "causal.tsv").write_text("variant_key\tkind\tcluster\n1:1:A:G\trare\t0\n")
    truth = load_truth(tmp_path / "causal.tsv", tmp_path / "samples.tsv")
    assert isinstance(truth, Truth)
    test = {"a": _client("a", [0, 1])}
    with pytest.raises(
        InputDataError, match="1 test samples of client 'a' are absent from the samples sheet: a_1"
    ):
        carrier_masks(test, ["1:0:A:G", "1:1:A:G", "1:2:A:G"], truth)
    with pytest.raises(InputDataError, match="samples sheet not found: .*nope.tsv"):
        load_truth(None, tmp_path / "nope.tsv")


def test_calibration_matches_maximum_likelihood_fits():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    z = rng.normal(size=4000)
    p = 1 / (1 + np.exp(-z))
    y = (rng.random(4000) < 1 / (1 + np.exp(-(0.3 + 0.6 * z)))).astype(int)  # over-confident p
    cal = calibration(y, p)
    fit = LogisticRegression(C=np.inf, tol=1e-10, max_iter=1000).fit(z[:, None], y)
    assert cal["slope"] == pytest.approx(fit.coef_[0, 0], abs=1e-5)
    # calibration-in-the-large: the offset model's intercept solves Σ y = Σ sigmoid(a + z)
    a = cal["intercept"]
    assert np.sum(1 / (1 + np.exp(-(a + z)))) == pytest.approx(y.sum(), rel=1e-8)
    assert 0.45 < cal["slope"] < 0.75  # the truth is 0.6
    order = np.argsort(p, kind="stable")
    ece = sum(len(b) / 4000 * abs(y[b].mean() - p[b].mean()) for b in np.array_split(order, 10))
    assert cal["ece"] == pytest.approx(ece)
    # perfectly calibrated predictions: slope ≈ 1, intercept ≈ 0
    y2 = (rng.random(4000) < p).astype(int)
    ideal = calibration(y2, p)
    assert abs(ideal["slope"] - 1) < 0.15 and abs(ideal["intercept"]) < 0.15
    assert np.isnan(calibration(np.zeros(5), np.full(5, 0.2))["slope"])


def test_between_client_sd_removes_sampling_noise():
    rng = np.random.default_rng(1)
    # 200 clients sharing one true AUC: the observed spread is sampling noise only
    se = {f"c{i}": 0.02 for i in range(200)}
    auc = {c: 0.7 + rng.normal(scale=0.02) for c in se}
    out = between_client_sd(auc, se)
    assert out["sd_observed"] == pytest.approx(np.std(list(auc.values()), ddof=1))
    assert out["mean_se"] == pytest.approx(0.02)
    assert out["sd_corrected"] < 0.01  # floored at 0 or close to it
    # a real spread of 0.05 on top of the noise is recovered
    auc = {c: 0.7 + rng.normal(scale=0.05) + rng.normal(scale=0.02) for c in se}
    assert between_client_sd(auc, se)["sd_corrected"] == pytest.approx(0.05, abs=0.01)
    assert np.isnan(between_client_sd({"a": 0.6}, {"a": 0.02})["sd_corrected"])


def test_signal_share():
    assert signal_share(0.70, 0.60, 0.80) == pytest.approx(0.5)
    assert np.isnan(signal_share(0.70, 0.80, 0.80))  # nothing learnable


def test_federation_metrics_reference_aucs_and_clusters(tmp_path):
    test = {"a": _client("a", [0, 1, 0, 1]), "b": _client("b", [1, 0, 0, 1])}
    test["a"] = ClientData("a", test["a"].sample_ids, [0.1, 0.2, 0.3, 0.0], test["a"].rare,
                           test["a"].y)  # fmt: skip
    pred = {"a": np.array([0.1, 0.9, 0.2, 0.3]), "b": np.array([0.4, 0.5, 0.05, 0.6])}
    genetic = {"a": np.array([0.0, 1.0, 0.1, 0.9]), "b": np.array([1.0, 0.0, 0.1, 0.9])}
    clusters = {"a": np.array(["1", "1", "1", "1"]), "b": np.array(["2", "2", "2", "2"])}
    carriers = {"a": np.array([True, True, False, True]), "b": np.array([True, True, True, True])}
    m = federation_metrics(pred, test, carriers=carriers, genetic=genetic, sample_clusters=clusters)
    y = np.concatenate([test["a"].y, test["b"].y])
    prs = np.concatenate([test["a"].prs, test["b"].prs])
    g = np.concatenate([genetic["a"], genetic["b"]])
    assert m["prs_only_auc"] == pytest.approx(_naive_auc(y, prs))
    assert m["oracle_auc"] == pytest.approx(_naive_auc(y, g)) and m["oracle_auc"] == 1.0
    mask = np.concatenate([carriers["a"], carriers["b"]])
    assert m["carrier_oracle_auc"] == pytest.approx(_naive_auc(y[mask], g[mask]))
    assert set(m["cluster_metrics"]) == {"1", "2"}
    one = m["cluster_metrics"]["1"]
    assert one["auc"] == pytest.approx(m["client_auc"]["a"]) and one["n"] == 4
    assert one["n_carriers"] == 3 and "calibration_slope" in one
    assert m["client_auc_se"]["a"] == pytest.approx(0.0)  # a perfectly separated client
    # truth: genetic values are read beside the causal table, samples named when missing
    (tmp_path / "samples.tsv").write_text(
        "sample_id\tpopulation\tcluster\tclient\na_0\tp\t1\ta\na_1\tp\t1\ta\n"
    )
    (tmp_path / "causal_variants.tsv").write_text("variant_key\tkind\tcluster\n1:1:A:G\trare\t1\n")
    (tmp_path / "genetic_values.tsv").write_text(
        "sample_id\tgenetic_common\tgenetic_rare\na_0\t0.5\t0.25\na_1\t-1\t0\n"
    )
    truth = load_truth(tmp_path / "causal_variants.tsv", tmp_path / "samples.tsv")
    np.testing.assert_allclose(truth.genetic_values(["a_1", "a_0"]), [-1.0, 0.75])
    assert list(truth.sample_clusters(["a_0"])) == ["1"]
    with pytest.raises(InputDataError, match="1 samples are absent from the genetic values: zz"):
        truth.genetic_values(["a_0", "zz"])
