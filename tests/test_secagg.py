"""Secure sums over the in-process engine: oracles, dropouts, and every bad input named.

A tiny task whose sites each hold a vector (they make it themselves in a step, so the server
never sends it) runs the real protocol (:func:`rvfedprs.federation.secagg.server.secure_sum`)
through :class:`~rvfedprs.federation.inprocess.InProcessTransport`. Faults are injected where
they arise: a site that dies in a step, a transport that alters one reply on its way to the
server, a site that replays its round key.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest
from scipy import stats

from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.federation.inprocess import InProcessTransport
from rvfedprs.federation.secagg import site as secagg_site
from rvfedprs.federation.secagg.protocol import (
    SECURE_FIT_KEY,
    STEP_KEYS,
    STEP_MASK,
    STEP_SHARE,
    STEP_UNMASK,
    SecAggParams,
    SecureAggregationError,
    b64,
    quantize_seeded,
    unb64,
)
from rvfedprs.federation.secagg.server import secure_sum
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.federation.task import Request, Task
from rvfedprs.strategies.base import FitInstruction, FitResult
from rvfedprs.strategies.secure import GroupSum, SumGroup

SHAPES = {"a": (3, 4), "b": (5,)}
CLIENTS = [f"site{k}" for k in range(6)]
SEED = 7
DEFAULTS = SecAggParams()


class VectorTask(Task):
    """Each site makes a vector from its own seed (step ``make``) and holds it."""

    name = "vectors"
    steps = {"setup": "setup_report", "make": "make"}
    #: client → step → callable(payload, state) raising InputDataError: a site that dies there
    dies: dict[str, dict[str, Callable]] = {}

    def locate(self, node_config, run_config, settings):  # noqa: D102
        raise NotImplementedError

    def open_site(self, locator, settings):  # noqa: D102
        raise NotImplementedError

    def setup_report(self, site, payload, state):  # noqa: D102
        return {}

    def fit(self, instruction, site, settings, state, *, random_seed):  # noqa: D102
        raise NotImplementedError

    def run_settings(self, job, reports):  # noqa: D102
        return {}

    def initial_parameters(self, settings, random_seed):  # noqa: D102
        return {}

    def build_strategy(self, spec, job):  # noqa: D102
        raise NotImplementedError

    def make(self, site, payload, state):
        """Hold this site's vectors: floats under ``float``, counts under ``counts``."""
        secagg_site.hold(state, "float", site["float"])
        secagg_site.hold(state, "counts", site["counts"])
        return {"held": True}

    def handle(self, request, site, state):  # noqa: D102
        hook = self.dies.get(site["id"], {}).get(request.step)
        if hook is not None:
            hook(request.payload, state)
        return super().handle(request, site, state)


def _sites(scale: float = 0.3) -> dict[str, dict[str, Any]]:
    sites = {}
    for k, c in enumerate(CLIENTS):
        rng = np.random.default_rng(100 + k)
        sites[c] = {
            "id": c,
            "float": {n: rng.normal(scale=scale, size=s) for n, s in SHAPES.items()},
            "counts": {"n": rng.integers(0, 500, size=17)},
        }
    return sites


class Tamper(InProcessTransport):
    """The in-process engine with ``alter(client, step, reply) -> reply`` on replies to the server.

    Also records every reply the server received (``seen``).
    """

    def __init__(self, task, sites, alter=None):
        super().__init__(task, sites)
        self.alter = alter
        self.seen: list[tuple[str, str, Any]] = []

    def query(self, requests, settings):  # noqa: D102
        replies, failures = super().query(requests, settings)
        for client in sorted(replies):
            step = requests[client].step
            if self.alter is not None:
                replies[client] = self.alter(client, step, replies[client])
            self.seen.append((client, step, replies[client]))
        return replies, failures


def _federation(alter=None, dies=None, scale=0.3) -> Tamper:
    task = VectorTask()
    task.dies = dies or {}
    transport = Tamper(task, _sites(scale), alter)
    transport.query({c: Request("make") for c in CLIENTS}, {})
    return transport


def _weights(clients) -> dict[str, float]:
    raw = {c: 10.0 + k for k, c in enumerate(clients)}
    total = sum(raw.values())
    return {c: v / total for c, v in raw.items()}


def _sum(transport, groups, params=DEFAULTS, held="float", shapes=SHAPES, **kw):
    return secure_sum(
        transport,
        {},
        groups,
        held=held,
        shapes=shapes,
        params=params,
        random_seed=SEED,
        label="test",
        **kw,
    )


