"""What each strategy computes: oracles for the aggregation rules (names and building:
tests/test_registries.py; the contract every strategy keeps: tests/test_strategy_contract.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies import FitResult, get_strategy, strategy_from_config
from rvfedprs.strategies.aggregation import weighted_average
from rvfedprs.strategies.clustered import bipartition


def _params(rng, scale=1.0):
    return {
        "common.fc0.weight": (scale * rng.normal(size=(4, 1))).astype(np.float32),
        "rare.input.weight": (scale * rng.normal(size=(3, 6))).astype(np.float32),
        "head.weight": (scale * rng.normal(size=(1, 7))).astype(np.float32),
    }


def _round(strategy, rng, client_ids, n_k, scale=0.1):
    instructions = strategy.configure_fit(1, client_ids)
    results = []
    for cid in client_ids:
        start = instructions[cid].parameters
        trained = {
            k: v + scale * rng.normal(size=v.shape).astype(np.float32) for k, v in start.items()
        }
        results.append(FitResult(cid, n_k[cid], trained, {"loss": 0.5}))
    return instructions, results


def test_bad_option_is_a_config_error():
    with pytest.raises(ConfigError, match="strategy 'fedprox'.*proximal_mu must be >= 0"):
        get_strategy("fedprox", proximal_mu=-1)
    with pytest.raises(ConfigError, match="strategy 'fedavg'.*unexpected keyword argument 'mu'"):
        get_strategy("fedavg", mu=1)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 5))
def test_fedavg_equals_numpy_average_and_ignores_order(seed, n):
    rng = np.random.default_rng(seed)
    ids = [f"c{i}" for i in range(n)]
    n_k = {c: int(rng.integers(5, 500)) for c in ids}
    results_by_order = []
    for order in (ids, ids[::-1]):
        s = get_strategy("fedavg")
        s.initialize(_params(np.random.default_rng(seed)), ids)
        _, results = _round(s, np.random.default_rng(seed + 1), ids, n_k)
        s.aggregate_fit(1, [results[ids.index(c)] for c in order])
        results_by_order.append((s.parameters_for("c0"), results))
    (a, results), (b, _) = results_by_order
    for name in a:
        expected = np.average(
            np.stack([r.parameters[name] for r in results]),
            axis=0,
            weights=[r.n_samples for r in results],
        )
        np.testing.assert_allclose(a[name], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(a[name], b[name])


def test_fedprox_mu_zero_equals_fedavg_and_sends_mu():
    ids = ["a", "b", "c"]
    n_k = {"a": 10, "b": 20, "c": 70}
    out = {}
    for name, opts in (("fedavg", {}), ("fedprox", {"proximal_mu": 0.0})):
        s = get_strategy(name, **opts)
        s.initialize(_params(np.random.default_rng(3)), ids)
        instructions, results = _round(s, np.random.default_rng(4), ids, n_k)
        s.aggregate_fit(1, results)
        out[name] = s.parameters_for("a")
    for k in out["fedavg"]:
        np.testing.assert_array_equal(out["fedavg"][k], out["fedprox"][k])
    s = get_strategy("fedprox", proximal_mu=0.3)
    s.initialize(_params(np.random.default_rng(3)), ids)
    assert s.configure_fit(1, ids)["b"].config == {"proximal_mu": 0.3}


def test_fedadam_matches_hand_computed_adam_step():
    ids = ["a", "b"]
    n_k = {"a": 1, "b": 3}
    w0 = _params(np.random.default_rng(5))
    s = get_strategy("fedadam", server_lr=0.5, beta1=0.9, beta2=0.99, tau=1e-3)
    s.initialize(w0, ids)
    m = {k: np.zeros_like(v, dtype=np.float64) for k, v in w0.items()}
    v2 = {k: np.zeros_like(v, dtype=np.float64) for k, v in w0.items()}
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    rng = np.random.default_rng(6)
    for rnd in (1, 2):
        _, results = _round(s, rng, ids, n_k)
        avg = weighted_average([r.parameters for r in results], [r.n_samples for r in results])
        s.aggregate_fit(rnd, results)
        for k in w:
            d = avg[k] - w[k]
            m[k] = 0.9 * m[k] + 0.1 * d
            v2[k] = 0.99 * v2[k] + 0.01 * d**2
            w[k] = w[k] + 0.5 * m[k] / (np.sqrt(v2[k]) + 1e-3)
            np.testing.assert_allclose(s.parameters_for("a")[k], w[k], rtol=1e-4, atol=1e-5)
    state = s.state_dict()
    t = get_strategy("fedadam", server_lr=0.5)
    t.load_state_dict(state)
    np.testing.assert_array_equal(t.m["head.weight"], s.m["head.weight"])


def test_local_only_keeps_each_clients_model():
    ids = ["a", "b"]
    s = get_strategy("local")
    s.initialize(_params(np.random.default_rng(7)), ids)
    _, results = _round(s, np.random.default_rng(8), ids, {"a": 5, "b": 5})
    s.aggregate_fit(1, results)
    for r in results:
        for k, v in r.parameters.items():
            np.testing.assert_array_equal(s.parameters_for(r.client_id)[k], v)
    assert s.configure_fit(2, ids)["b"].parameters["head.weight"].tolist() == (
        results[1].parameters["head.weight"].tolist()
    )


def test_centralized_is_pooled_fedavg():
    s = get_strategy("centralized")
    assert s.pooled and get_strategy("fedavg").pooled is False


def test_bipartition_separates_two_opposed_groups():
    rng = np.random.default_rng(9)
    u, v = rng.normal(size=20), rng.normal(size=20)
    x = np.stack(
        [u + 0.05 * rng.normal(size=20) for _ in range(3)]
        + [v + 0.05 * rng.normal(size=20) for _ in range(3)]
    )
    from rvfedprs.strategies.aggregation import cosine_similarity_matrix

    labels = bipartition(cosine_similarity_matrix(x))
    assert labels.tolist() == [0, 0, 0, 1, 1, 1]


def test_clustered_fl_splits_when_mean_update_small_and_max_large():
    ids = [f"c{i}" for i in range(6)]
    w0 = _params(np.random.default_rng(10), scale=0.0)
    s = get_strategy("clustered", eps1=0.5, eps2=1.0, min_cluster_size=3)
    s.initialize(w0, ids)
    direction = _params(np.random.default_rng(11))
    results = []
    for i, cid in enumerate(ids):
        sign = 1.0 if i < 3 else -1.0  # two groups pulling in opposite directions
        results.append(FitResult(cid, 10, {k: sign * v for k, v in direction.items()}))
    s.aggregate_fit(1, results)
    clusters = s.clusters()
    assert len(set(clusters.values())) == 2
    assert clusters["c0"] == clusters["c1"] == clusters["c2"] != clusters["c3"]
    for k, v in direction.items():
        np.testing.assert_allclose(s.parameters_for("c0")[k], v, rtol=1e-6)
        np.testing.assert_allclose(s.parameters_for("c5")[k], -v, rtol=1e-6)
    # no split when every client agrees
    t = get_strategy("clustered", eps1=0.5, eps2=1.0)
    t.initialize(w0, ids)
    t.aggregate_fit(1, [FitResult(c, 10, direction) for c in ids])
    assert set(t.clusters().values()) == {0}
    restored = get_strategy("clustered")
    restored.load_state_dict(s.state_dict())
    assert restored.clusters() == clusters


def test_strategy_from_config_passes_options():
    from rvfedprs.config import validate_config

    config = validate_config({"train": {"proximal_mu": 0.2, "server_lr": 0.3}})
    assert strategy_from_config("fedprox", config).proximal_mu == 0.2
    assert strategy_from_config("fedadam", config).server_lr == 0.3
