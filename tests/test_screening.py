"""In the clear, the server refuses and names poisoned replies (issue 30, item 3).

Every entry point fixes each site's training-sample count once, before training, the same way
(:func:`~rvfedprs.federation.rounds.declare_samples`): the ``setup`` step of a Flower job, the
setup reports of an in-process run and a study's features stage. A reply that reports another
count is refused and the site named.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint  # noqa: E402
from rvfedprs.federation.inprocess import InProcessTransport  # noqa: E402
from rvfedprs.federation.rounds import FederationError, RunSpec, negotiate, serve  # noqa: E402
from rvfedprs.federation.screening import UpdateScreen, update_norm  # noqa: E402
from rvfedprs.federation.task import Transport  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of  # noqa: E402
from rvfedprs.plan import RunPlan, run  # noqa: E402
from rvfedprs.strategies import FitInstruction, FitResult, get_strategy  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402

BAD = "client02"


class Tampering(InProcessTransport):
    """The in-process engine with one site that scales its update or inflates its count."""

    def __init__(self, task, sites, *, scale=1.0, n=None):
        super().__init__(task, sites)
        self.scale, self.n = scale, n

    def subset(self, client_ids):  # noqa: D102
        return self

    def fit(self, server_round, instructions, seeds, settings, client_state):  # noqa: D102
        results, failures = super().fit(server_round, instructions, seeds, settings, client_state)
        if BAD in results:
            r, sent = results[BAD], instructions[BAD].parameters
            params = {k: sent[k] + self.scale * (v - sent[k]) for k, v in r.parameters.items()}
            results[BAD] = replace(r, parameters=params, n_samples=self.n or r.n_samples)
        return results, failures


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    paths = write_federation(tmp_path_factory.mktemp("screen"), n_clients=5, n_clusters=2,
                             samples_per_client=100)  # fmt: skip
    return load_federation(paths["data"])


def _run(federation, **tamper):
    task = GenomicTask()
    transport = Tampering(task, sites_of(federation), **tamper)
    job = {"seed": 1, "rounds": 2, "config": _config(federation), "min_replies": 3}
    settings, transport, _ = negotiate(task, transport, job)
    return serve(task, transport, [RunSpec(get_strategy("fedavg"))], job, settings)[0]


def _config(federation):
    return load_config(None, overrides={
        "train": {"validation_fraction": 0, "strategy": "fedavg",
                  "rounds": 2, "seed": 1, "data": str(federation.data_dir)},
        "model": {"common_hidden": [4], "rare_hidden": [8]},
    })  # fmt: skip


def _inprocess_plan(federation, **tamper):
    """``rvfedprs.plan.run`` in this process (no setup step of its own), one site tampering."""
    plan = RunPlan(task="genomic", data=federation, strategy=get_strategy("fedavg"), rounds=2,
                   seed=1, config=_config(federation), min_replies=3)  # fmt: skip
    return run(plan, transport=Tampering(GenomicTask(), sites_of(federation), **tamper))


def test_a_scaled_update_is_refused_and_named(federation):
    result = _run(federation, scale=1e6)
    for entry in result.history:
        assert list(entry["failed"]) == [BAD]
        assert "x the round's median" in entry["failed"][BAD]
        assert "train.update_norm_factor = 100" in entry["failed"][BAD]
    honest = _run(federation)
    assert all("failed" not in e for e in honest.history)
    w = result.strategy.parameters_for("client00")
    assert max(float(np.abs(v).max()) for v in w.values()) < 100  # the 1e6 never got in


def test_an_inflated_sample_count_is_refused_and_named(federation):
    result = _run(federation, n=10**9)
    for entry in result.history:
        assert "reports 1000000000 training samples" in entry["failed"][BAD]
        assert "declared at setup" in entry["failed"][BAD]


def test_an_inprocess_run_fixes_the_counts_and_refuses_an_inflated_one(federation):
    result = _inprocess_plan(federation, n=10**9)
    declared = federation.train[BAD].n_samples
    for entry in result.history:
        assert entry["failed"] == {
            BAD: f"round {entry['round']}: reports 1000000000 training samples, {declared} "
            "declared at setup (the aggregation weight is the declared count)"
        }
    honest = _inprocess_plan(federation)
    assert all("failed" not in e for e in honest.history)
    assert honest.history[-1]["loss"] != result.history[-1]["loss"]  # BAD's update left out


def test_too_many_refusals_stop_the_round_with_the_reasons(federation):
    screen = UpdateScreen(declared={"a": 5, "b": 5, "c": 5}, factor=2.0)
    sent = {"w": np.zeros(3)}
    results = {c: FitResult(c, 5, {"w": np.full(3, v)}, {"loss": 0.0})
               for c, v in (("a", 1.0), ("b", 1.1), ("c", 9.0))}  # fmt: skip
    kept, refused = screen.screen(1, results, {c: FitInstruction(sent) for c in results})
    assert sorted(kept) == ["a", "b"] and "c" in refused
    assert update_norm(results["c"], sent) == pytest.approx(9.0 * np.sqrt(3))
    with pytest.raises(FederationError, match=r"only|min_replies"):
        from rvfedprs.federation.rounds import require_replies

        require_replies("round 1", "round 1: 2 of 3 clients replied", 2, 3, refused)


class Inflating(Transport):
    """A study's transport on which one site reports ``n`` training samples in every round."""

    def __init__(self, inner: Transport, site: str, n: int):
        self.inner, self.site, self.n = inner, site, n

    @property
    def client_ids(self):  # noqa: D102
        return self.inner.client_ids

    def subset(self, client_ids):  # noqa: D102
        return Inflating(self.inner.subset(client_ids), self.site, self.n)

    def pooled(self, task):  # noqa: D102
        return self.inner.pooled(task)

    def open(self, payload):  # noqa: D102
        return self.inner.open(payload)

    def query(self, requests, settings):  # noqa: D102
        return self.inner.query(requests, settings)

    def fit(self, server_round, instructions, seeds, settings, client_state):  # noqa: D102
        results, failures = self.inner.fit(
            server_round, instructions, seeds, settings, client_state
        )
        if self.site in results:
            results[self.site] = replace(results[self.site], n_samples=self.n)
        return results, failures


