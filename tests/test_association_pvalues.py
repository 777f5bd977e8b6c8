"""The tail probabilities of the association tests (χ² mixtures, Cauchy combination).

Oracles: scipy's χ² where the mixture is one (equal weights), Imhof's exact inversion of the
characteristic function (:func:`~rvfedprs.association.pvalues.imhof_sf`, adaptive quadrature)
and simulated null draws of Σ λ_k χ²_1; for ACAT, its defining identities.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from rvfedprs.association.pvalues import (
    cauchy_combination,
    chi2_mixture_sf,
    imhof_sf,
    liu_sf,
    saddlepoint_sf,
)

LAMBDA = np.array([3.0, 1.0, 0.5, 0.1, 0.05])


@pytest.mark.parametrize("q", [0.5, 5.0, 20.0, 60.0])
def test_equal_weights_are_an_exact_scaled_chi2(q):
    p, method = chi2_mixture_sf(2.0 * q, [2.0] * 4)
    assert method == "chi2"
    assert p == pytest.approx(stats.chi2.sf(q, 4), rel=1e-12)


@pytest.fixture(scope="module")
def null_draws():
    rng = np.random.default_rng(11)
    return np.sort((rng.standard_normal((2_000_000, LAMBDA.size)) ** 2) @ LAMBDA)


@pytest.mark.parametrize("q", [10.0, 20.0, 30.0])
def test_the_tail_matches_simulated_null_draws(null_draws, q):
    empirical = 1.0 - np.searchsorted(null_draws, q) / null_draws.size
    se = np.sqrt(empirical * (1 - empirical) / null_draws.size)
    p, method = chi2_mixture_sf(q, LAMBDA)
    assert method == "saddle"
    assert abs(p - empirical) < 4 * se + 0.06 * empirical  # the approximation's few per cent


@pytest.mark.parametrize("q", [30.0, 60.0])
def test_the_saddle_point_tail_is_within_ten_per_cent_of_imhof(q):
    exact = imhof_sf(q, LAMBDA)
    assert saddlepoint_sf(q, LAMBDA) == pytest.approx(exact, rel=0.10)


def test_liu_is_further_off_than_the_saddle_point_in_the_far_tail():
    exact = imhof_sf(60.0, LAMBDA)  # p ≈ 1e-5
    assert abs(liu_sf(60.0, LAMBDA) - exact) > abs(saddlepoint_sf(60.0, LAMBDA) - exact)


def test_a_far_tail_stays_positive_and_ordered():
    ps = [chi2_mixture_sf(q, LAMBDA)[0] for q in (100.0, 200.0, 400.0)]
    assert 0 < ps[2] < ps[1] < ps[0] < 1e-7


def test_the_cauchy_combination_of_equal_p_values_is_that_p_value():
    for p in (0.3, 1e-3, 1e-12, 1e-20):
        assert cauchy_combination([p, p, p]) == pytest.approx(p, rel=1e-9)


def test_the_cauchy_combination_is_uniform_for_independent_null_p_values():
    rng = np.random.default_rng(5)
    combined = [cauchy_combination(rng.random(5), rng.random(5) + 0.1) for _ in range(4000)]
    assert stats.kstest(combined, "uniform").pvalue > 1e-3


def test_the_cauchy_combination_ignores_nan_and_keeps_a_p_of_one_from_cancelling():
    assert np.isnan(cauchy_combination([np.nan]))
    assert cauchy_combination([1e-8, 1.0]) < 1e-7
    assert cauchy_combination([1e-8, np.nan]) == pytest.approx(1e-8, rel=1e-9)
