"""Securely aggregated training rounds: the model equals the plain aggregation up to the
quantisation bound, the server never holds an update, dropouts and refusals are named.

Every oracle is the plain round with the same seed: the clients train the same updates in both
(their fit replies are recorded), so the secure model must equal the plain one to within the
analytic bound n·2c/R / Σω (plus one float32 rounding) — for FedAvg, FedProx, FedAdam, FedAvg-w
and FedCE (its backbone over every client, each specialist within its cluster, the head both
ways). The ServerApp on the in-process Grid (the real ClientApp) gives the in-process result.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from test_secagg import _arrays  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.exceptions import ConfigError, InputDataError  # noqa: E402
from rvfedprs.federation.checkpoints import load_checkpoint  # noqa: E402
from rvfedprs.federation.inprocess import InProcessTransport  # noqa: E402
from rvfedprs.federation.rounds import RunSpec, serve  # noqa: E402
from rvfedprs.federation.secagg.protocol import (  # noqa: E402
    STEP_KEYS,
    STEP_MASK,
    STEP_RELEASE,
    STEP_SHARE,
    STEP_UNMASK,
    ImplausibleSumError,
    SecAggParams,
    SecureAggregationError,
)
from rvfedprs.federation.task import Request  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.engine import genomic_settings  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of, training_config  # noqa: E402
from rvfedprs.strategies import STRATEGY_NAMES, get_strategy, strategy_class  # noqa: E402
from rvfedprs.strategies import strategy_from_config as from_config  # noqa: E402
from rvfedprs.strategies.fedce import FedCE  # noqa: E402

SEED = 3
PARAMS = SecAggParams()
COMPATIBLE = {
    "fedavg", "fedprox", "fedadam", "fedavg_w", "fedavgm",
    "fedce", "fedce_carried", "fedce_global_head", "fedce_oracle", "fedce_random", "fedglm",
    "fedce_glm", "fedassoc",
}  # fmt: skip


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    paths = write_federation(
        tmp_path_factory.mktemp("fed"),
        n_clients=6,
        n_clusters=2,
        samples_per_client=120,
        private_per_cluster=12,
        n_shared=8,
        causal_private=4,
        causal_shared=2,
    )
    return load_federation(paths["data"])


def _config(fed, name="fedavg", secure=True, rounds=1, seed=SEED, **sections):
    secagg = {"enabled": secure, **sections.pop("secagg", {})}
    return load_config(
        None,
        overrides={
            "train": {
                "validation_fraction": 0,
                "strategy": name,
                "rounds": rounds,
                "seed": seed,
                "data": str(fed.data_dir),
            },
            # the floor's own secure fit is tested in test_fedglm; here both runs start alike
            "model": {"common_hidden": [4], "rare_hidden": [8], "start_from_floor": False},
            "fedce": {"n_clusters": 2, **sections.pop("fedce", {})},
            "secagg": secagg,
            **sections,
        },
    )


def _strategy(fed, name, config):
    if name == "fedavg_w":
        d = np.add.outer(np.arange(6.0), np.arange(6.0)) % 4
        np.fill_diagonal(d, 0)
        return get_strategy(name, distance=d, distance_clients=fed.client_ids, omega=0.3)
    return from_config(name, config)


class Recording(InProcessTransport):
    """The in-process engine, recording what reaches the server (fit results, step replies)."""

    def __init__(self, task, sites):
        super().__init__(task, sites)
        self.fitted: list = []
        self.replies: list = []

    def subset(self, client_ids):  # noqa: D102
        return self

    def fit(self, *args, **kw):  # noqa: D102
        results, failures = super().fit(*args, **kw)
        self.fitted.extend(results.values())
        return results, failures

    def query(self, requests, settings):  # noqa: D102
        replies, failures = super().query(requests, settings)
        self.replies.extend((c, requests[c].step, r) for c, r in replies.items())
        return replies, failures


def _run(
    fed, strategy, config, *, task=None, min_replies=None, rounds=None, out=None, resume=False
):
    task = task or GenomicTask()
    transport = Recording(task, sites_of(fed))
    settings = genomic_settings(
        fed, model_config=config["model"], training=training_config(config, fed)
    )
    job = {
        "seed": SEED if config["train"].get("seed") is None else config["train"]["seed"],
        "rounds": rounds or config["train"]["rounds"],
        "config": config,
        "min_replies": min_replies,
        "resume": resume,
    }
    result = serve(task, transport, [RunSpec(strategy, out=out)], job, settings)[0]
    result.transport = transport
    return result


def _bound(weights: dict[str, float], included) -> float:
    n = len(included)
    return n * PARAMS.step / sum(weights[c] for c in included)


def _assert_close(secure, plain, bound, label):
    for key in plain:
        a, b = np.asarray(secure[key]), np.asarray(plain[key])
        ulp = np.spacing(np.maximum(np.abs(a), np.abs(b)).astype(np.float32)).astype(np.float64)
        err = np.abs(a.astype(np.float64) - b.astype(np.float64))
        assert np.all(err <= bound + ulp), f"{label} {key}: {err.max()} > {bound}"


def _n(fed):
    return {c: float(fed.train[c].n_samples) for c in fed.client_ids}


def _assert_fedce_close(fed, secure, plain, label):
    """Backbone over everyone and each cluster's specialist within the quantisation bound."""
    clusters = plain.strategy.clusters()
    n = _n(fed)
    everyone = {c: v / sum(n.values()) for c, v in n.items()}
    _assert_close(
        secure.strategy.backbone, plain.strategy.backbone, _bound(everyone, n), f"{label} backbone"
    )
    for cluster in set(clusters.values()):
        members = [c for c in n if clusters[c] == cluster]
        within = {c: n[c] / sum(n[m] for m in members) for c in members}
        _assert_close(
            secure.strategy.specialists[cluster],
            plain.strategy.specialists[cluster],
            _bound(within, members),
            f"{label} cluster {cluster}",
        )