def _float_group(clients=CLIENTS) -> dict[str, SumGroup]:
    return {"all": SumGroup(tuple(clients), tuple(SHAPES), _weights(clients))}


def _oracle(clients, weights, key="float") -> dict[str, np.ndarray]:
    sites = _sites()
    return {n: sum(weights[c] * sites[c][key][n] for c in clients) for n in SHAPES}


def _assert_within(got: GroupSum, clients, weights, params=DEFAULTS):
    assert got.included == tuple(sorted(clients))
    # analytic bound: stochastic rounding moves each member's entry by less than one step 2c/R
    bound = len(clients) * 2 * params.clipping_range / 2**params.quantization_bits
    assert got.error_bound == pytest.approx(bound, rel=1e-6)
    want = _oracle(clients, {c: weights[c] for c in clients})
    for name in SHAPES:
        err = np.abs(got.total[name] - want[name])
        assert err.max() <= got.error_bound, name
    assert got.weight == pytest.approx(sum(weights[c] for c in clients))


# --- oracles --------------------------------------------------------------------------------
def test_float_sum_equals_the_weighted_sum_within_the_quantisation_bound():
    outcome = _sum(_federation(), _float_group())
    assert outcome.dropped == {} and outcome.faults == {}
    _assert_within(outcome.sums["all"], CLIENTS, _weights(CLIENTS))


def test_float_sum_is_the_quantised_sum_exactly():
    """The server gets exactly Σ q_k: the quantisation each site makes with its seed."""
    params = SecAggParams()
    got = _sum(_federation(), _float_group()).sums["all"]
    sites, weights = _sites(), _weights(CLIENTS)
    q = sum(
        quantize_seeded(
            np.concatenate([sites[c]["float"][n].ravel() * weights[c] for n in SHAPES]),
            params,
            derive_seed(SEED, "all", c),
        )
        for c in CLIENTS
    )
    want = q * params.step - len(CLIENTS) * params.clipping_range
    flat = np.concatenate([got.total[n].ravel() for n in SHAPES])
    np.testing.assert_allclose(flat, want, rtol=0, atol=1e-12)


def test_integer_sum_is_exact():
    outcome = _sum(
        _federation(),
        {"all": SumGroup(tuple(CLIENTS), ("n",))},
        held="counts",
        shapes={"n": (17,)},
    )
    got = outcome.sums["all"]
    want = sum(s["counts"]["n"] for s in _sites().values())
    np.testing.assert_array_equal(got.total["n"], want)
    assert got.total["n"].dtype == np.int64 and got.error_bound == 0 and got.weight == 6


def test_several_groups_in_one_protocol():
    groups = {
        "first": SumGroup(tuple(CLIENTS[:3]), ("a",), _weights(CLIENTS[:3])),
        "rest": SumGroup(tuple(CLIENTS[3:]), ("a", "b"), _weights(CLIENTS[3:])),
        "all": SumGroup(tuple(CLIENTS), ("b",), _weights(CLIENTS)),
    }
    sums = _sum(_federation(), groups).sums
    assert sorted(sums["first"].total) == ["a"]
    for name, group in groups.items():
        want = _oracle(group.members, group.weights)
        for tensor in group.tensors:
            assert np.abs(sums[name].total[tensor] - want[tensor]).max() <= sums[name].error_bound


def test_the_server_sees_no_individual_vector():
    transport = _federation()
    _sum(transport, _float_group())
    sites, weights, params = _sites(), _weights(CLIENTS), SecAggParams()
    masked = {}
    for client, step, reply in transport.seen:
        arrays = _arrays(reply)
        if step != STEP_MASK:
            assert arrays == [], (client, step)  # keys, shares, digests: text only
            continue
        (vector,) = arrays
        assert vector.dtype == np.uint32
        masked[client] = vector.astype(np.int64)
    assert sorted(masked) == CLIENTS
    for c in CLIENTS:
        q = quantize_seeded(
            np.concatenate([sites[c]["float"][n].ravel() * weights[c] for n in SHAPES]),
            params,
            derive_seed(SEED, "all", c),
        )
        assert np.mean(masked[c] == q) < 0.01  # the masked vector is not the vector
    # Spread over [0, M): the masks come from unseeded keys, so test all clients' 102 entries
    # together against the uniform law (a false alarm once in 10^6 runs; a mean check on one
    # client's 17 entries failed ~2% of runs by chance).
    pooled = np.concatenate([masked[c] for c in CLIENTS]) / 2**32
    assert stats.kstest(pooled, "uniform").pvalue > 1e-6
    total = sum(masked.values()) % 2**32  # the masks cancel only after unmasking
    assert not np.allclose(total * params.step - 6 * params.clipping_range, 0, atol=1)


