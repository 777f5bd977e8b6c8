"""A burden GLM's region map, sent to each site once per run rather than every round.

The map B (:class:`~rvfedprs.burden.BurdenMap`, public: the federation's variant set and the
region file) is as large as the variant set — 3.5 MB per site per round at 115,385 variants as
JSON lists. The protocol:

- every GLM instruction names the map by its content fingerprint (``burden_fingerprint``,
  SHA-256 of its packed arrays);
- the map itself, as packed arrays (int32 rows and columns, float64 weights: the Flower
  records carry them as ``config-arrays``), goes only to a site the server does not know to
  hold it: in the first GLM round, after a resume (the server's knowledge is not saved), and to
  a site that did not reply to the last GLM round (it joined late, failed, or lost its state);
- a site keeps the map in its per-run client state (:data:`HELD_KEY`; the engine keeps that
  state between rounds: the server's copy in-process, the node's ``context.state`` on Flower)
  and answers an instruction carrying only a fingerprint it does not hold with a clear error —
  a failed reply, after which the server sends it the map again.

The server counts a site as holding the map once it replied to a round that referred to it;
the set is replaced by each such round's repliers, so a site whose state was lost (a restarted
SuperNode) is sent the map in the round after its failure. The held map is not written to
checkpoints (:meth:`HeldBurden.state_dict` keeps only the fingerprint).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from rvfedprs.burden import BurdenMap
from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies.base import FitInstruction
from rvfedprs.training.glm import BURDEN_FEATURES

__all__ = ["HELD_KEY", "BurdenDelivery", "HeldBurden", "map_fingerprint", "site_burden"]

#: The key of a site's client state holding the map it was sent (:class:`HeldBurden`).
HELD_KEY = "glm_burden"
_ARRAY_NAMES = ("shape", "rows", "cols", "weights")


def map_fingerprint(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 (hex) of a map's packed arrays (:meth:`~rvfedprs.burden.BurdenMap.to_arrays`)."""
    digest = hashlib.sha256()
    for name in _ARRAY_NAMES:
        value = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{value.dtype.str}:{value.size};".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


class BurdenDelivery:
    """The server's side: what each site's GLM instruction carries of the map.

    Parameters
    ----------
    burden : BurdenMap
    """

    def __init__(self, burden: BurdenMap) -> None:
        self.arrays = burden.to_arrays()
        self.fingerprint = map_fingerprint(self.arrays)
        self.holders: set[str] = set()
        self._referred = False

    def glm_config(self, client_id: str) -> dict[str, Any]:
        """The fingerprint, and the map itself when ``client_id`` is not known to hold it."""
        self._referred = True
        config: dict[str, Any] = {"burden_fingerprint": self.fingerprint}
        if client_id not in self.holders:
            config["burden"] = dict(self.arrays)
        return config

    def attach(self, instructions: Mapping[str, FitInstruction]) -> dict[str, FitInstruction]:
        """``instructions`` with the map's part added to each GLM section on burden features."""
        out = {}
        for client, instruction in instructions.items():
            glm = instruction.config.get("glm")
            if glm is not None and glm.get("features") in BURDEN_FEATURES:
                glm = {**glm, **self.glm_config(client)}
                instruction = FitInstruction(
                    instruction.parameters, {**instruction.config, "glm": glm}
                )
            out[client] = instruction
        return out

    def received(self, client_ids: Iterable[str]) -> None:
        """The sites that replied to a round: after one that referred to the map, its holders."""
        if self._referred:
            self.holders = set(client_ids)
            self._referred = False


@dataclass
class HeldBurden:
    """A site's copy of the map, in its client state (:data:`HELD_KEY`)."""

    fingerprint: str
    matrix: sp.csr_matrix | None

    def state_dict(self) -> dict[str, Any]:
        """Only the fingerprint: the map is not checkpointed (a resumed run resends it)."""
        return {"fingerprint": self.fingerprint}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> HeldBurden:
        """A holder that knows which map it had but no longer holds it."""
        return cls(str(state["fingerprint"]), None)


def site_burden(
    glm: Mapping[str, Any], state: MutableMapping[str, Any], client_id: str
) -> sp.csr_matrix | None:
    """The map a GLM instruction refers to, at a site: the one sent, else the one held.

    Parameters
    ----------
    glm : mapping
        The instruction's ``glm`` section: ``burden_fingerprint`` and, when sent, ``burden``
        (packed arrays).
    state : mutable mapping
        The site's per-run client state; a map sent is kept there.
    client_id : str
        For the messages.

    Returns
    -------
    scipy.sparse.csr_matrix or None
        None when the instruction refers to no map.

    Raises
    ------
    ConfigError
        When the arrays sent do not match their fingerprint, or only a fingerprint came and the
        site does not hold that map (the server sends the map with the next instruction).
    """
    fingerprint = glm.get("burden_fingerprint")
    sent = glm.get("burden")
    if fingerprint is None:
        if sent is not None:
            raise ConfigError(f"client {client_id}: a burden map came without its fingerprint")
        return None
    if sent is not None:
        if map_fingerprint(sent) != fingerprint:
            raise ConfigError(
                f"client {client_id}: the burden map sent does not match its fingerprint "
                f"{fingerprint[:12]} (corrupted in transit?)"
            )
        state[HELD_KEY] = HeldBurden(str(fingerprint), BurdenMap.matrix_from_arrays(sent))
    held = state.get(HELD_KEY)
    if held is None or held.matrix is None or held.fingerprint != fingerprint:
        have = "none" if held is None or held.matrix is None else held.fingerprint[:12]
        raise ConfigError(
            f"client {client_id} does not hold the burden map {fingerprint[:12]} this GLM round "
            f"refers to (it holds {have}: a restarted site or a resumed run); the server sends "
            "the map with its next instruction to this site"
        )
    return held.matrix
