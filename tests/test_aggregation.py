import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rvfedprs.strategies import aggregation as agg


def _params(rng, shapes=(("common.w", (3, 2)), ("rare.input.weight", (4, 5)), ("head.b", (1,)))):
    return {name: rng.normal(size=shape).astype(np.float32) for name, shape in shapes}


@settings(max_examples=30, deadline=None)
@given(n_clients=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_weighted_average_equals_numpy_average(n_clients, seed):
    rng = np.random.default_rng(seed)
    clients = [_params(rng) for _ in range(n_clients)]
    n_k = rng.integers(1, 1000, size=n_clients)
    out = agg.weighted_average(clients, n_k)
    for name in clients[0]:
        expected = np.average(np.stack([c[name] for c in clients]), axis=0, weights=n_k)
        np.testing.assert_allclose(out[name], expected, rtol=1e-5, atol=1e-6)
        assert out[name].dtype == np.float32


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_clients=st.integers(2, 6))
def test_weighted_average_invariant_to_client_order(seed, n_clients):
    rng = np.random.default_rng(seed)
    clients = [_params(rng) for _ in range(n_clients)]
    n_k = list(rng.integers(1, 50, size=n_clients))
    perm = rng.permutation(n_clients)
    a = agg.weighted_average(clients, n_k)
    b = agg.weighted_average([clients[i] for i in perm], [n_k[i] for i in perm])
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-6, atol=1e-7)


def test_apply_weighted_delta_is_eq4_and_equals_average_when_all_start_equal():
    rng = np.random.default_rng(0)
    base = _params(rng)
    clients = [_params(rng) for _ in range(3)]
    n_k = [10, 30, 60]
    deltas = [agg.parameter_delta(c, base) for c in clients]
    out = agg.apply_weighted_delta(base, deltas, n_k)
    avg = agg.weighted_average(clients, n_k)
    for name in base:
        manual = base[name] + sum(n / 100 * d[name] for n, d in zip(n_k, deltas, strict=True))
        np.testing.assert_allclose(out[name], manual, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out[name], avg[name], rtol=1e-5, atol=1e-6)


def test_select_prefix_and_flatten():
    rng = np.random.default_rng(1)
    p = _params(rng)
    rare_head = agg.select_prefix(p, ("rare.", "head."))
    assert sorted(rare_head) == ["head.b", "rare.input.weight"]
    flat = agg.flatten_parameters(p)
    assert flat.shape == (6 + 20 + 1,)
    assert flat[0] == pytest.approx(float(p["common.w"].ravel()[0]))


def test_cosine_similarity_matrix_against_naive():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5, 7))
    x[3] = 0.0
    sim = agg.cosine_similarity_matrix(x)
    for i in range(5):
        for j in range(5):
            if i == j:
                assert sim[i, j] == pytest.approx(1.0)
            elif 3 in (i, j):
                assert sim[i, j] == 0.0
            else:
                naive = x[i] @ x[j] / np.linalg.norm(x[i]) / np.linalg.norm(x[j])
                assert sim[i, j] == pytest.approx(naive)


def test_bad_weights_raise():
    p = {"a": np.ones(2)}
    with pytest.raises(ValueError, match="sum > 0"):
        agg.weighted_average([p, p], [0, 0])
    with pytest.raises(ValueError, match="2 parameter sets but 1 weights"):
        agg.weighted_average([p, p], [1])