def _arrays(value) -> list[np.ndarray]:
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, Mapping):
        return [a for v in value.values() for a in _arrays(v)]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _arrays(v)]
    return []


# --- dropout --------------------------------------------------------------------------------
def _die(why: str) -> Callable:
    def hook(payload, state):
        raise InputDataError(why)

    return hook


def test_a_client_dropping_out_after_sharing_keys_leaves_the_others_sum_exact():
    victim = CLIENTS[2]
    transport = _federation(dies={victim: {STEP_MASK: _die("node lost")}})
    outcome = _sum(transport, _float_group())
    assert list(outcome.dropped) == [victim] and "node lost" in outcome.dropped[victim]
    rest = [c for c in CLIENTS if c != victim]
    _assert_within(outcome.sums["all"], rest, _weights(CLIENTS))
    ints = _sum(
        _federation(dies={victim: {STEP_MASK: _die("node lost")}}),
        {"all": SumGroup(tuple(CLIENTS), ("n",))},
        held="counts",
        shapes={"n": (17,)},
    )
    want = sum(s["counts"]["n"] for c, s in _sites().items() if c != victim)
    np.testing.assert_array_equal(ints.sums["all"].total["n"], want)


def test_dropouts_below_the_threshold_stop_with_a_clear_error():
    # 6 members, threshold max(3, floor(0.5·6) + 1) = 4: three dropouts leave 3
    dies = {c: {STEP_MASK: _die("node lost")} for c in CLIENTS[:3]}
    with pytest.raises(
        SecureAggregationError,
        match=r"test: secure aggregation of 'all': only 3 of 6 members sent valid masked "
        r"vectors, fewer than the threshold 4; nothing was unmasked.*site0.*node lost",
    ):
        _sum(_federation(dies=dies), _float_group())


def test_a_dropout_in_the_key_exchange_is_left_out():
    victim = CLIENTS[0]
    outcome = _sum(_federation(dies={victim: {STEP_KEYS: _die("offline")}}), _float_group())
    assert outcome.dropped == {victim: f"{STEP_KEYS}: offline"}
    _assert_within(outcome.sums["all"], CLIENTS[1:], _weights(CLIENTS))


def test_a_client_silent_in_the_unmask_step_is_still_summed():
    victim = CLIENTS[4]
    outcome = _sum(_federation(dies={victim: {STEP_UNMASK: _die("timeout")}}), _float_group())
    assert outcome.dropped == {} and "timeout" in outcome.faults[victim]
    _assert_within(outcome.sums["all"], CLIENTS, _weights(CLIENTS))


# --- bad input, named -----------------------------------------------------------------------
def _alter_mask(victim: str, change: Callable) -> Callable:
    def alter(client, step, reply):
        if client == victim and step == STEP_MASK:
            for session in reply["sessions"].values():
                session["masked"] = change(session["masked"])
        return reply

    return alter


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda m: m[:-1], r"the masked vector has shape \(16,\), expected \(17,\)"),
        (lambda m: np.append(m, m[:2]), r"the masked vector has shape \(19,\), expected \(17,\)"),
        (lambda m: m.astype(np.uint64), r"has dtype uint64, expected uint32"),
        (lambda m: m.astype(np.float32), r"has dtype float32, expected uint32"),
        (lambda m: m.tolist(), r"the masked vector is a list, not an array"),
    ],
)
def test_a_malformed_masked_vector_is_rejected_naming_the_client(change, reason):
    victim = CLIENTS[1]
    outcome = _sum(_federation(alter=_alter_mask(victim, change)), _float_group())
    assert list(outcome.dropped) == [victim]
    assert outcome.dropped[victim].startswith(f"{STEP_MASK}: malformed reply for 'all': ")
    assert re.search(reason, outcome.dropped[victim])
    _assert_within(outcome.sums["all"], [c for c in CLIENTS if c != victim], _weights(CLIENTS))


