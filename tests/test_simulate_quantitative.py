"""The simulator's quantitative trait (``phenotype.kind: quantitative``, SPEC §2 trait kinds):
a continuous, finite phenotype of variance ≈ 1 that regresses on the true genetic value with
slope 1, the realised h² in provenance recomputed from the truth files, a GWAS and C+T choice by
R², the binary default unchanged byte for byte, and the LDL-like preset."""

import hashlib
import json

import numpy as np
import pandas as pd
import pytest

from rvfedprs.cli import main
from rvfedprs.config import load_preset, validate_config
from rvfedprs.evaluation import load_truth
from rvfedprs.exceptions import ConfigError
from rvfedprs.simulate import simulate_cohort

# Balding–Nichols loci: a few seconds per cohort
TINY = dict(
    n_clusters=2,
    model="balding_nichols",
    discovery_samples=400,
    balding_nichols=dict(
        n_variants=2000, n_rare_per_cluster=200, n_rare_shared=100,
        rare_freq_min=0.005, rare_freq_max=0.02,
    ),
    phenotype=dict(rare_freq_min=0.005, rare_freq_max=0.05, rare_min_count=2),
    output=dict(progress=False, write_vcf=False),
)  # fmt: skip

H2_COMMON, H2_RARE = 0.3, 0.1
QUANTITATIVE = dict(
    TINY,
    discovery_samples=1000,
    phenotype=dict(
        TINY["phenotype"], kind="quantitative", name="LDL_direct", h2_common=H2_COMMON,
        h2_rare=H2_RARE, n_causal_common=500, n_causal_rare_per_cluster=30,
    ),
)  # fmt: skip

#: SHA-256 of the files of the binary default (TINY, 4 x 100, seed 11), computed with the
#: simulator before the quantitative trait existed (commit c267152 of main)
BINARY_DIGESTS = {
    "phenotypes.tsv": "760b25bde41cd22d560e0772918adfcf79421fa15dfc9a93648f41f6b06279fc",
    "truth/causal_variants.tsv": "cb5d43f972b99fe2987e15aee55e9cc8a17abfe40db91e3964d7dd59b9b55111",
    "truth/genetic_values.tsv": "72421e68df0fe4762092214fd7555ce47b48d8a0e6babb7a0cae1461429f4ecf",
    "truth/sites.tsv": "84c6cadf42027256bac877808e5651338b3872e16ac9eb3029b04e34b192dba1",
    "truth/causal_sites.tsv": "26b2182ec5ac08391ea085effbb06cf60d2d8678cf8f7f40699ad5f21b0c0168",
    "scores/PGS_sim.txt.gz": "5637bb47b340d9a1b49c57e5cb9b88d7ee80ce344efcfaae2867dbf2a5fab41b",
}


def _sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    out = tmp_path_factory.mktemp("quant") / "out"
    return simulate_cohort(4, samples_per_client=250, out=out, random_seed=5, **QUANTITATIVE)


def _trait_and_genetic(out):
    pheno = pd.read_csv(out / "phenotypes.tsv", sep="\t")
    genetic = pd.read_csv(out / "truth" / "genetic_values.tsv", sep="\t")
    assert (pheno["Subject id"] == genetic["sample_id"]).all()
    g = (genetic["genetic_common"] + genetic["genetic_rare"]).to_numpy()
    return pheno["LDL_direct"].to_numpy(), g


def test_the_phenotype_column_is_continuous_and_finite(cohort):
    pheno = pd.read_csv(cohort.out / "phenotypes.tsv", sep="\t")
    assert list(pheno.columns) == ["eid", "Subject id", "LDL_direct"]  # the CINECA/UKB layout
    assert (pheno["eid"] == 1_000_001 + np.arange(1000)).all()
    trait = pheno["LDL_direct"]
    assert trait.dtype == np.float64 and np.isfinite(trait).all()
    assert trait.nunique() == len(trait)  # no thresholding: not 0/1
    # written at full precision: the file holds what the simulator returned
    np.testing.assert_allclose(trait, cohort.phenotypes["LDL_direct"], rtol=1e-9)