# --- oracles --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedadam", "fedavg_w", "fedavgm"])
def test_global_model_equals_the_plain_aggregation_within_the_bound(fed, name):
    plain = _run(fed, _strategy(fed, name, _config(fed, name, False)), _config(fed, name, False))
    secure = _run(fed, _strategy(fed, name, _config(fed, name)), _config(fed, name))
    assert [r.parameters == {} for r in secure.transport.fitted] == [True] * 6
    weights = secure.strategy.client_weights(plain.transport.fitted)
    total = sum(weights.values())
    weights = {c: w / total for c, w in weights.items()}
    bound = _bound(weights, fed.client_ids)
    if name == "fedadam":  # round 1: w += η(1−β1)δ / (√(1−β2)|δ| + τ), slope ≤ η(1−β1)/τ
        train = _config(fed, name)["train"]
        bound *= train["server_lr"] * (1 - train["server_beta1"]) / train["server_tau"]
    if name == "fedavgm":  # round 1: v = Δ̄, w += η v
        bound *= secure.strategy.server_lr
    _assert_close(secure.strategy.parameters, plain.strategy.parameters, bound, name)
    assert secure.history[0]["loss"] == pytest.approx(plain.history[0]["loss"], rel=1e-12)
    assert secure.history[0]["secagg"] == {"model": fed.client_ids}


@pytest.mark.parametrize("head", ["cluster", "global"])
def test_fedce_equals_the_plain_aggregation_within_the_bound(fed, head):
    plain_config = _config(fed, "fedce", False, fedce={"head_aggregation": head})
    plain = _run(fed, from_config("fedce", plain_config), plain_config)
    config = _config(fed, "fedce", fedce={"head_aggregation": head})
    secure = _run(fed, from_config("fedce", config), config)
    assert secure.strategy.clusters() == plain.strategy.clusters()
    clusters = plain.strategy.clusters()
    assert sorted(np.bincount(list(clusters.values()))) == [3, 3]  # two clusters of three
    _assert_fedce_close(fed, secure, plain, "fedce")
    for label in set(clusters.values()):
        members = [c for c in fed.client_ids if clusters[c] == label]
        assert secure.history[0]["secagg"][f"cluster-{label}"] == members
    assert set(secure.strategy.specialists[0]) == set(plain.strategy.specialists[0])
    heads = [k for k in plain.strategy.backbone if k.startswith("head.")]
    assert bool(heads) == (head == "global")