def test_a_site_holding_another_length_is_left_out():
    sites = _sites()
    sites[CLIENTS[3]]["float"]["b"] = np.zeros(6)
    task = VectorTask()
    transport = Tamper(task, sites)
    transport.query({c: Request("make") for c in CLIENTS}, {})
    outcome = _sum(transport, _float_group())
    assert list(outcome.dropped) == [CLIENTS[3]]
    assert "tensor 'b' has shape (6,), expected (5,)" in outcome.dropped[CLIENTS[3]]


def _alter_share(victim: str, owner: str) -> Callable:
    def alter(client, step, reply):
        if client == victim and step == STEP_UNMASK:
            for session in reply["sessions"].values():
                share = bytearray(unb64(session["seed"][owner]))
                share[-1] ^= 0x5A
                session["seed"][owner] = b64(bytes(share))
        return reply

    return alter


def test_a_tampered_unmask_share_is_caught_by_its_digest_and_not_used():
    victim, owner = CLIENTS[1], CLIENTS[4]
    outcome = _sum(_federation(alter=_alter_share(victim, owner)), _float_group())
    assert outcome.dropped == {}
    assert outcome.faults == {
        victim: f"{STEP_UNMASK}: sent a tampered seed share of client {owner!r} in 'all' (it "
        f"does not match the digest {owner!r} published)"
    }
    _assert_within(outcome.sums["all"], CLIENTS, _weights(CLIENTS))


def test_too_many_tampered_shares_stop_with_an_error_naming_the_holders():
    owner = CLIENTS[0]
    alters = [_alter_share(c, owner) for c in CLIENTS[1:4]]

    def alter(client, step, reply):
        for a in alters:
            reply = a(client, step, reply)
        return reply

    with pytest.raises(
        SecureAggregationError,
        match=r"only 3 valid shares of the seed of client 'site0', fewer than the threshold 4; "
        r"faults: .*site1.*tampered seed share",
    ):
        _sum(_federation(alter=alter), _float_group())


def test_a_malformed_unmask_share_is_named():
    victim, owner = CLIENTS[2], CLIENTS[0]

    def alter(client, step, reply):
        if client == victim and step == STEP_UNMASK:
            for session in reply["sessions"].values():
                session["seed"][owner] = "not base64!"
        return reply

    outcome = _sum(_federation(alter=alter), _float_group())
    assert f"sent a malformed seed share of client {owner!r}" in outcome.faults[victim]
    _assert_within(outcome.sums["all"], CLIENTS, _weights(CLIENTS))


def test_a_tampered_encrypted_share_is_rejected_by_its_receiver_and_the_sender_dropped():
    sender, receiver = CLIENTS[5], CLIENTS[0]

    def alter(client, step, reply):
        if client == sender and step == STEP_SHARE:
            for session in reply["sessions"].values():
                token = session["ciphertexts"][receiver]
                session["ciphertexts"][receiver] = token[:-6] + ("A" if token[-6] != "A" else "B")
                session["ciphertexts"][receiver] += token[-5:]
        return reply

    outcome = _sum(_federation(alter=alter), _float_group())
    assert outcome.dropped == {
        sender: f"{STEP_MASK}: client {receiver!r} rejected its encrypted key share for 'all': "
        "its encrypted key share does not decrypt (tampered or corrupted)"
    }
    _assert_within(outcome.sums["all"], CLIENTS[:5], _weights(CLIENTS))


def test_a_reused_round_key_is_rejected_naming_the_client():
    victim = CLIENTS[3]
    kept: dict[str, Any] = {}

    def alter(client, step, reply):
        if client == victim and step == STEP_KEYS:
            (session,) = reply["sessions"].values()
            if "pair" not in kept:
                kept["pair"] = dict(session)
            else:  # the next sum: the site presents last sum's keys again
                session.update(kept["pair"])
        return reply

    transport = _federation(alter=alter)
    seen: set[str] = set()
    first = _sum(transport, _float_group(), seen_keys=seen)
    assert first.dropped == {} and len(seen) == 12
    transport.query({c: Request("make") for c in CLIENTS}, {})
    second = _sum(transport, _float_group(), seen_keys=seen)
    assert second.dropped == {
        victim: f"{STEP_KEYS}: reused a public key of an earlier secure-aggregation session "
        "(round keys must be fresh)"
    }
    _assert_within(second.sums["all"], [c for c in CLIENTS if c != victim], _weights(CLIENTS))


