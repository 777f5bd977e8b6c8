import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvfedprs.bloom import BloomSpec, encode
from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies import FitResult, get_strategy
from rvfedprs.strategies.aggregation import weighted_average

SPEC = BloomSpec(capacity=200, error_rate=0.01)


def _w0(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "common.fc0.weight": rng.normal(size=(4, 1)).astype(np.float32),
        "common.fc0.bias": rng.normal(size=4).astype(np.float32),
        "rare.input.weight": rng.normal(size=(3, 10)).astype(np.float32),
        "rare.input.bias": rng.normal(size=3).astype(np.float32),
        "head.weight": rng.normal(size=(1, 7)).astype(np.float32),
        "head.bias": rng.normal(size=1).astype(np.float32),
    }


def _bits(group: str, n: int = 40, extra: str = ""):
    keys = [f"{group}:{i}:A:G" for i in range(n)] + [f"{extra}{i}" for i in range(3) if extra]
    return encode(keys, SPEC)


def _fedce(**kw):
    opts = {"bloom_capacity": SPEC.capacity, "bloom_error_rate": SPEC.error_rate, "top_k": 40}
    opts.update(kw)
    return get_strategy("fedce", **opts)


def _results(strategy, groups, n_k, rng, server_round=1):
    instructions = strategy.configure_fit(server_round, sorted(groups))
    out = []
    for c in sorted(groups):
        start = instructions[c].parameters
        trained = {
            k: start[k] + rng.normal(size=start[k].shape).astype(np.float32) for k in sorted(start)
        }
        out.append(FitResult(c, n_k[c], trained, {"loss": 0.1}, _bits(groups[c], extra=c)))
    return out


GROUPS = {"a": "x", "b": "x", "c": "y", "d": "y", "e": "z", "f": "z"}
N_K = {"a": 10, "b": 30, "c": 20, "d": 20, "e": 50, "f": 5}


def test_config_asks_clients_for_influence_and_bloom():
    s = _fedce(top_k=7)
    s.initialize(_w0(), ["a"])
    config = s.configure_fit(1, ["a"])["a"].config
    assert config["influence"] is True and config["top_k"] == 7
    assert config["bloom"] == {"capacity": SPEC.capacity, "error_rate": SPEC.error_rate}


def test_recovers_planted_clusters_and_aggregates_eq4_eq5():
    s = _fedce(n_clusters="auto")
    w0 = _w0()
    s.initialize(w0, list(GROUPS))
    results = _results(s, GROUPS, N_K, np.random.default_rng(1))
    s.aggregate_fit(1, results)
    clusters = s.clusters()
    assert clusters["a"] == clusters["b"] != clusters["c"] == clusters["d"] != clusters["e"]
    assert clusters["e"] == clusters["f"] and len(set(clusters.values())) == 3
    by_id = {r.client_id: r for r in results}
    # eq. 4: backbone over all clients
    backbone = weighted_average([r.parameters for r in results], [r.n_samples for r in results])
    for c in GROUPS:
        model = s.parameters_for(c)
        members = [k for k in GROUPS if clusters[k] == clusters[c]]
        # eq. 5: specialist + head within the cluster, weights n_k / N_m
        within = weighted_average(
            [by_id[k].parameters for k in members], [by_id[k].n_samples for k in members]
        )
        for name, value in model.items():
            expected = backbone[name] if name.startswith("common.") else within[name]
            np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5, err_msg=name)


def test_head_aggregation_global_averages_head_over_everyone():
    s = _fedce(n_clusters=3, head_aggregation="global")
    s.initialize(_w0(), list(GROUPS))
    results = _results(s, GROUPS, N_K, np.random.default_rng(2))
    s.aggregate_fit(1, results)
    everyone = weighted_average([r.parameters for r in results], [r.n_samples for r in results])
    np.testing.assert_allclose(
        s.parameters_for("a")["head.weight"], everyone["head.weight"], rtol=1e-5
    )
    assert not np.allclose(
        s.parameters_for("a")["rare.input.weight"], everyone["rare.input.weight"]
    )


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_one_cluster_with_global_head_equals_fedavg(seed):
    ids = ["a", "b", "c", "d"]
    n_k = {"a": 3, "b": 9, "c": 27, "d": 1}
    fedce = _fedce(n_clusters=1, head_aggregation="global")
    fedavg = get_strategy("fedavg")
    rng_ce, rng_avg = np.random.default_rng(seed), np.random.default_rng(seed)
    fedce.initialize(_w0(seed % 7), ids)
    fedavg.initialize(_w0(seed % 7), ids)
    groups = dict(zip(ids, "wxyz", strict=True))
    for rnd in (1, 2):
        fedce.aggregate_fit(rnd, _results(fedce, groups, n_k, rng_ce, rnd))
        fedavg.aggregate_fit(rnd, _results(fedavg, groups, n_k, rng_avg, rnd))
    for c in ids:
        for name, value in fedavg.parameters_for(c).items():
            np.testing.assert_allclose(fedce.parameters_for(c)[name], value, rtol=1e-5, atol=1e-5)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_invariant_to_client_order(seed):
    outs = []
    for reverse in (False, True):
        s = _fedce(n_clusters="auto")
        s.initialize(_w0(), list(GROUPS))
        results = _results(s, GROUPS, N_K, np.random.default_rng(seed))
        s.aggregate_fit(1, results[::-1] if reverse else results)
        outs.append(s)
    assert outs[0].clusters() == outs[1].clusters()
    for c in GROUPS:
        for name, value in outs[0].parameters_for(c).items():
            np.testing.assert_array_equal(outs[1].parameters_for(c)[name], value)


