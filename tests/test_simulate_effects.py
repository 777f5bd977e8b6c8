"""The simulator's math: α-model, correlated effects, odds ratios, alleles, clumping, sumstats.

Statistical checks use fixed seeds; every tolerance is a number of standard errors of the
quantity tested (4 SE unless said), derived from its sampling distribution.
"""

import numpy as np
import pytest
from scipy import stats

from rvfedprs.exceptions import ConfigError
from rvfedprs.simulate import CausalArchitecture
from rvfedprs.simulate.alleles import (
    draw_allele_pairs,
    is_strand_ambiguous,
    is_transition,
    substitution_matrix,
)
from rvfedprs.simulate.effects import (
    alpha_sigma2,
    alpha_variance,
    correlated_effects,
    correlation_matrix,
    expected_h2,
    liability_odds_ratio,
)
from rvfedprs.simulate.gwas import (
    clump,
    clumping_thresholding,
    ld_pairs,
    summary_statistics,
)


def test_alpha_sigma2_makes_h2_the_expectation_over_effect_draws():
    rng = np.random.default_rng(0)
    freq = np.exp(rng.uniform(np.log(0.001), np.log(0.005), size=40))
    alpha, h2 = -0.3, 0.04
    causal = np.ones((40, 1), dtype=bool)
    sigma2 = alpha_sigma2(h2, freq, freq[:, None], causal, alpha)
    np.testing.assert_allclose(expected_h2(sigma2, freq, freq[:, None], causal, alpha), [h2])
    sd = np.sqrt(sigma2 * alpha_variance(freq, alpha))
    draws = 4000
    realised = np.array(
        [((rng.normal(0, sd) ** 2) * 2 * freq * (1 - freq)).sum() for _ in range(draws)]
    )
    se = realised.std(ddof=1) / np.sqrt(draws)
    assert abs(realised.mean() - h2) < 4 * se
    assert realised.std() > 0.2 * h2  # a realised h² is not pinned to the target


def test_alpha_is_the_slope_of_log_effect_variance_on_log_heterozygosity():
    rng = np.random.default_rng(1)
    freq = np.exp(rng.uniform(np.log(1e-3), np.log(0.5), size=20000))
    sd = np.sqrt(alpha_variance(freq, -0.35))
    effects, _ = correlated_effects(rng, sd, 1, 1.0)
    fit = stats.linregress(np.log(2 * freq * (1 - freq)), np.log(effects[:, 0] ** 2))
    assert abs(fit.slope - (-0.35)) < 4 * fit.stderr


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.5, 1.0])
def test_correlated_effects_have_correlation_rho_and_the_alpha_variance(rho):
    rng = np.random.default_rng(2)
    n = 3000
    effects, base = correlated_effects(rng, np.ones(n), 3, rho, risk_fraction=0.5)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        r = np.corrcoef(effects[:, a], effects[:, b])[0, 1]
        if rho == 1.0:
            np.testing.assert_allclose(effects[:, a], effects[:, b])
        else:
            assert abs(np.arctanh(r) - np.arctanh(rho)) < 4 / np.sqrt(n - 3)
    # each column has variance sd² = 1: (n - 1) s² ~ chi²(n - 1)
    for column in effects.T:
        assert abs(column.var(ddof=1) - 1) < 4 * np.sqrt(2 / (n - 1))
    assert base.shape == (n,)


def test_risk_fraction_sets_the_sign_of_base_effects_not_their_size():
    rng = np.random.default_rng(3)
    n = 4000
    _, base = correlated_effects(rng, np.ones(n), 1, 1.0, risk_fraction=0.8)
    positive = (base > 0).mean()
    assert abs(positive - 0.8) < 4 * np.sqrt(0.8 * 0.2 / n)
    assert abs((base**2).mean() - 1) < 4 * np.sqrt(2 / n)


def test_scalar_rho_draws_are_unchanged_bit_for_bit():
    """The numbers the scalar path drew before matrices and signs existed (issue 29)."""
    effects, base = correlated_effects(
        np.random.default_rng(11), np.array([0.1, 0.2, 0.3, 0.4]), 3, 0.5, risk_fraction=0.8
    )
    np.testing.assert_array_equal(effects, [
        [0.07388241459159048, -0.10955596305184596, 0.1318413523539717],
        [0.06094582096280475, 0.17080343145357874, 0.0552699916695457],
        [0.04043826100293384, 0.21909771133217276, 0.29576294320692864],
        [-0.041426679971039264, -0.02735703916239563, 0.20980227303439908],
    ])  # fmt: skip
    np.testing.assert_array_equal(
        base, [0.02979695111064471, 0.10547683860668505, 0.17091790727158804, 0.02242577561824704]
    )


