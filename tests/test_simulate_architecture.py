"""Each architecture knob of the simulator: the simulated truth has the property it claims.

Balding–Nichols cohorts (seconds each) with fixed seeds; tolerances are numbers of standard
errors of the statistic tested (4 SE), or exact where the property is exact by construction.
"""

import numpy as np
import pandas as pd
import pytest
from _simulate_helpers import genotypes_of, hwe_within_sites
from scipy import stats

from rvfedprs.exceptions import ConfigError
from rvfedprs.simulate import simulate_cohort

BASE = dict(
    model="balding_nichols",
    chromosomes=[1, 2],
    region_length=10_000_000,
    balding_nichols=dict(n_variants=3000, n_rare_per_cluster=400, n_rare_shared=1500),
    gwas=dict(sample_size=50_000),
    output=dict(progress=False, write_vcf=False),
)


def _cohort(out, *, seed, **extra):
    section = {**BASE, **extra}
    for key in ("balding_nichols", "phenotype", "gwas", "output"):
        section[key] = {**BASE.get(key, {}), **extra.get(key, {})}
    return simulate_cohort(out=out, random_seed=seed, **section)


@pytest.fixture(scope="module")
def hetero(tmp_path_factory):
    """Unequal clusters (3, 2, 1 sites), unequal sites, per-site prevalence, shared rare
    variants with rho 0.5, founder enrichment, r_g 0.3, discovery from cluster1 only."""
    return _cohort(
        tmp_path_factory.mktemp("hetero"),
        seed=21,
        n_clients=6,
        n_clusters=3,
        cluster_sizes=[3, 2, 1],
        samples_per_client=[500, 300, 400, 300, 500, 400],
        discovery_samples=1600,
        phenotype=dict(
            prevalence=[0.1, 0.2, 0.09, 0.15, 0.1, 0.3],
            n_causal_common=400,
            h2_common=0.3,
            common_effect_correlation=0.3,
            n_causal_rare_per_cluster=200,
            rare_shared_fraction=1.0,
            rare_effect_correlation=0.5,
            founder_fraction=0.25,
            rare_min_count=2,
        ),
        gwas=dict(discovery_clusters=["cluster1"]),
    )


def _truth(cohort):
    return pd.read_csv(
        cohort.out / "truth" / "causal_variants.tsv", sep="\t", keep_default_na=False,
        na_values={"founder_fold": [""]},
    )  # fmt: skip


def test_sites_clusters_sizes_and_per_site_prevalence(hetero):
    samples = hetero.samples
    per_cluster = samples.groupby("cluster")["client"].nunique()
    assert per_cluster.to_dict() == {"cluster1": 3, "cluster2": 2, "cluster3": 1}
    assert samples.groupby("client").size().tolist() == [500, 300, 400, 300, 500, 400]
    pheno = hetero.phenotypes.merge(samples, left_on="Subject id", right_on="sample_id")
    prevalence = [0.1, 0.2, 0.09, 0.15, 0.1, 0.3]
    for (client, group), k in zip(pheno.groupby("client"), prevalence, strict=True):
        assert group["disease"].sum() == round(k * len(group)), client
    sites = pd.read_csv(hetero.out / "truth" / "sites.tsv", sep="\t")
    assert sites["prevalence"].tolist() == prevalence
    assert (sites["architecture"] == sites["cluster"]).all()  # default partition


def test_shared_variants_correlate_rho_across_clusters(hetero):
    truth = _truth(hetero)
    rare = truth[truth["kind"] == "rare"]
    assert (rare["sharing"] == "shared").all()
    wide = rare.pivot(index="variant_key", columns="cluster", values="effect")
    assert wide.shape[1] == 3 and not wide.isna().any().any()  # causal in every group
    n = len(wide)
    assert n >= 150
    for a, b in (("cluster1", "cluster2"), ("cluster1", "cluster3"), ("cluster2", "cluster3")):
        r = np.corrcoef(wide[a], wide[b])[0, 1]
        assert abs(np.arctanh(r) - np.arctanh(0.5)) < 4 / np.sqrt(n - 3)
    # shared variants are carried in two groups or more (>= rare_min_count copies each)
    counts = rare.pivot(index="variant_key", columns="cluster", values="group_carriers")
    assert ((counts >= 1).sum(axis=1) >= 2).all()


