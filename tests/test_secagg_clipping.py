"""Under secure aggregation each site clips its own update to ±c before masking (issue 30, item 3).

A site whose update is scaled ×1e6 no longer stops the run: it scales its update down to the
L2 norm bound (``secagg.update_norm_bound``, issue 42) and clips its entries to ±c on the site,
the sum stays within both bounds, and the round's record names the site — the server still
never sees its vector. A sum that nevertheless
leaves the clipped range (a site that does not clip: a modified or outdated client) is refused
with advice that names the sites that reported clipping and does not tell the operator to raise
the bound blindly.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from test_secagg import (  # noqa: E402
    CLIENTS,
    DEFAULTS,
    SHAPES,
    _alter_mask,
    _federation,
    _float_group,
    _sites,
    _sum,
    _weights,
)

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.federation.inprocess import InProcessTransport  # noqa: E402
from rvfedprs.federation.rounds import RunSpec, negotiate, serve  # noqa: E402
from rvfedprs.federation.secagg import site as secagg_site  # noqa: E402
from rvfedprs.federation.secagg.protocol import STEP_KEYS, STEP_MASK, SecureAggregationError  # noqa: E402
from rvfedprs.federation.secagg.training import HELD_UPDATE  # noqa: E402
from rvfedprs.federation.task import Request  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import GenomicTask, sites_of  # noqa: E402
from rvfedprs.strategies import strategy_from_config  # noqa: E402

SEED = 5
POISONED = "client02"
SCALE = 1e6


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    paths = write_federation(tmp_path_factory.mktemp("clip"), n_clients=5, n_clusters=2,
                             samples_per_client=100)  # fmt: skip
    return load_federation(paths["data"])


class Poisoning(InProcessTransport):
    """The in-process engine with one site that scales the update it holds for the secure sum.

    Or that reports ``n`` training samples. Records, per round, the model sent and every site's
    held update (after the scaling): the oracle of what the sites clip.
    """

    def __init__(self, task, sites, scale, n=None):
        super().__init__(task, sites)
        self.scale, self.n = scale, n
        self.sent: list[dict[str, np.ndarray]] = []
        self.updates: list[dict[str, dict[str, np.ndarray]]] = []

    def subset(self, client_ids):  # noqa: D102
        return self

    def fit(self, server_round, instructions, seeds, settings, client_state):  # noqa: D102
        results, failures = super().fit(server_round, instructions, seeds, settings, client_state)
        state = self.step_state[POISONED]
        update = secagg_site.held(state, HELD_UPDATE)
        secagg_site.hold(state, HELD_UPDATE, {k: v * self.scale for k, v in update.items()})
        if self.n is not None:
            results[POISONED] = replace(results[POISONED], n_samples=self.n)
        self.sent.append({k: np.array(v) for k, v in instructions[POISONED].parameters.items()})
        self.updates.append({c: secagg_site.held(self.step_state[c], HELD_UPDATE) for c in results})
        return results, failures


def _secure_run(fed, scale, rounds=2, n=None):
    config = load_config(None, overrides={
        "train": {"validation_fraction": 0, "strategy": "fedavg",
                  "rounds": rounds, "seed": SEED, "data": str(fed.data_dir)},
        "model": {"common_hidden": [4], "rare_hidden": [8], "start_from_floor": False},
        "secagg": {"enabled": True},
    })  # fmt: skip
    task = GenomicTask()
    transport = Poisoning(task, sites_of(fed), scale, n)
    job = {"seed": SEED, "rounds": rounds, "config": config, "min_replies": 3}
    settings, transport, _ = negotiate(task, transport, job)  # the sites declare their counts
    spec = RunSpec(strategy_from_config("fedavg", config))
    result = serve(task, transport, [spec], job, settings)[0]
    return result, transport


def test_a_scaled_update_is_clipped_at_its_site_and_named_in_the_round_record(fed):
    # an honest client on poisoned data: it clips its update to L2 norm <= B before masking
    # (secagg.update_norm_bound), so the sum stays plausible and the run goes on; the round's
    # record names the site (secagg_norm_clipped), not its values
    result, transport = _secure_run(fed, SCALE)
    c, bound = DEFAULTS.clipping_range, DEFAULTS.update_norm_bound
    n = {cl: float(fed.train[cl].n_samples) for cl in fed.client_ids}
    omega = {cl: v / sum(n.values()) for cl, v in n.items()}
    assert len(result.history) == 2  # the run completed
    for entry, updates in zip(result.history, transport.updates, strict=True):
        assert "failed" not in entry and entry["secagg"] == {"model": sorted(updates)}
        assert entry["secagg_norm_clipped"] == [POISONED]  # the honest sites clip nothing
        assert "secagg_implausible" not in entry
    # the model is w_sent + Σ_k clip(ω_k · Δw_k·min(1, B/‖Δw_k‖), ±c) within the quantisation
    # bound: the poisoned site moved the model by at most ω_k·B
    sent, updates = transport.sent[-1], transport.updates[-1]
    quantisation = len(updates) * DEFAULTS.step
    names = sorted(sent)
    scale = {
        k: min(1.0, bound / np.linalg.norm(np.concatenate([u[m].ravel() for m in names])))
        for k, u in updates.items()
    }
    assert scale[POISONED] < 1e-3 and all(scale[k] == 1.0 for k in updates if k != POISONED)
    for name, w in result.strategy.parameters.items():
        want = sent[name] + sum(
            np.clip(omega[k] * scale[k] * u[name], -c, c) for k, u in updates.items()
        )
        ulp = np.spacing(np.abs(want).astype(np.float32))
        assert np.all(np.abs(w - want) <= quantisation + ulp), name
    moved = np.concatenate([(result.strategy.parameters[m] - sent[m]).ravel() for m in names])
    honest = sum(omega[k] * bound for k in updates if k != POISONED)
    assert np.linalg.norm(moved) <= omega[POISONED] * bound + honest + 1e-3
    assert max(float(np.abs(u).max()) for u in updates[POISONED].values()) > 1e3 * c


def test_honest_sites_clip_nothing(fed):
    result, _ = _secure_run(fed, 1.0, rounds=1)
    assert "secagg_clipped" not in result.history[0] and "failed" not in result.history[0]


def test_an_inflated_sample_count_is_refused_and_named_before_the_sum(fed):
    result, transport = _secure_run(fed, 1.0, rounds=1, n=10**9)
    (entry,) = result.history
    declared = fed.train[POISONED].n_samples
    assert entry["failed"] == {
        POISONED: f"round 1: reports 1000000000 training samples, {declared} declared at setup "
        "(the aggregation weight is the declared count)"
    }
    assert entry["secagg"] == {"model": [c for c in fed.client_ids if c != POISONED]}


# --- a site that does not clip: the sum's range check, its message --------------------------
def _unclipped(victim: str, scale: float):
    """The mask reply of a site that scales its vector and sends it without clipping.

    It quantises exactly as an honest site would and adds back what clipping took off —
    (x − clip(x))·R/2c per entry — to its masked vector (mod M): the vector it would have sent
    with the clip step removed.
    """
    x = np.concatenate([_sites()[victim]["float"][n].ravel() for n in SHAPES])
    x = x * scale * _weights(CLIENTS)[victim]
    c, levels = DEFAULTS.clipping_range, DEFAULTS.levels
    excess = np.round((x - np.clip(x, -c, c)) * levels / (2 * c)).astype(np.int64)
    return _alter_mask(victim, lambda m: ((m.astype(np.int64) + excess) % DEFAULTS.modulus)
                       .astype(m.dtype))  # fmt: skip


def test_an_overflowing_sum_names_the_site_that_reported_clipping():
    victim = CLIENTS[3]
    transport = _federation()
    transport.sites[victim]["float"] = {n: v * 1e3 for n, v in _sites()[victim]["float"].items()}
    transport.query({victim: Request("make")}, {})
    transport.alter = _unclipped(victim, 1e3)
    with pytest.raises(SecureAggregationError) as caught:
        _sum(transport, _float_group())
    message = str(caught.value)
    assert (
        "lie outside [0, 6·R], the range of 6 vectors clipped to secagg.clipping_range = 1"
        in message
    )
    assert "a member's vector exceeded the declared bound" in message
    assert f"Check the sites that reported clipping entries this round: {victim!r} (" in message
    assert "Raise secagg.clipping_range only if honest updates are legitimately larger than 1: " \
        "this round 5 of 6 members clipped no entry" in message  # fmt: skip
    assert not message.endswith("Raise secagg.clipping_range")  # the old, blind advice


def test_an_overflow_from_a_site_that_reports_no_clipping_names_the_members():
    victim = CLIENTS[1]
    alter_vector = _unclipped(victim, 1e3)

    def alter(client, step, reply):
        reply = alter_vector(client, step, reply)
        if client == victim and step == STEP_MASK:
            for session in reply["sessions"].values():
                session["clipped"] = 0  # it hides its clipping too
        return reply

    transport = _federation()
    transport.sites[victim]["float"] = {n: v * 1e3 for n, v in _sites()[victim]["float"].items()}
    transport.query({victim: Request("make")}, {})
    transport.alter = alter
    with pytest.raises(
        SecureAggregationError,
        match=r"No member reported clipping an entry, and the server cannot see whose vector it "
        r"was; check the members \['site0', .*'site5'\].* this round 6 of 6 members clipped no "
        r"entry",
    ):
        _sum(transport, _float_group())


# --- what a site refuses or must report --------------------------------------------------------
def test_a_site_holding_nan_is_refused_and_named():
    victim = CLIENTS[4]
    transport = _federation()
    transport.sites[victim]["float"]["a"][1, 2] = np.nan
    transport.sites[victim]["float"]["b"][0] = np.inf
    transport.query({victim: Request("make")}, {})
    outcome = _sum(transport, _float_group())
    assert list(outcome.dropped) == [victim]
    assert outcome.dropped[victim].startswith(f"{STEP_KEYS}: secure aggregation session")
    assert outcome.dropped[victim].endswith("tensor 'a' holds 1 NaN/inf values; it is not summed")
    assert outcome.clipped == {}


@pytest.mark.parametrize(
    ("count", "reason"),
    [
        (None, "no count of clipped entries (clipped: None)"),
        (True, "no count of clipped entries (clipped: True)"),
        (18, "it reports 18 clipped entries of 17"),
        (-1, "it reports -1 clipped entries of 17"),
    ],
)
def test_a_mask_reply_without_a_valid_clip_count_is_dropped_and_named(count, reason):
    victim = CLIENTS[0]

    def alter(client, step, reply):
        if client == victim and step == STEP_MASK:
            for session in reply["sessions"].values():
                if count is None:
                    del session["clipped"]
                else:
                    session["clipped"] = count
        return reply

    outcome = _sum(_federation(alter=alter), _float_group())
    assert outcome.dropped == {victim: f"{STEP_MASK}: malformed reply for 'all': {reason}"}


def test_one_site_beyond_the_range_is_clipped_counted_and_summed():
    victim = CLIENTS[2]
    transport = _federation()
    transport.sites[victim]["float"] = {n: v * 1e3 for n, v in _sites()[victim]["float"].items()}
    transport.query({victim: Request("make")}, {})
    outcome = _sum(transport, _float_group())
    c, weights, sites = DEFAULTS.clipping_range, _weights(CLIENTS), _sites()
    x = np.concatenate([sites[victim]["float"][n].ravel() * 1e3 * weights[victim] for n in SHAPES])
    beyond = int(np.count_nonzero(np.abs(x) > c))
    assert beyond > 0
    assert outcome.clipped == {victim: {"values": beyond, "of": 17, "fraction": beyond / 17}}
    got = outcome.sums["all"]
    assert got.included == tuple(CLIENTS) and outcome.dropped == {}
    for name in SHAPES:
        scale = {cl: 1e3 if cl == victim else 1.0 for cl in CLIENTS}
        want = sum(np.clip(scale[k] * weights[k] * sites[k]["float"][name], -c, c) for k in CLIENTS)
        assert np.abs(got.total[name] - want).max() <= got.error_bound
