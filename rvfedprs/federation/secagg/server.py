"""The server's side of a secure sum: :func:`secure_sum` over any engine's transport.

One call runs one protocol (four exchanges over :meth:`Transport.query`, each one message per
site; three when the members sent their public keys with their fit replies, ``advertised``)
for several groups at once — e.g. the FedCE backbone over every client and each cluster's
specialist over its members. Every group is its own session (fresh key pairs, seeds and shares),
so one group's masks say nothing of another's. A client that fails or misbehaves in any step
is dropped from every group: its vector is in no sum, and the masks it shared are removed with
its reconstructed key. The server checks every reply before it uses it and names the client:

- public keys that do not parse, or that any client presented before (a reused round key),
  whether in an earlier sum of the run (``seen_keys``) or in another group of this one;
- encrypted shares or digests missing or malformed, masked vectors of the wrong length, dtype
  or range, a mask set that does not match the members;
- a share, in the last step, whose SHA-256 differs from the digest its owner published when it
  made the shares (a tampered share: not used, and the holder named), and a reconstructed key
  that does not match its owner's public key;
- a site's complaint that a member's encrypted share does not decrypt: that member is dropped.

A group is unmasked only when at least t of its members sent valid masked vectors; otherwise
(or when fewer than t valid shares of a secret remain) :class:`SecureAggregationError` says who
is missing and why.

Every member clips its float vector to the declared bound ±c before masking it and says how
many entries it clipped; a member that clipped any is named (:attr:`SumOutcome.clipped`, a
training round's ``secagg_clipped``), so an out-of-bounds update — a poisoned one, or c too
small for honest updates — is visible by site although its vector is not, and its influence on
the sum is bounded by c per entry. An unmasked float sum outside [0, n·R] can only come from a
member that did not clip (a modified or outdated client) or from an altered masked vector or
share: it is refused, naming the members that reported clipping and what this round measured
of the honest members' magnitude.

With a norm bound B (``norm_bound``: a training round's ``secagg.update_norm_bound``) every
member also scales its vector to L2 norm ≤ B before weighting it, so an honest sum has norm
≤ B·Σω_k over its included members (plus the quantisation error). A sum beyond that is not
refused here but reported (:attr:`SumOutcome.implausible`): the caller decides (a training
round finds the member by group testing, :mod:`~.group_testing`, with ``keep_held`` so that
the members still hold their vectors, then :func:`release_held`).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.secagg.protocol import (
    STEP_KEYS,
    STEP_MASK,
    STEP_RELEASE,
    STEP_SHARE,
    STEP_UNMASK,
    SecAggParams,
    SecureAggregationError,
    dequantize_sum,
    digest,
    flat_length,
    mask_stream,
    unb64,
    wire_dtype,
)
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.federation.task import Request, Transport
from rvfedprs.strategies.secure import GroupSum, SumGroup

__all__ = ["SumOutcome", "secure_sum", "release_held"]

log = logging.getLogger(__name__)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
#: Where a member's keys come from when it sent them with its fit reply (named in a drop).
_FIT_REPLY = "fit reply"
_EPS = float(np.finfo(np.float64).eps)


@dataclass
class SumOutcome:
    """What :func:`secure_sum` returns.

    Attributes
    ----------
    sums : dict of str to GroupSum
        Per group, the sum over its members whose vectors arrived.
    dropped : dict of str to str
        Client → why its vector is in no sum (it failed, dropped out, or misbehaved).
    faults : dict of str to str
        Client → a fault that did not cost its vector (a tampered share in the last step, no
        reply to it): its vector is in the sums.
    clipped : dict of str to dict
        Client → ``{"values": n, "of": L, "fraction": n / L}``: the entries it clipped to ±c
        over the float vectors it sent to the sums (clients that clipped none are absent).
    norm_clipped : tuple of str
        Included clients that scaled a vector down to the norm bound (with ``norm_bound``).
    implausible : dict of str to dict
        Group → ``{"norm": ‖Σ ω_k v_k‖, "allowed": B·Σω_k + quantisation error}`` for each
        group whose sum exceeds what its members' norm bounds allow (with ``norm_bound``).
    """

    sums: dict[str, GroupSum]
    dropped: dict[str, str] = field(default_factory=dict)
    faults: dict[str, str] = field(default_factory=dict)
    clipped: dict[str, dict[str, float]] = field(default_factory=dict)
    norm_clipped: tuple[str, ...] = ()
    implausible: dict[str, dict[str, float]] = field(default_factory=dict)


@dataclass
class _Session:
    sid: str
    name: str
    group: SumGroup
    threshold: int
    length: int
    keys: dict[str, tuple[str, str]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    ciphertexts: dict[str, dict[str, str]] = field(default_factory=dict)
    digests: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)
    shared: list[str] = field(default_factory=list)
    masked: dict[str, np.ndarray] = field(default_factory=dict)
    masked_with: dict[str, list[str]] = field(default_factory=dict)
    clipped: dict[str, int] = field(default_factory=dict)
    norm_clipped: set[str] = field(default_factory=set)
    included: list[str] = field(default_factory=list)
    slot: str | None = None  # the members' keys came with their fit replies, in this slot

    @property
    def weighted(self) -> bool:
        return self.group.weights is not None


def secure_sum(
    transport: Transport,
    settings: Mapping[str, Any],
    groups: Mapping[str, SumGroup],
    *,
    held: str,
    shapes: Mapping[str, Sequence[int]],
    params: SecAggParams,
    random_seed: int,
    label: str = "secure sum",
    seen_keys: set[str] | None = None,
    norm_bound: float | None = None,
    keep_held: bool = False,
    advertised: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> SumOutcome:
    """Σ_{k ∈ group} ω_k v_k for each group, without the server seeing any v_k.

    Every member must hold its vector under ``held`` (:func:`rvfedprs.federation.secagg.site.hold`,
    or a securely aggregated fit round) with the tensors of ``shapes``.

    Parameters
    ----------
    transport : Transport
        Any engine's; reaches at least every member.
    settings : mapping
        The run settings sent with every request.
    groups : mapping of str to SumGroup
        Group name → members, tensors and weights (None: an exact integer sum). Each group has
        at least ``params.min_clients`` members.
    held : str
        The name the members hold their vectors under.
    shapes : mapping of str to tuple of int
        Every tensor's shape, as the server expects it (a member holding another is dropped).
    params : SecAggParams
    random_seed : int
        Quantisation of member k in group g is seeded ``derive_seed(random_seed, g, k)``: every
        engine rounds alike, so results are identical across engines.
    label : str
        Names the sessions and the errors (e.g. ``"round 3"``).
    seen_keys : set of str, optional
        Public keys of earlier sums of the run; a client presenting one again is dropped. The
        keys of this sum are added.
    norm_bound : float, optional
        B: each member scales its float vector to L2 norm ≤ B before weighting it, and a
        group whose unmasked sum exceeds B·Σω_k (plus the quantisation error) is reported in
        :attr:`SumOutcome.implausible`. None: no norm bound (integer sums never have one).
    keep_held : bool
        Ask the members to keep their held vectors after the sum (further sums of them may
        follow); :func:`release_held` drops them.
    advertised : mapping, optional
        Client → key slot → its two public keys, sent with its fit reply
        (:attr:`~rvfedprs.strategies.base.FitResult.secure_keys`). Each group takes a slot no
        other group of its members took (in group order) and skips the key exchange: its
        session opens at the share step. A group left without a slot exchanges keys as usual.

    Returns
    -------
    SumOutcome

    Raises
    ------
    ConfigError
        For a group smaller than ``params.min_clients``, larger than the modulus allows, or
        naming an unknown tensor.
    SecureAggregationError
        When a group keeps fewer than its threshold t of members, or a secret fewer than t
        valid shares, or its sum lies outside the range clipped vectors can reach (a member
        that did not clip, or a tampered vector).
    """
    protocol = _Protocol(transport, settings, params, label, seen_keys, norm_bound, keep_held)
    protocol.open(groups, held, shapes)
    protocol.assign_slots(advertised or {})
    protocol.exchange_keys()
    protocol.share_keys()
    protocol.collect_masked(random_seed)
    sums = protocol.unmask(shapes)
    dropped, faults = dict(sorted(protocol.dropped.items())), dict(sorted(protocol.faults.items()))
    norm_clipped = sorted({c for s in protocol.sessions for c in s.norm_clipped & set(s.included)})
    return SumOutcome(
        sums,
        dropped,
        faults,
        protocol.clipping(),
        tuple(norm_clipped),
        dict(sorted(protocol.implausible.items())),
    )


def release_held(
    transport: Transport, settings: Mapping[str, Any], clients, held: str
) -> dict[str, str]:
    """Ask ``clients`` to drop the vector they hold under ``held`` (after ``keep_held`` sums).

    Returns
    -------
    dict of str to str
        Client → why it did not confirm (it keeps only its own vector; nothing else follows).
    """
    requests = {c: Request(STEP_RELEASE, {"held": [held]}) for c in sorted(clients)}
    if not requests:
        return {}
    _, failures = transport.query(requests, settings)
    for client, why in sorted(failures.items()):
        log.warning("secure aggregation: client %r did not drop its held %r: %s", client, held, why)
    return dict(failures)


class _Protocol:
    def __init__(
        self, transport, settings, params, label, seen_keys, norm_bound=None, keep_held=False
    ) -> None:
        if norm_bound is not None and not norm_bound > 0:
            raise ConfigError(f"{label}: a secure sum's norm bound must be > 0, got {norm_bound}")
        self.norm_bound = None if norm_bound is None else float(norm_bound)
        self.keep_held = bool(keep_held)
        self.implausible: dict[str, dict[str, float]] = {}
        self.transport = transport
        self.settings = settings
        self.params = params
        self.label = label
        self.seen_keys = set() if seen_keys is None else seen_keys
        self.sessions: list[_Session] = []
        self.advertised: Mapping[str, Mapping[str, Sequence[str]]] = {}
        self.dropped: dict[str, str] = {}
        self.faults: dict[str, str] = {}

    # -- bookkeeping ----------------------------------------------------------------------------
    def drop(self, client: str, why: str) -> None:
        if client not in self.dropped:
            log.warning("%s: secure aggregation drops client %r: %s", self.label, client, why)
            self.dropped[client] = why

    def fault(self, client: str, why: str) -> None:
        log.warning("%s: secure aggregation fault of client %r: %s", self.label, client, why)
        self.faults.setdefault(client, why)

    def clipping(self) -> dict[str, dict[str, float]]:
        """Client → entries it clipped, of those it sent, over the sums its vector is in."""
        counts: dict[str, list[int]] = {}
        for s in self.sessions:
            if not s.weighted:
                continue
            for c in s.included:
                tally = counts.setdefault(c, [0, 0])
                tally[0] += s.clipped.get(c, 0)
                tally[1] += s.length
        return {
            c: {"values": n, "of": total, "fraction": n / total}
            for c, (n, total) in sorted(counts.items())
            if n
        }

    def live(self, clients) -> list[str]:
        return sorted(c for c in clients if c not in self.dropped)

    def enough(self, session: _Session, left: Sequence[str], what: str) -> None:
        if len(left) < session.threshold:
            gone = {c: self.dropped[c] for c in session.group.members if c in self.dropped}
            raise SecureAggregationError(
                f"{self.label}: secure aggregation of {session.name!r}: only {len(left)} of "
                f"{len(session.group.members)} members {what}, fewer than the threshold "
                f"{session.threshold}; nothing was unmasked. Dropped: {gone or 'none'}"
            )

    def query(self, step: str, requests: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
        """One exchange; failed or malformed replies drop their client. client → sid → reply."""
        if not requests:
            return {}
        replies, failures = self.transport.query(
            {c: Request(step, {"sessions": dict(r)}) for c, r in requests.items()}, self.settings
        )
        for client, why in sorted(failures.items()):
            self.drop(client, f"{step}: {why}")
        out = {}
        for client in sorted(replies):
            sessions = _sessions_of(replies[client])
            if sessions is None or set(sessions) != set(requests[client]):
                got = sorted(sessions or [])
                why = f"malformed reply (sessions {got}, expected {sorted(requests[client])})"
                self.drop(client, f"{step}: {why}")
                continue
            out[client] = dict(sessions)
        return out

    def malformed(self, client: str, step: str, session: _Session, what: str) -> None:
        self.drop(client, f"{step}: malformed reply for {session.name!r}: {what}")

    # -- steps ----------------------------------------------------------------------------------
    def open(self, groups: Mapping[str, SumGroup], held: str, shapes) -> None:
        self.held, self.shapes = held, shapes
        if not groups:
            raise ConfigError(f"{self.label}: a secure sum needs at least one group")
        for name in sorted(groups):
            group = groups[name]
            n = len(group.members)
            if n < self.params.min_clients:
                raise ConfigError(
                    f"{self.label}: secure aggregation group {name!r} has {n} members "
                    f"{list(group.members)}, fewer than secagg.min_clients = "
                    f"{self.params.min_clients}: its sum would reveal too few clients"
                )
            if group.weights is not None and n > self.params.max_members():
                raise ConfigError(
                    f"{self.label}: secure aggregation group {name!r} has {n} members; "
                    f"modulus_bits {self.params.modulus_bits} and quantization_bits "
                    f"{self.params.quantization_bits} allow at most {self.params.max_members()}"
                )
            unknown = sorted(set(group.tensors) - set(shapes))
            if unknown or not group.tensors:
                raise ConfigError(f"{self.label}: group {name!r} names unknown tensors {unknown}")
            length = flat_length(shapes, group.tensors)
            sid = f"{self.label}/{name}/{secrets.token_hex(8)}"
            self.sessions.append(
                _Session(sid, name, group, self.params.reconstruction_threshold(n), length)
            )

    def assign_slots(self, advertised: Mapping[str, Mapping[str, Sequence[str]]]) -> None:
        """Give each session a slot its members advertised and none of their other sessions took."""
        self.advertised = advertised
        slots = sorted({slot for keys in advertised.values() for slot in keys})
        taken: dict[str, set[str]] = {}  # client → slots its sessions took
        for s in self.sessions:
            members = s.group.members
            free = [k for k in slots if not any(k in taken.get(c, ()) for c in members)]
            if free and any(free[0] in advertised.get(c, {}) for c in members):
                s.slot = free[0]
                for c in members:
                    taken.setdefault(c, set()).add(s.slot)

    def definition(self, s: _Session, client: str) -> dict[str, Any]:
        """What a member checks of a session before it takes part (the key step's request)."""
        return {
            "params": self.params.as_payload(),
            "members": list(s.group.members),
            "you": client,
            "threshold": s.threshold,
            "held": self.held,
            "tensors": list(s.group.tensors),
            "shapes": {t: [int(d) for d in self.shapes[t]] for t in s.group.tensors},
            "weighted": s.weighted,
            "norm_bound": self.norm_bound if s.weighted else None,
        }

    def exchange_keys(self) -> None:
        requests: dict[str, dict[str, Any]] = {}
        for s in self.sessions:
            if s.slot is None:
                for c in s.group.members:
                    requests.setdefault(c, {})[s.sid] = self.definition(s, c)
        replies: dict[str, dict[str, Any]] = {}  # keys sent with the fit replies, then the step's
        for s in self.sessions:
            for c in s.group.members if s.slot is not None else ():
                replies.setdefault(c, {})[s.sid] = self.advertised.get(c, {}).get(s.slot)
        for client, sessions in self.query(STEP_KEYS, requests).items():
            replies.setdefault(client, {}).update(sessions)
        presented: dict[str, list[str]] = {}
        for client, sessions in sorted(replies.items()):
            for s in self.sessions:
                if s.sid not in sessions or client in self.dropped:
                    continue
                reply = sessions[s.sid]
                if s.slot is not None and not _is_pair(reply):
                    self.malformed(client, _FIT_REPLY, s, f"no public keys (slot {s.slot!r})")
                    continue
                if s.slot is not None:  # the (pk1, pk2) pair of its fit reply
                    reply = {"pk1": reply[0], "pk2": reply[1]}
                pair = (reply.get("pk1"), reply.get("pk2")) if isinstance(reply, Mapping) else ()
                problem = _bad_keys(pair)
                if problem:
                    self.malformed(client, STEP_KEYS if s.slot is None else _FIT_REPLY, s, problem)
                    continue
                s.keys[client] = pair
                for key in pair:
                    presented.setdefault(key, []).append(client)
        for key, owners in sorted(presented.items()):
            who = sorted(set(owners))
            if key in self.seen_keys:
                why = "reused a public key of an earlier secure-aggregation session"
            elif len(owners) > 1:
                why = f"presented a public key that {who} share across sessions or clients"
            else:
                continue
            for c in who:
                self.drop(c, f"{STEP_KEYS}: {why} (round keys must be fresh)")
        self.seen_keys.update(presented)
        for s in self.sessions:
            s.keys = {c: k for c, k in s.keys.items() if c not in self.dropped}
            self.enough(s, list(s.keys), "sent public keys")

    def share_keys(self) -> None:
        requests: dict[str, dict[str, Any]] = {}
        for s in self.sessions:
            s.keys = {c: k for c, k in s.keys.items() if c not in self.dropped}
            s.order = sorted(s.keys)
            keys = {m: list(k) for m, k in s.keys.items()}
            for c in s.order:
                request: dict[str, Any] = {"keys": keys}
                if s.slot is not None:  # no key step: the session opens here
                    request["open"] = {**self.definition(s, c), "slot": s.slot}
                requests.setdefault(c, {})[s.sid] = request
        replies = self.query(STEP_SHARE, requests)
        for client, sessions in replies.items():
            for s in self.sessions:
                if s.sid not in sessions:
                    continue
                reply = sessions[s.sid]
                problem = _bad_shares(reply, client, s.order)
                if problem:
                    self.malformed(client, STEP_SHARE, s, problem)
                    continue
                s.ciphertexts[client] = dict(reply["ciphertexts"])
                s.digests[client] = {h: (d[0], d[1]) for h, d in reply["digests"].items()}
        for s in self.sessions:
            s.shared = [c for c in self.live(s.ciphertexts)]
            self.enough(s, s.shared, "shared their keys")

    def collect_masked(self, random_seed: int) -> None:
        requests: dict[str, dict[str, Any]] = {}
        for s in self.sessions:
            s.shared = self.live(s.shared)
            for c in s.shared:
                requests.setdefault(c, {})[s.sid] = {
                    "ciphertexts": {src: s.ciphertexts[src][c] for src in s.shared if src != c},
                    "weight": None if s.group.weights is None else float(s.group.weights[c]),
                    "seed": derive_seed(random_seed, s.name, c),
                }
        replies = self.query(STEP_MASK, requests)
        dtype = wire_dtype(self.params)
        for client, sessions in replies.items():
            for s in self.sessions:
                if s.sid not in sessions:
                    continue
                reply = sessions[s.sid]
                others = set(s.shared) - {client}
                problem = _bad_masked(reply, (s.length,), dtype, self.params.modulus, others)
                if problem is None and self.norm_bound is not None and s.weighted:
                    flag = reply.get("norm_clipped")
                    if not (isinstance(flag, (int, np.integer)) and flag in (0, 1)):
                        problem = f"no 0/1 flag of a norm-clipped vector (norm_clipped: {flag!r})"
                if problem:
                    self.malformed(client, STEP_MASK, s, problem)
                    continue
                for src, why in sorted(reply["rejected"].items()):
                    accused = f"client {client!r} rejected its encrypted key share for {s.name!r}"
                    self.drop(src, f"{STEP_MASK}: {accused}: {why}")
                s.masked[client] = np.asarray(reply["masked"]).astype(np.int64)
                s.masked_with[client] = sorted(reply["masked_with"])
                s.clipped[client] = int(reply["clipped"])
                if self.norm_bound is not None and s.weighted and reply["norm_clipped"]:
                    s.norm_clipped.add(client)
                    log.warning(
                        "%s: client %r scaled its vector for %r down to the norm bound %g",
                        self.label, client, s.name, self.norm_bound,
                    )  # fmt: skip
                if s.clipped[client]:
                    log.warning(
                        "%s: client %r clipped %d of %d entries of its vector for %r to "
                        "±secagg.clipping_range = %g",
                        self.label, client, s.clipped[client], s.length, s.name,
                        self.params.clipping_range,
                    )  # fmt: skip
        for s in self.sessions:
            missing = sorted(set(s.shared) - set(s.masked) - set(self.dropped))
            for c in missing:
                self.drop(c, f"{STEP_MASK}: no masked vector for {s.name!r}")
        for s in self.sessions:
            s.included = self.live(s.masked)
            self.enough(s, s.included, "sent valid masked vectors")
            self.refuse_widespread_clipping(s)

    def refuse_widespread_clipping(self, s: _Session) -> None:
        """Stop before unmasking when more than half of a group clipped: c is too small.

        One site clipping is what a poisoned update looks like (bounded, named, summed); most
        of them clipping means honest updates exceed the bound, and a sum of clipped honest
        updates is biased (a FedGLM Newton step, say, would be wrong).
        """
        clipping = _clipping_of(s)
        n = len(s.included)
        norm_clipped = sorted(s.norm_clipped & set(s.included))
        if 2 * len(norm_clipped) > n:
            raise SecureAggregationError(
                f"{self.label}: secure aggregation of {s.name!r}: {len(norm_clipped)} of {n} "
                f"members scaled their vectors down to the norm bound "
                f"secagg.update_norm_bound = {self.norm_bound:g} ({norm_clipped}): more than "
                "half, so honest updates exceed the bound; the sum is refused rather than "
                "aggregated biased. Raise secagg.update_norm_bound above the honest sites' "
                "largest update norm"
            )
        if 2 * len(clipping) <= n:
            return
        c = self.params.clipping_range
        raise SecureAggregationError(
            f"{self.label}: secure aggregation of {s.name!r}: {len(clipping)} of {n} members "
            f"clipped entries of their weighted vectors to ±secagg.clipping_range = {c:g} "
            f"({_named(clipping, s.length)}): more than half, so honest updates exceed the "
            "bound (one poisoned site would be one of them); the sum is refused rather than "
            "aggregated biased. Raise secagg.clipping_range above the honest sites' largest "
            "weighted entry (n_k/N · Δw)"
        )

    def unmask(self, shapes) -> dict[str, GroupSum]:
        requests: dict[str, dict[str, Any]] = {}
        for s in self.sessions:
            dead = sorted(set(s.shared) - set(s.included))
            for c in s.included:
                requests.setdefault(c, {})[s.sid] = {
                    "alive": list(s.included),
                    "dead": dead,
                    "keep": self.keep_held,
                }
        replies, failures = self.transport.query(
            {c: Request(STEP_UNMASK, {"sessions": r}) for c, r in requests.items()}, self.settings
        )
        for client, why in sorted(failures.items()):
            self.fault(client, f"{STEP_UNMASK}: {why}")
        return {s.name: self._unmask_session(s, replies, shapes) for s in self.sessions}

    def _unmask_session(self, s: _Session, replies: Mapping, shapes) -> GroupSum:
        # Flower's key primitives, imported where keys are rebuilt (a run in the clear needs none)
        from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
        from flwr.supercore.primitives.asymmetric import (
            bytes_to_private_key,
            bytes_to_public_key,
            public_key_to_bytes,
        )

        alive, dead = s.included, sorted(set(s.shared) - set(s.included))
        shares: dict[tuple[str, str], list[bytes]] = {}  # (kind, owner) → valid shares
        for holder in sorted(replies):
            if holder not in alive:
                continue
            sessions = _sessions_of(replies[holder])
            reply = None if sessions is None else sessions.get(s.sid)
            if not isinstance(reply, Mapping) or not all(
                isinstance(reply.get(k), Mapping) for k in ("seed", "key")
            ):
                self.fault(holder, f"{STEP_UNMASK}: malformed reply for {s.name!r}")
                continue
            for kind, owners, slot in (("seed", alive, 0), ("key", dead, 1)):
                for owner, text in sorted(reply[kind].items()):
                    what = f"{kind} share of client {owner!r} in {s.name!r}"
                    if owner not in owners or owner not in s.digests:
                        self.fault(holder, f"{STEP_UNMASK}: sent a {what}, not asked for")
                        continue
                    try:
                        share = unb64(text)
                    except ValueError as exc:
                        self.fault(holder, f"{STEP_UNMASK}: sent a malformed {what} ({exc})")
                        continue
                    expected = s.digests[owner].get(holder, ("", ""))[slot]
                    if digest(share) != expected:
                        self.fault(
                            holder,
                            f"{STEP_UNMASK}: sent a tampered {what} (it does not match the "
                            f"digest {owner!r} published)",
                        )
                        continue
                    shares.setdefault((kind, owner), []).append(share)
        total = np.zeros(s.length, dtype=np.int64)
        modulus = self.params.modulus - 1
        for c in alive:
            total = (total + s.masked[c]) & modulus
        for owner in alive:
            seed = self._secret(s, shares, "seed", owner)
            total = (total - mask_stream(seed, s.length, self.params)) & modulus
        index = {c: i + 1 for i, c in enumerate(s.order)}
        for owner in dead:
            key = bytes_to_private_key(self._secret(s, shares, "key", owner))
            if public_key_to_bytes(key.public_key()).decode("ascii") != s.keys[owner][0]:
                raise SecureAggregationError(
                    f"{self.label}: secure aggregation of {s.name!r}: the shares of client "
                    f"{owner!r}'s key do not rebuild the public key it presented"
                )
            for c in alive:
                if owner not in s.masked_with[c]:
                    continue
                pairwise = generate_shared_key(key, bytes_to_public_key(s.keys[c][0].encode()))
                stream = mask_stream(pairwise, s.length, self.params)
                total = (total - stream if index[c] > index[owner] else total + stream) & modulus
        return self._decode(s, total, shapes)

    def _overflow(self, s: _Session, outside: int) -> str:
        """Why a float sum beyond [0, n·R] is refused: who may have sent it, and what to do."""
        c, n = self.params.clipping_range, len(s.included)
        clipping = _clipping_of(s)
        if clipping:
            named = _named(clipping, s.length)
            who = f"Check the sites that reported clipping entries this round: {named}."
        else:
            who = (
                "No member reported clipping an entry, and the server cannot see whose vector "
                f"it was; check the members {list(s.included)} (their client versions first)."
            )
        return (
            f"{self.label}: secure aggregation of {s.name!r}: {outside} entries of the unmasked "
            f"sum lie outside [0, {n}·R], the range of {n} vectors clipped to "
            f"secagg.clipping_range = {c:g}: a member's vector exceeded the declared bound (a "
            "site that does not clip its update — a modified or outdated client — or a masked "
            f"vector or share altered on the way); the sum is refused. {who} Raise "
            f"secagg.clipping_range only if honest updates are legitimately larger than {c:g}: "
            f"this round {n - len(clipping)} of {n} members clipped no entry (their weighted "
            f"updates lie within ±{c:g})."
        )

    def _check_norm(self, s: _Session, values: np.ndarray, weight: float, bound: float) -> None:
        """Report the group when ‖Σ ω_k v_k‖ exceeds B·Σω_k plus the quantisation error."""
        norm = float(np.linalg.norm(values))
        allowed = self.norm_bound * weight + bound * np.sqrt(values.size)
        if norm > allowed:
            log.warning(
                "%s: the secure sum of %r has norm %.6g, more than its %d members' norm bounds "
                "allow (%.6g): a member did not clip its update",
                self.label, s.name, norm, len(s.included), allowed,
            )  # fmt: skip
            self.implausible[s.name] = {"norm": norm, "allowed": float(allowed)}

    def _secret(self, s: _Session, shares, kind: str, owner: str) -> bytes:
        from flwr.common.secure_aggregation.crypto.shamir import combine_shares

        valid = shares.get((kind, owner), [])
        if len(valid) < s.threshold:
            raise SecureAggregationError(
                f"{self.label}: secure aggregation of {s.name!r}: only {len(valid)} valid shares "
                f"of the {kind} of client {owner!r}, fewer than the threshold {s.threshold}; "
                f"faults: {self.faults or 'none'}; dropped: {self.dropped or 'none'}"
            )
        return combine_shares(valid[: s.threshold])

    def _decode(self, s: _Session, total: np.ndarray, shapes) -> GroupSum:
        n = len(s.included)
        if s.weighted:
            outside = int(np.count_nonzero(total > n * self.params.levels))
            if outside:
                raise SecureAggregationError(self._overflow(s, outside))
            values = dequantize_sum(total, n, self.params)
            weight = float(sum(s.group.weights[c] for c in s.included))
            bound = n * self.params.step + 8 * n * self.params.clipping_range * _EPS
            if self.norm_bound is not None:
                self._check_norm(s, values, weight, bound)
        else:
            values, weight, bound = total, float(n), 0.0
        out, start = {}, 0
        for name in s.group.tensors:
            size = int(np.prod(shapes[name], dtype=np.int64))
            out[name] = values[start : start + size].reshape(tuple(shapes[name]))
            start += size
        return GroupSum(out, weight, tuple(s.included), bound, s.group.members)


def _clipping_of(s: _Session) -> dict[str, int]:
    """Included member → entries it clipped, for the members that clipped any."""
    return {m: s.clipped[m] for m in s.included if s.clipped.get(m, 0)}


def _named(clipping: Mapping[str, int], length: int) -> str:
    """``'site3' (120 of 400), ...``, most clipped first."""
    ranked = sorted(clipping, key=lambda m: (-clipping[m], m))
    return ", ".join(f"{m!r} ({clipping[m]} of {length})" for m in ranked)


def _sessions_of(reply: Any) -> Mapping | None:
    sessions = reply.get("sessions") if isinstance(reply, Mapping) else None
    return sessions if isinstance(sessions, Mapping) else None


def _is_pair(value) -> bool:
    return isinstance(value, (list, tuple)) and len(value) == 2


def _bad_keys(pair) -> str | None:
    if len(pair) != 2 or not all(isinstance(k, str) for k in pair):
        return "no public keys pk1, pk2"
    from flwr.supercore.primitives.asymmetric import bytes_to_public_key

    try:
        for key in pair:
            bytes_to_public_key(key.encode("ascii"))
    except (ValueError, TypeError, UnicodeError) as exc:
        return f"a public key does not parse ({type(exc).__name__})"
    return None


def _bad_shares(reply, client: str, order: Sequence[str]) -> str | None:
    if not isinstance(reply, Mapping):
        return "not a mapping"
    ciphertexts, digests = reply.get("ciphertexts"), reply.get("digests")
    others = sorted(set(order) - {client})
    if not isinstance(ciphertexts, Mapping) or set(ciphertexts) != set(others):
        return f"encrypted shares for {sorted(ciphertexts or [])}, expected {others}"
    if not all(isinstance(t, str) for t in ciphertexts.values()):
        return "an encrypted share is not text"
    if not isinstance(digests, Mapping) or set(digests) != set(order):
        return f"share digests for {sorted(digests or [])}, expected {sorted(order)}"
    for holder, pair in digests.items():
        if not (
            isinstance(pair, (list, tuple))
            and len(pair) == 2
            and all(isinstance(d, str) and _HEX64.match(d) for d in pair)
        ):
            return f"the share digests for {holder!r} are not two SHA-256 hex strings"
    return None


def _bad_masked(reply, shape, dtype, modulus: int, others: set[str]) -> str | None:
    if not isinstance(reply, Mapping):
        return "not a mapping"
    masked = reply.get("masked")
    if not isinstance(masked, np.ndarray):
        return f"the masked vector is a {type(masked).__name__}, not an array"
    if masked.shape != shape:
        return f"the masked vector has shape {masked.shape}, expected {shape}"
    if masked.dtype != dtype:
        return f"the masked vector has dtype {masked.dtype}, expected {dtype}"
    if masked.size and int(masked.max()) >= modulus:
        return f"the masked vector holds values >= the modulus 2^{modulus.bit_length() - 1}"
    masked_with, rejected = reply.get("masked_with"), reply.get("rejected")
    if not isinstance(masked_with, list) or not isinstance(rejected, Mapping):
        return "no mask set (masked_with, rejected)"
    clipped = reply.get("clipped")
    if not (isinstance(clipped, (int, np.integer)) and not isinstance(clipped, bool)):
        return f"no count of clipped entries (clipped: {clipped!r})"
    if not 0 <= int(clipped) <= shape[0]:
        return f"it reports {clipped} clipped entries of {shape[0]}"
    if set(masked_with) | set(rejected) != others or set(masked_with) & set(rejected):
        return (
            f"it masked with {sorted(masked_with)} and rejected {sorted(rejected)}; the members "
            f"are {sorted(others)}"
        )
    return None
