"""The Snakemake workflow: lint, dry run on the default config, one small real run."""

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import scipy.sparse as sp
import yaml

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile")]


# A small simulated cohort (4 clients x 60 samples, 2 clusters), also used by test_snakemake_paper.
SMALL_COHORT = {
    "simulate": {
        "n_clients": 4,
        "n_clusters": 2,
        "samples_per_client": 60,
        "discovery_samples": 300,
        "region_length": 1_000_000,
        "seed": 7,
    },
    "pipeline": {"min_samples_per_client": 20, "random_seed": 5},
}


def run(args, cwd, timeout=300):
    return subprocess.run(
        SNAKEMAKE + args, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_lint_finds_nothing_but_missing_conda_envs(tmp_path):
    result = run(["--lint", "--directory", str(tmp_path)], ROOT)
    lints = [
        line.strip()
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip().startswith("*")
    ]
    assert lints, result.stdout + result.stderr  # the linter ran
    assert set(lints) == {"* Specify a conda environment or container for each rule.:"}


def test_dry_run_on_default_config_plans_simulation_then_validation(tmp_path):
    result = run(["-n", "--cores", "2", "--directory", str(tmp_path)], ROOT)
    assert result.returncode == 0, result.stderr
    text = result.stdout + result.stderr
    for rule in ("simulate_config", "simulate_cohort", "validate_inputs"):
        assert f"rule {rule}:" in text or f"{rule} " in text


def test_dry_run_of_a_pgen_only_cohort_reads_the_pgen(tmp_path):
    """A simulate section writing only .pgen: the simulate rule promises it, prepare reads it."""
    output = {"write_vcf": False, "write_plink": False, "write_pgen": True}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"simulate": {"output": output}}))
    result = run(["-n", "-p", "--cores", "1", "--directory", str(tmp_path),
                  "--configfile", str(tmp_path / "c.yaml")], ROOT)  # fmt: skip
    text = result.stdout + result.stderr
    assert result.returncode == 0, text[-3000:]
    assert "results/cohort/genotypes/cohort.pgen" in text
    assert "results/cohort/genotypes/cohort.psam" in text
    assert "cohort.bed" not in text


def test_bad_config_key_stops_with_its_name(tmp_path):
    result = run(
        [
            "-n",
            "--cores",
            "1",
            "--directory",
            str(tmp_path),
            "--config",
            "pipeline={'rare_maf_maxx': 0.1}",
        ],
        ROOT,
    )
    assert result.returncode != 0
    assert "unknown key(s) ['rare_maf_maxx'] in 'pipeline'" in result.stdout + result.stderr


@pytest.mark.slow
def test_small_end_to_end_run(tmp_path):
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(SMALL_COHORT))
    result = run(
        [
            "--cores",
            "2",
            "--directory",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "test.yaml"),
            "-q",
        ],
        ROOT,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    results = tmp_path / "results"
    clients = pd.read_csv(results / "clients.tsv", sep="\t")
    assert len(clients) == 4 and clients["n_samples"].sum() == 240
    rare = pd.read_csv(results / "rare_variants.tsv", sep="\t")
    for client in clients["client"]:
        table = pd.read_parquet(results / "clients" / client / "samples.parquet")
        dosages = sp.load_npz(results / "clients" / client / "rare_dosages.npz")
        assert dosages.shape == (len(table), len(rare))
        assert set(table["split"]) == {"train", "test"}
    excl = pd.read_csv(results / "logs" / "exclusions.tsv", sep="\t")
    assert list(excl.columns) == ["kind", "id", "reason", "step"]
    assert (results / "logs" / "score_match.tsv").is_file()
    assert (results / "report" / "data_report.html").stat().st_size > 10_000
    # every rule wrote its log
    assert (results / "logs" / "validate_inputs.log").is_file()
    assert (results / "logs" / "simulate_cohort.log").is_file()
    # nothing to do on a second call
    again = run(
        [
            "-n",
            "--cores",
            "1",
            "--directory",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "test.yaml"),
        ],
        ROOT,
    )
    assert "Nothing to be done" in again.stdout + again.stderr
    shutil.rmtree(tmp_path / ".snakemake", ignore_errors=True)


@pytest.mark.slow
def test_each_strategy_config_carries_the_sections_it_reads(tmp_path):
    """Privacy and engine settings reach every strategy; the GLMs get fedglm and burden.

    Before this, the workflow's per-strategy files held only model/train/evaluate and one
    strategy section: secagg, dp and fedglm set in config.yaml never reached training.
    """
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            {
                "secagg": {"enabled": True},
                "fedglm": {"features": "burden", "l2": 3.0},
                "train": {"compare": ["fedglm", "fedce_oracle", "fedavg"]},
            }
        )
    )
    targets = [f"results/train/{s}/config.yaml" for s in ("fedglm", "fedce_oracle", "fedavg")]
    result = run([*targets, "--cores", "1", "--directory", str(tmp_path),
                  "--configfile", str(tmp_path / "c.yaml")], ROOT)  # fmt: skip
    assert result.returncode == 0, result.stderr
    written = {
        s: yaml.safe_load((tmp_path / f"results/train/{s}/config.yaml").read_text())
        for s in ("fedglm", "fedce_oracle", "fedavg")
    }
    for sections in written.values():
        assert sections["secagg"]["enabled"] is True
        assert {"dp", "flower"} <= set(sections)
    assert written["fedglm"]["fedglm"] == {**written["fedglm"]["fedglm"], "l2": 3.0}
    assert written["fedglm"]["fedglm"]["features"] == "burden"
    assert "burden" in written["fedglm"]
    assert "fedce" in written["fedce_oracle"] and "fedglm" not in written["fedce_oracle"]
    assert "fedce" not in written["fedavg"] and "burden" not in written["fedavg"]


@pytest.mark.slow
def test_burden_region_and_annotation_files_are_inputs_of_the_train_rule(tmp_path):
    """Editing burden.regions or burden.annotations retrains the strategies reading them."""
    regions, annotations = tmp_path / "genes.tsv", tmp_path / "annotations.tsv"
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            {
                "fedglm": {"features": "burden"},
                "burden": {"regions": str(regions), "annotations": str(annotations),
                           "mask_column": "lof"},
                "train": {"compare": ["fedglm", "fedavg"]},
            }
        )
    )  # fmt: skip
    args = ["-n", "--cores", "1", "--directory", str(tmp_path),
            "--configfile", str(tmp_path / "c.yaml")]  # fmt: skip
    # neither file exists: the GLM's training job is missing both
    result = run(["results/train/fedglm/metrics.json", *args], ROOT)
    text = result.stdout + result.stderr
    assert result.returncode != 0 and "Missing input files for rule train_strategy" in text
    assert str(regions) in text and str(annotations) in text
    # FedAvg reads no burden map: its job does not depend on them
    result = run(["results/train/fedavg/metrics.json", *args], ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
