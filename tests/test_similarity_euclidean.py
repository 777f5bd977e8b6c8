"""Euclidean embedding distance (000_* §2.2) against a naive reference."""

import numpy as np
import pytest

from rvfedprs import similarity


def test_without_pca_equals_distance_of_means():
    rng = np.random.default_rng(0)
    embs = [rng.normal(size=(20 + i, 5)) + i for i in range(3)]
    d = similarity.compute("euclidean", embs, n_components=None)
    means = [e.mean(axis=0) for e in embs]
    assert d[0, 2] == pytest.approx(np.linalg.norm(means[0] - means[2]))
    np.testing.assert_allclose(d, d.T)
    assert np.all(np.diag(d) == 0)


def test_pca_identical_zero_and_monotone():
    rng = np.random.default_rng(1)
    base = rng.normal(size=(100, 8))
    direction = np.eye(8)[0]
    assert similarity.compute("euclidean", [base, base.copy()])[0, 1] == pytest.approx(0, abs=1e-9)
    ds = [
        similarity.compute("euclidean", [base, base + s * direction])[0, 1]
        for s in (0.5, 1.0, 2.0, 4.0)
    ]
    assert np.all(np.diff(ds) > 0)


def test_bad_shapes():
    with pytest.raises(ValueError, match="different dimensions"):
        similarity.compute("euclidean", [np.ones((3, 2)), np.ones((3, 4))])
    with pytest.raises(ValueError, match="client 1"):
        similarity.compute("euclidean", [np.ones((3, 2)), np.ones((0, 2))])
