"""A consortium study chooses on validation held at its sites, as the pooled run does.

Every site of a study holds out its own validation rows of its prepared training split and
answers the coordinator's ``validate`` step with summaries; the study reports the round (or the
floor) the summaries chose. The reference is ``rvfedprs train`` in one process over the same
prepared folders gathered into one federation, with the same seed and validation fraction: the
same rows are held out, so the choice, every validation score and every per-site test AUC must
be equal, and the pooled test AUC within the tie bound the study reports.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_snakemake import SMALL_COHORT  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402
from rvfedprs.study.samplesheet import read_samplesheet  # noqa: E402

TRAIN = {"rounds": 3, "seed": 3, "compare": ["fedavg"], "progress": False,
         "validation_fraction": 0.25, "keep_checkpoints": 0}  # fmt: skip


def _config(out: Path) -> dict:
    return load_config(
        None,
        overrides={
            **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
            "train": TRAIN,
            "evaluate": {"truth": None, "samples": None},
            "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out)},
        },
    )


def _gathered(sites_dir: Path, sites: list[str], into: Path) -> Path:
    """The sites' prepared folders as one federation folder (links, nothing copied)."""
    (into / "clients").mkdir(parents=True)
    tables = []
    for site in sites:
        prepared = sites_dir / site / "prepared"
        (into / "clients" / site).symlink_to(prepared / "clients" / site)
        tables.append(pd.read_csv(prepared / "clients.tsv", sep="\t"))
    pd.concat(tables).to_csv(into / "clients.tsv", sep="\t", index=False)
    first = sites_dir / sites[0] / "prepared" / "rare_variants.tsv"
    (into / "rare_variants.tsv").write_text(first.read_text())
    return into


def test_a_study_chooses_what_the_pooled_run_chooses_on_the_same_site_splits(
    study_inputs, tmp_path
):
    out = tmp_path / "study"
    config = _config(out)
    run_study_config(
        config,
        scoring_file=study_inputs / "cohort" / "scores" / "PGS_sim.txt.gz",
        samplesheet=study_inputs / "sites" / "samplesheet.tsv",
    )
    study = json.loads((out / "train" / "fedavg" / "metrics.json").read_text())
    sites = sorted(read_samplesheet(study_inputs / "sites" / "samplesheet.tsv"))
    data = _gathered(out / "sites", sites, tmp_path / "gathered")
    pooled_config = {**config, "train": {**config["train"], "data": str(data),
                                         "strategy": "fedavg"}}  # fmt: skip
    pooled = train(pooled_config, tmp_path / "pooled").metrics

    chosen, reference = study["selection"], pooled["selection"]
    assert chosen["selected_round"] == reference["selected_round"]
    assert chosen["floor_validation_auc"] == pytest.approx(
        reference["floor_validation_auc"], abs=1e-9
    )
    assert chosen["validation_aucs"] == pytest.approx(reference["validation_aucs"], abs=1e-9)
    for client, auc in pooled["client_auc"].items():  # exact at every site
        assert study["client_auc"][client] == pytest.approx(auc, abs=1e-9)
    assert abs(study["auc"] - pooled["auc"]) <= study["auc_tie_bound"] + 1e-12
    for a, b in zip(study["history"], pooled["history"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-9)
        assert a["validation_auc"] == pytest.approx(b["validation_auc"], abs=1e-9)
    # the choice is one a study can make: the floor is a candidate, scored at the sites
    assert chosen["chose_floor"] == (chosen["selected_round"] == 0)
