"""The paper evaluation as the workflow's last rule: snakemake/paper.smk, paper_evaluation."""

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from sklearn.metrics import roc_auc_score
from test_snakemake import ROOT, SMALL_COHORT
from test_snakemake import run as run_snakemake

from rvfedprs.config import deep_merge, load_config, validate_config
from rvfedprs.exceptions import ConfigError

DRIVER = ROOT / "simulations" / "rvfedprs_paper" / "run.py"
SENTINEL = "results/paper_evaluation/report/table2_performance.md"


def run(args, timeout=300):
    return run_snakemake(args, ROOT, timeout)


def write_config(folder: Path, paper: dict, base: dict | None = None) -> Path:
    path = folder / "test.yaml"
    path.write_text(yaml.safe_dump({**(base or {}), "paper_evaluation": paper}))
    return path


def dry_run(folder: Path, *extra: str):
    result = run(["-n", "-p", "--cores", "2", "--directory", str(folder), *extra])
    return result, result.stdout + result.stderr


def test_both_shipped_configs_validate_and_only_paper_enables_it():
    demo = load_config(ROOT / "config" / "config.yaml")["paper_evaluation"]
    assert demo["enabled"] is False
    # config/paper.yaml is merged over config/config.yaml (Snakefile + --configfile)
    raw = [yaml.safe_load((ROOT / "config" / n).read_text()) for n in ("config.yaml", "paper.yaml")]
    paper = validate_config(deep_merge(*raw))["paper_evaluation"]
    assert paper["enabled"] is True and paper["seeds"] == 5
    assert paper["mia"] and paper["privacy"] and paper["sensitivity"]
    assert sorted(paper["strategies"]) == sorted(
        ["centralized", "local", "fedavg", "fedprox", "fedadam", "clustered", "fedce"]
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"strategies": ["fedce", "fedavgg"]}, r"'paper_evaluation\.strategies\.1': 'fedavgg'"),
        ({"seeds": 0}, r"'paper_evaluation\.seeds': 0 is less than the minimum of 1"),
        ({"rounds": "ten"}, r"'paper_evaluation\.rounds': 'ten' has the wrong type"),
        ({"mia_targets": 2}, r"unknown key\(s\) \['mia_targets'\] in 'paper_evaluation'"),
    ],
)
def test_bad_values_are_named(section, message):
    with pytest.raises(ConfigError, match=message):
        validate_config({"paper_evaluation": section})


def test_disabled_by_default_so_the_demo_plans_no_paper_evaluation(tmp_path):
    result, text = dry_run(tmp_path)
    assert result.returncode == 0, text[-3000:]
    assert "rule train_strategy:" in text  # the demo's own last stages are planned
    assert "paper_evaluation" not in text


def test_enabled_plans_the_driver_with_the_sections_options(tmp_path):
    paper = {"enabled": True, "seeds": 3, "strategies": ["fedce", "fedavg"], "mia": False,
             "privacy": False, "rounds": 4}  # fmt: skip
    config = write_config(tmp_path, paper)
    result, text = dry_run(tmp_path, "--configfile", str(config))
    assert result.returncode == 0, text[-3000:]
    assert "rule paper_evaluation:" in text and "rule paper_evaluation_config:" in text
    assert SENTINEL in text
    (command,) = [line for line in text.splitlines() if str(DRIVER) in line]
    # the driver is found from the Snakefile's folder, not from --directory
    assert "--data results --out results/paper_evaluation" in command
    assert "--seeds 3 --strategies fedce,fedavg --rounds 4 --no-mia --no-privacy" in command
    assert "--no-sensitivity" not in command and "--quick" not in command
    # a simulated cohort brings its truth for carrier AUC and ARI
    assert "--samples results/cohort/samples.tsv" in command
    assert "--truth results/cohort/truth/causal_variants.tsv" in command


def test_unknown_strategy_stops_the_workflow_before_planning(tmp_path):
    config = write_config(tmp_path, {"enabled": True, "strategies": ["fedcee"]})
    result, text = dry_run(tmp_path, "--configfile", str(config))
    assert result.returncode != 0
    assert "'paper_evaluation.strategies.0': 'fedcee' is not allowed" in text
    assert "rule paper_evaluation" not in text


@pytest.mark.slow
def test_small_run_writes_the_report_from_the_prepared_inputs(tmp_path):
    # Two strategies without FedAvg: on 48 test samples the carriers hold no case, so the
    # paired comparison against FedAvg (carrier subset) would have nothing to rank.
    paper = {"enabled": True, "seeds": 1, "strategies": ["fedce", "local"], "quick": True,
             "mia": False, "privacy": False, "sensitivity": False, "selected": False}  # fmt: skip
    config = write_config(tmp_path, paper, SMALL_COHORT)
    args = ["--cores", "2", "--directory", str(tmp_path), "--configfile", str(config)]
    result = run([SENTINEL, *args], timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = tmp_path / "results" / "paper_evaluation"
    assert (tmp_path / "results" / "logs" / "paper_evaluation.log").is_file()
    assert (out / "report" / "table2_performance.csv").is_file()
    assert (out / "report" / "headline.json").is_file()
    assert (out / "benchmark.tsv").is_file()
    # the driver ran with the workflow's configuration and the section's options
    driver_config = json.loads((out / "config.json").read_text())
    assert driver_config["train"]["rounds"] == 2  # quick
    assert driver_config["train"]["seed"] == 20240611  # from config/config.yaml
    runs = sorted(p.relative_to(out / "runs").as_posix() for p in out.rglob("metrics.json"))
    assert runs == ["main/fedce/seed0/metrics.json", "main/local/seed0/metrics.json"]
    # Table II holds each strategy's pooled AUC, recomputed here from its predictions
    table = pd.read_csv(out / "report" / "table2_performance.csv").set_index("strategy")
    clients = pd.read_csv(tmp_path / "results" / "clients.tsv", sep="\t")
    for strategy in ("fedce", "local"):
        predictions = pd.read_parquet(
            out / "runs" / "main" / strategy / "seed0" / "predictions.parquet"
        )
        assert set(predictions["client"]) == set(clients["client"])
        assert len(predictions) == clients["n_test"].sum()
        expected = roc_auc_score(predictions["y"], predictions["p"])
        assert table.loc[strategy, "auc_mean"] == pytest.approx(expected, abs=1e-9)
    # nothing to do on a second call
    again = run(["-n", SENTINEL, *args])
    assert "Nothing to be done" in again.stdout + again.stderr