def test_common_effects_correlate_r_g_and_the_pgs_ports_worse(hetero):
    truth = _truth(hetero)
    common = truth[truth["kind"] == "common"]
    wide = common.pivot(index="variant_key", columns="cluster", values="effect")
    n = len(wide)
    for a, b in (("cluster1", "cluster2"), ("cluster1", "cluster3")):
        r = np.corrcoef(wide[a], wide[b])[0, 1]
        assert abs(np.arctanh(r) - np.arctanh(0.3)) < 4 / np.sqrt(n - 3)
    # the discovery cohort came from cluster1 only, so the PGS tracks cluster1's common value
    values = pd.read_csv(hetero.out / "truth" / "genetic_values.tsv", sep="\t")
    prs = _prs(hetero)
    cluster = hetero.samples["cluster"].to_numpy()
    r_home = np.corrcoef(prs[cluster == "cluster1"],
                         values["genetic_common"][cluster == "cluster1"])[0, 1]  # fmt: skip
    r_away = np.corrcoef(prs[cluster == "cluster2"],
                         values["genetic_common"][cluster == "cluster2"])[0, 1]  # fmt: skip
    n_home, n_away = (cluster == "cluster1").sum(), (cluster == "cluster2").sum()
    se = np.sqrt(1 / (n_home - 3) + 1 / (n_away - 3))
    assert np.arctanh(r_home) - np.arctanh(r_away) > 4 * se
    assert hetero.summary["gwas"]["discovery_clusters"] == ["cluster1"]


def _prs(cohort):
    scores = cohort.scores
    keys = [f"{c}:{p}:{o}:{e}" for c, p, o, e in zip(
        scores["chr_name"], scores["chr_position"], scores["other_allele"],
        scores["effect_allele"], strict=True)]  # fmt: skip
    return genotypes_of(cohort.out, keys) @ scores["effect_weight"].to_numpy()


def test_founder_variants_are_enriched_fold_times_in_their_cluster(hetero):
    truth = _truth(hetero)
    founders = truth[(truth["kind"] == "rare") & (truth["founder_cluster"] != "")]
    founders = founders.drop_duplicates("variant_key")
    n_shared = truth.loc[truth["kind"] == "rare", "variant_key"].nunique()
    assert len(founders) == round(0.25 * n_shared)
    assert founders["founder_fold"].between(5, 20).all()
    x = genotypes_of(hetero.out, founders["variant_key"].tolist())
    cluster = hetero.samples["cluster"].to_numpy()
    z = []
    for j, row in enumerate(founders.itertuples()):
        inside = cluster == row.founder_cluster
        f_out = x[~inside, j].sum() / (2 * (~inside).sum())
        expected = min(row.founder_fold * f_out, 0.5)
        n_hap = 2 * inside.sum()
        observed = x[inside, j].sum()
        # the enriched frequency was set from all individuals outside the cluster (target and
        # discovery); f_out here is estimated from the target only, so add its variance
        var = n_hap * expected * (1 - expected) + (n_hap * row.founder_fold) ** 2 * f_out * (
            1 - f_out) / (2 * (~inside).sum())  # fmt: skip
        z.append((observed - n_hap * expected) / np.sqrt(var))
    z = np.array(z)
    assert abs(z.mean()) < 4 / np.sqrt(len(z))
    assert np.all(np.abs(z) < 5)


def test_h2_is_an_expectation_and_realised_values_are_recomputable(hetero):
    causal = hetero.summary["causal"]
    expected = [g["expected_h2_rare"] for g in causal["groups"].values()]
    # before founder enrichment the group expectations average to h2_rare (default 0.04)
    assert np.mean(expected) == pytest.approx(0.04)
    values = pd.read_csv(hetero.out / "truth" / "genetic_values.tsv", sep="\t")
    liability = hetero.phenotypes["disease_liability"].to_numpy()
    g_rare = values["genetic_rare"].to_numpy()
    assert causal["realised_h2_rare"] == pytest.approx(g_rare.var() / liability.var(), rel=1e-4)
    sites = pd.read_csv(hetero.out / "truth" / "sites.tsv", sep="\t")
    client = hetero.samples["client"].to_numpy()
    for row in sites.itertuples():
        members = client == row.client
        assert row.realised_h2_rare == pytest.approx(
            g_rare[members].var() / liability[members].var(), rel=1e-4
        )