@pytest.mark.parametrize("name", ["fedce_carried", "fedce_oracle", "fedce_random"])
def test_fedce_ablations_equal_their_plain_aggregation_within_the_bound(fed, name):
    # the ablations change how clusters are found, never how they are summed
    groups = {c: f"g{i // 3}" for i, c in enumerate(fed.client_ids)}
    runs = {}
    for secure in (False, True):
        config = _config(fed, name, secure)
        oracle = groups if name == "fedce_oracle" else None
        runs[secure] = _run(fed, from_config(name, config, clusters=oracle), config)
    plain, secure = runs[False], runs[True]
    clusters = plain.strategy.clusters()
    assert secure.strategy.clusters() == clusters
    assert min(np.bincount(list(clusters.values()))) >= 3
    _assert_fedce_close(fed, secure, plain, name)


def test_small_clusters_are_merged_into_the_nearest_and_aggregated_as_one(fed):
    # three clusters of six clients: some are smaller than secagg.min_clients = 3
    plain_config = _config(fed, "fedce", False, fedce={"n_clusters": 3})
    plain = _run(fed, from_config("fedce", plain_config), plain_config)
    assert min(np.bincount(list(plain.strategy.clusters().values()))) < 3
    config = _config(fed, "fedce", fedce={"n_clusters": 3})
    secure = _run(fed, from_config("fedce", config), config)
    clusters = secure.strategy.clusters()
    sizes = {m: list(clusters.values()).count(m) for m in set(clusters.values())}
    assert all(size >= 3 for size in sizes.values()) and len(sizes) < 3
    # oracle: eq. 4–5 on the plain run's client models w_k with the merged assignment (in
    # round 1 every client received w^0)
    results = {r.client_id: r for r in plain.transport.fitted}
    initial = _initial(fed, config)
    n = _n(fed)

    def eq45(weights, names):  # w^0 + Σ ω_k (w_k − w^0)
        return {
            k: initial[k]
            + sum(w * (results[c].parameters[k] - initial[k]) for c, w in weights.items())
            for k in names
        }

    everyone = {c: v / sum(n.values()) for c, v in n.items()}
    backbone = eq45(everyone, secure.strategy.backbone)
    _assert_close(secure.strategy.backbone, backbone, _bound(everyone, n), "backbone")
    for label in sizes:
        members = [c for c in n if clusters[c] == label]
        within = {c: n[c] / sum(n[m] for m in members) for c in members}
        want = eq45(within, secure.strategy.specialists[label])
        _assert_close(secure.strategy.specialists[label], want, _bound(within, members), "m")
        assert secure.history[0]["secagg"][f"cluster-{label}"] == members


def _initial(fed, config):
    from rvfedprs.genomic.task import initial_parameters

    return {
        k: v.astype(np.float64)
        for k, v in initial_parameters(fed.n_rare, config["model"], SEED).items()
    }


def test_small_clusters_can_be_refused(fed):
    config = _config(fed, "fedce", fedce={"n_clusters": 3}, secagg={"small_clusters": "refuse"})
    with pytest.raises(
        ConfigError,
        match=r"round 1: FedCE cluster 1 has 1 client\(s\) \['client01'\], fewer than "
        r"secagg.min_clients = 3, and secagg.small_clusters is 'refuse'",
    ):
        _run(fed, from_config("fedce", config), config)


