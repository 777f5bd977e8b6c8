"""The Balding–Nichols source: the sparse draw of rare loci against the dense law, and
reproducibility of any subset of loci."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from rvfedprs.simulate.alleles import substitution_matrix
from rvfedprs.simulate.demography import population_layout
from rvfedprs.simulate.sources import BaldingNicholsSource, _draw_dense, _draw_sparse

SPARSE_FREQ_MAX = 0.02


def _source(n_per_pop=200, **extra):
    layout = population_layout(4, 2, None)[["population", "client", "cluster"]]
    options = dict(
        n_target=[n_per_pop] * 4, n_discovery=[50] * 4, chromosomes=["21", "22"],
        region_start=1, region_length=1_000_000, n_variants=300, n_rare_per_cluster=200,
        n_rare_shared=100, fst_within=0.004, fst_between=0.011, maf_min=0.01,
        rare_freq_min=0.001, rare_freq_max=0.01, sparse_freq_max=SPARSE_FREQ_MAX,
        substitutions=substitution_matrix(0.67, 0.15), random_seed=11,
    )  # fmt: skip
    return BaldingNicholsSource(layout, **{**options, **extra})


def test_sparse_draw_has_the_dense_law():
    """Carriers ~ Binomial(n, 1 - q^2) and homozygotes among them ~ p^2 / (1 - q^2) (HWE),
    for the sparse draw and the dense one alike, at fixed seeds; and the two agree."""
    freqs = np.array([0.001, 0.005, 0.015, 0.0])
    sizes = np.array([30_000, 20_000, 10_000, 5_000])
    blocks = np.stack([np.r_[0, np.cumsum(sizes)[:-1]], np.cumsum(sizes)])
    pop = np.repeat(np.arange(4), sizes)
    n_loci = 300
    drawn = {}
    for name in ("sparse", "dense"):
        carriers = np.zeros((n_loci, 4))
        homozygous = np.zeros((n_loci, 4))
        for locus in range(n_loci):
            rng = np.random.Generator(np.random.Philox(key=[5, locus]))
            out = np.zeros(sizes.sum(), dtype=np.int8)
            if name == "sparse":
                _draw_sparse(rng, freqs, blocks, out)
            else:
                cuts = np.stack([freqs * (2 - freqs), freqs**2]).astype(np.float32)
                _draw_dense(rng, cuts[0][pop], cuts[1][pop], out)
            carriers[locus] = np.bincount(pop, weights=out > 0, minlength=4)
            homozygous[locus] = np.bincount(pop, weights=out == 2, minlength=4)
        drawn[name] = carriers, homozygous
        c = freqs * (2 - freqs)
        expected = n_loci * sizes * c
        z = (carriers.sum(0) - expected) / np.sqrt(np.maximum(expected * (1 - c), 1e-12))
        assert np.all(np.abs(z) < 4), (name, z)
        assert carriers[:, 3].sum() == 0  # frequency 0: no carrier
        # HWE: homozygotes among carriers, pooled over loci (p = 0.015: ~70 expected)
        share = freqs[2] ** 2 / c[2]
        n_carriers = carriers[:, 2].sum()
        test = stats.binomtest(int(homozygous[:, 2].sum()), int(n_carriers), share)
        assert test.pvalue > 1e-3, (name, test)
        # the per-locus carrier counts follow the binomial (chi-square of the counts, p = 0.005)
        counts = carriers[:, 1].astype(int)
        law = stats.binom(sizes[1], c[1])
        edges = np.r_[0, np.arange(int(law.ppf(0.05)), int(law.ppf(0.95)) + 1, 20), 10**9]
        observed = np.histogram(counts, bins=edges)[0]
        probs = np.diff(law.cdf(edges - 1))
        assert stats.chisquare(observed, probs / probs.sum() * n_loci).pvalue > 1e-3, name
    # sparse and dense: the same carrier frequencies (two-sample, per population)
    for k in range(3):
        a, b = drawn["sparse"][0][:, k].sum(), drawn["dense"][0][:, k].sum()
        n = n_loci * sizes[k]
        pooled = (a + b) / (2 * n)
        assert abs(a - b) / np.sqrt(2 * n * pooled * (1 - pooled)) < 4


def test_sparse_carriers_are_uniform_within_a_population():
    freqs = np.array([0.01])
    blocks = np.array([[0], [10_000]])
    seen = np.zeros(10_000)
    for locus in range(400):
        out = np.zeros(10_000, dtype=np.int8)
        _draw_sparse(np.random.Generator(np.random.Philox(key=[1, locus])), freqs, blocks, out)
        seen += out > 0
    per_decile = seen.reshape(10, -1).sum(1)
    assert stats.chisquare(per_decile).pvalue > 1e-3


def test_rare_loci_are_drawn_sparsely_and_common_ones_densely():
    source = _source()
    sparse = np.concatenate(source._sparse)
    max_freq = np.concatenate([f.max(0) for f in source.freqs])
    np.testing.assert_array_equal(sparse, max_freq < SPARSE_FREQ_MAX)
    assert 250 < sparse.sum() < source.n_variants  # the 500 rare loci and a few low-MAF ones
    assert (~sparse).sum() > 200


def test_sparse_freq_max_zero_draws_every_locus_densely():
    dense = _source(sparse_freq_max=0.0)
    assert not np.concatenate(dense._sparse).any()
    rows = np.arange(len(dense.individuals))
    sidx = np.arange(dense.n_variants)
    common = ~np.concatenate(_source()._sparse)
    # the common loci are drawn alike either way; the rare ones by another stream use
    np.testing.assert_array_equal(
        dense.fetch(sidx[common], rows), _source().fetch(sidx[common], rows)
    )


def test_a_subset_of_loci_reproduces_the_stream():
    source = _source()
    rows = np.arange(len(source.individuals))[::3]
    streamed = [(v, g) for v, g in source.iter_chunks(rows, 64)]
    table = pd.concat([v for v, _ in streamed], ignore_index=True)
    full = np.concatenate([g for _, g in streamed], axis=1)
    subset = np.random.default_rng(0).choice(source.n_variants, size=80, replace=False)
    fetched = source.fetch(subset, rows)
    np.testing.assert_array_equal(fetched, full[:, table["sidx"].searchsorted(subset)])
    # rare loci among them, with carriers, so the sparse stream is what is compared
    rare = np.concatenate(source._sparse)[subset]
    assert rare.any() and (fetched[:, rare] > 0).any()
    # a second source from the same seed gives the same genotypes for other rows
    other = _source().fetch(subset[::-1], rows[:7])
    np.testing.assert_array_equal(other, fetched[:7, ::-1])


@pytest.mark.parametrize("n_per_pop", [3000])
def test_rare_frequencies_match_the_model(n_per_pop):
    """Realised ALT frequencies of rare loci scatter around the model's, as binomials do."""
    source = _source(n_per_pop=n_per_pop)
    rows = np.arange(len(source.individuals))
    pop = source.individuals["pop_index"].to_numpy()
    sidx = np.flatnonzero(np.concatenate(source._sparse))
    g = source.fetch(sidx, rows)
    freqs = np.concatenate(source.freqs, axis=1)[:, sidx]
    n = np.bincount(pop)
    ac = np.stack([g[pop == k].sum(0) for k in range(4)])
    expected = 2 * n[:, None] * freqs
    z = (ac.sum() - expected.sum()) / np.sqrt((expected * (1 - freqs)).sum())
    assert abs(z) < 4