@pytest.fixture(scope="module")
def subtypes(tmp_path_factory):
    """Architecture groups A/B cut across three ancestry clusters."""
    return _cohort(
        tmp_path_factory.mktemp("subtypes"),
        seed=22,
        n_clients=6,
        n_clusters=3,
        samples_per_client=400,
        discovery_samples=800,
        phenotype=dict(
            architecture_groups=["A", "B", "A", "B", "B", "A"],
            n_causal_common=100,
            n_causal_rare_per_cluster=40,
            rare_min_count=3,
        ),
    )


def test_architecture_partition_is_recorded_per_variant_and_site(subtypes):
    samples = subtypes.samples
    group_of_client = dict(zip(samples["client"], samples["architecture"], strict=False))
    assert group_of_client == {"client01": "A", "client02": "B", "client03": "A",
                               "client04": "B", "client05": "B", "client06": "A"}  # fmt: skip
    truth = _truth(subtypes)
    rare = truth[truth["kind"] == "rare"]
    assert set(rare["cluster"]) == {"A", "B"} and (rare["sharing"] == "private").all()
    by_site = pd.read_csv(subtypes.out / "truth" / "causal_sites.tsv", sep="\t")
    rare_sites = by_site[by_site["kind"] == "rare"]
    group_of_variant = dict(zip(rare["variant_key"], rare["cluster"], strict=True))
    # a private variant acts at the sites of its group, and at no other
    assert (rare_sites["architecture"] == rare_sites["variant_key"].map(group_of_variant)).all()
    assert rare_sites.groupby("variant_key")["client"].nunique().eq(3).all()
    # carriers outside the group exist (it is carried across the partition) but have no effect
    x = genotypes_of(subtypes.out, rare["variant_key"].tolist())
    groups = samples["architecture"].to_numpy()
    outside = [(x[groups != g, j] > 0).sum() for j, g in enumerate(rare["cluster"])]
    assert sum(outside) > 0
    # oracle: the genetic value from the written genotypes and each site's effects
    effects = np.where(groups[:, None] == rare["cluster"].to_numpy()[None, :],
                       rare["effect"].to_numpy()[None, :], 0.0)  # fmt: skip
    values = pd.read_csv(subtypes.out / "truth" / "genetic_values.tsv", sep="\t")
    np.testing.assert_allclose((x * effects).sum(axis=1), values["genetic_rare"], atol=1e-6)


def test_per_variant_effects_do_not_depend_on_the_cohort_size(tmp_path):
    """Same architecture at 300 and 1,200 per site: the same effect distribution (the old
    rescaling to a realised h² gave carrier ORs 3x apart between demo and paper scale)."""
    settings = dict(
        n_clients=6, n_clusters=3, discovery_samples=600,
        phenotype=dict(n_causal_common=50, n_causal_rare_per_cluster=60, rare_min_count=2),
    )  # fmt: skip
    small = _cohort(tmp_path / "small", seed=23, samples_per_client=300, **settings)
    large = _cohort(tmp_path / "large", seed=23, samples_per_client=1200, **settings)
    rare = [(_truth(c).query("kind == 'rare'")) for c in (small, large)]
    for table in rare:
        assert len(table) == 180
    ks = stats.ks_2samp(np.log(rare[0]["odds_ratio"]), np.log(rare[1]["odds_ratio"]))
    assert ks.pvalue > 0.001
    sigma = [c.summary["causal"]["sigma2"]["rare"] for c in (small, large)]
    # sigma2 varies only through the sampled frequencies in the band: bootstrap its spread
    freq = rare[0]["frequency"].to_numpy()
    rng = np.random.default_rng(0)
    weight = lambda f: (2 * f * (1 - f)) ** 0.7  # noqa: E731  (1 + alpha, alpha = -0.3)
    boot = [weight(rng.choice(freq, len(freq))).sum() for _ in range(2000)]
    cv = np.std(boot) / np.mean(boot)
    assert abs(np.log(sigma[0] / sigma[1])) < 4 * np.sqrt(2) * cv
    # while the carriers per causal variant grow with the cohort
    carriers = [t["group_carriers"].median() for t in rare]
    assert carriers[1] > 2.5 * carriers[0]


