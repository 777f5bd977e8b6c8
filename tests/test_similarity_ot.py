"""OT dataset dissimilarity (003_* Alg. 1–3)."""

import numpy as np
import pytest
from scipy.integrate import trapezoid
from scipy.stats import multivariate_normal

from rvfedprs import similarity
from rvfedprs.similarity.ot import class_statistics, gaussian_hellinger, pairwise_ot_cost


def _client(rng, n=60, d=6, shift=0.0):
    y = rng.integers(0, 2, n)
    centres = np.array([np.r_[3.0, np.zeros(d - 1)], np.r_[0.0, 3.0, np.zeros(d - 2)]])
    h = centres[y] + rng.normal(scale=0.5, size=(n, d))
    h[:, -1] += shift
    return h, y


def test_hellinger_oracle_1d_closed_form_and_numeric():
    # closed form for 1-D Gaussians
    m1, s1, m2, s2 = 0.0, 1.0, 1.0, 2.0
    bc = np.sqrt(2 * s1 * s2 / (s1**2 + s2**2)) * np.exp(-((m1 - m2) ** 2) / (4 * (s1**2 + s2**2)))
    h = gaussian_hellinger(np.r_[m1], np.eye(1) * s1**2, np.r_[m2], np.eye(1) * s2**2)
    assert h == pytest.approx(np.sqrt(1 - bc))
    # numeric integral of sqrt(p q)
    x = np.linspace(-20, 20, 200001)
    p = multivariate_normal(m1, s1**2).pdf(x)
    q = multivariate_normal(m2, s2**2).pdf(x)
    assert h == pytest.approx(np.sqrt(1 - trapezoid(np.sqrt(p * q), x)), abs=1e-6)
    assert gaussian_hellinger(np.zeros(3), np.eye(3), np.zeros(3), np.eye(3)) == 0.0


def test_identical_clients_near_zero_bounded_symmetric():
    rng = np.random.default_rng(0)
    a = _client(rng)
    b = _client(rng, shift=2.0)
    d = similarity.compute("ot", [a[0], a[0].copy(), b[0]], [a[1], a[1], b[1]])
    assert d[0, 1] < 0.02
    np.testing.assert_allclose(d, d.T)
    assert np.all((d >= 0) & (d <= 1))
    assert d[0, 2] > 0.1


def test_monotone_as_clients_pulled_apart():
    rng = np.random.default_rng(2)
    h, y = _client(rng, n=80)
    costs = [
        pairwise_ot_cost(h, y, h + np.r_[np.zeros(5), s], y) for s in (0.0, 0.5, 1.0, 2.0, 4.0)
    ]
    assert np.all(np.diff(costs) > 0), costs
    assert 0 <= costs[0] < costs[-1] <= 1


def test_paper_normalisation_and_no_shared_class():
    rng = np.random.default_rng(3)
    h, y = _client(rng)
    far = -h
    spec = pairwise_ot_cost(h, y, far, y)
    paper = pairwise_ot_cost(h, y, far, y, normalisation="paper")
    assert 0 < spec <= 1 and 0 < paper <= 1 and spec != pytest.approx(paper)
    assert pairwise_ot_cost(h[y == 0], y[y == 0], h[y == 1], y[y == 1]) == 1.0
    with pytest.raises(ValueError, match="normalisation"):
        pairwise_ot_cost(h, y, h, y, normalisation="x")


def test_dp_noise_changes_statistics_and_is_seeded():
    rng = np.random.default_rng(4)
    h, _ = _client(rng)
    mean, cov = class_statistics(h)
    m1, c1 = class_statistics(h, dp_rho=0.5, rng=np.random.default_rng(9))
    m2, _ = class_statistics(h, dp_rho=0.5, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(m1, m2)
    assert not np.allclose(m1, mean)
    assert np.all(np.linalg.eigvalsh(c1) > 0)
    with pytest.raises(ValueError, match="dp_rho"):
        class_statistics(h, dp_rho=-1.0, rng=rng)
