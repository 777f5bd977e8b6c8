"""A site's side of a secure sum: what it holds, and its answers to the four protocol steps.

Everything secret stays in the site's step state (the in-process engine's ``step_state``, a
Flower node's ``context.state``): the vector it holds (:func:`hold`; a training round's update
through :func:`held_fit_result`), its key pairs, its self-mask seed and the key shares other
members sent it. Only public keys, encrypted shares, share digests, masked vectors and — in the
last step, for the members the server names — key shares leave the site.

A float vector is clipped to the declared bound, [−c, c] per entry (``secagg.clipping_range``),
before it is quantised and masked, so no sum of honest members can overflow; the mask reply
says how many entries were clipped (``clipped``, a count), which names a site whose update was
out of bounds — a poisoned one, say — even though its vector stays hidden. When the session
names a norm bound B (a training round: ``secagg.update_norm_bound``), the vector is first
scaled down to L2 norm ≤ B, before its weight is applied (``norm_clipped``: 1 if it had to be).

A session may ask the site to keep its held vector after the unmask step (``keep``: the
server may need further sums of it, e.g. to find a member that did not clip); the site drops it
at :data:`~.protocol.STEP_RELEASE` (or when it holds the name again).

A securely aggregated fit may name key slots (``key_slots``): the site then makes a key pair
per slot with its update and sends the public keys with the fit reply
(:attr:`~rvfedprs.strategies.base.FitResult.secure_keys`), so the round's sums start at the
share step, whose request then opens the session (``open``: what the key step would have
carried, and the slot whose keys it takes; a slot serves one session).

The site refuses (:class:`~rvfedprs.exceptions.InputDataError`, which the engines record as its
failure) a session id it has seen before, a step out of order, a group smaller than its minimum
or its threshold, public keys that are not distinct or misquote its own, a held vector with
NaN/inf entries, and a request for both the self-mask share and the key share of the same
member. A share that does not decrypt or is
misaddressed is not fatal: the site leaves its sender out of its masks and tells the server,
which drops the sender.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from cryptography.fernet import InvalidToken
from flwr.common.secure_aggregation.crypto.shamir import create_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import (
    decrypt,
    encrypt,
    generate_shared_key,
)
from flwr.common.secure_aggregation.secaggplus_utils import (
    share_keys_plaintext_concat,
    share_keys_plaintext_separate,
)
from flwr.supercore.primitives.asymmetric import (
    bytes_to_private_key,
    bytes_to_public_key,
    generate_key_pairs,
    private_key_to_bytes,
    public_key_to_bytes,
)

from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.secagg.protocol import (
    SECURE_FIT_KEY,
    STEP_KEYS,
    STEP_MASK,
    STEP_RELEASE,
    STEP_SHARE,
    STEP_UNMASK,
    SecAggParams,
    b64,
    clip_to_norm,
    clip_to_range,
    digest,
    mask_stream,
    quantize_seeded,
    wire_dtype,
)
from rvfedprs.strategies.base import FitInstruction, FitResult

__all__ = ["hold", "held", "held_fit_result", "answer"]

_ROOT = "secagg"


def _root(state: dict) -> dict[str, Any]:
    root = state.setdefault(_ROOT, {"held": {}, "users": {}, "sessions": {}, "seen": set()})
    root.setdefault("advertised", {})  # key slot → key pairs sent with a fit reply
    return root


def hold(state: dict, name: str, tensors: Mapping[str, np.ndarray]) -> None:
    """Keep ``tensors`` in the site's step state under ``name`` for a later secure sum.

    Call it from a task's step (e.g. the allele counts of a site-local preparation), reply
    without the values, and let the server run
    :func:`~rvfedprs.federation.secagg.server.secure_sum` with ``held=name``. Float arrays are
    summed after quantisation, integer arrays exactly. Holding a name again replaces it.
    """
    root = _root(state)
    root["held"][name] = {k: np.array(v, copy=True) for k, v in tensors.items()}


def held(state: Mapping, name: str) -> dict[str, np.ndarray] | None:
    """The tensors held under ``name`` (None when none are)."""
    return state.get(_ROOT, {}).get("held", {}).get(name)


def held_fit_result(result: FitResult, instruction: FitInstruction, state: dict) -> FitResult:
    """A fit reply without its parameters when the round is securely aggregated.

    When ``instruction.config`` asks for it (``secure_aggregation: {"hold": name}``), the
    update Δw_k = w_k − w_sent (float64, every tensor sent) is held under ``name`` in ``state``
    and the returned result carries no parameters; otherwise ``result`` is returned unchanged.

    Raises
    ------
    InputDataError
        When a tensor of the site's model is missing, has another shape than the one sent or
        holds NaN/inf — the refusals the server makes of a reply in the clear, made here
        because the server never sees the update.
    """
    spec = instruction.config.get(SECURE_FIT_KEY)
    if not spec:
        return result
    for name, sent in instruction.parameters.items():
        got = result.parameters.get(name)
        what = (
            "is missing" if got is None
            else f"has shape {np.shape(got)}, expected {np.shape(sent)}"
            if np.shape(got) != np.shape(sent)
            else f"holds {int((~np.isfinite(got)).sum())} NaN/inf values"
            if not np.all(np.isfinite(got))
            else None
        )  # fmt: skip
        if what is not None:
            raise InputDataError(f"the update cannot join the secure sum: tensor {name!r} {what}")
    delta = {
        name: np.asarray(result.parameters[name], np.float64) - np.asarray(sent, np.float64)
        for name, sent in instruction.parameters.items()
    }
    name = str(spec["hold"])
    hold(state, name, delta)
    keys = _advertise(_root(state), name, spec.get("key_slots") or ())
    return dataclasses.replace(result, parameters={}, secure_keys=keys or None)


def _advertise(root: dict, name: str, slots) -> dict[str, tuple[str, str]]:
    """Fresh key pairs for ``slots`` (a new round: earlier sessions' secrets go)."""
    root["sessions"].clear()
    root["users"].clear()
    root["advertised"] = {str(slot): {"held": name, **_key_pairs()} for slot in slots}
    return {
        slot: (pairs["pk1"].decode("ascii"), pairs["pk2"].decode("ascii"))
        for slot, pairs in root["advertised"].items()
    }


def _key_pairs() -> dict[str, bytes]:
    sk1, pk1 = generate_key_pairs()
    sk2, pk2 = generate_key_pairs()
    return {
        "sk1": private_key_to_bytes(sk1),
        "pk1": public_key_to_bytes(pk1),
        "sk2": private_key_to_bytes(sk2),
        "pk2": public_key_to_bytes(pk2),
    }


def answer(step: str, payload: Mapping[str, Any], state: dict) -> dict[str, Any]:
    """The site's reply to protocol step ``step`` (``payload["sessions"]``: session → request).

    Raises
    ------
    InputDataError
        Naming the session and the fault (see the module docstring).
    """
    root = _root(state)
    if step == STEP_RELEASE:
        return _release(root, payload)
    handler = {STEP_KEYS: _keys, STEP_SHARE: _share, STEP_MASK: _mask, STEP_UNMASK: _unmask}[step]
    sessions = payload.get("sessions")
    if not isinstance(sessions, Mapping) or not sessions:
        raise InputDataError(f"secure aggregation step {step!r}: the request names no session")
    if step == STEP_KEYS:  # one secure sum at a time: earlier (finished or abandoned) sessions'
        root["sessions"].clear()  # secrets go; their ids stay in "seen"
        root["users"].clear()
    return {"sessions": {sid: handler(root, sid, sessions[sid]) for sid in sorted(sessions)}}


def _fail(sid: str, what: str) -> InputDataError:
    return InputDataError(f"secure aggregation session {sid!r}: {what}")


def _session(root: dict, sid: str, stage: str) -> dict[str, Any]:
    session = root["sessions"].get(sid)
    if session is None:
        raise _fail(sid, "unknown here (no key exchange for it, or it is over)")
    if session["stage"] != stage:
        raise _fail(sid, f"step out of order: this site's last step was {session['stage']!r}")
    return session


# --- step 1: key pairs -----------------------------------------------------------------------
def _keys(root: dict, sid: str, request: Mapping[str, Any]) -> dict[str, Any]:
    session = _open(root, sid, request, _key_pairs())
    return {"pk1": session["pk1"].decode("ascii"), "pk2": session["pk2"].decode("ascii")}


def _open_advertised(root: dict, sid: str, request: Mapping[str, Any]) -> None:
    """Open session ``sid`` on the key pairs of the slot it names (sent with the fit reply)."""
    slot = str(request.get("slot"))
    pairs = root["advertised"].pop(slot, None)  # a slot serves one session
    if pairs is None:
        raise _fail(sid, f"no key pair of slot {slot!r} here (none sent, or used already)")
    if pairs["held"] != str(request["held"]):
        raise _fail(sid, f"slot {slot!r} holds keys for {pairs['held']!r}, not {request['held']!r}")
    _open(root, sid, request, {k: v for k, v in pairs.items() if k != "held"})


def _open(
    root: dict, sid: str, request: Mapping[str, Any], pairs: Mapping[str, bytes]
) -> dict[str, Any]:
    """Check a session's definition against what this site holds; record it with ``pairs``."""
    if sid in root["seen"]:
        raise _fail(sid, "this session id was used before (a replayed session)")
    params = SecAggParams.from_payload(request["params"])
    members = sorted(str(c) for c in request["members"])
    me, threshold = str(request["you"]), int(request["threshold"])
    if me not in members:
        raise _fail(sid, f"this site ({me!r}) is not among its members {members}")
    if len(members) < params.min_clients:
        raise _fail(sid, f"{len(members)} members, fewer than the minimum {params.min_clients}")
    if not params.min_clients <= threshold <= len(members):
        raise _fail(sid, f"threshold {threshold} outside [{params.min_clients}, {len(members)}]")
    name, tensors = str(request["held"]), [str(t) for t in request["tensors"]]
    vector = root["held"].get(name)
    if vector is None:
        raise _fail(sid, f"this site holds no vector {name!r} to sum")
    shapes = {str(k): tuple(int(d) for d in v) for k, v in request["shapes"].items()}
    weighted = request.get("weighted", True)
    norm_bound = request.get("norm_bound")
    if norm_bound is not None and not (weighted and float(norm_bound) > 0):
        raise _fail(sid, f"a norm bound ({norm_bound!r}) needs a weighted sum and must be > 0")
    for tensor in tensors:
        if tensor not in vector:
            raise _fail(sid, f"the held vector {name!r} has no tensor {tensor!r}")
        value = vector[tensor]
        if value.shape != shapes[tensor]:
            expected = shapes[tensor]
            raise _fail(sid, f"tensor {tensor!r} has shape {value.shape}, expected {expected}")
        if weighted != np.issubdtype(value.dtype, np.floating):
            kind = "a float (weighted)" if weighted else "an integer (exact)"
            raise _fail(sid, f"tensor {tensor!r} has dtype {value.dtype}; the sum is {kind} sum")
        if weighted and not np.all(np.isfinite(value)):
            bad = int(np.count_nonzero(~np.isfinite(value)))
            raise _fail(sid, f"tensor {tensor!r} holds {bad} NaN/inf values; it is not summed")
    root["seen"].add(sid)
    root["users"].setdefault(name, set()).add(sid)
    root["sessions"][sid] = {
        "stage": STEP_KEYS,
        "params": params,
        "members": members,
        "me": me,
        "threshold": threshold,
        "held": name,
        "tensors": tensors,
        "weighted": bool(weighted),
        "norm_bound": None if norm_bound is None else float(norm_bound),
        **pairs,
    }
    return root["sessions"][sid]


# --- step 2: secret shares -------------------------------------------------------------------
def _share(root: dict, sid: str, request: Mapping[str, Any]) -> dict[str, Any]:
    if "open" in request:  # its keys came with the fit reply: the session starts here
        _open_advertised(root, sid, request["open"])
    session = _session(root, sid, STEP_KEYS)
    keys = {str(c): (str(k[0]).encode(), str(k[1]).encode()) for c, k in request["keys"].items()}
    me, threshold = session["me"], session["threshold"]
    strangers = sorted(set(keys) - set(session["members"]))
    if strangers:
        raise _fail(sid, f"keys of non-members {strangers}")
    if keys.get(me) != (session["pk1"], session["pk2"]):
        raise _fail(sid, "the server misquotes this site's own public keys")
    every = [k for pair in keys.values() for k in pair]
    if len(set(every)) != len(every):
        raise _fail(sid, "some members' public keys are identical")
    if len(keys) < threshold:
        raise _fail(sid, f"{len(keys)} members left, fewer than the threshold {threshold}")
    order = sorted(keys)
    index = {c: i + 1 for i, c in enumerate(order)}
    seed = os.urandom(32)
    seed_shares = create_shares(seed, threshold, len(order))
    key_shares = create_shares(session["sk1"], threshold, len(order))
    sk2 = bytes_to_private_key(session["sk2"])
    ciphertexts, digests, channel = {}, {}, {}
    for c in order:
        i = index[c] - 1
        digests[c] = [digest(seed_shares[i]), digest(key_shares[i])]
        if c == me:
            continue
        channel[c] = generate_shared_key(sk2, bytes_to_public_key(keys[c][1]))
        plaintext = share_keys_plaintext_concat(index[me], index[c], seed_shares[i], key_shares[i])
        ciphertexts[c] = encrypt(channel[c], plaintext).decode("ascii")
    session.update(
        stage=STEP_SHARE,
        keys=keys,
        index=index,
        seed=seed,
        seed_shares={me: seed_shares[index[me] - 1]},
        key_shares={me: key_shares[index[me] - 1]},
        channel=channel,
    )
    return {"ciphertexts": ciphertexts, "digests": digests}


# --- step 3: the masked vector ---------------------------------------------------------------
def _mask(root: dict, sid: str, request: Mapping[str, Any]) -> dict[str, Any]:
    session = _session(root, sid, STEP_SHARE)
    me, index, params = session["me"], session["index"], session["params"]
    accepted, rejected = [], {}
    for src, token in sorted(request["ciphertexts"].items()):
        src = str(src)
        if src not in session["channel"]:
            rejected[src] = "it sent a key share but took no part in the key exchange"
            continue
        try:
            plaintext = decrypt(session["channel"][src], str(token).encode("ascii"))
        except (InvalidToken, ValueError, TypeError):
            rejected[src] = "its encrypted key share does not decrypt (tampered or corrupted)"
            continue
        source, target, seed_share, key_share = share_keys_plaintext_separate(plaintext)
        if (source, target) != (index[src], index[me]):
            expected = f"{index[src]} → {index[me]}"
            rejected[src] = f"its key share is addressed {source} → {target}, not {expected}"
            continue
        session["seed_shares"][src] = seed_share
        session["key_shares"][src] = key_share
        accepted.append(src)
    if len(accepted) + 1 < session["threshold"]:
        threshold = session["threshold"]
        raise _fail(
            sid, f"key shares of {len(accepted)} other members, below threshold {threshold}"
        )
    vector = root["held"][session["held"]]
    flat = np.concatenate([np.ravel(vector[t]) for t in session["tensors"]])
    clipped = norm_clipped = 0
    if session["weighted"]:
        flat = flat.astype(np.float64)
        if session["norm_bound"] is not None:
            flat, was_clipped = clip_to_norm(flat, session["norm_bound"])
            norm_clipped = int(was_clipped)
        scaled = flat * float(request["weight"])
        bounded, clipped = clip_to_range(scaled, params)
        values = quantize_seeded(bounded, params, int(request["seed"]))
    else:
        values = flat.astype(np.int64)
        limit = params.modulus // len(session["keys"])
        if values.size and (values.min() < 0 or values.max() >= limit):
            found = f"[{values.min()}, {values.max()}]"
            raise _fail(sid, f"integer entries must lie in [0, {limit}); found {found}")
    masked = values + mask_stream(session["seed"], values.size, params)
    sk1 = bytes_to_private_key(session["sk1"])
    for src in accepted:
        pairwise = generate_shared_key(sk1, bytes_to_public_key(session["keys"][src][0]))
        stream = mask_stream(pairwise, values.size, params)
        masked = masked + stream if index[me] > index[src] else masked - stream
    masked &= params.modulus - 1
    session.update(stage=STEP_MASK, masked_with=accepted)
    return {
        "masked": masked.astype(wire_dtype(params)),
        "masked_with": accepted,
        "rejected": rejected,
        "clipped": clipped,
        "norm_clipped": norm_clipped,
    }


# --- step 4: shares to unmask the sum ----------------------------------------------------------
def _unmask(root: dict, sid: str, request: Mapping[str, Any]) -> dict[str, Any]:
    session = _session(root, sid, STEP_MASK)
    alive = sorted(str(c) for c in request["alive"])
    dead = sorted(str(c) for c in request["dead"])
    both = sorted(set(alive) & set(dead))
    if both:
        raise _fail(sid, f"asked for both the self-mask and the key shares of {both}")
    unknown = sorted(set(alive + dead) - set(session["keys"]))
    if unknown:
        raise _fail(sid, f"asked for shares of non-members {unknown}")
    floor = max(session["threshold"], session["params"].min_clients)
    if len(alive) < floor:
        raise _fail(sid, f"only {len(alive)} members would be unmasked, fewer than {floor}")
    reply = {
        "seed": {c: b64(session["seed_shares"][c]) for c in alive if c in session["seed_shares"]},
        "key": {c: b64(session["key_shares"][c]) for c in dead if c in session["key_shares"]},
    }
    del root["sessions"][sid]  # this site's secrets of the session are gone
    users = root["users"].get(session["held"], set())
    users.discard(sid)
    if not users and not request.get("keep", False):
        root["held"].pop(session["held"], None)
        root["users"].pop(session["held"], None)
    return reply


# --- after sums that kept the vectors: drop them ---------------------------------------------
def _release(root: dict, payload: Mapping[str, Any]) -> dict[str, Any]:
    names = payload.get("held")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise InputDataError(f"secure aggregation step {STEP_RELEASE!r}: no held names to drop")
    for name in names:
        root["held"].pop(name, None)
        root["users"].pop(name, None)
    return {"released": sorted(names)}