def test_the_same_key_in_two_groups_is_rejected():
    victim = CLIENTS[0]

    def alter(client, step, reply):
        if client == victim and step == STEP_KEYS:
            first, second = (reply["sessions"][s] for s in sorted(reply["sessions"]))
            second.update(first)
        return reply

    groups = {
        "x": SumGroup(tuple(CLIENTS[:4]), ("a",), _weights(CLIENTS[:4])),
        "y": SumGroup(tuple(CLIENTS[:4]), ("b",), _weights(CLIENTS[:4])),
    }
    outcome = _sum(_federation(alter=alter), groups)
    assert list(outcome.dropped) == [victim]
    assert "share across sessions or clients" in outcome.dropped[victim]


def test_a_malformed_public_key_is_named():
    victim = CLIENTS[1]

    def alter(client, step, reply):
        if client == victim and step == STEP_KEYS:
            for session in reply["sessions"].values():
                session["pk1"] = "-----BEGIN PUBLIC KEY-----\nnonsense\n-----END PUBLIC KEY-----"
        return reply

    outcome = _sum(_federation(alter=alter), _float_group())
    assert outcome.dropped == {
        victim: f"{STEP_KEYS}: malformed reply for 'all': a public key does not parse (ValueError)"
    }


def test_a_sum_most_members_clipped_is_refused_with_advice_to_raise_the_range():
    """Most sites clipping means c is below honest updates: refused, never aggregated biased."""
    with pytest.raises(
        SecureAggregationError,
        match=r"secure aggregation of 'all': [4-6] of 6 members clipped entries of their "
        r"weighted vectors to ±secagg.clipping_range = 0.01 \('site\d' \(\d+ of 17\), .*\): "
        r"more than half, so honest updates exceed the bound .* Raise secagg.clipping_range "
        r"above the honest sites' largest weighted entry",
    ):
        _sum(_federation(), _float_group(), params=SecAggParams(clipping_range=0.01))


def test_a_tampered_masked_vector_is_detected_by_the_range_check():
    victim = CLIENTS[2]
    rng = np.random.default_rng(0)

    def change(masked):
        return rng.integers(0, 2**32, size=masked.shape, dtype=np.uint64).astype(np.uint32)

    with pytest.raises(
        SecureAggregationError,
        match=r"lie outside \[0, 6·R\].*or a masked vector or share altered on the way",
    ):
        _sum(_federation(alter=_alter_mask(victim, change)), _float_group())


def test_groups_below_the_minimum_are_refused():
    with pytest.raises(
        ConfigError,
        match=r"group 'all' has 2 members \['site0', 'site1'\], fewer than "
        r"secagg.min_clients = 3",
    ):
        _sum(_federation(), _float_group(CLIENTS[:2]))
    with pytest.raises(ConfigError, match="fewer than secagg.min_clients = 5"):
        _sum(_federation(), _float_group(CLIENTS[:4]), params=SecAggParams(min_clients=5))


def test_parameters_are_checked():
    with pytest.raises(ConfigError, match="secagg.min_clients must be >= 3, got 2"):
        SecAggParams(min_clients=2)
    with pytest.raises(ConfigError, match=r"modulus_bits must lie in \[quantization_bits \+ 2"):
        SecAggParams(quantization_bits=24, modulus_bits=25)
    params = SecAggParams(quantization_bits=24, modulus_bits=28)
    assert params.max_members() == 15
    members = tuple(f"c{k:02d}" for k in range(16))
    group = {"all": SumGroup(members, ("a",), {c: 1 / 16 for c in members})}
    with pytest.raises(ConfigError, match="allow at most 15"):
        _sum(_federation(), group, params=params)
    assert [SecAggParams().reconstruction_threshold(n) for n in (3, 4, 5, 6, 10)] == [3, 3, 3, 4, 6]


# --- the site's own checks ------------------------------------------------------------------
def _keys_request(members=CLIENTS[:3], you="site0", threshold=3, sid="s1") -> dict:
    return {
        "sessions": {
            sid: {
                "params": SecAggParams().as_payload(),
                "members": list(members),
                "you": you,
                "threshold": threshold,
                "held": "float",
                "tensors": ["a"],
                "shapes": {"a": [3, 4]},
                "weighted": True,
            }
        }
    }


def _held_state() -> dict:
    state: dict = {}
    secagg_site.hold(state, "float", _sites()["site0"]["float"])
    return state


def test_the_site_refuses_a_replayed_session_id():
    state = _held_state()
    secagg_site.answer(STEP_KEYS, _keys_request(), state)
    with pytest.raises(InputDataError, match="session 's1': this session id was used before"):
        secagg_site.answer(STEP_KEYS, _keys_request(), state)


