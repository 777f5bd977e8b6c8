"""Channel audits: carried variants read off real local-SGD updates (single and securely summed)
and off Bloom filters, scored against the truth."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from rvfedprs.bloom import BloomSpec, encode
from rvfedprs.evaluation.attacks import (
    SeenUpdate,
    audit_channels,
    carried_from_update,
    carried_mask,
    update_channel_scores,
)
from rvfedprs.evaluation.attacks.updates import shared_slope
from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, get_parameters, set_parameters
from rvfedprs.training import RARE_INPUT, ClientData, LocalTrainingConfig, local_update

P = 120
KEYS = [f"1:{1000 + j}:A:G" for j in range(P)]


def _client(name, columns, rng, n=40):
    """A client whose samples carry exactly ``columns`` (each at least once)."""
    rows, cols = [], []
    for k, j in enumerate(columns):
        for i in rng.choice(n, size=1 + k % 3, replace=False):
            rows.append(i)
            cols.append(j)
    rare = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)), shape=(n, P))
    y = (rng.random(n) < 0.4).astype(np.float32)
    y[:2] = [0, 1]
    return ClientData(name, [f"{name}{i}" for i in range(n)], rng.normal(size=n), rare, y)


@pytest.fixture(scope="module")
def federation():
    rng = np.random.default_rng(0)
    sets = {"a": range(0, 30), "b": range(20, 55), "c": [*range(60, 70), 5]}
    clients = {c: _client(c, list(cols), rng) for c, cols in sets.items()}
    start = get_parameters(TwoPathwayModel(P, common_hidden=(4,), rare_hidden=(8,), random_seed=1))
    return clients, start


def _received(data, start, config, seed=0):
    model = TwoPathwayModel(P, common_hidden=(4,), rare_hidden=(8,), initialise=False)
    set_parameters(model, start)
    return local_update(model, data, config, random_seed=seed).parameters[RARE_INPUT]


CONFIGS = {
    "plain SGD": LocalTrainingConfig(epochs=2, lr=0.05, momentum=0.0, batch_size=8),
    "momentum + weight decay": LocalTrainingConfig(
        epochs=2, lr=0.05, momentum=0.9, batch_size=8, weight_decay=0.01
    ),
    "FedProx": LocalTrainingConfig(epochs=2, lr=0.05, momentum=0.9, batch_size=8, proximal_mu=0.1),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_a_single_update_reveals_the_carried_set_exactly(federation, name):
    clients, start = federation
    sent = start[RARE_INPUT]
    for client, data in clients.items():
        received = _received(data, start, CONFIGS[name])
        inferred = carried_from_update(sent, received)
        np.testing.assert_array_equal(inferred, carried_mask(data), err_msg=f"{name} {client}")
        # the same from the update (received − sent) the server can compute
        np.testing.assert_array_equal(carried_from_update(sent, received - sent), inferred)


def test_shared_slope_recovers_the_data_free_factor_even_with_most_columns_carried():
    rng = np.random.default_rng(2)
    sent = rng.normal(size=(8, 50))
    received = 0.97 * sent
    carried = rng.random(50) < 0.7  # most columns carried
    received[:, carried] += rng.normal(scale=0.01, size=(8, int(carried.sum())))
    assert shared_slope(sent, received) == pytest.approx(0.97, rel=1e-9)
    np.testing.assert_array_equal(carried_from_update(sent, received), carried)
    # the server's own closed form gives the same answer
    np.testing.assert_array_equal(
        carried_from_update(sent, received, expected=0.97 * sent), carried
    )


def test_a_secure_sum_reveals_only_the_union_of_its_clients(federation):
    clients, start = federation
    sent = start[RARE_INPUT]
    config = CONFIGS["momentum + weight decay"]
    received = {c: _received(d, start, config, seed=i) for i, (c, d) in enumerate(clients.items())}
    n = {c: d.n_samples for c, d in clients.items()}
    summed = sum(n[c] * received[c] for c in clients)  # what SecAgg hands the server
    truth = {c: carried_mask(d) for c, d in clients.items()}
    union = np.logical_or.reduce(list(truth.values()))
    rows = audit_channels(
        truth, updates=[SeenUpdate(tuple(sorted(clients)), sent, summed)]
    )  # fmt: skip
    assert {r["channel"] for r in rows} == {"update"}
    for r in rows:
        t = truth[r["client"]]
        assert r["n_summed"] == 3 and r["tpr"] == 1.0
        assert r["fpr"] == pytest.approx((union & ~t).sum() / (~t).sum())
    # versus each client's own update: exact
    own = audit_channels(truth, updates=[SeenUpdate((c,), sent, received[c]) for c in clients])
    assert all(r["tpr"] == 1.0 and r["fpr"] == 0.0 and r["n_summed"] == 1 for r in own)


def test_noise_on_every_column_turns_the_rule_into_a_ranking(federation):
    clients, start = federation
    data = clients["a"]
    sent = start[RARE_INPUT]
    rng = np.random.default_rng(4)
    received = _received(data, start, CONFIGS["plain SGD"]) + rng.normal(
        scale=1e-4, size=sent.shape
    )
    truth = carried_mask(data)
    (row,) = audit_channels({"a": truth}, updates=[SeenUpdate(("a",), sent, received)])
    assert row["tpr"] == 1.0 and row["fpr"] == 1.0  # every column moved
    assert row["auc"] > 0.9 and row["advantage"] > 0.6  # but carried columns moved more
    scores = update_channel_scores(sent, received)
    assert scores[truth].mean() > 5 * scores[~truth].mean()


def test_bloom_channel_plain_keyed_and_combined(federation):
    clients, start = federation
    sent = start[RARE_INPUT]
    truth = {c: carried_mask(d) for c, d in clients.items()}
    reported = {c: [KEYS[j] for j in np.flatnonzero(t)[::2]] for c, t in truth.items()}
    summed = sum(_received(d, start, CONFIGS["plain SGD"]) for d in clients.values())
    update = [SeenUpdate(tuple(sorted(clients)), sent, summed)]
    for key, hashing in ((None, "plain"), (b"secret", "keyed")):
        spec = BloomSpec(capacity=50, error_rate=0.01, key=key)
        filters = {c: encode(reported[c], spec) for c in clients}
        rows = audit_channels(truth, updates=update, filters=filters, spec=spec, variant_keys=KEYS)
        by = {(r["client"], r["channel"]): r for r in rows}
        for c, t in truth.items():
            bloom = by[(c, "bloom")]
            assert bloom["hashing"] == hashing
            hits = np.isin(KEYS, reported[c])
            if key is None:  # plain: every reported key is found; false positives are rare
                assert bloom["tpr"] == pytest.approx(hits[t].mean())
                assert bloom["fpr"] < 0.05
            else:  # keyed: the server's test hashes the wrong items
                assert bloom["tpr"] < 0.2 and bloom["fpr"] < 0.2
            union = np.logical_or.reduce(list(truth.values()))
            both = by[(c, "update&bloom")]
            either = by[(c, "update|bloom")]
            if key is None:
                flag_and = union & hits
                assert both["tpr"] == pytest.approx(flag_and[t].mean())
                assert both["fpr"] <= by[(c, "update")]["fpr"]
            assert either["tpr"] == 1.0


def test_bad_inputs_are_named():
    truth = {"a": np.zeros(4, bool)}
    with pytest.raises(InputDataError, match="one shape"):
        update_channel_scores(np.zeros((2, 4)), np.zeros((2, 3)))
    with pytest.raises(InputDataError, match=r"clients \['z'\] with no carried-set truth"):
        audit_channels(truth, updates=[SeenUpdate(("z",), np.zeros((2, 4)), np.zeros((2, 4)))])
    with pytest.raises(InputDataError, match="spec and variant keys"):
        audit_channels(truth, filters={"a": np.zeros(8, np.uint8)})
    with pytest.raises(InputDataError, match="NaN or infinite"):
        update_channel_scores(np.zeros((1, 2)), np.array([[0.0, np.nan]]))
