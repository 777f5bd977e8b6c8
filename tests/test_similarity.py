import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_bloom import exact_jaccard  # noqa: E402

from rvfedprs import similarity  # noqa: E402
from rvfedprs.bloom import BloomSpec, encode  # noqa: E402
from rvfedprs.exceptions import InputDataError  # noqa: E402
from rvfedprs.similarity.jaccard import jaccard_matrix  # noqa: E402


def _client_sets(seed=0, k=6, pool=3000):
    rng = np.random.default_rng(seed)
    sets = []
    for _ in range(k):
        size = int(rng.integers(20, 600))
        ids = rng.choice(pool, size=size, replace=False)
        sets.append([f"1:{i}:A:G" for i in ids])
    sets.append([])  # a client with no influential variant
    return sets


def test_jaccard_matrix_against_exact_oracle():
    spec = BloomSpec()
    sets = _client_sets()
    s = jaccard_matrix([encode(x, spec) for x in sets], spec)
    k = len(sets)
    assert s.shape == (k, k)
    np.testing.assert_array_equal(s, s.T)
    np.testing.assert_array_equal(np.diag(s), np.ones(k))
    assert np.all((s >= 0) & (s <= 1))
    exact = np.array([[exact_jaccard(a, b) for b in sets] for a in sets])
    np.fill_diagonal(exact, 1.0)
    off = ~np.eye(k, dtype=bool)
    assert np.abs(s - exact)[off].max() < 0.03
    assert np.all(s[-1, :-1] == 0.0)  # the empty filter shares nothing


def test_registry_and_distance_conversion():
    assert "jaccard" in similarity.available()
    method = similarity.get_method("jaccard")
    assert method.kind == "similarity" and method.func is jaccard_matrix
    spec = BloomSpec()
    bits = [encode(x, spec) for x in _client_sets(k=3)]
    s = similarity.compute("jaccard", bits, spec)
    d = similarity.to_distance(s, method.kind)
    np.testing.assert_allclose(d, 1 - s)
    assert np.all(np.diag(d) == 0)
    np.testing.assert_array_equal(similarity.to_distance(d, "distance"), d)
    with pytest.raises(ValueError, match=r"similarity method 'jacard' unknown; choose from \["):
        similarity.get_method("jacard")
    with pytest.raises(ValueError, match="already registered"):
        similarity.register("jaccard", kind="similarity")(lambda: None)


def test_registry_is_extensible():
    @similarity.register("_test_constant", kind="distance")
    def constant(k):
        return np.ones((k, k)) - np.eye(k)

    try:
        assert "_test_constant" in similarity.available()
        np.testing.assert_array_equal(similarity.compute("_test_constant", 2), [[0, 1], [1, 0]])
    finally:
        similarity._REGISTRY.pop("_test_constant")


def test_mismatched_filters_are_rejected():
    spec = BloomSpec()
    bits = [encode(["a"], spec), encode(["a"], BloomSpec(capacity=50))]
    with pytest.raises(InputDataError, match="filter 1 has"):
        jaccard_matrix(bits, spec)
