"""In the clear, the server refuses and names poisoned replies (issue 30, item 3)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.inprocess import InProcessTransport  # noqa: E402
from rvfedprs.federation.rounds import FederationError, RunSpec, negotiate, serve  # noqa: E402
from rvfedprs.federation.screening import UpdateScreen, update_norm  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of  # noqa: E402
from rvfedprs.strategies import FitInstruction, FitResult, get_strategy  # noqa: E402

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
    config = load_config(None, overrides={
        "train": {"strategy": "fedavg", "rounds": 2, "seed": 1, "data": str(federation.data_dir)},
        "model": {"common_hidden": [4], "rare_hidden": [8]},
    })  # fmt: skip
    task = GenomicTask()
    transport = Tampering(task, sites_of(federation), **tamper)
    job = {"seed": 1, "rounds": 2, "config": config, "min_replies": 3}
    settings, transport, _ = negotiate(task, transport, job)
    return serve(task, transport, [RunSpec(get_strategy("fedavg"))], job, settings)[0]


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