def test_the_trait_has_unit_variance_and_noise_of_variance_one_minus_h2(cohort):
    trait, g = _trait_and_genetic(cohort.out)
    n = len(trait)
    noise = trait - (g - g.mean())
    # the noise is N(0, 1 - h2): (n - 1) s² / (1 - h2) ~ chi²(n - 1), sd of s²/σ² ≈ √(2/(n-1))
    sigma2 = 1 - H2_COMMON - H2_RARE
    assert abs(noise.var(ddof=1) / sigma2 - 1) < 4 * np.sqrt(2 / (n - 1))
    assert abs(noise.mean()) < 4 * np.sqrt(sigma2 / n)
    # the trait's variance is 1 in expectation; beside the sampling error of s² (same √(2/(n-1))
    # bound) the realised genetic variance moves with the effect draws (h² is an expectation,
    # never a rescaling target), by its own deviation from the expected h²
    realised = g.var(ddof=1)
    assert abs(trait.var(ddof=1) - 1) < 4 * np.sqrt(2 / (n - 1)) + abs(
        realised - H2_COMMON - H2_RARE
    ) + 4 * np.sqrt(realised * sigma2 / n)  # the sampling cross term 2·cov(g, noise)
    assert abs(trait.var() - 1) < 0.3


def test_provenance_records_the_kind_and_the_realised_h2_of_the_truth_files(cohort):
    prov = json.loads((cohort.out / "provenance.json").read_text())
    assert prov["parameters"]["phenotype"]["kind"] == "quantitative"
    extra = prov["extra"]
    assert extra["phenotype_kind"] == "quantitative"
    trait, g = _trait_and_genetic(cohort.out)
    causal = extra["causal"]
    assert causal["realised_h2"] == pytest.approx(np.var(g) / np.var(trait), rel=1e-6)
    assert causal["expected_h2"] == pytest.approx(H2_COMMON + H2_RARE)
    assert 0.1 < causal["realised_h2"] < 0.8
    assert extra["r2"]["true_genetic_value"] == pytest.approx(
        np.corrcoef(trait, g)[0, 1] ** 2, rel=1e-6
    )
    assert "auc" not in extra and "thresholds" not in extra
    sites = pd.read_csv(cohort.out / "truth" / "sites.tsv", sep="\t")
    assert {"trait_mean", "trait_var", "realised_h2"} <= set(sites.columns)
    assert not {"cases", "prevalence", "threshold"} & set(sites.columns)


def test_the_trait_regressed_on_the_true_genetic_value_has_slope_one(cohort):
    trait, g = _trait_and_genetic(cohort.out)
    x = np.column_stack([np.ones_like(g), g])
    coef, *_ = np.linalg.lstsq(x, trait, rcond=None)
    resid = trait - x @ coef
    se = np.sqrt(resid.var(ddof=2) / ((g - g.mean()) ** 2).sum())
    assert abs(coef[1] - 1) < 4 * se
    assert abs(coef[0] + g.mean()) < 4 * np.sqrt(resid.var() / len(g)) + 1e-9  # centred value


def test_truth_tables_give_effects_in_sd_units_and_stay_readable(cohort):
    out = cohort.out
    causal = pd.read_csv(out / "truth" / "causal_variants.tsv", sep="\t", keep_default_na=False)
    assert "odds_ratio" not in causal.columns and "group_carrier_cases" not in causal.columns
    rare = causal[causal["kind"] == "rare"]
    # the mean trait of a variant's carriers: its group's carriers, its effect on top
    carried = rare[rare["group_carriers"] > 0]
    assert np.isfinite(carried["group_carrier_mean"].astype(float)).all()
    truth = load_truth(out / "truth" / "causal_variants.tsv", out / "samples.tsv")
    assert len(truth.causal) == len(causal)
    np.testing.assert_allclose(truth.genetic_values(list(cohort.samples["sample_id"])),
                               _trait_and_genetic(out)[1], rtol=1e-9)  # fmt: skip
    sites = pd.read_csv(out / "truth" / "causal_sites.tsv", sep="\t")
    assert "carrier_mean" in sites.columns and "carrier_cases" not in sites.columns
    summary = cohort.summary["causal"]
    assert summary["effect_sd"]["max"] == pytest.approx(rare["effect"].max())
    assert summary["carrier_mean_difference"] is not None


def test_the_pgs_is_chosen_by_validation_r2(cohort):
    gwas = cohort.summary["gwas"]
    grid = pd.DataFrame(gwas["grid"])
    assert "validation_r2" in grid.columns and "validation_auc" not in grid.columns
    chosen = grid[
        (grid["clump_r2"] == gwas["clump_r2"]) & (grid["p_threshold"] == gwas["p_threshold"])
    ]
    assert chosen["validation_r2"].iat[0] == grid["validation_r2"].max() == gwas["validation_r2"]
    assert gwas["gwas_case_fraction"] is None
    assert 0 < gwas["validation_r2"] < 1
    assert cohort.summary["r2"]["prs"] > 0