def _fisher_ok(r, rho, n):
    """r within 4 SE of rho on Fisher's z scale (|rho| < 1)."""
    return abs(np.arctanh(r) - np.arctanh(rho)) < 4 / np.sqrt(n - 3)


@pytest.mark.parametrize(
    "matrix",
    [
        [[1.0, -0.6, 0.3], [-0.6, 1.0, 0.2], [0.3, 0.2, 1.0]],
        -0.4,  # a negative scalar: the equicorrelation matrix, allowed down to -1/(G-1) = -0.5
        [[1.0, 0.5, -0.5], [0.5, 1.0, 0.0], [-0.5, 0.0, 1.0]],
    ],
)
def test_matrix_effects_have_the_requested_correlations_and_alpha_variance(matrix):
    rng = np.random.default_rng(12)
    n = 4000
    effects, _ = correlated_effects(rng, np.ones(n), 3, matrix, risk_fraction=0.5)
    target = correlation_matrix(matrix, 3)
    observed = np.corrcoef(effects.T)
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert _fisher_ok(observed[a, b], target[a, b], n), (a, b, observed[a, b])
    for column in effects.T:
        assert abs(column.var(ddof=1) - 1) < 4 * np.sqrt(2 / (n - 1))


def test_opposite_effects_from_a_singular_matrix_or_a_scalar_minus_one():
    sd = np.exp(np.random.default_rng(13).normal(size=500))
    for rho in ([[1, -1], [-1, 1]], -1.0):
        effects, _ = correlated_effects(np.random.default_rng(14), sd, 2, rho)
        np.testing.assert_allclose(effects[:, 1], -effects[:, 0], rtol=1e-12, atol=1e-15)
        assert np.corrcoef(effects.T)[0, 1] == pytest.approx(-1)
        assert abs(np.mean(effects[:, 0] ** 2 / sd**2) - 1) < 4 * np.sqrt(2 / len(sd))
    # a block: groups 1 and 2 opposite, group 3 independent of both
    block = [[1, -1, 0], [-1, 1, 0], [0, 0, 1]]
    effects, _ = correlated_effects(np.random.default_rng(15), np.ones(3000), 3, block)
    np.testing.assert_allclose(effects[:, 1], -effects[:, 0], atol=1e-12)
    assert _fisher_ok(np.corrcoef(effects[:, 0], effects[:, 2])[0, 1], 0.0, 3000)


def test_risk_fraction_with_a_matrix_signs_the_principal_axis_and_keeps_the_covariance():
    n = 6000
    matrix = np.array([[1.0, 0.6, 0.6], [0.6, 1.0, 0.6], [0.6, 0.6, 1.0]])
    effects, base = correlated_effects(np.random.default_rng(16), np.ones(n), 3, matrix + 0.0,
                                       risk_fraction=0.8)  # fmt: skip
    # the principal axis of an equicorrelation matrix is the mean effect
    positive = (effects.mean(axis=1) > 0).mean()
    assert abs(positive - 0.8) < 4 * np.sqrt(0.8 * 0.2 / n)
    assert np.array_equal(np.sign(base), np.sign(effects.mean(axis=1)))
    # flipping whole rows leaves the second moments sd² Sigma
    moments = effects.T @ effects / n
    assert np.all(np.abs(moments - matrix) < 4 * np.sqrt((1 + matrix**2) / n))
    # given signs (one per gene, say) replace the draw
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    effects, base = correlated_effects(np.random.default_rng(17), np.ones(n), 3, matrix,
                                       sign=sign)  # fmt: skip
    assert np.array_equal(np.sign(effects.mean(axis=1)), sign)
    _, base = correlated_effects(np.random.default_rng(17), np.ones(n), 3, 0.5, sign=sign)
    assert np.array_equal(np.sign(base), sign)


@pytest.mark.parametrize(
    ("value", "n_groups", "message"),
    [
        (-0.6, 3, r"rho: -0.6 is below -1/\(G-1\) = -0.5 for G = 3 groups: 3 groups' effects "
                  r"cannot all be pairwise correlated below that"),
        (1.5, 2, r"rho: a correlation must be in \[-1, 1\], got 1.5"),
        ([[1, 0.5], [0.4, 1]], 2, r"must be symmetric; entry \[0, 1\] = 0.5 but \[1, 0\] = 0.4"),
        ([[1, 0.5], [0.5, 0.9]], 2, r"the diagonal must be 1 .* got \[1.0, 0.9\]"),
        ([[1, -0.9, -0.9], [-0.9, 1, -0.9], [-0.9, -0.9, 1]], 3,
         r"not positive semi-definite \(smallest eigenvalue -0.8\)"),
        ([[1, 0], [0, 1]], 3,
         r"needs a 3 x 3 matrix .* got shape \(2, 2\): \[\[1, 0\], \[0, 1\]\]"),
        ([[1, 2], [2, 1]], 2, r"entries must be in \[-1, 1\], got \[\[1, 2\], \[2, 1\]\]"),
        ([[1, 0], [0]], 2, r"is not a matrix of numbers"),
    ],
)  # fmt: skip
def test_bad_correlations_are_refused_naming_the_problem_and_value(value, n_groups, message):
    with pytest.raises(ConfigError, match=message):
        correlation_matrix(value, n_groups, name="rho")
    with pytest.raises(ConfigError):  # the drawing function checks them as well
        correlated_effects(np.random.default_rng(0), np.ones(3), n_groups, value)


