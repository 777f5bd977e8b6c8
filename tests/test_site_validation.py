"""Validation held at the sites and choices from their summaries (rvfedprs/genomic/validation.py).

Every site holds out its own validation rows (the split :func:`split_validation` draws, by its
id and the run's split seed), trains on the rest and answers the server's ``validate`` step with
histograms and a log-loss sum. The oracle for every choice is the pooled one: scikit-learn's AUC
and the mean cross-entropy of every round's models on the pooled validation samples. The three
engines run the same exchange, so ``rvfedprs train`` gives the same chosen round and metrics on
each.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import log_loss, roc_auc_score

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.evaluation import predict_clients  # noqa: E402
from rvfedprs.evaluation.selection import split_validation, validation_split  # noqa: E402
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint  # noqa: E402
from rvfedprs.genomic.client import build_model  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of  # noqa: E402
from rvfedprs.run import train  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402

FRACTION, SEED = 0.25, 7


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    paths = write_federation(tmp_path_factory.mktemp("site-validation"), n_clients=3,
                             n_clusters=3, samples_per_client=150)  # fmt: skip
    return paths["data"]


def _section(data: Path, **extra) -> dict:
    return {"data": str(data), "strategy": "fedavg", "rounds": 3, "seed": SEED,
            "progress": False, "validation_fraction": FRACTION, "lr": 0.5, "keep_checkpoints": 0,
            **extra}  # fmt: skip


def test_a_site_holds_out_the_rows_of_the_pooled_split_and_trains_on_the_rest(data):
    federation = load_federation(data)
    spec = validation_split(FRACTION, SEED)
    fit, validation = split_validation(federation, FRACTION, random_seed=spec["seed"])
    settings = {"validation": spec}
    for client, site in sites_of(federation).items():
        np.testing.assert_array_equal(site.validation_data(settings).sample_ids,
                                      validation[client].sample_ids)  # fmt: skip
        np.testing.assert_array_equal(site.training_data(settings).sample_ids,
                                      fit.train[client].sample_ids)  # fmt: skip
        report = GenomicTask().setup_report(site, settings, {})
        assert report["n-fit"] == fit.train[client].n_samples
        assert report["n-cases"] == float(fit.train[client].y.sum())
        assert report["n"] == federation.train[client].n_samples  # moments: every sample
    pooled = GenomicTask().pool_sites(sites_of(federation))
    held = np.concatenate([validation[c].sample_ids for c in federation.client_ids])
    np.testing.assert_array_equal(pooled.validation_data(settings).sample_ids, held)


def _pooled_scores(federation, record, spec) -> tuple[float, float]:
    """scikit-learn's AUC and log-loss of a checkpoint's models on the pooled validation."""
    _, validation = split_validation(federation, FRACTION, random_seed=spec["seed"])
    strategy = strategy_from_config(record["strategy_name"], record["config"])
    strategy.load_state_dict(record["strategy_state"])
    model = build_model(federation.n_rare, record["model_config"])
    p = predict_clients(strategy.parameters_for, validation, model)
    clients = sorted(validation)
    y = np.concatenate([validation[c].y for c in clients])
    score = np.concatenate([p[c] for c in clients])
    return roc_auc_score(y, score), log_loss(y, np.clip(score, 1e-12, 1 - 1e-12))


def test_the_choice_is_the_pooled_one_within_the_reported_bound(data, tmp_path):
    federation = load_federation(data)
    result = train(validate_config({"train": _section(data)}), tmp_path / "run")
    chosen, history = result.metrics["selection"], result.metrics["history"]
    spec = validation_split(FRACTION, SEED)
    bound = chosen["validation_auc_tie_bound"]
    assert 0 <= bound < 1e-3
    exact = []
    for entry in history:
        record = load_checkpoint(checkpoint_path(tmp_path / "run", entry["round"]))
        auc, loss = _pooled_scores(federation, record, spec)
        assert abs(entry["validation_auc"] - auc) <= bound + 1e-12
        exact.append(auc)
    assert chosen["validation_aucs"] == [e["validation_auc"] for e in history]
    floor = chosen["floor_validation_auc"]
    best = max([floor, *chosen["validation_aucs"]])
    assert chosen["validation_auc"] == best
    assert chosen["selected_round"] == [floor, *chosen["validation_aucs"]].index(best)
    # the reported models are the chosen round's: its test metrics are that checkpoint's
    if chosen["selected_round"]:
        from rvfedprs.run import evaluate_checkpoint

        again = evaluate_checkpoint(
            checkpoint_path(tmp_path / "run", chosen["selected_round"]), tmp_path / "eval"
        )
        assert again["auc"] == pytest.approx(result.metrics["auc"], abs=1e-12)


def test_the_log_loss_sum_gives_the_exact_pooled_log_loss(data, tmp_path):
    from rvfedprs.evaluation.summaries import pooled_validation, validation_summary

    rng = np.random.default_rng(0)
    parts = {f"s{i}": (rng.integers(0, 2, 50), rng.uniform(0.01, 0.99, 50)) for i in range(3)}
    pooled = pooled_validation({c: validation_summary(y, p) for c, (y, p) in parts.items()})
    y = np.concatenate([y for y, _ in parts.values()])
    p = np.concatenate([p for _, p in parts.values()])
    assert pooled["log_loss"] == pytest.approx(log_loss(y, p), rel=1e-12)
    assert abs(pooled["auc"] - roc_auc_score(y, p)) <= pooled["auc_tie_bound"] + 1e-12


def test_a_resumed_run_continues_the_same_choice(data, tmp_path):
    whole = train(validate_config({"train": _section(data, rounds=4)}), tmp_path / "whole")
    train(validate_config({"train": _section(data, rounds=2)}), tmp_path / "cut")
    resumed = train(validate_config({"train": _section(data, rounds=4)}), tmp_path / "cut",
                    resume=True)  # fmt: skip
    assert resumed.metrics["selection"] == whole.metrics["selection"]
    assert resumed.metrics["auc"] == pytest.approx(whole.metrics["auc"], abs=1e-12)


def test_the_centralised_baseline_chooses_on_the_same_validation_samples(data, tmp_path):
    section = _section(data, strategy="centralized", rounds=2)
    metrics = train(validate_config({"train": section}), tmp_path / "run").metrics
    federation = load_federation(data)
    record = load_checkpoint(checkpoint_path(tmp_path / "run", 1))
    auc, _ = _pooled_scores(federation, record, validation_split(FRACTION, SEED))
    bound = metrics["selection"]["validation_auc_tie_bound"]
    assert abs(metrics["selection"]["validation_aucs"][0] - auc) <= bound + 1e-12


@pytest.mark.slow
def test_train_gives_the_same_choice_and_metrics_on_every_engine(data, tmp_path):
    runs = {
        engine: train(
            validate_config({"train": _section(data, rounds=2, engine=engine)}), tmp_path / engine
        ).metrics  # fmt: skip
        for engine in ("inprocess", "flower-sim", "flower-deploy")
    }
    reference = runs["inprocess"]
    for engine in ("flower-sim", "flower-deploy"):
        other = runs[engine]
        assert other["selection"]["selected_round"] == reference["selection"]["selected_round"]
        np.testing.assert_allclose(
            other["selection"]["validation_aucs"],
            reference["selection"]["validation_aucs"],
            atol=1e-6,
        )
        for key in ("auc", "auprc", "prs_only_auc"):
            assert other[key] == pytest.approx(reference[key], abs=1e-6), (engine, key)
        assert other["client_auc"] == pytest.approx(reference["client_auc"], abs=1e-6)


class _LosesValidation:
    """The in-process transport, but ``site`` does not answer its ``at``-th validation."""

    def __init__(self, inner, site: str, at: int):
        self.inner, self.site, self.at, self.seen = inner, site, at, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def subset(self, client_ids):
        return _LosesValidation(self.inner.subset(client_ids), self.site, self.at)

    def query(self, requests, settings):
        replies, failures = self.inner.query(requests, settings)
        if any(r.step == "validate" for r in requests.values()):
            self.seen += 1
            if self.seen == self.at:
                replies.pop(self.site)
                failures = {**failures, self.site: "no reply within 5 s"}
        return replies, failures


def _run_losing(data, out, *, min_replies):
    from dataclasses import replace

    from rvfedprs.federation.inprocess import InProcessTransport
    from rvfedprs.plan import run
    from rvfedprs.tasks import get_task

    config = validate_config({"train": _section(data, rounds=2)})
    task = get_task("genomic")
    plan = replace(task.plan(config, out), min_replies=min_replies)
    site = plan.data.client_ids[1]
    transport = _LosesValidation(InProcessTransport(task, sites_of(plan.data)), site, at=2)
    return run(plan, transport=transport), site


def test_a_site_lost_in_a_validation_exchange_is_named_and_the_round_scored_on_the_rest(
    data, tmp_path
):
    from rvfedprs.federation.rounds import FederationError

    result, site = _run_losing(data, tmp_path / "two", min_replies=2)
    first = result.history[0]  # exchange 1: the floor's; 2: round 1's
    assert first["validation_failed"] == {site: "no reply within 5 s"}
    assert "validation_failed" not in result.history[1]
    assert result.selected["round"] in (0, 1, 2)
    with pytest.raises(FederationError, match=f"round 1 validation: only 2 of 3 .*{site}"):
        _run_losing(data, tmp_path / "all", min_replies=None)


class _Recording:
    """The in-process transport, keeping every ``validate`` reply the server receives."""

    def __init__(self, inner, seen=None):
        self.inner, self.seen = inner, [] if seen is None else seen

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def subset(self, client_ids):
        return _Recording(self.inner.subset(client_ids), self.seen)

    def query(self, requests, settings):
        replies, failures = self.inner.query(requests, settings)
        if any(r.step == "validate" for r in requests.values()):
            self.seen.append(dict(replies))
        return replies, failures


def test_under_secure_aggregation_the_server_learns_only_the_sum_of_the_summaries(data, tmp_path):
    from rvfedprs.evaluation.summaries import SECURE_BINS
    from rvfedprs.federation.inprocess import InProcessTransport
    from rvfedprs.plan import run
    from rvfedprs.tasks import get_task

    config = validate_config({"train": _section(data, rounds=2), "secagg": {"enabled": True}})
    task = get_task("genomic")
    plan = task.plan(config, tmp_path / "run")
    transport = _Recording(InProcessTransport(task, sites_of(plan.data)))
    result = run(plan, transport=transport)
    assert len(transport.seen) == 3  # the floor and two rounds
    for replies in transport.seen:  # a size, never a histogram or a count
        assert replies == dict.fromkeys(plan.data.client_ids, {"held": SECURE_BINS})
    federation = load_federation(data)
    spec = validation_split(FRACTION, SEED)
    bounds = result.selected["auc_tie_bounds"]
    assert len(bounds) == 3 and max(bounds) < 5e-3
    for entry in result.history:
        record = load_checkpoint(checkpoint_path(tmp_path / "run", entry["round"]))
        auc, loss = _pooled_scores(federation, record, spec)
        assert abs(entry["validation_auc"] - auc) <= bounds[entry["round"]] + 1e-12
        assert result.selected["losses"][entry["round"] - 1] == pytest.approx(loss, abs=1e-6)