def test_the_binary_default_is_unchanged_byte_for_byte(tmp_path):
    # every locus drawn densely, as then (balding_nichols.sparse_freq_max came later)
    dense = {**TINY, "balding_nichols": {**TINY["balding_nichols"], "sparse_freq_max": 0}}
    default = simulate_cohort(4, samples_per_client=100, out=tmp_path / "d", random_seed=11,
                              **dense)  # fmt: skip
    for rel, digest in BINARY_DIGESTS.items():
        assert _sha256(default.out / rel) == digest, rel
    explicit = simulate_cohort(
        4, samples_per_client=100, out=tmp_path / "e", random_seed=11,
        **{**dense, "phenotype": {**TINY["phenotype"], "kind": "binary"}},
    )  # fmt: skip
    for rel in BINARY_DIGESTS:
        assert _sha256(explicit.out / rel) == BINARY_DIGESTS[rel], rel
    assert default.summary["phenotype_kind"] == "binary"
    assert list(default.phenotypes.columns) == ["eid", "Subject id", "disease", "disease_liability"]


def test_the_schema_refuses_an_unknown_kind(tmp_path):
    with pytest.raises(ConfigError, match=r"'simulate.phenotype.kind': 'foo' is not allowed; "
                                          r"choose from \['binary', 'quantitative'\]"):  # fmt: skip
        validate_config({"simulate": {"phenotype": {"kind": "foo"}}})
    with pytest.raises(ConfigError, match=r"'simulate.phenotype.kind': 'foo' is not allowed"):
        simulate_cohort(4, samples_per_client=100, out=tmp_path, random_seed=1,
                        **{**TINY, "phenotype": {"kind": "foo"}})  # fmt: skip


def test_the_ldl_preset_is_a_quantitative_trait_with_three_genes():
    section = validate_config(load_preset("ldl"))["simulate"]
    pheno = section["phenotype"]
    assert pheno["kind"] == "quantitative" and pheno["name"] == "LDL_direct"
    assert pheno["rare_genes"]["n_genes"] == 3 and pheno["rare_genes"]["fraction_in_genes"] == 1
    assert pheno["h2_common"] == pytest.approx(0.2)


def test_the_ldl_preset_simulates_small_from_the_cli(tmp_path, capsys):
    config = tmp_path / "small.yaml"
    config.write_text(
        "simulate:\n  samples_per_client: 150\n  discovery_samples: 1000\n"
        "  balding_nichols: {n_variants: 2000}\n  phenotype: {n_causal_common: 200}\n"
        "  output: {write_vcf: false}\n"
    )
    out = tmp_path / "ldl"
    assert main(["simulate", "--preset", "ldl", "--config", str(config), "--out", str(out),
                 "--seed", "3", "--no-progress"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "R² " in printed and "realised h²" in printed
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["extra"]["origin"]["preset"] == "ldl"
    genes = pd.read_csv(out / "regions" / "genes.tsv", sep="\t")
    assert len(genes) == 3
    causal = pd.read_csv(out / "truth" / "causal_variants.tsv", sep="\t", keep_default_na=False)
    rare = causal[causal["kind"] == "rare"]
    assert len(rare) and (rare["gene"] != "").all()  # every rare causal variant in a gene
    trait = pd.read_csv(out / "phenotypes.tsv", sep="\t")["LDL_direct"]
    assert np.isfinite(trait).all() and trait.nunique() == 1500


@pytest.mark.slow
def test_the_full_ldl_preset_gives_carriers_of_large_effect(tmp_path):
    cohort = simulate_cohort(preset="ldl", out=tmp_path, random_seed=1,
                             output={"progress": False})  # fmt: skip
    causal = cohort.summary["causal"]
    assert causal["n_rare"] == 30 and cohort.summary["genes"]["n_genes_with_causal"] >= 2
    assert 0.5 < abs(causal["carrier_mean_difference"]) < 3  # FH-like: ~1-2 SD
    assert causal["realised_h2"] == pytest.approx(0.25, abs=0.1)
    assert cohort.summary["r2"]["prs"] > 0.05
    assert cohort.summary["timings"]["total_s"] < 120
