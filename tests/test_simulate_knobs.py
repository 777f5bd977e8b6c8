"""The shared rare variants' cross-group knobs (matrix, signs, nulls) and genes (issue 29).

Architecture draws on a synthetic site layout (no genotypes: milliseconds) and one small
Balding–Nichols cohort with every knob on; the old scalar path is checked bit-for-bit against
numbers captured from the simulator before these knobs existed.
"""

import hashlib
import json

import numpy as np
import pandas as pd
import pytest
from _simulate_helpers import genotypes_of

from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError
from rvfedprs.simulate import draw_architecture, simulate_cohort
from rvfedprs.simulate.causal import SiteLayout
from rvfedprs.simulate.genes import draw_genes, gene_index, write_regions

GROUPS = ["a", "b", "c"]


def _sites(seed=0, n_variants=3000):
    """Six sites in three groups of two; log-uniform frequencies from 5e-4 to 0.3."""
    rng = np.random.default_rng(seed)
    cluster = np.array([0, 0, 1, 1, 2, 2])
    p = np.exp(rng.uniform(np.log(5e-4), np.log(0.3), n_variants))
    all_ac = rng.binomial(2 * 600, p[None, :].repeat(6, axis=0))
    target_ac = rng.binomial(all_ac, 400 / 600)
    return SiteLayout(target_ac, all_ac, np.full(6, 400), np.full(6, 600), cluster, cluster.copy())


def _pheno(**phenotype):
    return validate_config({"simulate": {"phenotype": phenotype}})["simulate"]["phenotype"]


def _sha(array):
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


def test_the_old_scalar_architecture_is_drawn_bit_for_bit():
    """Captured from the simulator before matrices, signs, nulls and genes existed.

    The effects are compared to 9 decimals: their last bits differ between CPUs (numpy's SIMD
    transcendental functions); every effect lies more than 1e-12 from a rounding boundary.
    """
    pheno = _pheno(rare_shared_fraction=0.5, rare_effect_correlation=0.5, founder_fraction=0.3,
                   n_causal_rare_per_cluster=20, n_causal_common=50, rare_min_count=2)  # fmt: skip
    arch = draw_architecture(np.random.default_rng(5), _sites(), pheno, group_names=GROUPS)
    assert len(arch.rare.indices) == 35
    assert _sha(arch.rare.indices) == (
        "1e884d74ac3be029d34279f63c2a74cf7bbeb8faa5e8d68f754337957802792f"
    )
    assert _sha(np.round(arch.rare.effects, 9)) == (
        "57fbcb385282f660955ab5640dbb17b9b37b5e05ee2665da95067578844cfec0"
    )
    assert _sha(np.round(arch.common.effects, 9)) == (
        "19822c8bcc0774ba9ad237caea822530df0237c131db329e8b9fe8a4ab6de7df"
    )
    np.testing.assert_allclose(arch.rare.effects[0], [0.6659020776982919, 0.5401647021454392,
                                                      0.2218662388855137], rtol=1e-14)  # fmt: skip
    assert (arch.rare_gene == "").all()


def test_the_old_scalar_cohort_is_written_bit_for_bit(tmp_path):
    """Genotypes and truth (less the new, empty ``gene`` column) as before issue 29."""
    cohort = simulate_cohort(
        4, samples_per_client=150, n_clusters=2, model="balding_nichols", out=tmp_path,
        random_seed=3, discovery_samples=400, chromosomes=[21, 22], region_length=5_000_000,
        balding_nichols=dict(n_variants=1500, n_rare_per_cluster=300, n_rare_shared=400,
                             sparse_freq_max=0),  # the dense draw of every locus, as then
        phenotype=dict(rare_shared_fraction=0.5, rare_effect_correlation=0.5,
                       founder_fraction=0.2, n_causal_common=100, n_causal_rare_per_cluster=10,
                       rare_min_count=2),
        gwas=dict(sample_size=50_000), output=dict(progress=False, write_vcf=False),
    )  # fmt: skip
    bed = (tmp_path / "genotypes" / "cohort.bed").read_bytes()
    assert hashlib.sha256(bed).hexdigest() == (
        "e4e97679b8bc14cd8bc16f477029deab1bb2d187cc8cf0e2f8f4928dc1f721d9"
    )
    lines = (tmp_path / "truth" / "causal_variants.tsv").read_text().splitlines()
    assert lines[0].endswith("\tgene") and all(line.endswith("\t") for line in lines[1:])
    before = "".join(line.rsplit("\t", 1)[0] + "\n" for line in lines)
    assert hashlib.sha256(before.encode()).hexdigest() == (
        "c20ede404cf2563d70e1a538507c56cdbf68c036e479e606ef5acfbdb1dab464"
    )
    assert "genes" not in cohort.paths and not (tmp_path / "regions").exists()