def test_the_site_refuses_steps_out_of_order_and_groups_too_small():
    state = _held_state()
    secagg_site.answer(STEP_KEYS, _keys_request(), state)
    with pytest.raises(InputDataError, match="step out of order: this site's last step was"):
        secagg_site.answer(STEP_MASK, {"sessions": {"s1": {"ciphertexts": {}}}}, state)
    with pytest.raises(InputDataError, match="2 members, fewer than the minimum 3"):
        secagg_site.answer(STEP_KEYS, _keys_request(CLIENTS[:2], threshold=2, sid="s2"), state)
    with pytest.raises(InputDataError, match="holds no vector 'other'"):
        request = _keys_request(sid="s3")
        request["sessions"]["s3"]["held"] = "other"
        secagg_site.answer(STEP_KEYS, request, state)

    other = _held_state()  # another site, or another step, is not frozen
    assert secagg_site.answer(STEP_KEYS, _keys_request(you="site1"), other)["sessions"]


def test_the_site_opens_a_session_on_the_keys_of_its_fit_reply_once():
    state: dict = {}
    sent = {"a": np.zeros((3, 4))}
    spec = {"hold": "float", "key_slots": ["k1", "k2"]}
    instruction = FitInstruction(sent, {SECURE_FIT_KEY: spec})
    result = FitResult("site0", 10, {"a": np.ones((3, 4))})
    reply = secagg_site.held_fit_result(result, instruction, state)
    assert reply.parameters == {} and sorted(reply.secure_keys) == ["k1", "k2"]
    np.testing.assert_array_equal(secagg_site.held(state, "float")["a"], np.ones((3, 4)))
    others = {c: [k.decode() for k in _public_pair()] for c in CLIENTS[1:3]}
    keys = {"site0": list(reply.secure_keys["k1"]), **others}

    def share(sid: str, slot: str) -> dict:
        definition = _keys_request(sid=sid)["sessions"][sid]
        request = {"keys": keys, "open": {**definition, "slot": slot}}
        return secagg_site.answer(STEP_SHARE, {"sessions": {sid: request}}, state)

    shared = share("s1", "k1")["sessions"]["s1"]
    assert sorted(shared["ciphertexts"]) == CLIENTS[1:3]
    with pytest.raises(InputDataError, match="no key pair of slot 'k1' here .*used already"):
        share("s2", "k1")  # a slot serves one session
    with pytest.raises(InputDataError, match="no key pair of slot 'k9' here"):
        share("s3", "k9")
    with pytest.raises(InputDataError, match="server misquotes this site's own public keys"):
        share("s4", "k2")  # k2's keys are not the ones quoted for site0


def _public_pair() -> tuple[bytes, bytes]:
    from flwr.supercore.primitives.asymmetric import generate_key_pairs, public_key_to_bytes

    return tuple(public_key_to_bytes(generate_key_pairs()[1]) for _ in range(2))


def test_the_site_never_gives_both_shares_of_a_member():
    transport = _federation()
    groups = _float_group(CLIENTS[:4])
    original = transport.query

    def query(requests, settings):
        for request in requests.values():
            if request.step == STEP_UNMASK:
                for session in request.payload["sessions"].values():
                    session["dead"] = [session["alive"][0]]  # a server asking for both
        return original(requests, settings)

    transport.query = query
    with pytest.raises(SecureAggregationError, match="only 0 valid shares"):
        _sum(transport, groups)
    state = transport.step_state[CLIENTS[0]]
    assert state["secagg"]["sessions"]  # every site refused: its secrets are still its own


def test_held_fit_update_leaves_the_reply_without_parameters():
    from rvfedprs.strategies.base import FitInstruction, FitResult

    sent = {"w": np.ones(3, dtype=np.float32)}
    result = FitResult("c", 5, {"w": np.array([1.5, 1.0, 0.25], dtype=np.float32)}, {"loss": 1.0})
    state: dict = {}
    plain = secagg_site.held_fit_result(result, FitInstruction(sent, {}), state)
    assert plain is result and state == {}
    secure = FitInstruction(sent, {"secure_aggregation": {"hold": "fit-update"}})
    held = secagg_site.held_fit_result(result, secure, state)
    assert held.parameters == {} and held.n_samples == 5 and held.metrics == {"loss": 1.0}
    np.testing.assert_array_equal(secagg_site.held(state, "fit-update")["w"], [0.5, 0, -0.75])
