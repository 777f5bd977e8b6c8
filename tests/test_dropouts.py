"""Sites lost at an exchange: one ``min_replies`` rule, the lost named, the checkpoint kept.

A tiny federation (three sites) trains on the in-process engine with the study's federated
evaluation after every round (:func:`rvfedprs.study.coordinator.RoundEvaluation`). A site whose
evaluation fails (its step raises, as a node that never replies is recorded) is named in the
round's record and the pooled metrics cover the others; with too few sites left the run stops
naming it, and the round's checkpoint, written before its evaluation, is on disk and loads.

Slow: whole studies on a small simulated cohort split into four sites — in-process with one
site's evaluation replies lost in transit (what a killed node gives), and on Flower's simulation
engine with one site whose evaluation fails on its node (its truth table is gone)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from test_snakemake import SMALL_COHORT  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.evaluation.summaries import site_summary  # noqa: E402
from rvfedprs.exceptions import ConfigError, InputDataError  # noqa: E402
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint  # noqa: E402
from rvfedprs.federation.inprocess import InProcessTransport  # noqa: E402
from rvfedprs.federation.rounds import (  # noqa: E402
    FederationError,
    RunSetup,
    RunSpec,
    begin_run,
    serve,
)
from rvfedprs.federation.secagg.protocol import STEP_UNMASK  # noqa: E402
from rvfedprs.federation.task import Transport  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.engine import genomic_settings  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of  # noqa: E402
from rvfedprs.model import model_from_config, set_parameters  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402
from rvfedprs.study.coordinator import RoundEvaluation, federated_evaluation  # noqa: E402
from rvfedprs.study.run import run_study_config, study_job, study_min_replies  # noqa: E402
from rvfedprs.study.samplesheet import read_samplesheet  # noqa: E402
from rvfedprs.training import LocalTrainingConfig, evaluate  # noqa: E402

SEED = 5
BINS = 50
MODEL = {"common_hidden": [4], "rare_hidden": [8], "dropout": 0.0}
TRAINING = LocalTrainingConfig(epochs=1, lr=0.05, momentum=0.0, batch_size=32)
LOST = "client01"
ROOT = Path(__file__).resolve().parents[1]


class EvaluatingTask(GenomicTask):
    """The genomic task with the study's ``evaluate`` step; sites in ``lost`` never answer it."""

    steps = {**GenomicTask.steps, "evaluate": "step_evaluate"}

    def __init__(self, federation, lost=()) -> None:
        super().__init__()
        self.federation = federation
        self.lost = set(lost)

    def step_evaluate(self, site, payload, state) -> dict:
        data = self.federation.test[site.train.client_id]
        if data.client_id in self.lost:
            raise InputDataError(f"site {data.client_id}: node lost")
        model = model_from_config(data.n_rare, payload["settings"]["model"], initialise=False)
        set_parameters(model, payload["parameters"])
        return site_summary(data.y, evaluate(model, data), bins=int(payload["bins"]))


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    paths = write_federation(
        tmp_path_factory.mktemp("dropouts"),
        n_clients=3,
        n_clusters=1,
        samples_per_client=80,
        private_per_cluster=5,
        n_shared=4,
        causal_private=2,
        causal_shared=1,
    )
    return load_federation(paths["data"])


def _serve(federation, out, *, lost=(), min_replies=None, rounds=2, evaluate_round=None):
    """Train fedavg; evaluate every round federatedly (unless ``evaluate_round`` is given)."""
    task = EvaluatingTask(federation, lost)
    transport = InProcessTransport(task, sites_of(federation))
    settings = genomic_settings(federation, model_config=MODEL, training=TRAINING)
    job = {"seed": SEED, "rounds": rounds, "resume": False, "min_replies": min_replies}
    strategy = strategy_from_config("fedavg", load_config(None))
    if evaluate_round is None:
        needed = min_replies or len(transport.client_ids)
        evaluate_round = RoundEvaluation(transport, settings, bins=BINS, min_replies=needed)
    run = RunSpec(strategy, out=out, evaluate_round=evaluate_round)
    return serve(task, transport, [run], job, settings)[0], strategy, transport, settings