def _study(study_inputs, out, *, liar=None, min_replies=None):
    from test_snakemake import SMALL_COHORT

    config = load_config(None, overrides={
        **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
        "train": {"rounds": 2, "seed": 3, "compare": ["fedavg"], "progress": False,
                  "validation_fraction": 0},
        "evaluate": {"truth": None, "samples": None},
        "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out),
                  "min_replies": min_replies},
    })  # fmt: skip
    wrap = None if liar is None else (lambda t: Inflating(t, liar, 10**9))
    return run_study_config(
        config,
        scoring_file=study_inputs / "cohort" / "scores" / "PGS_sim.txt.gz",
        samplesheet=study_inputs / "sites" / "samplesheet.tsv",
        wrap=wrap,
    )


@pytest.mark.slow  # the sites' folders come from the Snakemake workflow
def test_a_study_refuses_and_names_a_site_inflating_its_count(study_inputs, tmp_path):
    honest = _study(study_inputs, tmp_path / "honest")
    assert honest["runs"]["fedavg"]["failures"] == {}  # every reply had its declared count
    liar = honest["sites"][1]
    clients = pd.read_csv(tmp_path / "honest" / "clients.tsv", sep="\t").set_index("client")
    declared = int(clients.loc[liar, "n_train"])  # fixed by the features stage
    with pytest.raises(FederationError, match=rf"{liar}.*reports 1000000000 training samples"):
        _study(study_inputs, tmp_path / "all", liar=liar)  # min_replies: every site
    lied = _study(study_inputs, tmp_path / "lied", liar=liar, min_replies=2)
    failures = lied["runs"]["fedavg"]["failures"]
    assert sorted(failures) == [1, 2]
    for server_round, failed in failures.items():
        assert failed == {
            liar: f"round {server_round}: reports 1000000000 training samples, {declared} "
            "declared at setup (the aggregation weight is the declared count)"
        }
    models = [
        load_checkpoint(checkpoint_path(tmp_path / run / "train" / "fedavg", 2))["strategy_state"]
        for run in ("honest", "lied")
    ]
    params = [m["parameters"] for m in models]
    assert params[0].keys() == params[1].keys()
    assert any(not np.array_equal(params[0][k], params[1][k]) for k in params[0])  # liar left out
