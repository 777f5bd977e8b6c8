"""simulate_phenotype with user architectures, Fst of the default demography, and the CLI."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from rvfedprs.cli import main
from rvfedprs.exceptions import InputDataError
from rvfedprs.simulate import CausalArchitecture, simulate_cohort, simulate_phenotype
from rvfedprs.simulate.demography import hudson_fst


def _genotypes(n=2000, m=50, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.5, size=m)
    return rng.binomial(2, p, size=(n, m)).astype(np.int8)


def test_user_architecture_gives_the_naive_genetic_value():
    g = _genotypes()
    arch = CausalArchitecture(indices=[3, 7, 11], effects=[0.5, -1.0, 0.25])
    result = simulate_phenotype(g, arch, prevalence=0.1, random_seed=4)
    naive = np.array([0.5 * row[3] - 1.0 * row[7] + 0.25 * row[11] for row in g])
    np.testing.assert_allclose(result.genetic_value, naive)
    noise = result.liability - naive
    assert abs(noise.std() - 1.0) < 0.05  # heritability=None: standard normal noise
    assert result.phenotype.sum() == 200
    assert (
        result.liability[result.phenotype == 1].min()
        >= result.liability[result.phenotype == 0].max()
    )
    again = simulate_phenotype(g, {"indices": [3, 7, 11], "effects": [0.5, -1.0, 0.25]},
                               prevalence=0.1, random_seed=4)  # fmt: skip
    np.testing.assert_array_equal(again.liability, result.liability)


def test_group_specific_effects_and_per_group_prevalence():
    g = _genotypes(n=3000)
    groups = np.repeat([0, 1, 2], 1000)
    arch = CausalArchitecture([3, 7], [[0.5, -1.0, 0.0], [0.25, 0.25, 2.0]])
    result = simulate_phenotype(
        g, arch, prevalence={"a": 0.1, "b": 0.3, "c": 0.05}, random_seed=2,
        groups=np.repeat(["a", "b", "c"], 1000), effect_groups=groups,
    )  # fmt: skip
    naive = np.array([row[3] * arch.effects[0, k] + row[7] * arch.effects[1, k]
                      for row, k in zip(g, groups, strict=True)])  # fmt: skip
    np.testing.assert_allclose(result.genetic_value, naive)
    assert [result.phenotype[groups == k].sum() for k in range(3)] == [100, 300, 50]


def test_heritability_scaling_groups_and_callable_architecture():
    g = _genotypes(n=4000)
    groups = np.repeat(["a", "b", "c", "d"], 1000)
    result = simulate_phenotype(
        g, lambda x: (x[:, 0] * x[:, 1]).astype(float), prevalence=1 / 11,
        heritability=0.3, groups=groups, random_seed=1,
    )  # fmt: skip
    assert abs(result.genetic_value.var() - 0.3) < 1e-9
    assert abs(result.genetic_value.mean()) < 1e-9
    for label in "abcd":
        assert result.phenotype[groups == label].sum() == 91
    assert set(result.thresholds) == set("abcd")


def test_bad_architectures_are_input_errors():
    g = _genotypes(n=10, m=5)
    with pytest.raises(InputDataError, match="architecture index 9 out of range for 5 variants"):
        simulate_phenotype(g, CausalArchitecture([9], [1.0]), prevalence=0.1, random_seed=0)
    with pytest.raises(InputDataError, match=r"2 indices but effects of shape \(1,\)"):
        CausalArchitecture([1, 2], [1.0])
    grouped = CausalArchitecture([1, 2], [[1.0, 0.0], [0.5, 0.5]])
    with pytest.raises(InputDataError, match="has 2 effect columns: give each sample's group"):
        simulate_phenotype(g, grouped, prevalence=0.1, random_seed=0)
    with pytest.raises(InputDataError, match="group 2 out of range for 2 effect columns"):
        simulate_phenotype(g, grouped, prevalence=0.1, random_seed=0,
                           effect_groups=np.array([0, 1, 2, 0, 0, 0, 0, 0, 0, 0]))  # fmt: skip
    with pytest.raises(InputDataError, match=r"lacks keys \['effects'\]"):
        simulate_phenotype(g, {"indices": [1]}, prevalence=0.1, random_seed=0)
    with pytest.raises(InputDataError, match=r"shape \(3,\), expected \(10,\)"):
        simulate_phenotype(g, lambda x: np.zeros(3), prevalence=0.1, random_seed=0)


def test_hudson_fst_from_counts_matches_tskit():
    msprime = pytest.importorskip("msprime")
    ts = msprime.sim_ancestry(
        {"A": 30, "B": 30}, demography=_two_pops(msprime), sequence_length=2e5,
        recombination_rate=1e-8, random_seed=5,
    )  # fmt: skip
    ts = msprime.sim_mutations(ts, rate=1e-7, random_seed=6, model="binary")
    g = ts.genotype_matrix()
    sets = [ts.samples(population=0), ts.samples(population=1)]
    counts = np.stack([g[:, s].sum(1) for s in sets])
    ours = hudson_fst(counts, np.array([60, 60]), [(0, 1)])
    np.testing.assert_allclose(ours, ts.Fst(sets, indexes=[(0, 1)]), rtol=1e-9)


def _two_pops(msprime):
    d = msprime.Demography()
    for name in ("A", "B", "C"):
        d.add_population(name=name, initial_size=1000)
    d.add_population_split(time=200, derived=["A", "B"], ancestral="C")
    return d


def test_default_demography_gives_european_like_fst(tmp_path):
    pytest.importorskip("msprime")
    result = simulate_cohort(
        10, samples_per_client=60, n_clusters=3, out=tmp_path, random_seed=11,
        discovery_samples=100, region_length=5_000_000,
        output=dict(progress=False, write_vcf=False),
    )  # fmt: skip
    fst = result.summary["fst"]["tskit"]
    assert 0.001 <= fst["within_cluster"]["mean"] <= 0.003
    assert 0.005 <= fst["between_cluster"]["mean"] <= 0.01
    assert fst["within_cluster"]["n_pairs"] == 4 * 3 // 2 + 2 * 3
    counts = result.summary["fst"]["hudson_counts"]
    for key in ("within_cluster", "between_cluster"):
        assert counts[key]["mean"] == pytest.approx(fst[key]["mean"], rel=0.05)


def _write_config(path, section):
    path.write_text(yaml.safe_dump({"simulate": section}))
    return path


SMALL_CLI = dict(
    n_clients=3, n_clusters=3, samples_per_client=50, discovery_samples=150,
    region_length=300_000, phenotype=dict(n_causal_rare_per_cluster=0, n_causal_common=10),
    output=dict(progress=False, write_vcf=False),
)  # fmt: skip


def test_cli_runs_a_config_file_with_seed_override(tmp_path, capsys):
    config = _write_config(tmp_path / "c.yaml", {**SMALL_CLI, "seed": 1})
    status = main(
        ["simulate", "--config", str(config), "--out", str(tmp_path / "o"), "--seed", "5"]
    )
    assert status == 0
    prov = json.loads((tmp_path / "o" / "provenance.json").read_text())
    assert prov["seed"] == 5 and prov["parameters"]["seed"] == 5
    assert prov["parameters"]["samples_per_client"] == 50
    assert len(pd.read_csv(tmp_path / "o" / "samples.tsv", sep="\t")) == 150
    assert "wrote" in capsys.readouterr().out


def test_cli_config_merges_over_preset_and_provenance_says_so(tmp_path):
    from rvfedprs.provenance import file_sha256

    config = _write_config(tmp_path / "c.yaml", SMALL_CLI)
    status = main(["simulate", "--preset", "demo", "--config", str(config),
                   "--out", str(tmp_path / "o")])  # fmt: skip
    assert status == 0
    prov = json.loads((tmp_path / "o" / "provenance.json").read_text())
    assert isinstance(prov["seed"], int)  # drawn and recorded
    # the full resolved section: the preset's keys, the file's keys and the schema defaults
    parameters = prov["parameters"]
    assert parameters["chromosomes"] == [20, 21, 22]  # from the preset
    assert parameters["gwas"]["sample_size"] == 100000  # from the preset
    assert parameters["samples_per_client"] == 50  # from the file
    assert parameters["phenotype"]["alpha"] == -0.3  # a schema default
    assert prov["extra"]["origin"] == {"preset": "demo", "scenario": None, "config": str(config)}
    assert prov["inputs"] == {str(config): file_sha256(config)}


def test_cli_runs_a_scenario_with_a_config_on_top(tmp_path):
    config = _write_config(
        tmp_path / "c.yaml",
        {"samples_per_client": 60, "discovery_samples": 300, "chromosomes": [21, 22],
         "region_length": 2_000_000,
         "balding_nichols": {"n_variants": 800, "n_rare_per_cluster": 100, "n_rare_shared": 100},
         "phenotype": {"n_causal_common": 50, "rare_min_count": 1}},
    )  # fmt: skip
    status = main(["simulate", "--scenario", "shared_rho05", "--config", str(config),
                   "--out", str(tmp_path / "o"), "--seed", "3"])  # fmt: skip
    assert status == 0
    prov = json.loads((tmp_path / "o" / "provenance.json").read_text())
    assert prov["extra"]["origin"]["scenario"] == "shared_rho05"
    assert prov["parameters"]["phenotype"]["rare_effect_correlation"] == 0.5  # the scenario
    assert prov["parameters"]["samples_per_client"] == 60  # the file over the scenario
    assert prov["parameters"]["model"] == "balding_nichols"


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"model": "wright_fisher"}, r"'simulate.model': 'wright_fisher' is not allowed; choose"),
        ({"n_clients": 0}, r"'simulate.n_clients'"),
        (
            {"samples_per_client": "many"},
            r"'simulate.samples_per_client': 'many' is not valid under any of the given schemas",
        ),
        ({"phenotype": {"prevalence": 1.5}}, r"'simulate.phenotype.prevalence'"),
        ({"chromosomes": [23]}, r"'simulate.chromosomes.0'"),
        ({"n_clusters": 4, "n_clients": 3}, r"n_clusters': 4 exceeds n_clients 3"),
        ({"bogus": 1}, r"unknown key\(s\) \['bogus'\] in 'simulate'"),
    ],
)
def test_cli_bad_values_exit_2_naming_key_and_value(tmp_path, capsys, section, message):
    config = _write_config(tmp_path / "c.yaml", section)
    assert main(["simulate", "--config", str(config), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rvfedprs simulate: error:")
    assert re.search(message, err), err


def test_cli_needs_config_or_preset(tmp_path, capsys):
    assert main(["simulate", "--out", str(tmp_path)]) == 2
    assert "give --config FILE and/or --preset NAME or --scenario NAME" in capsys.readouterr().err
    assert main(["simulate", "--preset", "demo", "--scenario", "minority",
                 "--out", str(tmp_path)]) == 2  # fmt: skip
    assert "give --preset or --scenario, not both" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--preset", "huge", "--out", str(tmp_path)])
    assert exc.value.code == 2
