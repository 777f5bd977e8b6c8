"""EMD distances (000_* §2.1, App. C) against scipy / hand-computed references."""

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from rvfedprs import similarity
from rvfedprs.similarity.emd import combine_emd, emd_pairwise


def test_registered_as_distance():
    assert similarity.get_method("emd").kind == "distance"


def test_pairwise_matches_scipy_and_axioms():
    rng = np.random.default_rng(0)
    values = [rng.normal(loc, 1.0, size=50 + 10 * i) for i, loc in enumerate([0.0, 0.5, 3.0])]
    d = emd_pairwise(values)
    assert d[0, 2] == pytest.approx(wasserstein_distance(values[0], values[2]))
    np.testing.assert_allclose(d, d.T)
    assert np.all(np.diag(d) == 0) and np.all(d >= 0)
    assert d[0, 2] > d[0, 1]


def test_shift_of_a_distribution_is_the_shift():
    x = np.linspace(0, 1, 101)
    assert emd_pairwise([x, x + 0.7])[0, 1] == pytest.approx(0.7)


def test_identical_clients_zero_and_monotone_when_pulled_apart():
    rng = np.random.default_rng(1)
    x = rng.normal(size=200)
    assert similarity.compute("emd", {"v": [x, x.copy()]})[0, 1] == pytest.approx(0.0)
    ds = [similarity.compute("emd", {"v": [x, x + s]})[0, 1] for s in (0.1, 0.5, 1.0, 2.0)]
    assert np.all(np.diff(ds) > 0)


def test_combine_app_c_keeps_max_per_group_and_averages():
    small = np.array([[0, 1.0], [1.0, 0]])
    large = np.array([[0, 3.0], [3.0, 0]])
    label = np.array([[0, 10.0], [10.0, 0]])
    combined = combine_emd(
        {"t1": small, "flair": large, "et": label},
        {"t1": "intensity", "flair": "intensity", "et": "label"},
    )
    np.testing.assert_allclose(combined, (large + label) / 2)


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="client 1 has no finite"):
        emd_pairwise([np.ones(3), np.array([np.nan])])
    with pytest.raises(ValueError, match="different numbers of clients"):
        similarity.compute("emd", {"a": [np.ones(2)], "b": [np.ones(2), np.ones(2)]})