def test_liability_odds_ratio_matches_a_large_liability_simulation():
    rng = np.random.default_rng(4)
    k, beta, n = 1 / 11, 0.8, 400_000
    carrier = rng.random(n) < 0.5
    liability = beta * carrier + rng.standard_normal(n)
    threshold = stats.norm.isf(k)
    case = liability > threshold
    a, b = (carrier & case).sum(), (carrier & ~case).sum()
    c, d = (~carrier & case).sum(), (~carrier & ~case).sum()
    log_or = np.log(a * d / (b * c))
    se = np.sqrt(1 / a + 1 / b + 1 / c + 1 / d)
    # the model's OR is relative to the prevalence among non-carriers (here K exactly)
    assert abs(np.log(liability_odds_ratio(beta, k)) - log_or) < 4 * se
    assert liability_odds_ratio(0.0, k) == pytest.approx(1.0)


def test_alpha_model_architecture_api():
    arch = CausalArchitecture.alpha_model(
        [0, 4, 9], frequencies=[0.002, 0.004, 0.01], h2=0.02, n_groups=2, correlation=0.5,
        random_seed=1,
    )  # fmt: skip
    assert arch.effects.shape == (3, 2) and arch.n_groups == 2
    again = CausalArchitecture.alpha_model(
        [0, 4, 9], frequencies=[0.002, 0.004, 0.01], h2=0.02, n_groups=2, correlation=0.5,
        random_seed=1,
    )  # fmt: skip
    np.testing.assert_array_equal(arch.effects, again.effects)
    opposite = CausalArchitecture.alpha_model(
        [0, 4, 9], frequencies=[0.002, 0.004, 0.01], h2=0.02, n_groups=2,
        correlation=[[1, -1], [-1, 1]], random_seed=1,
    )  # fmt: skip
    np.testing.assert_allclose(opposite.effects[:, 1], -opposite.effects[:, 0], atol=1e-12)
    with pytest.raises(ConfigError, match="needs 0 < p < 1 for alpha < 0; got frequency 0.0"):
        alpha_variance(np.array([0.1, 0.0]), -0.3)


@pytest.mark.parametrize(("transitions", "ambiguous"), [(0.78, 0.05), (1 / 3, 1 / 3), (0.5, 0.0)])
def test_allele_pairs_have_the_asked_fractions(transitions, ambiguous):
    matrix = substitution_matrix(transitions, ambiguous)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0)
    assert np.all(np.diag(matrix) == 0)
    n = 20000
    ref, alt = draw_allele_pairs(
        np.random.default_rng(5), n, transition_fraction=transitions,
        strand_ambiguous_fraction=ambiguous,
    )  # fmt: skip
    assert not np.any(ref == alt)
    for observed, expected in ((is_strand_ambiguous(ref, alt).mean(), ambiguous),
                               (is_transition(ref, alt).mean(), transitions)):  # fmt: skip
        assert abs(observed - expected) <= 4 * np.sqrt(expected * (1 - expected) / n)
    with pytest.raises(ConfigError, match=r"must be in \[0, 1\], got 0.8 \+ 0.3"):
        substitution_matrix(0.8, 0.3)


def _ld_genotypes(n=600, m=120, seed=6):
    """Blocks of correlated loci: each locus copies its left neighbour's alleles 80% of the time."""
    rng = np.random.default_rng(seed)
    haps = np.empty((2 * n, m), dtype=np.int8)
    haps[:, 0] = rng.random(2 * n) < 0.3
    for j in range(1, m):
        fresh = rng.random(2 * n) < rng.uniform(0.1, 0.5)
        copy = rng.random(2 * n) < (0.8 if j % 10 else 0.0)
        haps[:, j] = np.where(copy, haps[:, j - 1], fresh)
    g = haps[0::2] + haps[1::2]
    pos = np.cumsum(rng.integers(1_000, 20_000, size=m))
    return g, pos


def _naive_clump(g, pos, p, r2_max, window):
    r2 = np.corrcoef(g.T) ** 2
    clumped = np.zeros(len(p), dtype=bool)
    keep = np.zeros(len(p), dtype=bool)
    for i in np.argsort(p, kind="stable"):
        if clumped[i]:
            continue
        keep[i] = True
        for j in range(len(p)):
            if j != i and abs(pos[j] - pos[i]) <= window and r2[i, j] > r2_max:
                clumped[j] = True
    return keep, r2