def test_shared_variants_causal_in_some_groups_only_have_exact_zeros_elsewhere():
    pheno = _pheno(rare_shared_fraction=1.0, rare_shared_causal_groups=["a"],
                   n_causal_rare_per_cluster=40, rare_min_count=2)  # fmt: skip
    sites = _sites()
    arch = draw_architecture(np.random.default_rng(6), sites, pheno, group_names=GROUPS)
    effects = arch.rare.effects
    assert len(effects) == 40 and arch.rare_shared.all()
    assert np.all(effects[:, 1:] == 0) and not np.signbit(effects[:, 1:]).any()
    assert np.all(effects[:, 0] != 0)
    assert arch.rare_causal[:, 0].all() and not arch.rare_causal[:, 1:].any()
    # every such variant has carriers to learn from in the group where it acts
    carried_a = sites.target_ac[sites.group == 0][:, arch.rare.indices].sum(0)
    assert (carried_a >= 2).all()
    # sigma² is set from the groups where they act: h2_rare is the mean over groups
    assert arch.expected_h2["rare"][1:] == [0.0, 0.0]
    assert np.mean(arch.expected_h2["rare"]) == pytest.approx(0.04)


def test_per_group_signs_give_opposite_effects():
    pheno = _pheno(rare_shared_fraction=1.0, rare_effect_signs=[1, -1, 1],
                   n_causal_rare_per_cluster=40, rare_min_count=2)  # fmt: skip
    arch = draw_architecture(np.random.default_rng(7), _sites(), pheno, group_names=GROUPS)
    effects = arch.rare.effects
    np.testing.assert_array_equal(effects[:, 1], -effects[:, 0])
    np.testing.assert_array_equal(effects[:, 2], effects[:, 0])
    # the same draw without signs: the signs only multiply
    plain = draw_architecture(np.random.default_rng(7), _sites(), _pheno(
        rare_shared_fraction=1.0, n_causal_rare_per_cluster=40, rare_min_count=2),
        group_names=GROUPS)  # fmt: skip
    np.testing.assert_array_equal(plain.rare.effects * [1, -1, 1], effects)


def test_a_correlation_matrix_reaches_the_drawn_architecture():
    pheno = _pheno(rare_shared_fraction=1.0, rare_effect_correlation=[[1, -1, 0], [-1, 1, 0],
                   [0, 0, 1]], n_causal_rare_per_cluster=40, rare_min_count=2)  # fmt: skip
    arch = draw_architecture(np.random.default_rng(8), _sites(), pheno, group_names=GROUPS)
    effects = arch.rare.effects
    np.testing.assert_allclose(effects[:, 1], -effects[:, 0], atol=1e-12)
    assert not np.allclose(np.abs(effects[:, 2]), np.abs(effects[:, 0]))


