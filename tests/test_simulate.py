"""The cohort simulator (msprime): layout, validity with bcftools/plink2, phenotype oracle,
alleles and HWE within sites, provenance, determinism."""

import gzip
import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from _simulate_helpers import hwe_within_sites

from rvfedprs.exceptions import ConfigError
from rvfedprs.provenance import file_sha256
from rvfedprs.simulate import simulate_cohort

needs_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("bcftools", "plink2", "bgzip", "tabix")),
    reason="bcftools, plink2, bgzip and tabix are needed",
)
pytest.importorskip("msprime")

SMALL = dict(
    n_clusters=2,
    discovery_samples=400,
    region_length=1_000_000,
    phenotype=dict(
        rare_freq_min=0.002,
        rare_freq_max=0.01,
        rare_min_count=2,
        n_causal_rare_per_cluster=5,
        n_causal_common=20,
    ),
    output=dict(progress=False),
)


def _small(out, seed=7, **extra):
    return simulate_cohort(
        4, samples_per_client=100, out=out, random_seed=seed, **{**SMALL, **extra}
    )


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    return _small(tmp_path_factory.mktemp("sim") / "out")


def _run(args):
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


def _dosages_from_vcf(vcf, ids, tmp_path):
    """ALT counts of variants ``ids`` read back with bcftools: (n_samples, len(ids))."""
    id_file = tmp_path / "ids.txt"
    id_file.write_text("\n".join(ids) + "\n")
    out = _run(["bcftools", "query", "-i", f"ID=@{id_file}", "-f", "%ID[\t%GT]\n", str(vcf)])
    code = {"0/0": 0, "0/1": 1, "1/1": 2}
    rows = {r.split("\t")[0]: [code[c] for c in r.split("\t")[1:]] for r in out.stdout.splitlines()}
    assert set(rows) == set(ids)
    return np.array([rows[i] for i in ids]).T


def test_every_file_of_the_layout_is_written(cohort):
    out = cohort.out
    for rel in (
        "genotypes/chr22.vcf.gz", "genotypes/chr22.vcf.gz.tbi", "genotypes/cohort.bed",
        "genotypes/cohort.bim", "genotypes/cohort.fam", "samples.tsv", "phenotypes.tsv",
        "scores/PGS_sim.txt.gz", "truth/causal_variants.tsv", "truth/causal_sites.tsv",
        "truth/sites.tsv", "truth/genetic_values.tsv", "provenance.json",
    ):  # fmt: skip
        assert (out / rel).is_file(), rel
    samples = pd.read_csv(out / "samples.tsv", sep="\t")
    assert samples.columns.tolist() == [
        "sample_id", "population", "cluster", "client", "architecture"
    ]  # fmt: skip
    assert len(samples) == 400 and samples["sample_id"].is_unique
    assert samples["sample_id"].str.fullmatch(r"SIM\d{6}").all()
    assert samples.groupby("client")["cluster"].nunique().eq(1).all()
    assert samples["cluster"].nunique() == 2
    assert (samples["architecture"] == samples["cluster"]).all()
    pheno = pd.read_csv(out / "phenotypes.tsv", sep="\t")
    assert pheno.columns.tolist() == ["eid", "Subject id", "disease", "disease_liability"]
    assert pheno["Subject id"].tolist() == samples["sample_id"].tolist()
    truth = pd.read_csv(out / "truth" / "causal_variants.tsv", sep="\t", keep_default_na=False)
    assert truth.columns.tolist() == [
        "variant_key", "id", "chrom", "pos", "ref", "alt", "effect_allele", "effect", "kind",
        "cluster", "sharing", "frequency", "group_frequency", "group_carriers",
        "group_carrier_cases", "odds_ratio", "founder_cluster", "founder_fold", "gene",
    ]  # fmt: skip
    assert (truth["gene"] == "").all()  # no genes unless phenotype.rare_genes asks for them
    assert set(truth["kind"]) == {"common", "rare"}
    # one row per causal variant and group in which it acts: common ones in every cluster
    common = truth[truth["kind"] == "common"]
    assert common.groupby("variant_key")["cluster"].nunique().eq(2).all()
    assert set(truth.loc[truth["kind"] == "rare", "cluster"]) <= set(samples["cluster"])
    assert (truth.loc[truth["kind"] == "rare", "sharing"] == "private").all()
    lines = gzip.open(out / "scores" / "PGS_sim.txt.gz", "rt").read().splitlines()
    assert "#pgs_id=PGS_sim" in lines and "#genome_build=GRCh37" in lines
    header = next(line for line in lines if not line.startswith("#")).split("\t")
    assert header[1:] == [
        "chr_name", "chr_position", "effect_allele", "other_allele", "effect_weight",
    ]  # fmt: skip
    prov = json.loads((out / "provenance.json").read_text())
    assert prov["seed"] == 7
    assert prov["extra"]["fst"]["tskit"]["within_cluster"]["n_pairs"] == 2
    assert set(prov["extra"]["clients"]) == set(samples["client"])


