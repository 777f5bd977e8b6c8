"""The `calibrated` scenario: the published rare-variant architecture of SPEC §2, realised."""

import numpy as np
import pandas as pd
import pytest

from rvfedprs.burden import read_annotations, variant_mask
from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError
from rvfedprs.genotypes.chunk import variant_keys
from rvfedprs.genotypes.readers import open_genotypes
from rvfedprs.simulate import scenario_info, scenario_names, simulate_scenario
from rvfedprs.simulate.annotations import draw_consequences
from rvfedprs.simulate.phenotype import polygenic_modifier
from rvfedprs.simulate.scenarios import scenario_section
from rvfedprs.simulate.truth import penetrance_by_quintile

# The scenario's sites, people and rare loci (so its frequencies and carriers are the preset's),
# with fewer common loci: the common part only sets the PRS background.
SMALLER = dict(
    balding_nichols=dict(n_variants=3000),
    phenotype=dict(n_causal_common=300),
)


def test_calibrated_is_a_listed_documented_scenario():
    assert "calibrated" in scenario_names()
    info = scenario_info("calibrated")
    assert "realistic" in info["expectation"] and "MYBPC3" in info["description"]
    pheno = validate_config({"simulate": scenario_section("calibrated")})["simulate"]["phenotype"]
    assert pheno["h2_rare"] == 0.015 and pheno["annotations"]["write"]
    assert pheno["rare_genes"]["n_genes"] > 0


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibrated")
    return simulate_scenario("calibrated", out=out, random_seed=3, **SMALLER)


def test_realised_figures_match_the_published_ones(cohort):
    causal = cohort.summary["causal"]
    assert 0.004 <= causal["carrier_fraction"] <= 0.025  # ~1% carry a pathogenic variant
    assert causal["n_rare"] >= 30  # enough draws for the tail to show
    assert 1.5 <= causal["odds_ratio"]["median"] <= 10
    assert causal["odds_ratio"]["max"] > 20
    assert causal["odds_ratio_bands"]["1_5_to_10"] >= 0.35
    assert 0.005 <= causal["realised_h2_rare"] <= 0.035
    assert cohort.summary["annotations"]["causal_lof_fraction"] > 0.5
    assert cohort.summary["genes"]["n_rare_causal_in_genes"] >= 0.7 * causal["n_rare"]
    for score in ("pgs", "true_common_value"):
        table = causal["penetrance_by_prs_quintile"][score]
        assert [row["quintile"] for row in table["quintiles"]] == [1, 2, 3, 4, 5]
        assert sum(row["n_carriers"] for row in table["quintiles"]) == causal["rare_carriers"]
    # the interaction makes carriers' risk rise with the polygenic background
    rise = causal["penetrance_by_prs_quintile"]["true_common_value"]["top_over_bottom"]
    assert rise > 1.5


def test_annotations_cover_every_variant_and_read_as_a_lof_mask(cohort):
    path = cohort.paths["annotations"]
    table = pd.read_csv(path, sep="\t", dtype={"chrom": str}, keep_default_na=False)
    assert {"variant_key", "gene", "consequence", "lof", "missense"} <= set(table.columns)
    written = open_genotypes(cohort.out / "genotypes" / "cohort").variants
    assert set(table["variant_key"]) == set(variant_keys(written))
    coding = table["consequence"] != "other"
    assert coding.sum() == cohort.summary["n_rare_variants_maf_below_0_01"]
    rare_null = table[coding & ~table["variant_key"].isin(cohort.causal_variants["variant_key"])]
    shares = rare_null["consequence"].value_counts(normalize=True)
    assert shares["missense"] > shares["synonymous"] > shares["lof"]  # as in exomes
    np.testing.assert_array_equal(table["lof"], table["consequence"] == "lof")
    mask = variant_mask(written.assign(variant_key=variant_keys(written)), "lof",
                        read_annotations(path, "lof"))  # fmt: skip
    assert not np.isnan(mask).any()
    rare = cohort.causal_variants.query("kind == 'rare'")["variant_key"].unique()
    causal_lof = read_annotations(path, "lof").reindex(rare)
    assert causal_lof.notna().all() and causal_lof.mean() > 0.5
    genes = table.loc[table["gene"] != "", "gene"]
    assert set(genes) <= set(pd.read_csv(cohort.paths["genes"], sep="\t")["gene"])


def test_polygenic_modifier_scales_with_the_background():
    value = np.random.default_rng(0).normal(size=5000)
    np.testing.assert_array_equal(polygenic_modifier(value, 0.0), np.ones(5000))
    scale = polygenic_modifier(value, 0.5)
    assert np.mean(scale**2) == pytest.approx(1.0)
    assert scale.min() == 0.0  # a risk allele never turns protective
    order = np.argsort(value)
    assert np.all(np.diff(scale[order]) >= 0)


def test_penetrance_by_quintile_against_a_hand_count():
    score = np.arange(100.0)
    carrier = np.zeros(100, bool)
    carrier[[0, 1, 95, 96, 97, 98]] = True
    case = np.zeros(100, bool)
    case[[1, 95, 96, 97, 50]] = True  # one carrier case of 2 at the bottom, 3 of 4 at the top
    table = penetrance_by_quintile(score, carrier, case)
    reference = 1 / 60  # one case among the 60 non-carriers of quintiles 2-4
    assert table["reference_risk"] == pytest.approx(reference)
    assert table["quintiles"][0]["relative_risk"] == pytest.approx(0.5 / reference)
    assert table["quintiles"][4]["relative_risk"] == pytest.approx(0.75 / reference)
    assert table["top_over_bottom"] == pytest.approx(1.5)
    assert penetrance_by_quintile(score, np.zeros(100, bool), case) is None


def test_consequence_fractions_must_leave_room_for_synonymous():
    settings = {"causal_lof_fraction": 0.8, "rare_lof_fraction": 0.5, "rare_missense_fraction": 0.6}
    with pytest.raises(
        ConfigError, match=r"rare_lof_fraction \+ rare_missense_fraction .* 0.5 \+ 0.6"
    ):
        draw_consequences(np.random.default_rng(0), np.zeros(3), np.zeros(3, bool), settings)
