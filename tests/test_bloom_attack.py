"""Server membership tests on Bloom filters: plain hashing leaks, keyed hashing does not."""

from __future__ import annotations

import numpy as np
import pytest

from rvfedprs.bloom import BloomSpec, encode
from rvfedprs.evaluation.attacks.bloom import (
    bloom_membership_attack,
    plain_vs_keyed,
    server_membership_tests,
)
from rvfedprs.exceptions import InputDataError

CANDIDATES = [f"1:{1000 + j}:A:G" for j in range(4000)]


def test_plain_filter_leaks_membership():
    spec = BloomSpec(capacity=400, error_rate=0.05)
    reported = CANDIDATES[:300]
    out = bloom_membership_attack(encode(reported, spec), CANDIDATES, reported, spec)
    assert out["tpr"] == 1.0  # no false negatives in a Bloom filter
    assert out["n_pos"] == 300 and out["n_neg"] == 3700
    # FPR ≈ the filter's acceptance rate of a random item (≤ error rate below capacity)
    se = np.sqrt(out["chance_rate"] * (1 - out["chance_rate"]) / out["n_neg"])
    assert abs(out["fpr"] - out["chance_rate"]) < 4 * se + 1e-3
    assert out["fpr"] < 0.05


def test_keyed_filter_gives_chance_level():
    secret = b"clients-only"
    spec = BloomSpec(capacity=400, error_rate=0.2, key=secret)
    reported = CANDIDATES[:350]
    bits = encode(reported, spec)
    out = bloom_membership_attack(bits, CANDIDATES, reported, spec)
    # the server hashes plain keys: hits only by chance, equally for positives and negatives
    se = np.sqrt(out["chance_rate"] * (1 - out["chance_rate"]) / out["n_pos"])
    assert abs(out["tpr"] - out["fpr"]) < 4 * se + 1e-3
    assert out["tpr"] < 0.5
    # whoever holds the secret can test membership exactly
    from rvfedprs.bloom import contains

    assert all(contains(bits, k, spec) for k in reported[:20])


def test_server_tests_ignore_the_key_it_does_not_have():
    spec = BloomSpec(capacity=50, error_rate=0.01, key=b"s")
    bits = encode(CANDIDATES[:10], spec)
    plain = BloomSpec(capacity=50, error_rate=0.01)
    np.testing.assert_array_equal(
        server_membership_tests(bits, CANDIDATES[:10], spec),
        server_membership_tests(bits, CANDIDATES[:10], plain),
    )


def test_plain_vs_keyed_rows():
    reported = {"a": CANDIDATES[:100], "b": CANDIDATES[50:150]}
    carried = {"a": CANDIDATES[:500], "b": CANDIDATES[:500]}
    rows = plain_vs_keyed(
        reported, CANDIDATES, capacity=200, error_rate=0.01, secret=b"k", carried=carried
    )
    assert [(r["client"], r["hashing"]) for r in rows] == [
        ("a", "plain"), ("a", "keyed"), ("b", "plain"), ("b", "keyed")
    ]  # fmt: skip
    plain = [r for r in rows if r["hashing"] == "plain"]
    keyed = [r for r in rows if r["hashing"] == "keyed"]
    assert all(r["tpr"] == 1.0 and r["carried_tpr"] == pytest.approx(0.2, abs=0.02) for r in plain)
    assert all(r["tpr"] < 0.1 for r in keyed)


def test_reported_keys_must_be_candidates():
    spec = BloomSpec(capacity=10, error_rate=0.01)
    with pytest.raises(InputDataError, match="1 reported variants are not among"):
        bloom_membership_attack(encode(["X:1:A:G"], spec), CANDIDATES[:5], ["X:1:A:G"], spec)