def test_provenance_records_the_resolved_section_versions_and_output_checksums(cohort):
    from rvfedprs.config import validate_config

    prov = json.loads((cohort.out / "provenance.json").read_text())
    section = {"n_clients": 4, "samples_per_client": 100, **SMALL}
    resolved = validate_config({"simulate": section})["simulate"]
    assert prov["parameters"] == json.loads(json.dumps({**resolved, "seed": 7}))
    assert prov["command"] == "rvfedprs simulate"
    assert {"rvfedprs", "numpy", "msprime", "tskit"} <= set(prov["versions"])
    outputs = prov["extra"]["outputs"]
    written = {
        str(p.relative_to(cohort.out)) for p in cohort.out.rglob("*")
        if p.is_file() and p.name != "provenance.json"
    }  # fmt: skip
    assert set(outputs) == written
    for rel, digest in outputs.items():
        assert file_sha256(cohort.out / rel) == digest, rel


@needs_tools
def test_genotype_files_read_by_bcftools_and_plink2_without_warnings(cohort, tmp_path):
    vcf = cohort.out / "genotypes" / "chr22.vcf.gz"
    view = _run(["bcftools", "view", "-H", str(vcf)])
    assert "warn" not in view.stderr.lower()
    n_records = len(view.stdout.splitlines())
    assert n_records == cohort.summary["n_variants"]
    stats = _run(["bcftools", "stats", str(vcf)]).stdout
    assert "number of multiallelic sites:\t0" in stats
    assert "number of samples:\t400" in stats
    from_vcf = _run(["plink2", "--vcf", str(vcf), "--freq", "--out", str(tmp_path / "v")])
    from_bed = _run(
        ["plink2", "--bfile", str(cohort.out / "genotypes" / "cohort"), "--freq",
         "--out", str(tmp_path / "b")]
    )  # fmt: skip
    for done in (from_vcf, from_bed):
        assert "warning" not in (done.stdout + done.stderr).lower()
    fv = pd.read_csv(tmp_path / "v.afreq", sep="\t")
    fb = pd.read_csv(tmp_path / "b.afreq", sep="\t")
    assert len(fv) == n_records
    pd.testing.assert_frame_equal(fv, fb)
    assert fv["ID"].is_unique
    assert fv["REF"].isin(list("ACGT")).all() and fv["ALT"].isin(list("ACGT")).all()
    assert ((fv["ALT_FREQS"] > 0) & (fv["ALT_FREQS"] < 1)).all()
    bim = pd.read_csv(cohort.out / "genotypes" / "cohort.bim", sep="\t", header=None)
    assert (bim[3] >= 1).all() and bim[3].is_monotonic_increasing and bim[3].is_unique


def test_one_case_per_ten_controls_in_every_client(cohort):
    pheno = pd.read_csv(cohort.out / "phenotypes.tsv", sep="\t")
    samples = pd.read_csv(cohort.out / "samples.tsv", sep="\t")
    merged = pheno.merge(samples, left_on="Subject id", right_on="sample_id")
    for client, group in merged.groupby("client"):
        assert group["disease"].sum() == round(len(group) / 11), client
        # cases are exactly the top liabilities of their client
        threshold = group.loc[group["disease"] == 1, "disease_liability"].min()
        assert (group.loc[group["disease"] == 0, "disease_liability"] <= threshold).all()


