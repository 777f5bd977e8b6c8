"""Membership-inference attacks: metric oracles, an overfit model (advantage >> 0) and a model
independent of its members (advantage ≈ 0)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from rvfedprs.evaluation.attacks.audit import audit_model, balanced_audit_set
from rvfedprs.evaluation.attacks.mia import (
    attack_metrics,
    decision_metrics,
    example_losses,
    is_resolvable,
    lira_offline_scores,
    logit_confidence,
    pooled_attack_metrics,
    tpr_at_fpr,
)
from rvfedprs.evaluation.attacks.outputs import example_logits
from rvfedprs.evaluation.attacks.shadows import reference_population, train_reference_models
from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, get_parameters
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update

MODEL = {"common_hidden": (8,), "rare_hidden": (32,), "dropout": 0.0}


def _naive_tpr_at_fpr(scores, member, level):
    best = 0.0
    for t in np.concatenate([np.unique(scores), [np.inf]]):
        pred = scores >= t
        fpr = pred[~member].mean()
        if fpr <= level + 1e-12:
            best = max(best, pred[member].mean())
    return best


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("level", [0.0, 0.01, 0.1, 0.3])
def test_tpr_at_fpr_matches_naive_reference(seed, level):
    rng = np.random.default_rng(seed)
    member = rng.random(300) < 0.5
    scores = np.round(rng.normal(size=300) + member * 0.8, 1)  # ties on purpose
    assert tpr_at_fpr(scores, member, level) == pytest.approx(
        _naive_tpr_at_fpr(scores, member, level)
    )


def _naive_advantage(scores, member):
    """max over thresholds t (and 'flag nobody') of TPR − FPR, by brute force."""
    best = 0.0
    for t in np.unique(scores):
        pred = scores >= t
        best = max(best, pred[member].mean() - pred[~member].mean())
    return best


@pytest.mark.parametrize("seed", range(3))
def test_advantage_is_max_tpr_minus_fpr_never_the_absolute_value(seed):
    rng = np.random.default_rng(seed)
    member = np.repeat([True, False], 100)
    scores = np.round(rng.normal(size=200) + 0.5 * member, 1)
    m = attack_metrics(scores, member)
    assert m["advantage"] == pytest.approx(_naive_advantage(scores, member))
    assert m["n_members"] == m["n_nonmembers"] == 100
    # an anti-correlated attack: |TPR − FPR| would be large, the advantage is small
    reversed_ = attack_metrics(-scores, member)
    assert reversed_["advantage"] == pytest.approx(_naive_advantage(-scores, member))
    assert reversed_["auc"] == pytest.approx(1 - m["auc"])


def test_perfect_and_reversed_attacks():
    member = np.repeat([True, False], 100)
    perfect = attack_metrics(member.astype(float), member)
    assert perfect["advantage"] == 1.0 and perfect["auc"] == 1.0
    assert perfect["accuracy_advantage"] == 0.5
    worst = attack_metrics(-member.astype(float), member)
    assert worst["advantage"] == 0.0  # not 1: flagging nobody beats a reversed attack
    assert worst["auc"] == 0.0
    assert worst["accuracy_advantage"] == 0.0  # the best held-out threshold flags all or none


def test_chance_attack_has_no_held_out_accuracy_gain():
    rng = np.random.default_rng(7)
    member = np.repeat([True, False], 2000)
    m = attack_metrics(rng.normal(size=4000), member)
    assert abs(m["accuracy_advantage"]) < 3.3 * np.sqrt(0.25 / 4000)
    assert m["advantage"] < 1.95 * np.sqrt(2 / 2000)  # KS critical value at α ≈ 0.001


@pytest.mark.parametrize(
    ("n_nonmembers", "level", "resolved"),
    [(999, 0.01, False), (1000, 0.01, True), (9999, 0.001, False), (10000, 0.001, True)],
)
def test_tpr_at_low_fpr_only_where_the_nonmembers_resolve_it(n_nonmembers, level, resolved):
    assert is_resolvable(n_nonmembers, level) is resolved
    rng = np.random.default_rng(0)
    member = np.concatenate([np.ones(200, bool), np.zeros(n_nonmembers, bool)])
    scores = rng.normal(size=member.size) + 2 * member
    m = attack_metrics(scores, member, fpr_levels=[level])
    value = m[f"tpr_at_{level:g}"]
    assert m["min_resolvable_fpr"] == pytest.approx(10 / n_nonmembers)
    if resolved:
        assert value == pytest.approx(_naive_tpr_at_fpr(scores, member, level))
    else:
        assert np.isnan(value)


def test_pooling_clients_and_seeds_resolves_what_one_audit_cannot():
    rng = np.random.default_rng(3)
    parts = []
    for _ in range(10):  # e.g. 5 clients x 2 seeds, 1,000 non-members each
        member = np.concatenate([np.ones(300, bool), np.zeros(1000, bool)])
        parts.append((rng.normal(size=member.size) + 1.5 * member, member))
    single = attack_metrics(*parts[0])
    assert np.isnan(single["tpr_at_0.001"]) and np.isfinite(single["tpr_at_0.01"])
    pooled = pooled_attack_metrics(parts)
    scores = np.concatenate([s for s, _ in parts])
    member = np.concatenate([m for _, m in parts])
    assert pooled["n_parts"] == 10 and pooled["n_nonmembers"] == 10000
    assert pooled["tpr_at_0.001"] == pytest.approx(_naive_tpr_at_fpr(scores, member, 0.001))
    assert pooled["advantage"] == pytest.approx(attack_metrics(scores, member)["advantage"])


def test_decision_metrics_of_a_rule():
    truth = np.array([True, True, True, False, False, False, False, False])
    rule = np.array([True, True, False, True, False, False, False, False])
    m = decision_metrics(rule, truth)
    assert (m["tpr"], m["fpr"]) == pytest.approx((2 / 3, 1 / 5))
    assert m["rule_advantage"] == pytest.approx(2 / 3 - 1 / 5)
    assert m["advantage"] == pytest.approx(2 / 3 - 1 / 5)  # a binary score has one threshold
    assert m["auc"] == pytest.approx((1 + 2 / 3 - 1 / 5) / 2)
    assert (m["n_positive"], m["n_negative"], m["n_flagged"]) == (3, 5, 3)
    only_positives = decision_metrics(rule[:3], truth[:3])
    assert np.isnan(only_positives["fpr"]) and np.isnan(only_positives["auc"])


def test_logit_confidence_and_loss_match_bce():
    z = np.array([-3.0, -0.5, 0.0, 2.0])
    y = np.array([1.0, 0.0, 1.0, 0.0])
    p = 1 / (1 + np.exp(-z))
    bce = -(y * np.log(p) + (1 - y) * np.log(1 - p))
    np.testing.assert_allclose(example_losses(z, y), bce)
    py = np.where(y == 1, p, 1 - p)
    np.testing.assert_allclose(logit_confidence(z, y), np.log(py / (1 - py)))


def test_lira_scores_rank_by_one_sided_gaussian_test():
    ref = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    scores = lira_offline_scores(np.array([-1.0, 1.0, 4.0]), ref, global_variance=False)
    assert scores[0] < scores[1] < scores[2]
    assert scores[1] == pytest.approx(np.log(2))  # at the OUT mean: Pr[Z > μ] = 1/2
    with pytest.raises(ValueError, match="at least 2 reference models"):
        lira_offline_scores(np.zeros(3), ref[:1])


def _population(n, n_rare, rng, client="c"):
    rare = sp.csr_matrix((rng.random((n, n_rare)) < 0.15).astype(np.float32))
    return ClientData(
        client,
        np.array([f"{client}{i}" for i in range(n)]),
        rng.normal(size=n).astype(np.float32),
        rare,
        (rng.random(n) < 0.5).astype(np.float32),  # labels unrelated to features: only memory
    )


def _train(data, epochs, seed):
    model = TwoPathwayModel(data.n_rare, common_hidden=(8,), rare_hidden=(32,), random_seed=seed)
    cfg = LocalTrainingConfig(epochs=epochs, lr=0.1, momentum=0.9, batch_size=32)
    local_update(model, data, cfg, random_seed=seed)
    return get_parameters(model)


@pytest.fixture(scope="module")
def overfit_setup():
    rng = np.random.default_rng(0)
    members = _population(80, 60, rng, "m")
    nonmembers = _population(80, 60, rng, "n")
    population = _population(160, 60, rng, "p")
    target = _train(members, 80, 1)
    independent = _train(population.subset(np.arange(80)), 80, 2)
    refs = train_reference_models(
        population,
        n_models=3,
        model_config=MODEL,
        training=LocalTrainingConfig(epochs=80, lr=0.1, momentum=0.9, batch_size=32),
        random_seed=3,
    )
    audit = balanced_audit_set(members, nonmembers, random_seed=0)
    return target, independent, refs, audit


def test_overfit_model_is_vulnerable(overfit_setup):
    target, _, refs, audit = overfit_setup
    rows, scores = audit_model(target, audit, MODEL, reference_parameters=refs)
    general = {r["attack"]: r for r in rows if r["subset"] == "general"}
    n = int(audit.is_member.sum())
    ks_crit = 1.95 * np.sqrt(2 / n)  # two-sample KS critical value at α ≈ 0.001
    assert general["loss"]["advantage"] > 0.6, general["loss"]
    assert general["loss"]["accuracy_advantage"] > 0.25
    assert general["loss"]["auc"] > 0.7
    # offline LiRA with 3 OUT models is weaker here, but still far from chance
    assert general["lira_offline"]["advantage"] > ks_crit, general["lira_offline"]
    assert general["lira_offline"]["auc"] > 0.65
    assert scores["loss"].shape == audit.is_member.shape


def test_model_independent_of_members_gives_no_advantage(overfit_setup):
    _, independent, refs, audit = overfit_setup
    rows, _ = audit_model(independent, audit, MODEL, reference_parameters=refs)
    n = int(audit.is_member.sum())
    ks_crit = 1.95 * np.sqrt(2 / n)  # two-sample KS critical value at α ≈ 0.001
    binom_half = 3.3 * np.sqrt(0.25 / (2 * n))  # accuracy on 2n held-out examples, ≈ 99.9%
    for r in rows:
        if r["subset"] != "general":
            continue
        assert r["advantage"] < ks_crit, r
        assert abs(r["accuracy_advantage"]) < binom_half, r


def test_example_logits_match_model_forward(overfit_setup):
    target, _, _, audit = overfit_setup
    model = TwoPathwayModel(audit.data.n_rare, common_hidden=(8,), rare_hidden=(32,))
    from rvfedprs.model import set_parameters
    from rvfedprs.training import evaluate

    set_parameters(model, target)
    p = evaluate(model, audit.data)
    z = example_logits(target, audit.data, MODEL)
    np.testing.assert_allclose(1 / (1 + np.exp(-z)), p, rtol=1e-5, atol=1e-6)


def test_balanced_audit_set_balances_general_and_carriers():
    rng = np.random.default_rng(4)
    members, nonmembers = _population(80, 10, rng, "m"), _population(30, 10, rng, "n")
    mc = np.zeros(80, bool)
    mc[:20] = True
    nc = np.zeros(30, bool)
    nc[:5] = True
    audit = balanced_audit_set(
        members, nonmembers, member_carriers=mc, nonmember_carriers=nc, random_seed=1
    )
    g, c = audit.general, audit.is_carrier
    assert audit.is_member[g].sum() == (~audit.is_member[g]).sum() == 30
    assert audit.is_member[c].sum() == (~audit.is_member[c]).sum() == 5
    assert len(set(audit.data.sample_ids)) == audit.data.n_samples


def test_bad_inputs_raise_clear_errors(overfit_setup):
    target, _, _, audit = overfit_setup
    with pytest.raises(InputDataError, match=r"attacks \['shadow'\] unknown"):
        audit_model(target, audit, MODEL, attacks=["shadow"])
    with pytest.raises(InputDataError, match="LiRA needs at least 2 reference models, got 0"):
        audit_model(target, audit, MODEL, attacks=["lira"])
    rng = np.random.default_rng(0)
    pool = {"a": _population(5, 4, rng, "a")}
    with pytest.raises(InputDataError, match="every client is excluded"):
        reference_population(pool, exclude=["a"])


def test_the_schema_enumerates_the_registered_attacks():
    import json
    from importlib import resources

    from rvfedprs.evaluation.attacks import ATTACK_ALIASES, ATTACKS, resolve_attacks

    schema = json.loads((resources.files("rvfedprs") / "schemas" / "mia.schema.json").read_text())
    names = schema["properties"]["attacks"]["items"]["enum"]
    assert set(names) == set(ATTACKS) | set(ATTACK_ALIASES)
    assert resolve_attacks(["lira", "loss", "lira_offline"]) == ["lira_offline", "loss"]


@pytest.mark.parametrize("seed", range(3))
def test_held_out_threshold_accuracy_matches_brute_force(seed):
    from rvfedprs.evaluation.attacks.mia import _threshold_accuracy

    rng = np.random.default_rng(seed)
    for _ in range(50):
        n = int(rng.integers(2, 60))
        s, y = np.round(rng.normal(size=n), 1), rng.random(n) < 0.5
        s2, y2 = np.round(rng.normal(size=n), 1), rng.random(n) < 0.5
        candidates = np.concatenate([np.unique(s), [np.inf]])
        accuracy = ((s[None, :] >= candidates[:, None]) == y[None, :]).mean(axis=1)
        t = candidates[int(np.argmax(accuracy))]
        assert _threshold_accuracy(s, y, s2, y2) == ((s2 >= t) == y2).mean()
