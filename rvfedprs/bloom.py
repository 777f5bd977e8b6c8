"""Bloom filters of influential rare variants and Jaccard estimation from them (design §5–6).

Clients encode their influential variant keys (``chrom:pos:ref:alt``) in a pybloom-live
``BloomFilter(capacity, error_rate)``; the server fixes ``capacity`` and ``error_rate`` for the
whole federation, so every filter has the same number of slices ``k`` and bits ``m`` and the same
hash functions.  Only the packed bit array travels (:func:`encode`), never pybloom's file header,
which records the exact number of items.  With a ``key`` (shared by the clients, unknown to the
server) the items are ``HMAC-SHA256(key, variant_key)`` hex digests, so the server cannot test a
known variant against a filter.

Cardinality of a partitioned filter
-----------------------------------
pybloom-live's filter is *partitioned*: ``k`` slices of ``s = m/k`` bits, and every item sets
exactly one bit in each slice.  After ``n`` distinct items a given bit of a slice is still zero
with probability ``(1 − 1/s)^n``, so the expected number of set bits is
``E[X] = m·(1 − (1 − 1/s)^n)``.  Solving for ``n`` gives the estimator used here::

    n̂ = ln(1 − X/m) / ln(1 − 1/s) = ln(1 − X/m) / ln(1 − k/m)

Since ``ln(1 − k/m) ≈ −k/m`` it is the classic ``−(m/k)·ln(1 − X/m)`` (design §6) up to a relative
``O(k/m)`` term; the exact form is kept because it is exact in expectation for this layout.  A
filter with every bit set has no finite estimate and raises :class:`InputDataError`.

Jaccard (design §6): ``n̂∪ = n̂(A | B)``, ``n̂∩ = n̂(A) + n̂(B) − n̂∪``, ``Ŝ = clip(n̂∩ / n̂∪, 0, 1)``
(0 when both filters are empty).  Estimating the intersection from ``A & B`` is biased upward
(bits set in both by *different* items count as shared) and is not offered, except as
:func:`_and_bits_jaccard` for the test that demonstrates the bias.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import bitarray
import numpy as np
from pybloom_live import BloomFilter

from rvfedprs.exceptions import ConfigError, InputDataError

__all__ = [
    "BloomSpec",
    "encode",
    "decode",
    "n_bits",
    "n_hashes",
    "n_bytes",
    "estimate_cardinality",
    "estimate_jaccard",
    "contains",
    "read_bloom_key",
    "DEFAULT_CAPACITY",
    "DEFAULT_ERROR_RATE",
]

DEFAULT_CAPACITY = 1000
DEFAULT_ERROR_RATE = 0.01


@dataclass(frozen=True)
class BloomSpec:
    """Federation-wide filter parameters chosen by the server.

    Attributes
    ----------
    capacity : int
        Most items a filter may hold (pybloom's capacity).
    error_rate : float
        False-positive rate at capacity, in (0, 1).
    key : bytes or None
        Clients' shared secret for keyed hashing (HMAC-SHA256); ``None`` hashes the plain keys.
    """

    capacity: int = DEFAULT_CAPACITY
    error_rate: float = DEFAULT_ERROR_RATE
    key: bytes | None = None

    def __post_init__(self) -> None:
        if int(self.capacity) < 1:
            raise InputDataError(f"Bloom capacity must be >= 1, got {self.capacity}")
        if not 0 < float(self.error_rate) < 1:
            raise InputDataError(f"Bloom error_rate must be in (0, 1), got {self.error_rate}")
        if self.key is not None and not isinstance(self.key, bytes):
            raise InputDataError(f"Bloom key must be bytes, got {type(self.key).__name__}")

    def __repr__(self) -> str:  # never print the secret
        key = "None" if self.key is None else "<secret>"
        return f"BloomSpec(capacity={self.capacity}, error_rate={self.error_rate}, key={key})"


@lru_cache(maxsize=32)
def _layout(capacity: int, error_rate: float) -> tuple[int, int]:
    """(num_slices k, bits_per_slice s) of pybloom-live's filter."""
    bf = BloomFilter(capacity=capacity, error_rate=error_rate)
    return int(bf.num_slices), int(bf.bits_per_slice)


def n_hashes(spec: BloomSpec) -> int:
    """Number of hash functions ``k`` (= slices of the partitioned filter)."""
    return _layout(int(spec.capacity), float(spec.error_rate))[0]


def n_bits(spec: BloomSpec) -> int:
    """Number of bits ``m`` of every filter (``k`` slices × bits per slice)."""
    k, s = _layout(int(spec.capacity), float(spec.error_rate))
    return k * s


def n_bytes(spec: BloomSpec) -> int:
    """Length of the packed array :func:`encode` returns, ``ceil(m / 8)``."""
    return (n_bits(spec) + 7) // 8


def _item(variant_key: str, key: bytes | None) -> str:
    if key is None:
        return variant_key
    return hmac.new(key, variant_key.encode("utf-8"), hashlib.sha256).hexdigest()


def encode(keys: Iterable[str], spec: BloomSpec) -> np.ndarray:
    """Bloom filter bits of a set of variant keys.

    Parameters
    ----------
    keys : iterable of str
        Variant keys ``chrom:pos:ref:alt`` (duplicates count once).
    spec : BloomSpec

    Returns
    -------
    ndarray of uint8, shape (ceil(m / 8),)
        The filter's bit array packed little-endian within each byte (bit ``i`` of the filter
        is ``(bits[i // 8] >> (i % 8)) & 1``), padding bits zero; no header.

    Raises
    ------
    InputDataError
        When there are more distinct keys than ``spec.capacity``.
    """
    items = sorted({str(k) for k in keys})
    if len(items) > spec.capacity:
        raise InputDataError(
            f"{len(items)} variant keys exceed the Bloom filter capacity {spec.capacity}; "
            f"raise bloom_capacity or lower top_k"
        )
    bf = BloomFilter(capacity=int(spec.capacity), error_rate=float(spec.error_rate))
    for item in items:
        bf.add(_item(item, spec.key))
    bits = bf.bitarray[: bf.num_bits]
    return np.frombuffer(bits.tobytes(), dtype=np.uint8).copy()


def _check_bits(bits: np.ndarray, spec: BloomSpec, what: str = "filter") -> np.ndarray:
    arr = np.asarray(bits)
    if arr.dtype != np.uint8 or arr.ndim != 1:
        raise InputDataError(
            f"Bloom {what} must be a 1-D uint8 array, got dtype {arr.dtype} shape {arr.shape}"
        )
    expected = n_bytes(spec)
    if arr.size != expected:
        raise InputDataError(
            f"Bloom {what} has {arr.size} bytes; the federation's spec (capacity "
            f"{spec.capacity}, error_rate {spec.error_rate}) has {n_bits(spec)} bits = "
            f"{expected} bytes"
        )
    pad = expected * 8 - n_bits(spec)
    if pad and int(arr[-1]) >> (8 - pad):
        raise InputDataError(f"Bloom {what} has bits set beyond its {n_bits(spec)} bits")
    return arr


def decode(bits: np.ndarray, spec: BloomSpec) -> BloomFilter:
    """Rebuild a pybloom-live filter from :func:`encode`'s bits for membership tests.

    ``len()`` of the result is the rounded cardinality estimate (the true count is not sent).
    With a keyed spec, test membership of ``HMAC`` items, e.g. through :func:`contains`.
    """
    arr = _check_bits(bits, spec)
    bf = BloomFilter(capacity=int(spec.capacity), error_rate=float(spec.error_rate))
    ba = bitarray.bitarray(endian="little")
    ba.frombytes(arr.tobytes())
    bf.bitarray = ba[: bf.num_bits]
    bf.count = int(round(_cardinality(arr, spec))) if arr.any() else 0
    return bf


def contains(bits: np.ndarray, variant_key: str, spec: BloomSpec) -> bool:
    """Whether ``variant_key`` may be in the filter (false positives at ``error_rate``)."""
    return _item(variant_key, spec.key) in decode(bits, spec)


def _popcount(arr: np.ndarray) -> int:
    return int(np.unpackbits(arr).sum())


def _cardinality(arr: np.ndarray, spec: BloomSpec) -> float:
    m, k = n_bits(spec), n_hashes(spec)
    x = _popcount(arr)
    if x >= m:
        raise InputDataError(
            f"Bloom filter is full ({x} of {m} bits set): its cardinality cannot be estimated; "
            f"raise bloom_capacity"
        )
    if x == 0:
        return 0.0
    return math.log1p(-x / m) / math.log1p(-k / m)


def estimate_cardinality(bits: np.ndarray, spec: BloomSpec) -> float:
    """Estimated number of distinct items, ``ln(1 − X/m) / ln(1 − k/m)`` (see module notes).

    Parameters
    ----------
    bits : ndarray of uint8, shape (ceil(m / 8),)
    spec : BloomSpec

    Raises
    ------
    InputDataError
        On a length mismatch with ``spec`` or a full filter.
    """
    return _cardinality(_check_bits(bits, spec), spec)


def estimate_jaccard(a: np.ndarray, b: np.ndarray, spec: BloomSpec) -> float:
    """Jaccard similarity of the two encoded sets, estimated through the OR union.

    ``n̂∪ = n̂(A | B)``, ``n̂∩ = n̂(A) + n̂(B) − n̂∪``, ``Ŝ = clip(n̂∩ / n̂∪, 0, 1)``; 0 when both
    filters are empty.
    """
    a = _check_bits(a, spec, "filter A")
    b = _check_bits(b, spec, "filter B")
    n_union = _cardinality(a | b, spec)
    if n_union == 0.0:
        return 0.0
    n_inter = _cardinality(a, spec) + _cardinality(b, spec) - n_union
    return float(min(max(n_inter / n_union, 0.0), 1.0))


def _and_bits_jaccard(a: np.ndarray, b: np.ndarray, spec: BloomSpec) -> float:
    """The biased estimator ``n̂(A & B) / n̂(A | B)`` — for demonstration only, never use it."""
    union = _cardinality(a | b, spec)
    return _cardinality(a & b, spec) / union if union else 0.0


def read_bloom_key(
    path: str | Path | None, *, setting: str = "fedce.bloom_key_file"
) -> bytes | None:
    """The clients' shared HMAC secret: the file's bytes, surrounding whitespace stripped.

    Parameters
    ----------
    path : str or Path, optional
        None (or empty) means plain hashing.
    setting : str
        The configuration key that named the file, for the error message.

    Raises
    ------
    ConfigError
        When the file is missing or empty.
    """
    if not path:
        return None
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{setting}: {p} not found")
    key = p.read_bytes().strip()
    if not key:
        raise ConfigError(f"{setting}: {p} is empty")
    return key
