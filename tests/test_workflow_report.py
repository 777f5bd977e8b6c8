"""The workflow's score report (results/report/assess.*), its ancestry rule, the training logs."""

import gzip
import inspect
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from _kg_panel import DATA, PANEL, split_panel
from sklearn.metrics import roc_auc_score
from test_snakemake import ROOT, SMALL_COHORT
from test_snakemake import run as run_snakemake

from rvfedprs.ancestry import run_ancestry
from rvfedprs.cli import main
from rvfedprs.config import section_defaults
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.scoring import score, write_plink2_scorefile

needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")


def _snakemake(tmp_path: Path, config: dict, *targets: str) -> None:
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(config))
    result = run_snakemake(
        [*targets, "--cores", "2", "--directory", str(tmp_path),
         "--configfile", str(tmp_path / "test.yaml"), "-q"],
        ROOT,
        timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_ancestry_section_defaults_are_the_commands():
    """The workflow's ancestry keys default to what `rvfedprs ancestry` does."""
    defaults = section_defaults("ancestry")
    signature = inspect.signature(run_ancestry).parameters
    keyword = {
        "n_pcs": "n_components",
        "n_assignment_pcs": "n_assignment",
        "n_normalisation_pcs": "n_normalisation",
        "seed": "random_seed",
        "labels": "reference_labels",
    }
    for key, value in defaults.items():
        if key != "reference":
            assert signature[keyword.get(key, key)].default == value, key


@pytest.mark.slow
@needs_plink2
def test_report_equals_assess_and_plink2_and_training_logs_rounds(tmp_path):
    config = {**SMALL_COHORT, "train": {"compare": ["fedavg"], "rounds": 2}}
    _snakemake(tmp_path, config, "results/report/assess.html", "results/train/fedavg/metrics.json")
    results = tmp_path / "results"
    report = pd.read_csv(results / "report" / "assess.tsv", sep="\t")
    clients = sorted(p.parent.name for p in (results / "clients").glob("*/samples.parquet"))
    assert sorted(report["site"]) == sorted([*clients, "pooled"])
    pooled = report.set_index("site").loc["pooled"]
    assert pooled["n"] == 240 and pooled["score"] == "prs"

    # `rvfedprs assess` on the same samples, its tables built here from the prepared files
    samples = pd.concat(
        pd.read_parquet(results / "clients" / c / "samples.parquet").assign(site=c) for c in clients
    )
    samples[["sample_id", "prs"]].to_csv(tmp_path / "scores.tsv", sep="\t", index=False)
    samples[["sample_id", "phenotype"]].to_csv(tmp_path / "pheno.tsv", sep="\t", index=False)
    samples[["sample_id", "site"]].to_csv(tmp_path / "sites.tsv", sep="\t", index=False)
    assert main([
        "assess", "--scores", str(tmp_path / "scores.tsv"), "--phenotypes",
        str(tmp_path / "pheno.tsv"), "--samples", str(tmp_path / "sites.tsv"),
        "--group-column", "site", "--out", str(tmp_path / "assess"),
    ]) == 0  # fmt: skip
    command = pd.read_csv(tmp_path / "assess" / "assess.tsv", sep="\t")
    pd.testing.assert_frame_equal(
        command.drop(columns="note"), report.drop(columns="note"), check_exact=False, rtol=1e-9
    )

    # plink2 --score on the cohort with the workflow's matched scoring rows: the same PRS
    genotypes = results / "cohort" / "genotypes" / "cohort"
    weights = results / "prepare" / "score_weights.txt.gz"
    _, match = score(open_genotypes(str(genotypes)), weights)
    plink_file = write_plink2_scorefile(match, tmp_path / "plink2_score.txt")
    subprocess.run(
        ["plink2", "--bfile", str(genotypes), "--score", str(plink_file), "1", "2", "3",
         "header", "cols=+scoresums", "--out", str(tmp_path / "p2")],
        check=True, capture_output=True,
    )  # fmt: skip
    plink = pd.read_csv(tmp_path / "p2.sscore", sep="\t").set_index("IID")["SCORE1_SUM"]
    prs = samples.set_index("sample_id")["prs"]
    np.testing.assert_allclose(plink[prs.index], prs, rtol=1e-5, atol=1e-5)
    plink_auc = roc_auc_score(samples["phenotype"], plink[samples["sample_id"]])
    assert abs(plink_auc - pooled["auc"]) < 1e-3

    page = (results / "report" / "assess.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "pooled" in page
    assert "## " not in (results / "report" / "assess.md").read_text()  # no ancestry sections
    assert not (results / "ancestry").exists()
    # training inside Snakemake logs every round to the rule's log
    train_log = (results / "logs" / "train" / "fedavg.log").read_text()
    assert "fedavg round 1/2" in train_log and "fedavg round 2/2" in train_log, train_log


def _kg_cohort(tmp: Path) -> dict:
    """The 1000 Genomes excerpt split into a reference panel and a cohort of 5 sites.

    Sites are the super-populations; the phenotype follows a 12-variant score; the scoring
    file is that score's variants (common, strand-unambiguous) with its weights.
    """
    psam, held_out = split_panel(tmp)
    subprocess.run(
        ["plink2", "--bfile", str(tmp / "tgt"), "--freq", "--out", str(tmp / "tgt")],
        check=True, capture_output=True,
    )  # fmt: skip
    freq = pd.read_csv(tmp / "tgt.afreq", sep="\t")
    bim = pd.read_csv(tmp / "tgt.bim", sep="\t", header=None,
                      names=["chrom", "id", "cm", "pos", "a1", "a2"])  # fmt: skip
    ambiguous = {frozenset("AT"), frozenset("CG")}
    usable = bim[
        (freq["ALT_FREQS"].between(0.05, 0.95)).to_numpy()
        & [frozenset((a, b)) not in ambiguous for a, b in zip(bim["a1"], bim["a2"], strict=True)]
    ].drop_duplicates("pos")
    chosen = usable.sample(12, random_state=3)
    weights = np.random.default_rng(4).normal(0, 0.5, len(chosen))
    rows = "".join(
        f"21\t{r.pos}\t{r.a1}\t{r.a2}\t{w:.4f}\n"
        for r, w in zip(chosen.itertuples(), weights, strict=True)
    )
    header = "\t".join(
        ["chr_name", "chr_position", "effect_allele", "other_allele", "effect_weight"]
    )
    text = f"#genome_build=GRCh37\n{header}\n{rows}"
    (tmp / "score.txt.gz").write_bytes(gzip.compress(text.encode()))
    prs = score(open_genotypes(str(tmp / "tgt")), tmp / "score.txt.gz")[0]
    z = (prs["SUM"] - prs["SUM"].mean()) / prs["SUM"].std()
    risk = 1 / (1 + np.exp(-(-1.0 + 1.0 * z)))
    disease = (np.random.default_rng(5).random(len(z)) < risk).astype(int)
    pd.DataFrame({"Subject id": prs["sample_id"], "disease": disease}).to_csv(
        tmp / "pheno.tsv", sep="\t", index=False
    )
    sites = psam.set_index("#IID").loc[prs["sample_id"], "SuperPop"]
    pd.DataFrame({"sample_id": prs["sample_id"], "client": sites.to_numpy()}).to_csv(
        tmp / "samples.tsv", sep="\t", index=False
    )
    return {
        "pipeline": {
            "cohort": {
                "simulate": False,
                "genotypes": [str(tmp / "tgt")],
                "samples": str(tmp / "samples.tsv"),
                "phenotypes": str(tmp / "pheno.tsv"),
                "scoring_file": str(tmp / "score.txt.gz"),
            },
            "qc": {"hwe_p_min": 0},
        },
        "ancestry": {"reference": str(tmp / "ref.pgen"), "maf": 0.001, "ld_r2": 0.5, "seed": 1},
    }


@pytest.mark.slow
@needs_plink2
def test_ancestry_rule_on_1000_genomes(tmp_path):
    if not PANEL.with_suffix(".pgen").is_file():
        pytest.skip(f"needs the 1000 Genomes excerpt in {DATA}")
    config = _kg_cohort(tmp_path)
    _snakemake(tmp_path, config, "results/report/assess.html")
    results = tmp_path / "results"
    truth = pd.read_csv(PANEL.with_suffix(".psam"), sep="\t").set_index("#IID")["SuperPop"]

    # populations recovered (85 variants of chr21 only: see test_ancestry)
    ancestry = pd.read_csv(results / "ancestry" / "ancestry.tsv", sep="\t")
    assigned = ancestry["population"] != "undetermined"
    right = ancestry["population"].to_numpy() == truth[ancestry["sample_id"]].to_numpy()
    assert right[assigned.to_numpy()].mean() > 0.55

    # the normalised PRS equals `rvfedprs ancestry` given the reference's and the cohort's PRS
    inputs = pd.read_csv(results / "prepare" / "assess_inputs.tsv", sep="\t")
    assert len(inputs) == len(ancestry)  # every genotyped sample was prepared
    inputs.rename(columns={"prs": "SUM"})[["sample_id", "SUM"]].to_csv(
        tmp_path / "cohort_prs.tsv", sep="\t", index=False
    )
    assert main([
        "ancestry", "--reference", config["ancestry"]["reference"], "--target",
        str(tmp_path / "tgt.bed"), "--out", str(tmp_path / "cli"), "--maf", "0.001",
        "--ld-r2", "0.5", "--seed", "1",
        "--reference-prs", str(results / "ancestry" / "reference_prs.tsv"),
        "--target-prs", str(tmp_path / "cohort_prs.tsv"),
    ]) == 0  # fmt: skip
    cli = pd.read_csv(tmp_path / "cli" / "prs_normalised.tsv", sep="\t")
    cli_reference = cli[cli["source"] == "reference"].set_index("sample_id")
    cli = cli[cli["source"] == "target"].set_index("sample_id").loc[inputs["sample_id"]]
    for column in ("Z_norm1", "Z_norm2"):
        np.testing.assert_allclose(inputs[column], cli[column], rtol=1e-6, atol=1e-6)
    # normalised, the reference's own score has mean 0 and SD 1, and smaller population offsets
    # (not none: 4 PCs of 96 variants in 15 kb capture part of the ancestry)
    z2 = cli_reference["Z_norm2"]
    assert abs(z2.mean()) < 0.05 and abs(z2.std() - 1) < 0.05
    raw = (cli_reference["raw"] - cli_reference["raw"].mean()) / cli_reference["raw"].std()
    population = truth[cli_reference.index].to_numpy()
    offsets = {
        name: v.groupby(population).mean().abs().max() for name, v in (("raw", raw), ("z2", z2))
    }
    assert offsets["z2"] < 0.75 * offsets["raw"], offsets

    report = pd.read_csv(results / "report" / "assess.tsv", sep="\t")
    assert set(report["score"]) == {"prs", "Z_norm1", "Z_norm2"}
    assert set(report["site"]) == {"AFR", "AMR", "EAS", "EUR", "SAS", "pooled"}
    page = (results / "report" / "assess.html").read_text()
    for heading in ("Genetic ancestry", "PRS normalised for ancestry"):
        assert f"<h2>{heading}</h2>" in page
    assert page.count("data:image/png;base64,") == 5
    provenance = json.loads((results / "ancestry" / "provenance.json").read_text())
    assert provenance["command"] == "rvfedprs ancestry"
