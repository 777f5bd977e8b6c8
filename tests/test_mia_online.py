"""Online LiRA and RMIA: formula oracles, the shadow design, and shadow federations on a toy
where membership leaks (a model memorising random labels) and where it cannot (a model that
never saw its members)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.stats import norm

from rvfedprs.evaluation.attacks import (
    audit_federation,
    pool_audits,
    train_shadow_federations,
)
from rvfedprs.evaluation.attacks.mia import lira_online_scores, rmia_scores
from rvfedprs.evaluation.attacks.shadows import shadow_splits
from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, get_parameters
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update

MODEL = {"common_hidden": (8,), "rare_hidden": (32,), "dropout": 0.0}
TRAINING = LocalTrainingConfig(epochs=30, lr=0.2, momentum=0.9, batch_size=30)


def test_lira_online_is_the_gaussian_likelihood_ratio():
    rng = np.random.default_rng(0)
    shadow = rng.normal(size=(6, 5))
    is_in = np.zeros((6, 5), bool)
    is_in[::2] = True  # models 0, 2, 4 are IN for every example
    target = rng.normal(size=5)
    scores = lira_online_scores(target, shadow, is_in, global_variance=False)
    for j in range(5):
        a, b = shadow[is_in[:, j], j], shadow[~is_in[:, j], j]
        expected = norm.logpdf(target[j], a.mean(), a.std(ddof=1)) - norm.logpdf(
            target[j], b.mean(), b.std(ddof=1)
        )
        assert scores[j] == pytest.approx(expected)
    # pooled σ: squared deviations from each example's mean over all examples, ddof per example
    pooled = lira_online_scores(target, shadow, is_in, global_variance=True)
    a, b = shadow[::2], shadow[1::2]
    sd_in = np.sqrt(((a - a.mean(0)) ** 2).sum() / (5 * 2))
    sd_out = np.sqrt(((b - b.mean(0)) ** 2).sum() / (5 * 2))
    expected = norm.logpdf(target, a.mean(0), sd_in) - norm.logpdf(target, b.mean(0), sd_out)
    np.testing.assert_allclose(pooled, expected)


def test_lira_online_needs_both_sides():
    with pytest.raises(ValueError, match="2 examples lack an IN or an OUT shadow model"):
        lira_online_scores(np.zeros(2), np.zeros((4, 2)), np.array([[1, 0]] * 4, bool))


def _naive_rmia(tx, rx, tz, rz, gamma, a=None):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731

    def marginal(r):
        m = sig(r).mean(axis=0)
        return m if a is None else 0.5 * ((1 + a) * m + (1 - a))

    ratio_x = sig(tx) / marginal(rx)
    ratio_z = sig(tz) / marginal(rz)
    return np.array([np.mean([(rx_ / rz_) >= gamma for rz_ in ratio_z]) for rx_ in ratio_x])


@pytest.mark.parametrize(("gamma", "a"), [(1.0, None), (2.0, None), (1.0, 0.3)])
def test_rmia_matches_pairwise_definition(gamma, a):
    rng = np.random.default_rng(1)
    tx, rx = rng.normal(size=30), rng.normal(size=(4, 30))
    tz, rz = rng.normal(size=50), rng.normal(size=(4, 50))
    got = rmia_scores(tx, rx, tz, rz, gamma=gamma, offline_a=a)
    np.testing.assert_allclose(got, _naive_rmia(tx, rx, tz, rz, gamma, a))
    with pytest.raises(ValueError, match="gamma must be >= 1"):
        rmia_scores(tx, rx, tz, rz, gamma=0.5)


def test_shadow_splits_are_complementary_and_stratified():
    y = np.array([1] * 7 + [0] * 30)
    splits = shadow_splits(y, 6, random_seed=3)
    assert splits.shape == (6, 37)
    assert (splits.sum(axis=0) == 3).all()  # every candidate IN for exactly half
    for pair in range(3):
        assert (splits[2 * pair] ^ splits[2 * pair + 1]).all()
    for s in splits:
        assert abs(int(s[y == 1].sum()) - 3.5) <= 0.5 and int(s[y == 0].sum()) == 15
    with pytest.raises(ValueError, match="even and >= 2"):
        shadow_splits(y, 3, random_seed=0)


def _client(name, n, rng, n_rare=40):
    rare = sp.csr_matrix((rng.random((n, n_rare)) < 0.15).astype(np.float32))
    y = (rng.random(n) < 0.5).astype(np.float32)  # labels unrelated to features: only memory
    return ClientData(name, [f"{name}_{i}" for i in range(n)], rng.normal(size=n), rare, y)


def _local_models(sets, seed):
    """The toy's 'federation': every client trains alone (what the target did too)."""
    out = {}
    for i, (client, data) in enumerate(sorted(sets.items())):
        model = TwoPathwayModel(data.n_rare, common_hidden=(8,), rare_hidden=(32,),
                                random_seed=seed + i)  # fmt: skip
        local_update(model, data, TRAINING, random_seed=seed + i)
        out[client] = get_parameters(model)
    return out.__getitem__