def _gene_sites():
    """The synthetic layout with variants 1500.. private to a, b, c (500 each) and 12 'genes'
    holding every other run of 12 columns (so shared and private variants in each gene)."""
    sites = _sites()
    for m in range(3):
        columns = np.arange(1500 + 500 * m, 2000 + 500 * m)
        for ac in (sites.target_ac, sites.all_ac):
            ac[np.ix_(sites.group != m, columns)] = 0
    column = np.arange(3000)
    gene = np.where((column // 12) % 2 == 0, column % 12, -1)
    return sites, gene, [f"G{k}" for k in range(12)]


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_gene_variants_share_their_gene_direction(fraction):
    sites, gene, names = _gene_sites()
    pheno = _pheno(rare_shared_fraction=0.5, n_causal_rare_per_cluster=30, rare_min_count=2,
                   rare_genes=dict(n_genes=12, fraction_in_genes=fraction))  # fmt: skip
    arch = draw_architecture(np.random.default_rng(9), sites, pheno, group_names=GROUPS,
                             gene=gene, gene_names=names)  # fmt: skip
    in_gene = arch.rare_gene != ""
    n_shared = arch.rare_shared.sum()
    assert n_shared == 15 and len(arch.rare_gene) == 15 + 3 * 15
    # round(fraction * n) of each draw (the shared one, then each group's private one)
    assert in_gene.sum() == (15 + 3 * 15 if fraction == 1 else 8 + 3 * 8)
    np.testing.assert_array_equal(
        arch.rare_gene, [names[g] if g >= 0 else "" for g in gene[arch.rare.indices]]
    )
    effects = arch.rare.effects
    genes_with_several = 0
    for name in set(arch.rare_gene[in_gene]):
        rows = effects[arch.rare_gene == name]
        signs = np.sign(rows[rows != 0])
        genes_with_several += len(rows) > 1
        assert len(set(signs)) == 1, (name, rows)
    assert genes_with_several >= 5
    if fraction == 1:  # with risk fraction 0.8, most genes raise risk, not every gene
        gene_signs = [np.sign(effects[arch.rare_gene == n].sum()) for n in set(arch.rare_gene)]
        assert 1 in gene_signs


def test_genes_do_not_overlap_and_are_found_by_position(tmp_path):
    rng = np.random.default_rng(10)
    genes = draw_genes(rng, [21, 22], region_start=1000, region_length=100_000, n_genes=12,
                       gene_length=5_000)  # fmt: skip
    assert genes.columns.tolist() == ["chrom", "start", "end", "gene"]
    assert genes["gene"].tolist() == [f"GENE{k:02d}" for k in range(1, 13)]
    assert ((genes["end"] - genes["start"]) == 4_999).all()
    assert (genes["start"] >= 1000).all() and (genes["end"] < 101_000).all()
    for _, rows in genes.groupby("chrom"):
        assert (rows["start"].to_numpy()[1:] > rows["end"].to_numpy()[:-1]).all()
    chrom = rng.choice(["21", "22", "1"], size=5000)
    pos = rng.integers(0, 102_000, size=5000)
    naive = np.full(5000, -1)
    for k, row in genes.iterrows():
        naive[(chrom == row.chrom) & (pos >= row.start) & (pos <= row.end)] = k
    np.testing.assert_array_equal(gene_index(genes, chrom, pos), naive)
    paths = write_regions(tmp_path, genes)
    tsv = pd.read_csv(paths["genes"], sep="\t", dtype={"chrom": str})
    pd.testing.assert_frame_equal(tsv, genes)
    bed = pd.read_csv(paths["genes_bed"], sep="\t", header=None, dtype={0: str})
    np.testing.assert_array_equal(bed[1], genes["start"] - 1)  # BED: 0-based, end exclusive
    np.testing.assert_array_equal(bed[2], genes["end"])
    with pytest.raises(ConfigError, match=r"rare_genes': \d+ genes of 60000 bp do not fit"):
        draw_genes(rng, [22], region_start=1, region_length=100_000, n_genes=2,
                   gene_length=60_000)  # fmt: skip


@pytest.mark.parametrize("seed", range(5))
def test_genes_are_spread_evenly_over_chromosomes(seed):
    # gene_burden's seed 2 once put 5 of 20 genes on one chromosome, more than its rare loci hold
    genes = draw_genes(np.random.default_rng(seed), list(range(1, 23)), region_start=1,
                       region_length=1_000_000, n_genes=20, gene_length=20_000)  # fmt: skip
    assert genes["chrom"].value_counts().max() == 1
    genes = draw_genes(np.random.default_rng(seed), [1, 2, 3], region_start=1,
                       region_length=1_000_000, n_genes=8, gene_length=20_000)  # fmt: skip
    assert sorted(genes["chrom"].value_counts().tolist()) == [2, 3, 3]


KNOBS = dict(
    model="balding_nichols",
    n_clients=6,
    n_clusters=3,
    samples_per_client=200,
    discovery_samples=600,
    chromosomes=[21, 22],
    region_length=5_000_000,
    balding_nichols=dict(n_variants=1500, n_rare_per_cluster=300, n_rare_shared=400,
                         rare_loci_per_gene=30),
    phenotype=dict(
        n_causal_common=100, n_causal_rare_per_cluster=20, rare_min_count=2,
        rare_shared_fraction=0.5, rare_shared_causal_groups=["cluster1", "cluster3"],
        rare_effect_signs=[1, 1, -1],
        rare_genes=dict(n_genes=10, gene_length_bp=20_000, fraction_in_genes=0.5),
    ),
    gwas=dict(sample_size=50_000),
    output=dict(progress=False, write_vcf=False),
)  # fmt: skip


@pytest.fixture(scope="module")
def knobs(tmp_path_factory):
    """Every new knob at once: nulls in cluster2, opposite signs in cluster3, genes."""
    return simulate_cohort(out=tmp_path_factory.mktemp("knobs"), random_seed=31, **KNOBS)


def _truth(cohort):
    return pd.read_csv(cohort.out / "truth" / "causal_variants.tsv", sep="\t",
                       keep_default_na=False, dtype={"chrom": str})  # fmt: skip


def test_region_file_is_written_listed_and_holds_every_gene_variant(knobs):
    genes = pd.read_csv(knobs.paths["genes"], sep="\t", dtype={"chrom": str})
    assert len(genes) == 10 and genes["gene"].is_unique
    assert knobs.paths["genes_bed"].is_file()
    prov = json.loads((knobs.out / "provenance.json").read_text())
    assert prov["extra"]["genes"]["files"] == {"genes": "regions/genes.tsv",
                                               "genes_bed": "regions/genes.bed"}  # fmt: skip
    assert {"regions/genes.tsv", "regions/genes.bed"} <= set(prov["extra"]["outputs"])
    rare = _truth(knobs).query("kind == 'rare'")
    in_gene = rare[rare["gene"] != ""]
    assert 0 < in_gene["variant_key"].nunique() < rare["variant_key"].nunique()
    region = genes.set_index("gene")
    for row in in_gene.itertuples():
        assert row.chrom == region.at[row.gene, "chrom"]
        assert region.at[row.gene, "start"] <= row.pos <= region.at[row.gene, "end"], row
    outside = rare[rare["gene"] == ""]
    hits = gene_index(genes, outside["chrom"], outside["pos"])
    assert (hits == -1).all()  # scattered causal variants come from outside the genes
    # one direction per gene, in every group, once cluster3's sign (on shared variants) is undone
    flip = np.where((in_gene["sharing"] == "shared") & (in_gene["cluster"] == "cluster3"), -1, 1)
    direction = np.sign(in_gene["effect"] * flip).groupby(in_gene["gene"]).nunique()
    assert (direction == 1).all() and (in_gene["gene"].value_counts() > 1).sum() >= 3
    # the Balding–Nichols model put rare loci in every gene
    bim = pd.read_csv(knobs.out / "genotypes" / "cohort.bim", sep="\t", header=None,
                      dtype={0: str})  # fmt: skip
    per_gene = np.bincount(gene_index(genes, bim[0], bim[3]) + 1, minlength=11)[1:]
    assert (per_gene >= 10).all()


def test_nulls_and_signs_in_the_truth_and_the_carriers(knobs):
    rare = _truth(knobs).query("kind == 'rare'")
    shared = rare[rare["sharing"] == "shared"]
    assert len(shared) and set(shared["cluster"]) == {"cluster1", "cluster3"}
    wide = shared.pivot(index="variant_key", columns="cluster", values="effect")
    np.testing.assert_array_equal(wide["cluster3"], -wide["cluster1"])
    # a shared variant carried in cluster2 acts there in no table and for no carrier
    samples = knobs.samples
    keys = list(dict.fromkeys(rare["variant_key"]))
    x = genotypes_of(knobs.out, keys)[:, [keys.index(k) for k in rare["variant_key"]]]
    group = samples["architecture"].to_numpy()
    acts = group[:, None] == rare["cluster"].to_numpy()[None, :]
    is_shared = (rare["sharing"] == "shared").to_numpy()
    assert (x[group == "cluster2"][:, is_shared] > 0).sum() > 0  # null carriers exist
    sites = pd.read_csv(knobs.out / "truth" / "sites.tsv", sep="\t")
    carrier = ((x > 0) & acts).any(axis=1)
    counted = samples.assign(c=carrier).groupby("client")["c"].sum()
    assert sites.set_index("client")["rare_causal_carriers"].to_dict() == counted.to_dict()
    by_site = pd.read_csv(knobs.out / "truth" / "causal_sites.tsv", sep="\t")
    null_keys = set(shared["variant_key"])
    assert not by_site[(by_site["architecture"] == "cluster2")
                       & by_site["variant_key"].isin(null_keys)].shape[0]  # fmt: skip
    # oracle: the rare genetic value from the written genotypes and the truth's effects
    effects = np.where(acts, rare["effect"].to_numpy()[None, :], 0.0)
    values = pd.read_csv(knobs.out / "truth" / "genetic_values.tsv", sep="\t")
    np.testing.assert_allclose((x * effects).sum(axis=1), values["genetic_rare"], atol=1e-6)


def test_same_seed_gives_the_same_cohort_with_the_new_knobs(knobs, tmp_path):
    again = simulate_cohort(out=tmp_path, random_seed=31, **KNOBS)
    for path in sorted(p for p in knobs.out.rglob("*") if p.is_file()):
        rel = path.relative_to(knobs.out)
        if rel.name != "provenance.json":
            assert path.read_bytes() == (again.out / rel).read_bytes(), rel


def _section(**phenotype):
    return {**KNOBS, "phenotype": {**KNOBS["phenotype"], **phenotype}}


@pytest.mark.parametrize(
    ("phenotype", "message"),
    [
        (dict(rare_effect_signs=[1, -1]),
         r"'simulate.phenotype.rare_effect_signs': 2 signs \[1, -1\] for 3 architecture groups "
         r"\['cluster1', 'cluster2', 'cluster3'\] \(give one per group\)"),
        (dict(rare_shared_causal_groups=["cluster9"]),
         r"rare_shared_causal_groups': \['cluster9'\] not among the architecture groups "
         r"\['cluster1', 'cluster2', 'cluster3'\]"),
        (dict(rare_effect_correlation=-0.7),
         r"'simulate.phenotype.rare_effect_correlation': -0.7 is below -1/\(G-1\) = -0.5 for "
         r"G = 3 groups"),
        (dict(rare_effect_correlation=[[1, -1, -1], [-1, 1, -1], [-1, -1, 1]]),
         r"rare_effect_correlation': the matrix is not positive semi-definite \(smallest "
         r"eigenvalue -1\)"),
        (dict(rare_effect_correlation=[[1, -1], [-1, 1]]),
         r"rare_effect_correlation': needs a 3 x 3 matrix"),
        (dict(rare_effect_correlation=-1.5),
         r"'simulate.phenotype.rare_effect_correlation': -1.5 is not valid"),
        (dict(rare_effect_signs=[1, 2, 1]),
         r"'simulate.phenotype.rare_effect_signs.1': 2 is not allowed; choose from \[1, -1\]"),
        (dict(rare_genes=dict(n_genes=300, gene_length_bp=20_000)),
         r"rare_genes': 300 genes of 20000 bp must fit in one chromosome's region"),
    ],
)  # fmt: skip
def test_bad_knobs_are_config_errors_naming_key_and_value(tmp_path, phenotype, message):
    with pytest.raises(ConfigError, match=message):
        simulate_cohort(out=tmp_path, random_seed=1, **_section(**phenotype))


def test_two_groups_may_be_fully_opposed_with_a_scalar(tmp_path):
    cohort = simulate_cohort(
        out=tmp_path, random_seed=2, **{**_section(
            rare_effect_correlation=-1.0, rare_effect_signs=None, rare_shared_causal_groups=None,
            rare_genes=dict(n_genes=0), rare_shared_fraction=1.0),
            "n_clients": 4, "n_clusters": 2},
    )  # fmt: skip
    rare = _truth(cohort).query("kind == 'rare'")
    wide = rare.pivot(index="variant_key", columns="cluster", values="effect")
    assert len(wide) >= 10
    np.testing.assert_allclose(wide["cluster2"], -wide["cluster1"], rtol=1e-9)