# --- what the server sees -------------------------------------------------------------------
class Watching(FedCE):
    """FedCE recording what the server-side aggregation receives."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.received: list = []

    def aggregate_fit(self, server_round, results):  # noqa: D102
        raise AssertionError("a secure round must not aggregate individual updates")

    def aggregate_sums(self, server_round, results, sums):  # noqa: D102
        self.received.append((list(results), dict(sums)))
        super().aggregate_sums(server_round, results, sums)


def test_the_server_holds_sums_of_three_or_more_and_bloom_filters_only(fed):
    config = _config(fed, "fedce", rounds=2)
    options = {k: config["fedce"][k] for k in ("n_clusters", "top_k", "bloom_capacity")}
    strategy = Watching(**options)
    result = _run(fed, strategy, config)
    assert len(strategy.received) == 2
    for results, sums in strategy.received:
        assert all(r.parameters == {} for r in results)  # no update reached the strategy
        assert all(r.bloom_bits is not None for r in results)  # the one per-client item
        assert sorted(sums) == ["backbone", "cluster-0", "cluster-1"]
        assert all(len(s.included) >= 3 for s in sums.values())
    for client, step, reply in result.transport.replies:
        for array in _arrays(reply):
            assert step == STEP_MASK and array.dtype == np.uint32, (client, step)
    assert all(r.parameters == {} for r in result.transport.fitted)
    # the sites' held updates are gone once the sums are unmasked
    for state in result.transport.step_state.values():
        assert state["secagg"]["held"] == {} and state["secagg"]["sessions"] == {}


def test_a_secure_round_is_four_exchanges_with_the_keys_sent_with_the_fit(fed):
    config = _config(fed, "fedce", rounds=2)
    result = _run(fed, _strategy(fed, "fedce", config), config)
    steps = [step for _, step, _ in result.transport.replies]
    per_client = len(fed.client_ids)
    # no key step: each round shares, masks and unmasks (the backbone and a cluster at once),
    # and the sites drop the last update once, when the run ends
    assert (
        steps
        == ([STEP_SHARE] * per_client + [STEP_MASK] * per_client + [STEP_UNMASK] * per_client) * 2
        + [STEP_RELEASE] * per_client
    )
    keys = [r.secure_keys for r in result.transport.fitted]
    assert all(sorted(k) == sorted(keys[0]) for k in keys[:per_client])  # one set of slots
    every = [key for k in keys for pair in k.values() for key in pair]
    assert len(every) == 4 * len(keys) == len(set(every))  # two pairs per fit, never reused
    assert sorted(result.history[0]["secagg"]) == ["backbone", "cluster-0", "cluster-1"]


class NoKeys(Recording):
    """A transport on which one site's fit reply arrives without its public keys."""

    victim = ""

    def fit(self, *args, **kw):  # noqa: D102
        results, failures = super().fit(*args, **kw)
        if self.victim in results:
            results[self.victim] = dataclasses.replace(results[self.victim], secure_keys=None)
        return results, failures


def test_a_fit_reply_without_public_keys_drops_its_site_by_name(fed, monkeypatch):
    victim = fed.client_ids[2]
    monkeypatch.setattr(NoKeys, "victim", victim)
    monkeypatch.setitem(globals(), "Recording", NoKeys)
    config = _config(fed, rounds=1)
    result = _run(fed, from_config("fedavg", config), config, min_replies=5)
    (entry,) = result.history
    assert list(entry["failed"]) == [victim]
    assert re.fullmatch(
        r"secure aggregation: fit reply: malformed reply for 'model': no public keys "
        r"\(slot '[0-9a-f]{16}'\)",
        entry["failed"][victim],
    )
    assert entry["secagg"] == {"model": [c for c in fed.client_ids if c != victim]}


# --- dropout --------------------------------------------------------------------------------
class Dying(GenomicTask):
    """A genomic site that is lost after sharing its keys (before its masked vector)."""

    victims: tuple[str, ...] = ()

    def handle(self, request, site, state):  # noqa: D102
        if request.step == STEP_MASK and site.client_id in self.victims:
            raise InputDataError("node lost")
        return super().handle(request, site, state)


def test_a_client_dropping_out_mid_round_leaves_the_rest_aggregated_exactly(fed):
    victim = fed.client_ids[4]
    plain = _run(fed, from_config("fedavg", _config(fed, secure=False)), _config(fed, secure=False))
    task = Dying()
    task.victims = (victim,)
    config = _config(fed)
    secure = _run(fed, from_config("fedavg", config), config, task=task, min_replies=4)
    entry = secure.history[0]
    assert entry["failed"] == {victim: "secure aggregation: secagg.mask: node lost"}
    rest = [c for c in fed.client_ids if c != victim]
    assert entry["secagg"] == {"model": rest}
    n = _n(fed)
    results = {r.client_id: r for r in plain.transport.fitted}
    want = {
        k: sum(n[c] * results[c].parameters[k].astype(np.float64) for c in rest)
        / sum(n[c] for c in rest)
        for k in plain.strategy.parameters
    }
    everyone = {c: v / sum(n.values()) for c, v in n.items()}
    _assert_close(secure.strategy.parameters, want, _bound(everyone, rest), "fedavg")
    rest_loss = np.average([results[c].metrics["loss"] for c in rest], weights=[n[c] for c in rest])
    assert entry["loss"] == pytest.approx(rest_loss, rel=1e-12)


class WrongShape(GenomicTask):
    """A genomic site whose trained model has one entry too many in its first tensor."""

    victims: tuple[str, ...] = ()

    def fit(self, instruction, site, settings, state, *, random_seed):  # noqa: D102
        result = super().fit(instruction, site, settings, state, random_seed=random_seed)
        if site.client_id not in self.victims:
            return result
        name = sorted(result.parameters)[0]
        grown = np.append(np.ravel(result.parameters[name]), 0.0)
        return dataclasses.replace(result, parameters={**result.parameters, name: grown})


