"""Homer et al.'s membership test on summed allele counts: the statistic against scipy's
one-sample t-test, power and false-positive rate on simulated and real genotypes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from rvfedprs.evaluation.attacks.homer import (
    homer_p_values,
    homer_statistic,
    homer_test,
    pool_frequencies,
)
from rvfedprs.exceptions import InputDataError

CINECA = Path("/work/shared/data/cineca_synthetic/cineca_synthetic_subset")


def _genotypes(rng, n, freq):
    return rng.binomial(2, freq, size=(n, freq.size)).astype(np.float64)


def _pool(genotypes):
    counts = np.nansum(genotypes, axis=0)
    totals = 2 * np.isfinite(genotypes).sum(axis=0)
    return pool_frequencies(counts, totals)


def test_statistic_is_a_one_sample_t_test_of_homers_distance():
    rng = np.random.default_rng(0)
    freq = rng.uniform(0.05, 0.5, 300)
    g = _genotypes(rng, 6, freq)
    g[0, :10] = np.nan  # missing calls are left out for that individual
    m, pop = rng.uniform(0.05, 0.5, 300), rng.uniform(0.05, 0.5, 300)
    t, k = homer_statistic(g, m, pop)
    for i in range(6):
        called = np.isfinite(g[i])
        y = g[i, called] / 2
        d = np.abs(y - pop[called]) - np.abs(y - m[called])
        assert t[i] == pytest.approx(stats.ttest_1samp(d, 0.0).statistic)
        assert k[i] == called.sum()
    p = homer_p_values(t, k)
    np.testing.assert_allclose(p, stats.t.sf(t, k - 1))


def test_a_small_pool_reveals_its_members_a_large_one_hides_them():
    rng = np.random.default_rng(1)
    freq = rng.uniform(0.05, 0.5, 4000)  # independent loci, one population
    reference = _pool(_genotypes(rng, 2000, freq))
    nonmembers = _genotypes(rng, 300, freq)
    small = _genotypes(rng, 50, freq)
    leak = homer_test(small, nonmembers, _pool(small), reference)
    assert leak["tpr"] > 0.95 and leak["auc"] > 0.99
    fpr_bound = 0.05 + 3.3 * np.sqrt(0.05 * 0.95 / 300)  # ≈ 99.9% binomial bound at α = 0.05
    assert leak["fpr"] < fpr_bound
    large = _genotypes(rng, 20000, freq[:300])
    hidden = homer_test(
        large[:300], _genotypes(rng, 300, freq[:300]), _pool(large), _pool(
            _genotypes(rng, 2000, freq[:300])
        )
    )  # fmt: skip
    assert hidden["advantage"] < 1.95 * np.sqrt(2 / 300)  # KS critical value at α ≈ 0.001
    assert hidden["n_positive"] == hidden["n_negative"] == 300


@pytest.mark.skipif(not CINECA.with_suffix(".bed").is_file(), reason="CINECA excerpt absent")
def test_real_genotypes_power_falls_with_pool_size():
    from rvfedprs.genotypes.plink import BedSource

    g = np.concatenate([c.dosages for c in BedSource(CINECA).iter_chunks()], axis=1)
    rng = np.random.default_rng(0)
    order = rng.permutation(g.shape[0])
    reference = _pool(g[order[1000:2000]])
    nonmembers = g[order[2000:2200]]
    power = {}
    for n in (20, 500):
        pool = g[order[:n]]
        power[n] = homer_test(pool[:200], nonmembers, _pool(pool), reference)
    assert power[20]["tpr"] > 0.8 and power[20]["auc"] > 0.85  # 829 variants, 20 people
    assert power[500]["auc"] < power[20]["auc"] - 0.1


def test_bad_inputs_are_named():
    with pytest.raises(InputDataError, match="variant 1: count 5 of 4 alleles"):
        pool_frequencies(np.array([1, 5]), np.array([4, 4]))
    with pytest.raises(InputDataError, match=r"dosages must lie in \[0, 2\]"):
        homer_statistic(np.array([[0.0, 3.0]]), np.full(2, 0.2), np.full(2, 0.2))
    with pytest.raises(InputDataError, match="individual 0 has 1 called variants"):
        homer_statistic(np.array([[0.0, np.nan]]), np.full(2, 0.2), np.full(2, 0.2))
    with pytest.raises(InputDataError, match=r"reference frequency has shape \(3,\)"):
        homer_statistic(np.zeros((1, 2)), np.full(2, 0.2), np.full(3, 0.2))