def test_a_round_whose_evaluation_fails_keeps_its_checkpoint(federation, tmp_path):
    def evaluate_round(strategy, server_round):
        if server_round == 2:
            raise FederationError("round 2 evaluation: only 1 of 3 sites answered")
        return {"auc": 0.5}

    with pytest.raises(FederationError, match="round 2 evaluation"):
        _serve(federation, tmp_path, evaluate_round=evaluate_round)
    first = load_checkpoint(checkpoint_path(tmp_path, 1))
    assert first["history"][0]["auc"] == 0.5  # rewritten once the round was evaluated
    second = load_checkpoint(checkpoint_path(tmp_path, 2))
    assert second["round"] == 2 and [e["round"] for e in second["history"]] == [1, 2]
    assert "auc" not in second["history"][1]
    # the round's trained model resumes: it equals round 2 of an uninterrupted run
    _, trained, _, _ = _serve(federation, tmp_path / "uninterrupted", rounds=2,
                              evaluate_round=lambda s, r: {})  # fmt: skip
    restored = strategy_from_config("fedavg", load_config(None))
    setup = RunSetup(federation.client_ids, random_seed=SEED, out=tmp_path)
    start, history = begin_run(restored, setup, lambda: {}, resume=True)
    assert start == 2 and len(history) == 2
    for name, value in trained.parameters.items():
        np.testing.assert_array_equal(restored.parameters[name], value)


def test_a_site_lost_in_evaluation_is_named_and_the_rest_are_pooled(federation, tmp_path):
    result, strategy, transport, settings = _serve(federation, tmp_path, lost=[LOST], min_replies=2)
    kept = [c for c in federation.client_ids if c != LOST]
    assert [e["round"] for e in result.history] == [1, 2]
    for entry in result.history:
        assert "failed" not in entry  # training had every site
        assert list(entry["evaluation_failed"]) == [LOST]
        assert "node lost" in entry["evaluation_failed"][LOST]
        assert entry["evaluated_sites"] == kept
    saved = load_checkpoint(checkpoint_path(tmp_path, 2))["history"]
    assert saved[-1]["evaluation_failed"] == result.history[-1]["evaluation_failed"]

    final = federated_evaluation(transport, strategy, settings, bins=BINS, min_replies=2)
    assert final["evaluated_sites"] == kept and list(final["evaluation_failed"]) == [LOST]
    assert sorted(final["client_auc"]) == kept
    assert final["auc"] == result.history[-1]["auc"]
    every = InProcessTransport(EvaluatingTask(federation), sites_of(federation))
    remaining = federated_evaluation(
        every.subset(kept), strategy, settings, bins=BINS, min_replies=2
    )
    assert final["auc"] == remaining["auc"]  # pooled over exactly the sites that answered
    assert (
        final["auc"]
        != federated_evaluation(every, strategy, settings, bins=BINS, min_replies=3)["auc"]
    )


def test_too_few_sites_in_evaluation_stop_the_run_naming_them(federation, tmp_path):
    with pytest.raises(
        FederationError,
        match=rf"round 1 evaluation: only 2 of 3 sites answered \(min_replies=3\).*{LOST}.*lost",
    ):
        _serve(federation, tmp_path, lost=[LOST], min_replies=3)
    assert load_checkpoint(checkpoint_path(tmp_path, 1))["round"] == 1


def _config(study=None, flower=None):
    return load_config(None, overrides={"study": study or {}, "flower": flower or {}})