def test_a_wrong_shaped_update_is_refused_by_name_under_secure_aggregation(fed):
    victim = fed.client_ids[2]
    task = WrongShape()
    task.victims = (victim,)
    config = _config(fed)
    secure = _run(fed, from_config("fedavg", config), config, task=task, min_replies=4)
    entry = secure.history[0]
    (why,) = entry["failed"].values()
    assert list(entry["failed"]) == [victim]
    assert "the update cannot join the secure sum: tensor" in why and "expected" in why
    assert "broadcast" not in why
    assert entry["secagg"] == {"model": [c for c in fed.client_ids if c != victim]}


def test_too_many_dropouts_stop_the_round_with_a_clear_error(fed):
    task = Dying()
    task.victims = tuple(fed.client_ids[:3])  # 6 members, threshold 4
    config = _config(fed)
    with pytest.raises(
        SecureAggregationError,
        match=r"run 0 round 1: secure aggregation of 'model': only 3 of 6 members sent valid "
        r"masked vectors, fewer than the threshold 4; nothing was unmasked",
    ):
        _run(fed, from_config("fedavg", config), config, task=task, min_replies=3)


class LostEarlyAndLate(Dying):
    """Sites lost at the fit (``early``) and after sharing their keys (``victims``)."""

    early: tuple[str, ...] = ()

    def fit(self, instruction, site, settings, state, *, random_seed):  # noqa: D102
        if site.client_id in self.early:
            raise InputDataError("node lost at the fit")
        return super().fit(instruction, site, settings, state, random_seed=random_seed)


def test_a_sum_below_the_threshold_names_the_sites_lost_before_it_too(fed):
    task = LostEarlyAndLate()
    task.early = (fed.client_ids[0],)
    task.victims = tuple(fed.client_ids[1:4])  # 5 members, threshold 3: two left
    config = _config(fed)
    with pytest.raises(SecureAggregationError) as caught:
        _run(fed, from_config("fedavg", config), config, task=task, min_replies=2)
    message = str(caught.value)
    assert re.search(
        r"only 2 of 5 members sent valid masked vectors, fewer than the threshold 3; nothing "
        r"was unmasked\. Dropped: \{'client01': 'secagg\.mask: node lost', ",
        message,
    ), message
    assert message.endswith("; lost before the secure sum: {'client00': 'node lost at the fit'}")


class FitFailing(GenomicTask):
    """Genomic sites of which some fail their fit."""

    victims: tuple[str, ...] = ()

    def fit(self, instruction, site, settings, state, *, random_seed):  # noqa: D102
        if site.client_id in self.victims:
            raise InputDataError("disk full")
        return super().fit(instruction, site, settings, state, random_seed=random_seed)


def test_fewer_fit_replies_than_the_minimum_stop_before_any_sum(fed):
    task = FitFailing()
    task.victims = tuple(fed.client_ids[:4])
    config = _config(fed)
    with pytest.raises(
        SecureAggregationError,
        match=r"round 1: only 2 clients replied, fewer than secagg.min_clients = 3: no sum may "
        r"be taken; failures: \{'client00': 'disk full'",
    ):
        _run(fed, from_config("fedavg", config), config, task=task, min_replies=1)


# --- refusals -------------------------------------------------------------------------------
def test_every_strategy_is_compatible_or_says_why_not():
    for name in STRATEGY_NAMES:
        reason = strategy_class(name).secagg_refusal
        assert (reason is None) == (name in COMPATIBLE), name
        if reason is not None:
            assert len(reason) > 40, name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("scaffold", "control variate c_k per client on the server"),
        ("fedsvrg", "control variate c_k per client on the server"),
        ("ditto", "personal model v_k on the server"),
        ("clustered", "cosine similarity of its members' individual updates"),
        ("fedatt", "distance between each client's own model and the server's"),
        ("fedatt_cosine", "cosine similarity of each client's own model"),
        ("local", "keeps each client's own model on the server"),
        ("centralized", "pools every client's training data"),
        ("cluster_fedavg", "Algorithm 1 always leaves a cluster of 2 clients"),
        ("fedavg_masked", "carries no column masks"),
    ],
)
def test_incompatible_strategies_are_refused_before_any_round(fed, name, why, tmp_path):
    config = _config(fed, name, train={"momentum": 0.0})
    if name == "cluster_fedavg":
        strategy = get_strategy(name, distance=np.ones((6, 6)) - np.eye(6))
    else:
        strategy = from_config(name, _config(fed, name, False, train={"momentum": 0.0}))
    refusal = (
        rf"strategy '{strategy.name}' cannot run with secure aggregation "
        rf"\(secagg.enabled: true\): .*{why}"
    )
    with pytest.raises(ConfigError, match=refusal):  # the server loop refuses it
        _run(fed, strategy, config, out=tmp_path)
    assert not (tmp_path / "checkpoints").exists()
    if name != "cluster_fedavg":  # and so does building it from a secure configuration
        with pytest.raises(ConfigError, match=refusal):
            from_config(name, config)