@needs_tools
def test_phenotype_is_built_from_the_truth_file_and_written_genotypes(cohort, tmp_path):
    out = cohort.out
    truth = pd.read_csv(out / "truth" / "causal_variants.tsv", sep="\t", keep_default_na=False)
    ids = list(dict.fromkeys(truth["id"]))
    x = _dosages_from_vcf(out / "genotypes" / "chr22.vcf.gz", ids, tmp_path)
    column = {v: j for j, v in enumerate(ids)}
    assert (truth["effect_allele"] == truth["alt"]).all()
    samples = pd.read_csv(out / "samples.tsv", sep="\t")
    # each sample takes its cluster's effect (common) and its group's effect (rare)
    g = {"common": np.zeros(len(samples)), "rare": np.zeros(len(samples))}
    for row in truth.itertuples():
        label = samples["cluster" if row.kind == "common" else "architecture"]
        g[row.kind] += np.where(label == row.cluster, x[:, column[row.id]] * row.effect, 0.0)
    values = pd.read_csv(out / "truth" / "genetic_values.tsv", sep="\t")
    np.testing.assert_allclose(values["genetic_common"], g["common"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(values["genetic_rare"], g["rare"], rtol=1e-6, atol=1e-6)
    liability = pd.read_csv(out / "phenotypes.tsv", sep="\t")["disease_liability"].to_numpy()
    genetic = g["common"] - g["common"].mean() + g["rare"] - g["rare"].mean()
    noise = liability - genetic
    n = len(noise)
    assert abs(noise.mean()) < 4 * np.sqrt(0.91 / n)
    # 1 - h2_common - h2_rare = 0.91; (n - 1) s² / 0.91 ~ chi²(n - 1)
    assert abs(noise.var(ddof=1) / 0.91 - 1) < 4 * np.sqrt(2 / (n - 1))
    assert abs(np.corrcoef(noise, genetic)[0, 1]) < 4 / np.sqrt(n)
    # rare causal variants are carried only in their own cluster (private, the default)
    clusters = samples["cluster"].to_numpy()
    for row in truth[truth["kind"] == "rare"].itertuples():
        carriers = clusters[x[:, column[row.id]] > 0]
        assert len(carriers) and set(carriers) == {row.cluster}


@needs_tools
def test_alleles_are_array_like_and_genotypes_in_hwe_within_sites(cohort, tmp_path):
    bim = pd.read_csv(cohort.out / "genotypes" / "cohort.bim", sep="\t", header=None)
    n = len(bim)
    pair = bim[4] + bim[5]
    assert abs(pair.isin(["AT", "TA", "CG", "GC"]).mean() - 0.05) < 4 * np.sqrt(0.05 * 0.95 / n)
    assert abs(pair.isin(["AG", "GA", "CT", "TC"]).mean() - 0.78) < 4 * np.sqrt(0.78 * 0.22 / n)
    hwe_within_sites(cohort, tmp_path)


def test_pgs_weights_come_from_the_discovery_gwas_not_the_truth(cohort):
    truth = cohort.causal_variants
    scores = cohort.scores
    effects = dict(zip(truth["id"], truth["effect"], strict=False))
    assert len(scores) >= 5
    assert set(scores["rsID"]) != set(truth.loc[truth["kind"] == "common", "id"])
    for vid in (v for v in scores["rsID"] if v in effects):
        weight = scores.loc[scores["rsID"] == vid, "effect_weight"].iat[0]
        assert not np.isclose(weight, effects[vid])
    gwas = cohort.summary["gwas"]
    assert gwas["n_in_score"] == len(scores)
    grid = pd.DataFrame(gwas["grid"])
    chosen = grid[
        (grid["clump_r2"] == gwas["clump_r2"]) & (grid["p_threshold"] == gwas["p_threshold"])
    ]
    assert chosen["n_variants"].iat[0] == len(scores)
    assert chosen["validation_auc"].iat[0] == grid["validation_auc"].max()
    samples = pd.read_csv(cohort.out / "samples.tsv", sep="\t")
    assert cohort.summary["n_discovery_samples"] == 400
    assert len(samples) == 400  # discovery individuals are not written


def test_same_seed_gives_the_same_files(cohort, tmp_path):
    again = _small(tmp_path / "again")
    for path in sorted(p for p in cohort.out.rglob("*") if p.is_file()):
        rel = path.relative_to(cohort.out)
        other = again.out / rel
        if rel.name == "provenance.json":
            a, b = json.loads(path.read_text()), json.loads(other.read_text())
            for record in (a, b):
                record.pop("created")
                record["extra"].pop("timings")
                record["extra"]["outputs"].pop("provenance.json", None)
            assert a == b
        else:
            assert path.read_bytes() == other.read_bytes(), rel
    different = _small(tmp_path / "other", seed=8, output=dict(progress=False, write_vcf=False))
    assert not different.phenotypes.equals(cohort.phenotypes)


def test_balding_nichols_mode(tmp_path):
    result = simulate_cohort(
        4, samples_per_client=100, n_clusters=2, model="balding_nichols", out=tmp_path,
        random_seed=3, discovery_samples=400,
        balding_nichols=dict(n_variants=2000, n_rare_per_cluster=200, n_rare_shared=100,
                             rare_freq_min=0.005, rare_freq_max=0.02),
        phenotype=dict(rare_freq_min=0.005, rare_freq_max=0.05, rare_min_count=2),
        output=dict(progress=False, write_pgen=True),
    )  # fmt: skip
    s = result.summary
    assert 1000 < s["n_variants"] <= 2500
    assert s["causal"]["n_rare"] == 60
    fst = s["fst"]["hudson_counts"]
    assert fst["within_cluster"]["mean"] < fst["between_cluster"]["mean"]
    bim = pd.read_csv(tmp_path / "genotypes" / "cohort.bim", sep="\t", header=None)
    assert bim[1].is_unique and (bim[3].diff().dropna() > 0).all()
    assert result.paths["pgen"] == tmp_path / "genotypes" / "cohort.pgen"
    assert result.paths["plink"] == tmp_path / "genotypes" / "cohort"


@needs_tools
def test_pgen_and_bed_of_one_simulation_agree_through_plink2(tmp_path):
    """The .pgen and the .bed written from one simulation: plink2 reads the same genotypes."""
    simulate_cohort(
        4, samples_per_client=100, n_clusters=2, model="balding_nichols", out=tmp_path,
        random_seed=5, discovery_samples=400,
        balding_nichols=dict(n_variants=500, n_rare_per_cluster=300, n_rare_shared=100),
        phenotype=dict(rare_freq_min=0.002, rare_freq_max=0.01, rare_min_count=2,
                       n_causal_rare_per_cluster=5, n_causal_common=20),
        output=dict(progress=False, write_vcf=False, write_pgen=True, chunk_variants=64),
    )  # fmt: skip
    prefix = tmp_path / "genotypes" / "cohort"
    for flag, name in (("--bfile", "b"), ("--pfile", "p")):
        _run(["plink2", flag, str(prefix), "--freq", "counts", "--export", "A",
              "--out", str(tmp_path / name)])  # fmt: skip
    counts = {n: pd.read_csv(tmp_path / f"{n}.acount", sep="\t") for n in "bp"}
    pd.testing.assert_frame_equal(counts["b"], counts["p"])
    assert (counts["p"]["ALT_CTS"] < 20).sum() > 300  # rare columns, stored as carrier lists
    raws = {n: pd.read_csv(tmp_path / f"{n}.raw", sep="\t") for n in "bp"}
    pd.testing.assert_frame_equal(raws["b"], raws["p"])
    sizes = {e: prefix.with_suffix(e).stat().st_size for e in (".pgen", ".bed")}
    assert sizes[".pgen"] < sizes[".bed"]


def test_inconsistent_parameters_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"h2_common \+ h2_rare must be < 1, got 0.6 \+ 0.5"):
        _small(tmp_path, phenotype=dict(h2_common=0.6, h2_rare=0.5))
    with pytest.raises(ConfigError, match=r"'simulate.n_clusters': 5 exceeds n_clients 4"):
        _small(tmp_path, n_clusters=5)
    with pytest.raises(ConfigError, match=r"'simulate.model': 'coalescent' is not allowed"):
        _small(tmp_path, model="coalescent")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['h2'\] in 'simulate.phenotype'"):
        _small(tmp_path, phenotype=dict(h2=0.1))