def test_a_study_honours_either_min_replies_and_refuses_two_that_disagree(tmp_path):
    assert study_min_replies(_config(), 5) == 5
    assert study_min_replies(_config(study={"min_replies": 3}), 5) == 3
    assert study_min_replies(_config(flower={"min_replies": 3}), 5) == 3
    both = _config(study={"min_replies": 3}, flower={"min_replies": 3})
    assert study_min_replies(both, 5) == 3
    job = study_job(_config(flower={"min_replies": 4}), out=tmp_path, scoring_file="s.txt",
                    seed=1, n_sites=5)  # fmt: skip
    assert job["min_replies"] == 4
    with pytest.raises(ConfigError, match=r"study.min_replies and flower.min_replies.*\(3 and 4\)"):
        study_min_replies(_config(study={"min_replies": 3}, flower={"min_replies": 4}), 5)
    with pytest.raises(ConfigError, match=r"study.min_replies must be in \[1, 5\].*got 6"):
        study_min_replies(_config(study={"min_replies": 6}), 5)


class LosingReplies(Transport):
    """An engine's transport whose ``step`` requests to ``lost`` go unanswered (a dead node).

    Every other message is delivered by ``inner``, as it would be before the node died.
    """

    def __init__(self, inner: Transport, lost: str, step: str = "evaluate") -> None:
        self.inner = inner
        self.lost = lost
        self.step = step

    @property
    def client_ids(self) -> list[str]:
        return self.inner.client_ids

    def open(self, payload):
        return self.inner.open(payload)

    def subset(self, client_ids):
        return LosingReplies(self.inner.subset(client_ids), self.lost, self.step)

    def query(self, requests, settings):
        dropped = {c for c, r in requests.items() if c == self.lost and r.step == self.step}
        replies, failures = self.inner.query(
            {c: r for c, r in requests.items() if c not in dropped}, settings
        )
        return replies, {**failures, **dict.fromkeys(dropped, "no reply within 180.0 s")}

    def fit(self, server_round, instructions, seeds, settings, client_state):
        return self.inner.fit(server_round, instructions, seeds, settings, client_state)


def _study(inputs: Path, out: Path, **study):
    config = load_config(
        None,
        overrides={
            **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
            "train": {"rounds": 2, "seed": 3, "compare": ["fedavg"], "progress": False,
                      "validation_fraction": 0},
            "evaluate": {"truth": None, "samples": None},
            "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out), **study},
        },
    )  # fmt: skip
    return config, inputs / "cohort" / "scores" / "PGS_sim.txt.gz"


@pytest.mark.slow
def test_a_study_survives_a_site_lost_in_evaluation_and_names_it(study_inputs, tmp_path):
    sheet = study_inputs / "sites" / "samplesheet.tsv"
    sites = sorted(read_samplesheet(sheet))
    lost = sites[1]
    config, scores = _study(study_inputs, tmp_path / "ok", min_replies=3)
    summary = run_study_config(
        config,
        scoring_file=scores,
        samplesheet=sheet,
        wrap=lambda t: LosingReplies(t, lost),
    )
    kept = [s for s in sites if s != lost]
    run = summary["runs"]["fedavg"]
    assert run["evaluated_sites"] == kept and run["failures"] == {}
    named = {lost: "no reply within 180.0 s"}
    assert run["evaluation_failures"] == {1: named, 2: named, "final": named}
    written = json.loads((tmp_path / "ok" / "study.json").read_text())
    assert written["runs"]["fedavg"]["evaluation_failures"] == {"1": named, "2": named,
                                                                "final": named}  # fmt: skip
    metrics = json.loads((tmp_path / "ok" / "train" / "fedavg" / "metrics.json").read_text())
    assert sorted(metrics["client_auc"]) == kept and metrics["evaluated_sites"] == kept
    assert [e["evaluation_failed"] for e in metrics["history"]] == [named, named]

    config, scores = _study(study_inputs, tmp_path / "stops")
    with pytest.raises(FederationError, match=rf"round 1 evaluation: only 3 of 4 .*{lost}"):
        run_study_config(
            config, scoring_file=scores, samplesheet=sheet,
            wrap=lambda t: LosingReplies(t, lost),
        )  # fmt: skip
    assert load_checkpoint(checkpoint_path(tmp_path / "stops" / "train" / "fedavg", 1))