# --- the Flower ServerApp (in-process Grid, real ClientApp) -----------------------------------
def _flower(fed, tmp_path, config, tamper=None, min_replies=None):
    from test_flower_server import LocalGrid

    from rvfedprs.federation.flower import server_app
    from rvfedprs.federation.flower.job import write_job

    name = config["train"]["strategy"]
    job = write_job(
        tmp_path / "job.json",
        config=config,
        strategy=name,
        rounds=config["train"]["rounds"],
        seed=SEED,
        out=tmp_path,
        expected_clients=6,
        min_replies=min_replies,
        round_timeout=0.5,
        node_wait=1,
    )
    import json

    nodes = {
        100 + i: {"data-dir": str(fed.data_dir), "client-id": c}
        for i, c in enumerate(fed.client_ids)
    }
    grid = LocalGrid(nodes, tamper=tamper)
    summary = server_app.run_server(grid, json.loads(job.read_text()))
    return summary, grid, load_checkpoint(tmp_path / "checkpoints" / "round_001.pt")


def test_the_flower_server_app_gives_the_in_process_secure_model(fed, tmp_path):
    config = _config(fed, "fedce")
    reference = _run(fed, from_config("fedce", config), config)
    summary, grid, record = _flower(fed, tmp_path, config)
    strategy = from_config("fedce", config)
    strategy.load_state_dict(record["strategy_state"])
    assert strategy.clusters() == reference.strategy.clusters()
    for client in fed.client_ids:
        want = reference.strategy.parameters_for(client)
        for key, value in strategy.parameters_for(client).items():
            np.testing.assert_allclose(value, want[key], rtol=1e-6, atol=1e-7, err_msg=key)
    assert record["history"][0]["secagg"] == reference.history[0]["secagg"]
    # no train reply carried parameters; the only arrays the server got were masked vectors
    for (client, _), reply in grid.replies.items():
        if reply.metadata.message_type == "train":
            assert all(len(r) == 0 for r in reply.content.array_records.values()), client


def test_a_flower_node_lost_mid_round_is_named_and_the_rest_aggregated(fed, tmp_path):
    from rvfedprs.federation.flower.records import content_to_request

    victim = fed.client_ids[1]

    def tamper(client, msg, reply):
        if client == victim and msg.metadata.message_type == "query":
            if content_to_request(msg.content)[0].step == STEP_MASK:
                return None
        return reply

    config = _config(fed)
    summary, _, record = _flower(fed, tmp_path, config, tamper=tamper, min_replies=4)
    assert summary["failures"][1] == {
        victim: "secure aggregation: secagg.mask: no reply within 0.5 s"
    }
    task = Dying()
    task.victims = (victim,)
    reference = _run(fed, from_config("fedavg", config), config, task=task, min_replies=4)
    for key, value in record["strategy_state"]["parameters"].items():
        np.testing.assert_allclose(
            value, reference.strategy.parameters[key], rtol=1e-6, atol=1e-7, err_msg=key
        )


