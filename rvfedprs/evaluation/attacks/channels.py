"""Audit of what the server can infer of each client's carried rare variants (design §6, §10).

Three channels leave a site in a FedCE round: the model update, the Bloom filter of influential
variants, and both together. For every client the server's inference is scored against the
truth — the variants its training samples carry — as TPR/FPR over all rare-variant columns:

- ``update`` — :mod:`.updates`: columns that moved beyond the data-free prediction. The server
  may see the client's own update, or only a sum (secure aggregation: a FedCE cluster, all
  FedAvg clients); :class:`SeenUpdate` says which. A client in several sums is inferred from
  all of them (a variant is flagged only if every sum flags it).
- ``bloom`` — :mod:`.bloom`: every known variant key tested against the client's filter with
  plain hashing (keyed filters hash an HMAC the server cannot compute).
- ``update&bloom`` / ``update|bloom`` — flagged by both channels, by either.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from rvfedprs.bloom import BloomSpec
from rvfedprs.evaluation.attacks.bloom import server_membership_tests
from rvfedprs.evaluation.attacks.mia import decision_metrics
from rvfedprs.evaluation.attacks.updates import DEFAULT_TOLERANCE, update_channel_scores
from rvfedprs.exceptions import InputDataError
from rvfedprs.training import ClientData

__all__ = ["CHANNELS", "SeenUpdate", "carried_mask", "audit_channels"]

#: Channel names of :func:`audit_channels`' rows, in report order.
CHANNELS: tuple[str, ...] = ("update", "bloom", "update&bloom", "update|bloom")


@dataclass(frozen=True)
class SeenUpdate:
    """A first-layer update as the server saw it: one client's, or a sum over clients.

    Attributes
    ----------
    clients : tuple of str
        Whose update it is (one client), or whose updates it sums (secure aggregation).
    sent : ndarray, shape (h, P)
        ``rare.input.weight`` as sent to (every one of) them.
    received : ndarray, shape (h, P)
        What the server received: weights or updates, single or (weighted) summed.
    expected : ndarray, shape (h, P), optional
        The server's closed-form data-free prediction of ``received``; default estimated
        (:func:`~.updates.shared_slope`).
    """

    clients: tuple[str, ...]
    sent: np.ndarray
    received: np.ndarray
    expected: np.ndarray | None = None


def carried_mask(data: ClientData, projection: sp.spmatrix | None = None) -> np.ndarray:
    """Which columns of the specialist's input ``data`` carries.

    The rare-variant columns with at least one non-zero dosage, shape (P,); with the
    network's rare projection R (P × F, a burden or top-k ``model.rare_input``), the features
    a carried variant feeds (a region burden, a chosen variant), shape (F,).
    """
    out = np.zeros(data.n_rare, dtype=bool)
    out[data.carried_variants()] = True
    if projection is None:
        return out
    return np.asarray(abs(projection)[out].sum(axis=0)).ravel() > 0


def _update_inference(
    client: str, updates: Sequence[SeenUpdate], tolerance: float
) -> tuple[np.ndarray, np.ndarray, int] | None:
    seen = [u for u in updates if client in u.clients]
    if not seen:
        return None
    scores = np.min(
        [update_channel_scores(u.sent, u.received, expected=u.expected) for u in seen], axis=0
    )
    return scores > tolerance, scores, max(len(u.clients) for u in seen)


def audit_channels(
    carried: Mapping[str, np.ndarray],
    *,
    updates: Sequence[SeenUpdate] = (),
    filters: Mapping[str, np.ndarray] | None = None,
    spec: BloomSpec | None = None,
    variant_keys: Sequence[str] | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> list[dict[str, Any]]:
    """TPR/FPR of the server's inference of each client's carried variants, per channel.

    Parameters
    ----------
    carried : mapping of client id to bool array, shape (P,)
        The truth (:func:`carried_mask` of each client's training split).
    updates : sequence of SeenUpdate
        What the server received of the first specialist layer.
    filters : mapping of client id to uint8 array, optional
        The Bloom filter bits each client sent.
    spec : BloomSpec, optional
        The federation's filter spec (its ``key`` is the clients' secret: it only labels the
        rows ``keyed``; the server's tests never use it). Required with ``filters``.
    variant_keys : sequence of str, shape (P,), optional
        The keys the server tests against the filters. Required with ``filters``.
    tolerance : float
        Relative deviation above which a column counts as carried (:mod:`.updates`).

    Returns
    -------
    list of dict
        One row per (client, channel the server has for it): ``client``, ``channel``,
        ``n_summed`` (1 = the client's own update; more = a secure sum; NaN for ``bloom``),
        ``hashing`` (``plain``/``keyed``; None without a filter) and
        :func:`~.mia.decision_metrics`' keys (positives = carried variants).

    Raises
    ------
    InputDataError
        On inconsistent shapes, or filters without ``spec``/``variant_keys``.
    """
    sizes = {int(np.asarray(m).size) for m in carried.values()}
    if len(sizes) > 1:
        raise InputDataError(f"carried masks of different lengths: {sorted(sizes)}")
    for u in updates:
        unknown = sorted(set(u.clients) - set(carried))
        if unknown:
            raise InputDataError(f"updates name clients {unknown} with no carried-set truth")
        if np.shape(u.sent)[-1] not in sizes:
            raise InputDataError(
                f"an update has {np.shape(u.sent)[-1]} columns, the carried masks {sorted(sizes)}"
            )
    if filters is not None and (spec is None or variant_keys is None):
        raise InputDataError("auditing Bloom filters needs the federation's spec and variant keys")
    if variant_keys is not None and len(variant_keys) not in sizes:
        raise InputDataError(f"{len(variant_keys)} variant keys for masks of {sorted(sizes)}")
    hashing = None if spec is None else ("keyed" if spec.key is not None else "plain")
    rows = []
    for client in sorted(carried):
        truth = np.asarray(carried[client], dtype=bool)
        found = _update_inference(client, updates, tolerance)
        hits = None
        if filters is not None and client in filters:
            hits = server_membership_tests(filters[client], variant_keys, spec)
        base = {"client": client}
        if found is not None:
            flagged, scores, n_summed = found
            rows.append({**base, "channel": "update", "n_summed": n_summed, "hashing": None,
                         **decision_metrics(flagged, truth, scores=scores)})  # fmt: skip
        if hits is not None:
            rows.append({**base, "channel": "bloom", "n_summed": float("nan"),
                         "hashing": hashing, **decision_metrics(hits, truth)})  # fmt: skip
        if found is not None and hits is not None:
            flagged, _, n_summed = found
            for channel, decision in (("update&bloom", flagged & hits),
                                      ("update|bloom", flagged | hits)):  # fmt: skip
                rows.append({**base, "channel": channel, "n_summed": n_summed,
                             "hashing": hashing, **decision_metrics(decision, truth)})  # fmt: skip
    return rows
