"""A consortium study of a quantitative trait gives what the pooled run gives (issue 39).

The study prepares, trains, validates and evaluates at its sites; its test R²s come from the
sites' sums. The reference is ``rvfedprs train`` over the same prepared folders gathered into
one federation, with the same seed and split: the same choice and validation R²s, the same
per-site test R², and the same pooled R² and incremental R² (exact from sums).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _workflows import run_workflow  # noqa: E402
from test_snakemake import SMALL_COHORT  # noqa: E402
from test_study_validation import _gathered  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402
from rvfedprs.study.samplesheet import read_samplesheet  # noqa: E402

PHENOTYPE = {"kind": "quantitative", "column": "disease", "id_column": "Subject id"}
TRAIN = {"rounds": 2, "seed": 3, "compare": ["fedavg"], "progress": False,
         "validation_fraction": 0.25, "keep_checkpoints": 0}  # fmt: skip


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("quantitative-study")
    simulate = {**SMALL_COHORT["simulate"], "phenotype": {"kind": "quantitative"}}
    pipeline = {**SMALL_COHORT["pipeline"], "phenotype": PHENOTYPE}
    config = {"simulate": simulate, "pipeline": pipeline, "study": {"enabled": True}}
    run_workflow(root, config, ["results/sites/samplesheet.tsv",
                                "results/cohort/scores/PGS_sim.txt.gz"])  # fmt: skip
    return root / "results"


@pytest.mark.slow
def test_a_quantitative_study_equals_the_pooled_run(inputs, tmp_path):
    out = tmp_path / "study"
    overrides = {
        "pipeline": {**SMALL_COHORT["pipeline"], "phenotype": PHENOTYPE},
        "train": TRAIN,
        "evaluate": {"truth": None, "samples": None},
        "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out)},
    }
    config = load_config(None, overrides=overrides)
    run_study_config(config, scoring_file=inputs / "cohort" / "scores" / "PGS_sim.txt.gz",
                     samplesheet=inputs / "sites" / "samplesheet.tsv")  # fmt: skip
    study = json.loads((out / "train" / "fedavg" / "metrics.json").read_text())
    sites = sorted(read_samplesheet(inputs / "sites" / "samplesheet.tsv"))
    data = _gathered(out / "sites", sites, tmp_path / "gathered")
    (data / "outcome.json").write_text((out / "sites" / sites[0] / "prepared" /
                                        "outcome.json").read_text())  # fmt: skip
    pooled_config = {**config, "train": {**config["train"], "data": str(data),
                                         "strategy": "fedavg"}}  # fmt: skip
    pooled = train(pooled_config, tmp_path / "pooled").metrics
    assert study["metric"] == pooled["metric"] == "r2"
    chosen, reference = study["selection"], pooled["selection"]
    assert chosen["selected_round"] == reference["selected_round"]
    assert chosen["validation_r2s"] == pytest.approx(reference["validation_r2s"], abs=1e-9)
    for client, r2 in pooled["client_r2"].items():
        assert study["client_r2"][client] == pytest.approx(r2, abs=1e-9)
    for key in ("r2", "incremental_r2", "null_r2", "full_r2", "prs_only_r2"):
        assert study[key] == pytest.approx(pooled[key], abs=1e-9), key


@pytest.mark.slow
def test_the_workflow_runs_a_quantitative_trait_to_comparison_md(tmp_path):
    config = {
        "simulate": {**SMALL_COHORT["simulate"], "phenotype": {"kind": "quantitative"}},
        "pipeline": {**SMALL_COHORT["pipeline"], "phenotype": PHENOTYPE},
        "train": {"compare": ["fedglm", "fedavg"], "rounds": 2, "seed": 1},
        "assess": {"enabled": False},
    }
    run_workflow(tmp_path, config, ["results/train/comparison.md"], timeout=1200)
    text = (tmp_path / "results" / "train" / "comparison.md").read_text()
    assert "| strategy | R² [95% CI]" in text and "| fedglm |" in text and "| fedavg |" in text
    outcome = json.loads((tmp_path / "results" / "outcome.json").read_text())
    assert outcome["kind"] == "quantitative"
    for name in ("fedglm", "fedavg"):
        record = json.loads((tmp_path / "results" / "evaluate" / name / "metrics.json").read_text())
        assert record["metric"] == "r2" and 0 <= record["r2"] <= 1