# --- the command line and resume ------------------------------------------------------------
def test_rvfedprs_train_runs_secure_fedce_and_refuses_ditto(fed, tmp_path, capsys):
    import json

    import yaml

    from rvfedprs.cli import main

    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                # the floor's own secure fit is tested in test_fedglm; here both runs start alike
                "model": {"common_hidden": [4], "rare_hidden": [8], "start_from_floor": False},
                "train": {
                    "validation_fraction": 0,
                    "data": str(fed.data_dir),
                    "rounds": 2,
                    "progress": False,
                },
                "fedce": {"n_clusters": 2},
                "secagg": {"enabled": True},
            }
        )
    )
    argv = ["train", "--config", str(config), "--seed", str(SEED), "--engine", "inprocess"]
    assert main([*argv, "--strategy", "fedce", "--out", str(tmp_path / "fedce")]) == 0
    metrics = json.loads((tmp_path / "fedce" / "metrics.json").read_text())
    assert [sorted(e["secagg"]) for e in metrics["history"]] == [
        ["backbone", "cluster-0", "cluster-1"]
    ] * 2
    assert main([*argv, "--strategy", "ditto", "--out", str(tmp_path / "ditto")]) == 2
    err = capsys.readouterr().err
    assert "strategy 'ditto' cannot run with secure aggregation (secagg.enabled: true)" in err
    assert not (tmp_path / "ditto" / "metrics.json").exists()


def test_a_resumed_secure_run_gives_the_uninterrupted_model(fed, tmp_path):
    config = _config(fed, "fedce", rounds=2)
    whole = _run(fed, from_config("fedce", config), config, out=tmp_path / "a")
    _run(fed, from_config("fedce", config), config, out=tmp_path / "b", rounds=1)
    resumed = _run(fed, from_config("fedce", config), config, out=tmp_path / "b", resume=True)
    assert [e["round"] for e in resumed.history] == [1, 2]
    assert resumed.strategy.clusters() == whole.strategy.clusters()
    for client in fed.client_ids:
        want = whole.strategy.parameters_for(client)
        for key, value in resumed.strategy.parameters_for(client).items():
            np.testing.assert_array_equal(value, want[key], err_msg=key)


# --- the norm bound: a site that does not clip (issue 42, item 1) ----------------------------
@pytest.fixture(scope="module")
def fed8(tmp_path_factory):
    """Eight sites: enough for group testing over sums of >= 3 that reveal no honest update."""
    paths = write_federation(
        tmp_path_factory.mktemp("fed8"),
        n_clients=8,
        n_clusters=2,
        samples_per_client=80,
        private_per_cluster=12,
        n_shared=8,
        causal_private=4,
        causal_shared=2,
    )
    return load_federation(paths["data"])


class Unclipped(GenomicTask):
    """A modified site: its fit result is scaled ×1e6 and it does not clip its update's norm.

    It drops the norm bound from the sessions' definitions — the key step's, or the share
    step's ``open`` when its keys went with the fit reply (its entries are still clipped to
    ±c, so the sum stays in range and only its norm gives it away).
    """

    victims: tuple[str, ...] = ()

    def fit(self, instruction, site, settings, state, *, random_seed):  # noqa: D102
        result = super().fit(instruction, site, settings, state, random_seed=random_seed)
        if site.client_id not in self.victims:
            return result
        scaled = {k: v * 1e6 for k, v in result.parameters.items()}
        return dataclasses.replace(result, parameters=scaled)

    def handle(self, request, site, state):  # noqa: D102
        if request.step in (STEP_KEYS, STEP_SHARE) and site.client_id in self.victims:
            sessions = {sid: _unbounded(r) for sid, r in request.payload["sessions"].items()}
            request = Request(request.step, {**request.payload, "sessions": sessions})
        return super().handle(request, site, state)


def _unbounded(request):
    if "open" in request:
        return {**request, "open": {**request["open"], "norm_bound": None}}
    return {**request, "norm_bound": None} if "params" in request else request


def _entries_flag_no_one(history):
    for entry in history:
        assert "failed" not in entry, entry
        assert "secagg_implausible" not in entry and "secagg_norm_clipped" not in entry, entry