@pytest.mark.slow
def test_a_listed_site_no_node_serves_is_named_not_dropped(study_inputs, tmp_path):
    """The sheet lists it, no node answers for it at the start: left out by name, in study.json."""
    sheet = study_inputs / "sites" / "samplesheet.tsv"
    sites = sorted(read_samplesheet(sheet))
    absent = sites[2]
    kept = [s for s in sites if s != absent]
    out = tmp_path / "study"
    config, scores = _study(study_inputs, out, min_replies=3)
    config["train"] = {**config["train"], "rounds": 1}
    summary = run_study_config(
        config, scoring_file=scores, samplesheet=sheet, wrap=lambda t: t.subset(kept)
    )
    why = "no node serving this site was connected at the start of the study"
    written = json.loads((out / "study.json").read_text())
    for got in (summary, written):
        assert got["sites"] == kept and got["left_out"] == {absent: why}
    with pytest.raises(FederationError, match=rf"setup: only 3 of 4 .*{absent}"):
        config, scores = _study(study_inputs, tmp_path / "all")  # every site required
        run_study_config(config, scoring_file=scores, samplesheet=sheet,
                         wrap=lambda t: t.subset(kept))  # fmt: skip


@pytest.mark.slow
def test_a_site_silent_in_the_unmask_step_of_the_secure_counts_is_out_of_the_study(
    study_inputs, tmp_path
):
    """Its masked counts arrived, so they are in the sum (SecAgg's rule), but it did not answer
    a step: it is left out of the rest of the study, named with the step and that its counts
    are in the sum — not kept in to be lost at the next step under another name."""
    sheet = study_inputs / "sites" / "samplesheet.tsv"
    sites = sorted(read_samplesheet(sheet))
    lost = sites[1]
    out = tmp_path / "study"
    config, scores = _study(study_inputs, out, min_replies=3, count_aggregation="secure")
    config["train"] = {**config["train"], "rounds": 1}
    summary = run_study_config(
        config, scoring_file=scores, samplesheet=sheet,
        wrap=lambda t: LosingReplies(t, lost, STEP_UNMASK),
    )  # fmt: skip
    kept = [s for s in sites if s != lost]
    why = f"secure sum of counts: {STEP_UNMASK}: no reply within 180.0 s"
    why += " (its counts are in the sum)"
    written = json.loads((out / "study.json").read_text())
    for got in (summary, written):
        assert got["sites"] == kept and got["left_out"] == {lost: why}
    assert sorted(pd.read_csv(out / "clients.tsv", sep="\t")["client"]) == kept
    assert not (out / "sites" / lost / "prepared" / "features.request").exists()
    metrics = json.loads((out / "train" / "fedavg" / "metrics.json").read_text())
    assert metrics["evaluated_sites"] == kept and not metrics["history"][0].get("evaluation_failed")


@pytest.mark.slow
def test_a_flower_simulation_study_survives_a_site_failing_its_evaluation(study_inputs, tmp_path):
    """On Flower: the site's evaluation raises on its node (its truth table is gone)."""
    sheet = pd.read_csv(study_inputs / "sites" / "samplesheet.tsv", sep="\t")
    assert sheet["truth"].notna().all() and sheet["samples"].notna().all()
    lost = sorted(sheet["site"])[2]
    sheet.loc[sheet["site"] == lost, "truth"] = str(tmp_path / "gone_truth.tsv")
    path = tmp_path / "samplesheet.tsv"
    sheet.to_csv(path, sep="\t", index=False)
    config, scores = _study(study_inputs, tmp_path / "sim", engine="flower-sim", min_replies=3)
    config["train"] = {**config["train"], "rounds": 1}
    summary = run_study_config(config, scoring_file=scores, samplesheet=path)
    kept = [s for s in sorted(sheet["site"]) if s != lost]
    run = summary["runs"]["fedavg"]
    assert run["evaluated_sites"] == kept and run["failures"] == {}
    assert sorted(run["evaluation_failures"]) == ["1", "final"]  # through status.json
    for failed in run["evaluation_failures"].values():
        assert list(failed) == [lost] and "truth table not found" in failed[lost]