@pytest.mark.parametrize("r2_max", [0.1, 0.5])
def test_ld_clumping_equals_a_naive_implementation(r2_max):
    g, pos = _ld_genotypes()
    p = np.random.default_rng(7).random(g.shape[1])
    window = 60_000
    chrom = np.array(["1"] * 70 + ["2"] * 50)
    pos = np.r_[pos[:70], pos[70:] - pos[70] + 1]
    pairs = ld_pairs(g, chrom, pos, window_bp=window, r2_min=0.05, block=16)
    keep = clump(p, pairs, r2_max)
    expected = np.zeros(len(p), dtype=bool)
    r2_blocks = []
    for members in (np.arange(70), np.arange(70, 120)):
        k, r2 = _naive_clump(g[:, members], pos[members], p[members], r2_max, window)
        expected[members] = k
        r2_blocks.append(r2)
    np.testing.assert_array_equal(keep, expected)
    assert 5 < keep.sum() < len(p)  # clumping did something
    # stored pairs: symmetric, within window, one chromosome, r² equal to numpy's
    dense = pairs.toarray()
    np.testing.assert_allclose(dense, dense.T)
    i, j = np.nonzero(dense)
    assert np.all(chrom[i] == chrom[j]) and np.all(np.abs(pos[i] - pos[j]) <= window)
    first = r2_blocks[0]
    mask = (i < 70) & (j < 70)
    np.testing.assert_allclose(dense[i[mask], j[mask]], first[i[mask], j[mask]], rtol=1e-4)


def test_clumping_thresholding_picks_the_best_validation_auc_fewest_on_ties():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(8)
    n, m = 800, 60
    g = rng.binomial(2, 0.3, size=(n, m)).astype(np.int8)
    beta = np.r_[np.full(5, 0.6), np.zeros(m - 5)]
    y = (g @ beta + rng.standard_normal(n) * 2 > 2.5).astype(int)
    p = np.r_[rng.uniform(1e-9, 1e-6, 5), rng.uniform(0.01, 1, m - 5)]
    weights = rng.normal(size=m) * 0.01 + beta
    chosen, table = clumping_thresholding(
        p, weights, None, g, y, r2_values=[0.2], p_thresholds=[1e-4, 0.5, 1.0]
    )
    for row in table.itertuples():
        use = p < row.p_threshold if row.p_threshold < 1 else np.ones(m, dtype=bool)
        assert row.n_variants == use.sum()
        assert row.validation_auc == pytest.approx(roc_auc_score(y, g[:, use] @ weights[use]))
    best = table["validation_auc"].max()
    winners = table[table["validation_auc"] == best]
    assert table.loc[table["chosen"], "n_variants"].iat[0] == winners["n_variants"].min()
    assert chosen.sum() == table.loc[table["chosen"], "n_variants"].iat[0]
    with pytest.raises(ConfigError, match="validation part holds only one phenotype class"):
        clumping_thresholding(p, weights, None, g, np.zeros(n), r2_values=[0.1],
                              p_thresholds=[1.0])  # fmt: skip


def test_summary_statistics_have_mean_r_beta_and_covariance_r_over_n():
    g, pos = _ld_genotypes(n=1500, m=40, seed=9)
    chrom = np.array(["1"] * 40)
    causal = np.array([5, 25])
    effects = np.array([0.3, -0.2])
    r = np.corrcoef(g.T)
    sd = g.std(axis=0)
    window = 10**9
    expected = (r[:, causal] * (effects * sd[causal])).sum(axis=1)  # R beta, standardised
    n_gwas, draws = 50_000, 400
    rng = np.random.default_rng(10)
    b = np.array([
        summary_statistics(
            rng, g, chrom, pos, g[:, causal], effects, chrom[causal], pos[causal],
            sample_size=n_gwas, window_bp=window, block=7,
        )[0] * sd
        for _ in range(draws)
    ])  # fmt: skip
    se_mean = np.sqrt(np.diag(r) / n_gwas / draws)
    assert np.all(np.abs(b.mean(axis=0) - expected) < 4 * se_mean)
    # noise covariance R / N: the variance of each standardised estimate is 1 / N
    variance = b.var(axis=0, ddof=1)
    assert np.all(np.abs(variance * n_gwas - 1) < 4 * np.sqrt(2 / (draws - 1)))
    # and neighbours' noise is correlated as their LD
    j = 12
    noise_r = np.corrcoef(b[:, j], b[:, j + 1])[0, 1]
    assert abs(np.arctanh(noise_r) - np.arctanh(r[j, j + 1])) < 4 / np.sqrt(draws - 3)