def test_a_site_that_does_not_clip_is_found_by_group_testing_named_and_left_out(fed8):
    victim = fed8.client_ids[5]
    rest = [c for c in fed8.client_ids if c != victim]
    task = Unclipped()
    task.victims = (victim,)
    config = _config(fed8, rounds=2)
    secure = _run(fed8, from_config("fedavg", config), config, task=task, min_replies=5)
    first, second = secure.history
    bound = PARAMS.update_norm_bound
    assert first["failed"] == {
        victim: f"secure aggregation: its update exceeds the norm bound "
        f"secagg.update_norm_bound = {bound:g} (found by group testing over sums of >= 3 "
        "members of 'model'); left out from round 1 on"
    }
    assert first["secagg"] == {"model": rest}
    found = first["secagg_implausible"]
    assert found["model"]["norm"] > found["model"]["allowed"] and found["group_tests"] >= 2
    assert (
        list(second["failed"]) == [victim]
        and "left out from round 1 on" in second["failed"][victim]
    )
    assert second["secagg"] == {"model": rest} and "secagg_implausible" not in second
    asked = [r.client_id for r in secure.transport.fitted]
    assert asked.count(victim) == 1  # asked to fit in round 1 only
    # the sites dropped their held updates (the victim's last sum was the group's own)
    for client, state in secure.transport.step_state.items():
        if client != victim:
            assert state["secagg"]["held"] == {}, client
    # oracle: the site lost at the fit from round 1 on; round 1 within both quantisation bounds
    absent = FitFailing()
    absent.victims = (victim,)
    one = _config(fed8)
    reference = _run(fed8, from_config("fedavg", one), one, task=absent, min_replies=5)
    found_once = _run(fed8, from_config("fedavg", one), one, task=task, min_replies=5)
    n = {c: float(fed8.train[c].n_samples) for c in fed8.client_ids}
    everyone = {c: v / sum(n.values()) for c, v in n.items()}
    without = {c: n[c] / sum(n[m] for m in rest) for c in rest}
    quantisation = _bound(everyone, rest) + _bound(without, rest)
    _assert_close(
        found_once.strategy.parameters, reference.strategy.parameters, quantisation, "round 1"
    )
    assert found_once.history[0]["loss"] == pytest.approx(reference.history[0]["loss"], rel=1e-12)
    two = _config(fed8, rounds=2)
    reference = _run(fed8, from_config("fedavg", two), two, task=absent, min_replies=5)
    for key, value in secure.strategy.parameters.items():
        np.testing.assert_allclose(
            value, reference.strategy.parameters[key], rtol=0, atol=1e-5, err_msg=key
        )


def test_a_site_that_does_not_clip_in_a_group_too_small_to_search_stops_the_run(fed, tmp_path):
    task = Unclipped()
    task.victims = (fed.client_ids[2],)  # 6 members: every search would reveal an honest one
    config = _config(fed)
    with pytest.raises(
        ImplausibleSumError,
        match=r"run 0 round 1: 'model': the secure sum of 6 members .* exceeds what their norm "
        r"bounds allow \(a member did not clip its update\), and no sum over 3 or more of them "
        r"can narrow down the 6 suspects .* without revealing an honest member's update .*; the "
        r"round is not applied",
    ):
        _run(fed, from_config("fedavg", config), config, task=task, out=tmp_path)
    assert not (tmp_path / "checkpoints" / "round_001.pt").exists()


@pytest.mark.parametrize("seed", [1, 2, 7])
@pytest.mark.parametrize("name", ["fedavg", "fedce"])
def test_no_honest_site_is_flagged_by_the_norm_check(fed, name, seed):
    config = _config(fed, name, rounds=2, seed=seed)
    _entries_flag_no_one(_run(fed, from_config(name, config), config).history)


def test_no_honest_site_is_flagged_on_eight_sites(fed8):
    config = _config(fed8, "fedce", rounds=2)
    _entries_flag_no_one(_run(fed8, from_config("fedce", config), config).history)


def test_the_norm_bound_leaves_an_honest_model_unchanged(fed):
    config = _config(fed, "fedce")
    unbounded = _config(fed, "fedce", secagg={"update_norm_bound": 1e12})
    bounded = _run(fed, from_config("fedce", config), config)
    loose = _run(fed, from_config("fedce", unbounded), unbounded)
    for client in fed.client_ids:  # same quantisation seeds, nothing clipped: bit for bit
        want = loose.strategy.parameters_for(client)
        for key, value in bounded.strategy.parameters_for(client).items():
            np.testing.assert_array_equal(value, want[key], err_msg=key)


def test_a_norm_bound_most_honest_sites_exceed_is_refused_with_advice(fed):
    config = _config(fed, secagg={"update_norm_bound": 1e-4})
    with pytest.raises(
        SecureAggregationError,
        match=r"6 of 6 members scaled their vectors down to the norm bound "
        r"secagg.update_norm_bound = 0.0001 .*Raise secagg.update_norm_bound",
    ):
        _run(fed, from_config("fedavg", config), config)