@pytest.fixture(scope="module")
def toy():
    rng = np.random.default_rng(0)
    train = {c: _client(c, 60, rng) for c in ("a", "b")}
    test = {c: _client(c + "t", 60, rng) for c in ("a", "b")}
    memorising = _local_models(train, 100)
    blind = _local_models({c: _client(c + "x", 60, rng) for c in ("a", "b")}, 200)
    calls = []
    shadows = train_shadow_federations(
        train, test, lambda sets, seed: (calls.append(sets) or _local_models(sets, seed)),
        MODEL, n_shadow=4, random_seed=5,
    )  # fmt: skip
    return train, test, memorising, blind, shadows, calls


def test_shadow_federations_train_on_halves_of_each_clients_candidates(toy):
    train, test, _, _, shadows, calls = toy
    assert len(calls) == 4 and shadows.n_shadow == 4
    for c in ("a", "b"):
        assert shadows.candidates[c].n_samples == 120 and shadows.n_train[c] == 60
        assert (shadows.is_in[c].sum(axis=0) == 2).all()
        for s, sets in enumerate(calls):  # the shadow trained on exactly its IN candidates
            expected = shadows.candidates[c].sample_ids[shadows.is_in[c][s]]
            assert sorted(sets[c].sample_ids) == sorted(expected)
        assert shadows.confidence[c].shape == (4, 240)
    view = shadows.view("a", np.array([0, 61]))
    assert view.population.n_samples == 60  # client b's test split
    assert set(view.population.sample_ids) == set(test["b"].sample_ids)


def _audit(toy, model):
    train, test, *_ = toy
    shadows = toy[4]
    return audit_federation(
        model, train, test, ["a", "b"], MODEL,
        attacks=["loss", "lira_online", "rmia"], shadows=shadows, random_seed=1,
    )  # fmt: skip


def test_online_attacks_detect_memorised_members(toy):
    rows, scores = _audit(toy, toy[2])
    pooled = {(r["attack"], r["subset"]): r for r in pool_audits([scores])}
    n = 120  # members (and non-members) pooled over the two clients
    ks_crit = 1.95 * np.sqrt(2 / n)  # two-sample KS critical value at α ≈ 0.001
    for attack in ("lira_online", "rmia"):
        general = pooled[(attack, "general")]
        assert general["advantage"] > max(ks_crit, 0.4), general
        assert general["auc"] > 0.75, general
    assert {r["client"] for r in rows} == {"a", "b"}


def test_online_attacks_see_nothing_in_a_model_blind_to_its_members(toy):
    _, scores = _audit(toy, toy[3])
    pooled = {(r["attack"], r["subset"]): r for r in pool_audits([scores])}
    ks_crit = 1.95 * np.sqrt(2 / 120)
    for attack in ("loss", "lira_online", "rmia"):
        general = pooled[(attack, "general")]
        assert general["advantage"] < ks_crit, general
        assert abs(general["auc"] - 0.5) < 0.15, general


def test_shadow_attacks_need_shadows(toy):
    train, test, model, *_ = toy
    with pytest.raises(InputDataError, match="'rmia' needs shadow federations"):
        audit_federation(model, train, test, ["a"], MODEL, attacks=["rmia"])
    with pytest.raises(InputDataError, match=r"attacks \['lira_onlin'\] unknown"):
        audit_federation(model, train, test, ["a"], MODEL, attacks=["lira_onlin"])


def test_pool_audits_per_cluster_and_over_runs(toy):
    _, scores = _audit(toy, toy[2])
    rows = pool_audits([scores, scores], clusters={"a": 1, "b": 2})
    by = {(r["attack"], r["subset"], r["cluster"]): r for r in rows}
    assert by[("loss", "general", "all")]["n_nonmembers"] == 2 * 120
    assert by[("loss", "general", "1")]["n_nonmembers"] == 2 * 60
    assert by[("loss", "general", "1")]["n_clients"] == 1
    assert by[("loss", "general", "all")]["n_runs"] == 2
    # no carriers in this toy: carrier rows report the counts and NaN metrics
    assert np.isnan(by[("loss", "carriers", "all")]["auc"])
