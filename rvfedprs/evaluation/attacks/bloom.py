"""A curious server testing candidate variants against a client's Bloom filter (design §5 step 4).

The server knows the federation's filter parameters (capacity, error rate, hence the hash
functions) and a list of candidate variant keys (e.g. ``rare_variants.tsv``, which is public
within the federation). For each candidate it asks "is it in client k's filter?":

- **plain hashing** — the filter holds the variant keys themselves, so the test is exact up to
  false positives: TPR = 1 on the variants the client reported as influential, FPR ≈ the
  filter's false-positive rate at its fill;
- **keyed hashing** — the filter holds ``HMAC-SHA256(secret, key)``; the server cannot compute
  the items, so its test (hashing the plain key) hits only by chance: TPR ≈ FPR ≈ the fraction of
  random items the filter accepts.

:func:`bloom_membership_attack` measures TPR/FPR against the reported set (and, optionally,
against the set of variants the client carries at all).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.bloom import BloomSpec, decode, encode, n_bits, n_hashes
from rvfedprs.exceptions import InputDataError

__all__ = ["server_membership_tests", "bloom_membership_attack", "plain_vs_keyed"]


def server_membership_tests(
    bits: np.ndarray, candidates: Sequence[str], spec: BloomSpec
) -> np.ndarray:
    """What the server can compute: ``key in filter`` for each candidate, hashing plain keys.

    The server never holds the clients' secret, so the test always uses ``spec`` without a key.

    Returns
    -------
    ndarray of bool, shape (n_candidates,)
    """
    server_spec = BloomSpec(capacity=spec.capacity, error_rate=spec.error_rate, key=None)
    bf = decode(np.asarray(bits, dtype=np.uint8), server_spec)
    return np.fromiter((str(k) in bf for k in candidates), dtype=bool, count=len(candidates))


def _rates(hit: np.ndarray, positive: np.ndarray) -> dict[str, float]:
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    tpr = float(hit[positive].mean()) if n_pos else float("nan")
    fpr = float(hit[~positive].mean()) if n_neg else float("nan")
    return {"tpr": tpr, "fpr": fpr, "advantage": tpr - fpr, "n_pos": n_pos, "n_neg": n_neg}


def bloom_membership_attack(
    bits: np.ndarray,
    candidates: Sequence[str],
    reported: Iterable[str],
    spec: BloomSpec,
    *,
    carried: Iterable[str] | None = None,
) -> dict[str, Any]:
    """TPR/FPR of the server's membership test on one client's filter.

    Parameters
    ----------
    bits : ndarray of uint8
        The filter the client sent.
    candidates : sequence of str
        Variant keys the server tests.
    reported : iterable of str
        The keys the client encoded (its influential set V_k): the positives.
    spec : BloomSpec
        The federation's spec (its ``key``, if any, is ignored: the server does not have it).
    carried : iterable of str, optional
        The variants the client carries at all; adds ``carried_tpr``/``carried_fpr``.

    Returns
    -------
    dict
        ``tpr``, ``fpr``, ``advantage``, ``n_pos``, ``n_neg``, ``fill`` (fraction of bits set),
        ``chance_rate`` (fill^k, the acceptance rate of a random item), and the carried rates.

    Raises
    ------
    InputDataError
        When ``reported`` names keys that are not candidates.
    """
    candidates = [str(c) for c in candidates]
    reported = {str(r) for r in reported}
    missing = reported - set(candidates)
    if missing:
        raise InputDataError(
            f"{len(missing)} reported variants are not among the server's candidates: "
            f"{', '.join(sorted(missing)[:5])}"
        )
    hit = server_membership_tests(bits, candidates, spec)
    positive = np.fromiter((c in reported for c in candidates), dtype=bool, count=len(candidates))
    out: dict[str, Any] = _rates(hit, positive)
    m, k = n_bits(spec), n_hashes(spec)
    # partitioned filter: a random item hits iff its bit in each of the k slices is set
    fill = float(np.unpackbits(np.asarray(bits, dtype=np.uint8))[:m].mean())
    out["fill"] = fill
    out["chance_rate"] = fill**k
    if carried is not None:
        carried = {str(c) for c in carried}
        carried_pos = np.fromiter(
            (c in carried for c in candidates), dtype=bool, count=len(candidates)
        )
        rates = _rates(hit, carried_pos)
        out["carried_tpr"], out["carried_fpr"] = rates["tpr"], rates["fpr"]
    return out


def plain_vs_keyed(
    reported: Mapping[str, Iterable[str]],
    candidates: Sequence[str],
    *,
    capacity: int,
    error_rate: float,
    secret: bytes,
    carried: Mapping[str, Iterable[str]] | None = None,
) -> list[dict[str, Any]]:
    """Encode each client's reported set with plain and with keyed hashing and attack both.

    Parameters
    ----------
    reported : mapping of client id to iterable of str
    candidates : sequence of str
    capacity, error_rate : int, float
    secret : bytes
        The clients' HMAC secret (used to build the keyed filters, never by the attacker).
    carried : mapping, optional
        Per client, the variants it carries.

    Returns
    -------
    list of dict
        One row per (client, hashing ∈ {plain, keyed}) with :func:`bloom_membership_attack`.
    """
    rows = []
    for client in sorted(reported):
        keys = sorted({str(k) for k in reported[client]})
        for hashing, key in (("plain", None), ("keyed", secret)):
            spec = BloomSpec(capacity=capacity, error_rate=error_rate, key=key)
            bits = encode(keys, spec)
            result = bloom_membership_attack(
                bits,
                candidates,
                keys,
                spec,
                carried=None if carried is None else carried[client],
            )
            rows.append(
                {
                    "client": client,
                    "hashing": hashing,
                    "capacity": capacity,
                    "error_rate": error_rate,
                    **result,
                }
            )
    return rows