def test_invariant_to_cluster_label_permutation():
    s = _fedce(n_clusters=3)
    s.initialize(_w0(), list(GROUPS))
    s.aggregate_fit(1, _results(s, GROUPS, N_K, np.random.default_rng(3)))
    state = s.state_dict()
    labels = sorted(state["specialists"])
    perm = dict(zip(labels, labels[1:] + labels[:1], strict=True))  # rotate the labels
    permuted = dict(state)
    permuted["specialists"] = {perm[m]: p for m, p in state["specialists"].items()}
    permuted["assignment"] = {c: int(perm[str(m)]) for c, m in state["assignment"].items()}
    t = _fedce(n_clusters=3)
    t.load_state_dict(permuted)
    round2_s = _results(s, GROUPS, N_K, np.random.default_rng(4), 2)
    round2_t = _results(t, GROUPS, N_K, np.random.default_rng(4), 2)
    s.aggregate_fit(2, round2_s)
    t.aggregate_fit(2, round2_t)
    for c in GROUPS:
        assert perm[str(s.clusters()[c])] == str(t.clusters()[c])
        for name, value in s.parameters_for(c).items():
            np.testing.assert_array_equal(t.parameters_for(c)[name], value)


def test_client_moving_cluster_gets_new_specialist_and_new_cluster_starts_from_mean():
    groups = {"a": "x", "b": "x", "c": "x", "d": "y", "e": "y", "f": "y"}
    s = _fedce(n_clusters=2)
    s.initialize(_w0(), list(groups))
    s.aggregate_fit(1, _results(s, groups, N_K, np.random.default_rng(5)))
    first = s.clusters()
    # round 2: c and f now share a third profile -> {a,b}, {d,e} keep labels, {c,f} is new
    moved = {"a": "x", "b": "x", "c": "w", "d": "y", "e": "y", "f": "w"}
    s.n_clusters = 3
    received = {c: s.parameters_for(c) for c in moved}
    results = _results(s, moved, N_K, np.random.default_rng(6), 2)
    s.aggregate_fit(2, results)
    second = s.clusters()
    assert second["a"] == first["a"] and second["d"] == first["d"]
    new_label = second["c"]
    assert second["f"] == new_label and new_label not in set(first.values())
    by_id = {r.client_id: r for r in results}
    # base = weighted mean of the specialists c and f received; + eq. 5 deltas
    expected = weighted_average(
        [by_id["c"].parameters, by_id["f"].parameters], [N_K["c"], N_K["f"]]
    )
    assert not np.allclose(received["c"]["rare.input.weight"], received["f"]["rare.input.weight"])
    for name in ("rare.input.weight", "head.weight"):
        np.testing.assert_allclose(
            s.parameters_for("c")[name], expected[name], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_array_equal(s.parameters_for("f")[name], s.parameters_for("c")[name])


def test_recluster_every_keeps_assignment_between_reclusterings():
    s = _fedce(n_clusters=2, recluster_every=3)
    groups = {"a": "x", "b": "x", "c": "y", "d": "y"}
    s.initialize(_w0(), list(groups))
    s.aggregate_fit(1, _results(s, groups, N_K, np.random.default_rng(7)))
    before = s.clusters()
    swapped = {"a": "y", "b": "y", "c": "x", "d": "x"}
    swapped_groups = {"a": "x", "b": "y", "c": "x", "d": "y"}
    s.aggregate_fit(2, _results(s, swapped_groups, N_K, np.random.default_rng(8), 2))
    assert s.clusters() == before  # round 2: no re-clustering
    s.aggregate_fit(3, _results(s, swapped_groups, N_K, np.random.default_rng(9), 3))
    assert s.clusters() == before
    s.aggregate_fit(4, _results(s, swapped, N_K, np.random.default_rng(10), 4))
    assert s.clusters()["a"] == s.clusters()["b"]  # round 4 re-clusters
    assert s.clusters()["a"] != s.clusters()["c"]


def test_unseen_client_goes_to_nearest_cluster():
    s = _fedce(n_clusters=3)
    s.initialize(_w0(), list(GROUPS))
    s.aggregate_fit(1, _results(s, GROUPS, N_K, np.random.default_rng(11)))
    label = s.place_client("newcomer", _bits("y", extra="new"))
    assert label == s.clusters()["c"]
    for name, value in s.parameters_for("c").items():
        np.testing.assert_array_equal(s.parameters_for("newcomer")[name], value)


def test_state_dict_round_trip_and_errors():
    s = _fedce(n_clusters=3)
    s.initialize(_w0(), list(GROUPS))
    s.aggregate_fit(1, _results(s, GROUPS, N_K, np.random.default_rng(12)))
    t = _fedce(n_clusters=3)
    t.load_state_dict(s.state_dict())
    assert t.clusters() == s.clusters()
    np.testing.assert_array_equal(
        t.parameters_for("e")["head.bias"], s.parameters_for("e")["head.bias"]
    )
    with pytest.raises(ValueError, match="head_aggregation='cluster'"):
        _fedce(head_aggregation="global").load_state_dict(s.state_dict())
    no_bits = [FitResult("a", 5, s.parameters_for("a"))]
    with pytest.raises(ValueError, match=r"Bloom filter from every client; none from \['a'\]"):
        s.aggregate_fit(2, no_bits)
    with pytest.raises(ConfigError, match="head_aggregation 'both' unknown"):
        _fedce(head_aggregation="both")