def test_alleles_and_hardy_weinberg_within_sites(hetero, tmp_path):
    bim = pd.read_csv(hetero.out / "genotypes" / "cohort.bim", sep="\t", header=None)
    n = len(bim)
    pair = bim[4] + bim[5]
    ambiguous = pair.isin(["AT", "TA", "CG", "GC"]).mean()
    assert abs(ambiguous - 0.05) < 4 * np.sqrt(0.05 * 0.95 / n)
    transitions = pair.isin(["AG", "GA", "CT", "TC"]).mean()
    assert abs(transitions - 0.78) < 4 * np.sqrt(0.78 * 0.22 / n)
    hwe_within_sites(hetero, tmp_path)


def test_bad_architecture_settings_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"'simulate.cluster_sizes': \[2, 2\] must hold"):
        _cohort(tmp_path, seed=1, n_clients=5, n_clusters=2, cluster_sizes=[2, 2])
    with pytest.raises(ConfigError, match=r"'simulate.phenotype.prevalence': 2 values for 3"):
        _cohort(tmp_path, seed=1, n_clients=3, n_clusters=1,
                phenotype=dict(prevalence=[0.1, 0.2]))  # fmt: skip
    with pytest.raises(ConfigError, match=r"architecture_groups': 2 labels for 3 clients"):
        _cohort(tmp_path, seed=1, n_clients=3, n_clusters=1,
                phenotype=dict(architecture_groups=["A", "B"]))  # fmt: skip
    with pytest.raises(ConfigError, match=r"discovery_clusters': \['cluster9'\] not among"):
        _cohort(tmp_path, seed=1, n_clients=3, n_clusters=1,
                gwas=dict(discovery_clusters=["cluster9"]))  # fmt: skip
    with pytest.raises(ConfigError, match=r"rare_freq_min': 0.01 exceeds rare_freq_max 0.005"):
        _cohort(tmp_path, seed=1, n_clients=3, n_clusters=1, phenotype=dict(rare_freq_min=0.01))
    with pytest.raises(ConfigError, match=r"runs past the end of chromosome\(s\) \[21\]"):
        _cohort(tmp_path, seed=1, n_clients=3, n_clusters=1, chromosomes=[21],
                region_length=40_000_000)  # fmt: skip
    with pytest.raises(ConfigError, match=r"'simulate.alleles': .* got 0.9 \+ 0.2"):
        _cohort(tmp_path, seed=1, n_clients=3, n_clusters=1,
                alleles=dict(transition_fraction=0.9, strand_ambiguous_fraction=0.2))  # fmt: skip


def test_rare_variants_are_observed_only_in_sequenced_blocks(tmp_path):
    cohort = _cohort(
        tmp_path, seed=24, n_clients=3, n_clusters=1, samples_per_client=300,
        discovery_samples=600, sequenced_fraction=0.3,
        phenotype=dict(n_causal_common=50, n_causal_rare_per_cluster=20, rare_min_count=2),
    )  # fmt: skip
    bim = pd.read_csv(cohort.out / "genotypes" / "cohort.bim", sep="\t", header=None)
    x = genotypes_of(cohort.out, (bim[0].astype(str) + ":" + bim[3].astype(str) + ":" + bim[5]
                                  + ":" + bim[4]).tolist())  # fmt: skip
    af = x.mean(axis=0) / 2
    rare = np.minimum(af, 1 - af) < 0.01
    block = (bim[3] - 20_000_000) // 100_000
    n_blocks = 10_000_000 // 100_000
    for chrom in (1, 2):
        on = (bim[0] == chrom).to_numpy()
        assert block[on & rare].nunique() <= round(0.3 * n_blocks)
        assert block[on & ~rare].nunique() > 0.9 * n_blocks  # common variants everywhere
    truth = _truth(cohort)
    causal_blocks = (truth.loc[truth["kind"] == "rare", "pos"] - 20_000_000) // 100_000
    assert set(causal_blocks) <= set(block[rare])
    assert cohort.summary["dropped"]["rare_outside_sequenced_blocks"] > 0
