import io
import math

import numpy as np
import pytest
from pybloom_live import BloomFilter

from rvfedprs.bloom import (
    BloomSpec,
    _and_bits_jaccard,
    contains,
    decode,
    encode,
    estimate_cardinality,
    estimate_jaccard,
    n_bits,
    n_hashes,
)
from rvfedprs.exceptions import InputDataError


def exact_jaccard(a, b) -> float:
    """The oracle: exact Jaccard similarity of two sets (0 when both are empty)."""
    sa, sb = set(a), set(b)
    union = len(sa | sb)
    return len(sa & sb) / union if union else 0.0


def _keys(prefix, n, rng=None):
    return [f"{prefix}:{i}:A:G" for i in range(n)]


def _pair(n_a, n_b, n_shared):
    shared = [f"1:{i}:A:G" for i in range(n_shared)]
    a = shared + [f"2:{i}:C:T" for i in range(n_a - n_shared)]
    b = shared + [f"3:{i}:G:A" for i in range(n_b - n_shared)]
    return a, b


def test_layout_matches_pybloom_and_bits_are_the_whole_payload():
    spec = BloomSpec()
    bf = BloomFilter(capacity=spec.capacity, error_rate=spec.error_rate)
    assert n_bits(spec) == bf.num_bits and n_hashes(spec) == bf.num_slices
    keys = _keys("1", 300)
    for key in keys:
        bf.add(key)
    buf = io.BytesIO()
    bf.tofile(buf)
    bits = encode(keys, spec)
    assert bits.dtype == np.uint8 and bits.shape == ((n_bits(spec) + 7) // 8,)
    # identical to pybloom's payload with the header (which carries the count) removed
    assert bits.tobytes() == buf.getvalue()[-bits.size :]
    assert len(buf.getvalue()) > bits.size
    assert encode([], spec).shape == bits.shape  # size does not reveal the set size
    # decode → membership works and matches pybloom's own filter
    rebuilt = decode(bits, spec)
    assert all(k in rebuilt for k in keys)
    assert rebuilt.bitarray == bf.bitarray
    false_pos = np.mean([f"9:{i}:T:C" in rebuilt for i in range(2000)])
    assert false_pos < 0.01


@pytest.mark.parametrize("capacity", [1000, 2000])
def test_cardinality_estimate_against_exact(capacity):
    spec = BloomSpec(capacity=capacity)
    m, k = n_bits(spec), n_hashes(spec)
    for n in (0, 1, 10, 100, capacity // 2, capacity):
        bits = encode(_keys("5", n), spec)
        est = estimate_cardinality(bits, spec)
        assert abs(est - n) <= max(1.0, 0.03 * n), (n, est)
        # the classic −(m/k)·ln(1 − X/m) agrees up to the O(k/m) correction
        x = int(np.unpackbits(bits).sum())
        classic = -(m / k) * math.log(1 - x / m)
        assert abs(classic - est) <= est * 2 * k / m + 1e-9


@pytest.mark.parametrize(
    "capacity,sizes", [(1000, (10, 50, 200, 600, 1000)), (2000, (10, 300, 1000, 2000))]
)
def test_jaccard_estimate_accuracy_and_and_bits_bias(capacity, sizes):
    spec = BloomSpec(capacity=capacity)
    rng = np.random.default_rng(0)
    errors, and_bias = [], []
    for n in sizes:
        for overlap in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
            n_b = int(rng.integers(max(1, n // 2), n + 1))
            shared = int(round(overlap * n_b))
            a, b = _pair(n, n_b, shared)
            bits_a, bits_b = encode(a, spec), encode(b, spec)
            truth = exact_jaccard(a, b)
            est = estimate_jaccard(bits_a, bits_b, spec)
            assert 0.0 <= est <= 1.0
            errors.append(abs(est - truth))
            if 0 < overlap < 1:
                and_bias.append(_and_bits_jaccard(bits_a, bits_b, spec) - truth)
    errors = np.array(errors)
    assert errors.mean() < 0.03 and errors.max() < 0.1
    # the AND-bits estimator is biased upward (bits shared by different items count)
    assert np.mean(and_bias) > 0.01
    assert np.mean(and_bias) > 2 * errors.mean()


def test_jaccard_edge_cases():
    spec = BloomSpec()
    empty = encode([], spec)
    a = encode(_keys("1", 50), spec)
    assert estimate_jaccard(empty, empty, spec) == 0.0
    assert estimate_jaccard(a, empty, spec) == 0.0
    assert estimate_jaccard(a, a, spec) == pytest.approx(1.0)
    assert exact_jaccard([], []) == 0.0


def test_keyed_hashing_hides_variants_but_keeps_jaccard():
    keyed = BloomSpec(key=b"shared-secret")
    other_key = BloomSpec(key=b"another-secret")
    plain = BloomSpec()
    a, b = _pair(400, 300, 150)
    bits = encode(a, keyed)
    assert not np.array_equal(bits, encode(a, plain))
    assert not np.array_equal(bits, encode(a, other_key))
    # the server, without the key, cannot test a known variant against the filter
    server_view = decode(bits, plain)
    assert np.mean([k in server_view for k in a]) < 0.05
    assert all(contains(bits, k, keyed) for k in a)
    est = estimate_jaccard(bits, encode(b, keyed), keyed)
    assert est == pytest.approx(exact_jaccard(a, b), abs=0.03)
    assert "shared-secret" not in repr(keyed)


def test_errors_are_clear():
    spec = BloomSpec(capacity=100)
    with pytest.raises(
        InputDataError, match="101 variant keys exceed the Bloom filter capacity 100"
    ):
        encode(_keys("1", 101), spec)
    bits = encode(_keys("1", 10), spec)
    other = BloomSpec(capacity=200)
    with pytest.raises(InputDataError, match=r"filter B has \d+ bytes; the federation's spec"):
        estimate_jaccard(bits, encode([], other), spec)
    with pytest.raises(InputDataError, match="1-D uint8"):
        estimate_cardinality(bits.astype(np.int64), spec)
    full = np.full_like(bits, 255)
    pad = full.size * 8 - n_bits(spec)
    if pad:
        full[-1] = 255 >> pad
        with pytest.raises(InputDataError, match="bits set beyond"):
            estimate_cardinality(np.full_like(bits, 255), spec)
    with pytest.raises(InputDataError, match="Bloom filter is full"):
        estimate_cardinality(full, spec)
    with pytest.raises(InputDataError, match="error_rate must be in"):
        BloomSpec(error_rate=1.5)
    with pytest.raises(InputDataError, match="key must be bytes"):
        BloomSpec(key="text")
