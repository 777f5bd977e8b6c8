"""The scenario map's named architectures: valid, documented, and each with its signature."""

import numpy as np
import pandas as pd
import pytest

from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError
from rvfedprs.simulate import scenario_info, scenario_names, simulate_scenario
from rvfedprs.simulate.scenarios import scenario_section

# Small enough for a test (a few seconds each); everything else is the scenario's.
SMALL = dict(
    samples_per_client=150,
    discovery_samples=600,
    chromosomes=[21, 22],
    region_length=5_000_000,
    balding_nichols=dict(n_variants=1500, n_rare_per_cluster=300, n_rare_shared=400),
    phenotype=dict(n_causal_common=100, n_causal_rare_per_cluster=10, rare_min_count=2),
)


def test_at_least_six_scenarios_on_both_sides_of_the_claim():
    names = scenario_names()
    assert len(names) >= 6
    expectations = [scenario_info(n)["expectation"].lower() for n in names]
    assert sum("should help" in e for e in expectations) >= 3
    assert sum("should not" in e for e in expectations) >= 3
    for name in names:
        info = scenario_info(name)
        assert len(info["description"]) > 80, name  # says what biology it stands for
        validate_config({"simulate": scenario_section(name)})
    with pytest.raises(ConfigError, match=r"scenario 'nope' unknown; choose from \['private'"):
        scenario_section("nope")


#: calibrated's ultra-rare causal variants need more people than SMALL holds: its own signature
#: is checked by tests/test_simulate_calibrated.py
@pytest.fixture(scope="module", params=[n for n in scenario_names() if n != "calibrated"])
def run(request, tmp_path_factory):
    name = request.param
    cohort = simulate_scenario(name, out=tmp_path_factory.mktemp(name), random_seed=5, **SMALL)
    truth = pd.read_csv(cohort.out / "truth" / "causal_variants.tsv", sep="\t",
                        keep_default_na=False)  # fmt: skip
    return name, cohort, truth


def test_each_scenario_has_its_signature(run):
    name, cohort, truth = run
    rare = truth[truth["kind"] == "rare"]
    common = truth[truth["kind"] == "common"].pivot(
        index="variant_key", columns="cluster", values="effect"
    )
    samples = cohort.samples
    summary = cohort.summary
    if name == "no_rare":
        assert rare.empty and summary["causal"]["n_rare"] == 0
        values = pd.read_csv(cohort.out / "truth" / "genetic_values.tsv", sep="\t")
        assert (values["genetic_rare"] == 0).all()
        return
    assert not rare.empty
    sharing = set(rare["sharing"])
    wide = rare.pivot(index="variant_key", columns="cluster", values="effect")
    if name in ("shared_rho05", "shared_rho1", "founder"):
        assert sharing == {"shared"}
        identical = np.allclose(wide.to_numpy(), wide.to_numpy()[:, :1])
        assert identical == (name != "shared_rho05")
    elif name == "sign_conflict":
        assert sharing == {"shared"}
        np.testing.assert_array_equal(wide["cluster2"], -wide["cluster1"])
        np.testing.assert_array_equal(wide["cluster3"], wide["cluster1"])
    elif name == "causal_in_one_group":
        assert sharing == {"shared", "private"}
        # shared variants act in cluster1 only: no row (effect 0) in the other clusters
        assert set(rare.loc[rare["sharing"] == "shared", "cluster"]) == {"cluster1"}
        assert rare.groupby("cluster")["sharing"].apply(set).to_dict() == {
            "cluster1": {"shared", "private"}, "cluster2": {"private"}, "cluster3": {"private"}
        }  # fmt: skip
    else:
        assert sharing == {"private"}
    if name == "gene_burden":
        genes = pd.read_csv(cohort.paths["genes"], sep="\t", dtype={"chrom": str})
        assert len(genes) == 20 and (genes["end"] - genes["start"] + 1 == 20_000).all()
        assert (rare["gene"] != "").all()
        region = genes.set_index("gene")
        assert rare.apply(lambda r: region.at[r.gene, "start"] <= r.pos <= region.at[r.gene, "end"],
                          axis=1).all()  # fmt: skip
        assert (np.sign(rare["effect"]).groupby(rare["gene"]).nunique() == 1).all()
        assert (rare["gene"].value_counts() > 1).any()  # genes hold several causal variants
    else:
        assert (rare["gene"] == "").all() and "genes" not in cohort.paths
    if name == "founder":
        assert (rare["founder_cluster"] != "").all()
        assert summary["causal"]["n_founder"] == rare["variant_key"].nunique()
    else:
        assert (rare["founder_cluster"] == "").all()
    if name == "portability":
        assert summary["gwas"]["discovery_clusters"] == ["cluster1"]
        assert not np.allclose(common["cluster1"], common["cluster2"])
    else:
        np.testing.assert_allclose(common["cluster1"], common["cluster2"])
    sizes = samples.groupby("cluster")["client"].nunique().tolist()
    assert sizes == ([5, 4, 1] if name == "minority" else [4, 3, 3])
    groups = sorted(set(samples["architecture"]))
    assert groups == (["A", "B"] if name == "subtypes" else ["cluster1", "cluster2", "cluster3"])
    assert summary["gwas"]["sample_size"] == 100_000
    assert len(cohort.scores) == summary["gwas"]["n_in_score"] > 0
