"""What both sides of a secure sum share: parameters, step names, encodings, the arithmetic.

Quantised, masked vectors are made with Flower's primitives, seeded where a result depends on
them.

A float vector x_k (already scaled by its public weight ω_k) is clipped by its site to [−c, c]
(:func:`clip_to_range`: the site reports how many entries it clipped, in the clear — a number,
not the values) and mapped to integers in [0, R] by Flower's stochastic rounding
(:func:`quantize_seeded`, seeded per client and group so that every engine rounds alike), so an
honest member's vector never leaves [0, R] and a sum of n never leaves [0, n·R]. Sums run modulo
M = 2^modulus_bits, which must exceed n·R for n members. Masks are Flower's
:func:`~flwr.common.secure_aggregation.secaggplus_utils.pseudo_rand_gen` streams of a seed: the
site's self-mask seed b_k, or the ECDH key it shares with another member.
"""

from __future__ import annotations

import base64
import hashlib
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rvfedprs.config import section_defaults
from rvfedprs.exceptions import ConfigError, RvfedprsError
from rvfedprs.strategies.secure import SMALL_CLUSTERS

__all__ = [
    "SecAggParams",
    "SecureAggregationError",
    "ImplausibleSumError",
    "STEP_KEYS",
    "STEP_SHARE",
    "STEP_MASK",
    "STEP_UNMASK",
    "STEP_RELEASE",
    "STEPS",
    "SECURE_FIT_KEY",
    "b64",
    "unb64",
    "digest",
    "clip_to_range",
    "clip_to_norm",
    "quantize_seeded",
    "dequantize_sum",
    "mask_stream",
    "wire_dtype",
]

#: The protocol's steps, in order (answered by every task: :meth:`Task.handle`).
STEP_KEYS = "secagg.keys"
STEP_SHARE = "secagg.share"
STEP_MASK = "secagg.mask"
STEP_UNMASK = "secagg.unmask"
#: After sums that kept the members' vectors (``keep_held``): the sites drop them.
STEP_RELEASE = "secagg.release"
STEPS: tuple[str, ...] = (STEP_KEYS, STEP_SHARE, STEP_MASK, STEP_UNMASK, STEP_RELEASE)

#: ``FitInstruction.config`` key asking a site to hold its update (``{"hold": <name>}``).
SECURE_FIT_KEY = "secure_aggregation"


#: The ``secagg`` section's schema defaults: the dataclass defaults below (one default per option).
_DEFAULTS = section_defaults("secagg")


class SecureAggregationError(RvfedprsError, RuntimeError):
    """A secure sum cannot be completed: too few members left, tampered shares, a sum out of range.

    The message names the session, the clients and why.
    """


class ImplausibleSumError(SecureAggregationError):
    """A sum's norm exceeds its members' norm bounds and the culprit cannot be isolated.

    Raised instead of applying the round: isolating it would take a sum that reveals an honest
    member's update (or a sum of fewer than ``min_clients``), or more than one member exceeds
    the bound. The message names the group, its members and the norms.
    """


@dataclass(frozen=True)
class SecAggParams:
    """Parameters of every secure sum of a run (the ``secagg`` configuration section).

    Attributes
    ----------
    min_clients : int
        The fewest clients whose sum the server may learn (≥ 3).
    threshold : float
        Shamir reconstruction threshold as a fraction of a group's n members:
        t = max(min_clients, ⌊threshold·n⌋ + 1), at most n. A sum survives n − t dropouts.
    clipping_range : float
        c: each site clips its float entries (ω_k Δw_k) to [−c, c] and quantises them there.
    quantization_bits : int
        R = 2^quantization_bits quantisation levels on [−c, c].
    modulus_bits : int
        Sums run modulo M = 2^modulus_bits (n·R < M is required).
    small_clusters : {"merge", "refuse"}
        A clustering strategy's cluster of fewer than ``min_clients`` clients.
    update_norm_bound : float
        B: in a training round each site clips its update's L2 norm to B before weighting,
        quantising and masking it, so a sum of honest members has norm ≤ B·Σω_k.
    """

    min_clients: int = _DEFAULTS["min_clients"]
    threshold: float = _DEFAULTS["threshold"]
    clipping_range: float = _DEFAULTS["clipping_range"]
    quantization_bits: int = _DEFAULTS["quantization_bits"]
    modulus_bits: int = _DEFAULTS["modulus_bits"]
    small_clusters: str = _DEFAULTS["small_clusters"]
    update_norm_bound: float = _DEFAULTS["update_norm_bound"]

    def __post_init__(self) -> None:
        if self.min_clients < 3:
            raise ConfigError(f"secagg.min_clients must be >= 3, got {self.min_clients}")
        if not 0.5 <= self.threshold < 1:
            raise ConfigError(f"secagg.threshold must lie in [0.5, 1), got {self.threshold}")
        if not (self.clipping_range > 0 and math.isfinite(self.clipping_range)):
            raise ConfigError(f"secagg.clipping_range must be > 0, got {self.clipping_range}")
        if not 8 <= self.quantization_bits <= 30:
            raise ConfigError(
                f"secagg.quantization_bits must lie in [8, 30] (Flower quantises to int32), "
                f"got {self.quantization_bits}"
            )
        if not self.quantization_bits + 2 <= self.modulus_bits <= 62:
            raise ConfigError(
                f"secagg.modulus_bits must lie in [quantization_bits + 2, 62], "
                f"got {self.modulus_bits} with quantization_bits {self.quantization_bits}"
            )
        if not (self.update_norm_bound > 0 and math.isfinite(self.update_norm_bound)):
            raise ConfigError(
                f"secagg.update_norm_bound must be > 0 and finite, got {self.update_norm_bound}"
            )
        if self.small_clusters not in SMALL_CLUSTERS:
            raise ConfigError(
                f"secagg.small_clusters {self.small_clusters!r} unknown; "
                f"choose from {list(SMALL_CLUSTERS)}"
            )

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> SecAggParams:
        """From the validated ``secagg`` section (``enabled`` is the caller's business)."""
        return cls(
            min_clients=int(section["min_clients"]),
            threshold=float(section["threshold"]),
            clipping_range=float(section["clipping_range"]),
            quantization_bits=int(section["quantization_bits"]),
            modulus_bits=int(section["modulus_bits"]),
            small_clusters=str(section["small_clusters"]),
            update_norm_bound=float(section["update_norm_bound"]),
        )

    @property
    def levels(self) -> int:
        """R, the quantisation range: entries map to integers in [0, R]."""
        return 1 << self.quantization_bits

    @property
    def modulus(self) -> int:
        """M."""
        return 1 << self.modulus_bits

    @property
    def step(self) -> float:
        """The quantisation step 2c/R (the largest rounding error of one entry)."""
        return 2.0 * self.clipping_range / self.levels

    def reconstruction_threshold(self, n_members: int) -> int:
        """Threshold of a group of n members: max(min_clients, ⌊threshold·n⌋ + 1), at most n."""
        return min(n_members, max(self.min_clients, math.floor(self.threshold * n_members) + 1))

    def max_members(self) -> int:
        """The most members a float sum may have: n·R + R < M."""
        return self.modulus // self.levels - 1

    def as_payload(self) -> dict[str, Any]:
        """What a site needs of the parameters (sent with every session)."""
        return {
            "min_clients": self.min_clients,
            "clipping_range": self.clipping_range,
            "quantization_bits": self.quantization_bits,
            "modulus_bits": self.modulus_bits,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> SecAggParams:
        """Inverse of :meth:`as_payload` (threshold and small_clusters at their defaults)."""
        return cls(
            min_clients=int(payload["min_clients"]),
            clipping_range=float(payload["clipping_range"]),
            quantization_bits=int(payload["quantization_bits"]),
            modulus_bits=int(payload["modulus_bits"]),
        )


def b64(data: bytes) -> str:
    """Bytes as ASCII for a JSON payload."""
    return base64.b64encode(data).decode("ascii")


def unb64(text: Any) -> bytes:
    """Inverse of :func:`b64`.

    Raises
    ------
    ValueError
        When ``text`` is not a base64 string.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a base64 string, got {type(text).__name__}")
    return base64.b64decode(text.encode("ascii"), validate=True)


def digest(data: bytes) -> str:
    """SHA-256 of a share, hex: what its owner publishes so that the server can check it."""
    return hashlib.sha256(data).hexdigest()


_GLOBAL_RNG = threading.Lock()


def clip_to_range(values: np.ndarray, params: SecAggParams) -> tuple[np.ndarray, int]:
    """``values`` clipped elementwise to [−c, c], and how many entries were clipped.

    A site bounds its own vector before quantising it, so that its quantised entries lie in
    [0, R] whatever it trained (an update scaled ×1e6 contributes at most ±c per entry) and a
    sum of honest members cannot overflow. The count is what the site reports to the server.

    Parameters
    ----------
    values : array of float64, shape (L,)
        Finite (a site refuses to sum a non-finite vector before this).
    params : SecAggParams

    Returns
    -------
    clipped : array of float64, shape (L,)
    n_clipped : int
        The entries with |x| > c.
    """
    c = params.clipping_range
    n_clipped = int(np.count_nonzero(np.abs(values) > c))
    return np.clip(values, -c, c), n_clipped


def clip_to_norm(values: np.ndarray, bound: float) -> tuple[np.ndarray, bool]:
    """``values`` scaled down to L2 norm ≤ ``bound``, and whether they had to be.

    A site bounds its own update before weighting it (ω_k), so that a sum of honest members
    has norm ≤ bound·Σω_k: what the server checks after unmasking.

    Parameters
    ----------
    values : array of float64, shape (L,)
        Finite.
    bound : float
        B > 0.

    Returns
    -------
    clipped : array of float64, shape (L,)
    was_clipped : bool
        True when ‖values‖ > B.
    """
    norm = float(np.linalg.norm(values))
    if norm <= bound:
        return values, False
    return values * (bound / norm), True


def quantize_seeded(values: np.ndarray, params: SecAggParams, seed: int) -> np.ndarray:
    """Flower's stochastic quantisation of ``values`` to [0, R], seeded.

    Flower's :func:`~flwr.common.secure_aggregation.quantization.quantize` draws from numpy's
    global generator; it is seeded with ``seed`` here (and its state restored after, under a
    lock), so that every engine quantises a client's vector alike.

    Parameters
    ----------
    values : array of float64, shape (L,)
    params : SecAggParams
    seed : int
        32-bit.

    Returns
    -------
    array of int64, shape (L,)
    """
    from flwr.common.secure_aggregation.quantization import quantize

    with _GLOBAL_RNG:
        saved = np.random.get_state()  # noqa: NPY002 (Flower draws from the global generator)
        try:
            np.random.seed(int(seed) & 0xFFFFFFFF)  # noqa: NPY002
            (quantised,) = quantize([values], params.clipping_range, params.levels)
        finally:
            np.random.set_state(saved)  # noqa: NPY002
    return np.asarray(quantised, dtype=np.int64)


def dequantize_sum(total: np.ndarray, n_members: int, params: SecAggParams) -> np.ndarray:
    """The float sum of ``n_members`` quantised vectors from the sum of their integers.

    Flower's :func:`~flwr.common.secure_aggregation.quantization.dequantize` maps one vector
    back to [−c, c]; a sum of n carries n offsets of −c, so n − 1 more are subtracted.
    """
    total = np.asarray(total, dtype=np.int64)
    from flwr.common.secure_aggregation.quantization import dequantize

    (values,) = dequantize([total], params.clipping_range, params.levels)
    return np.asarray(values, dtype=np.float64) - (n_members - 1) * params.clipping_range


def mask_stream(seed: bytes, length: int, params: SecAggParams) -> np.ndarray:
    """The mask of a seed: Flower's ``pseudo_rand_gen`` stream in [0, M − 1) (int64, (L,))."""
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen

    (stream,) = pseudo_rand_gen(seed, params.modulus, [(int(length),)])
    return np.asarray(stream, dtype=np.int64)


def wire_dtype(params: SecAggParams) -> np.dtype:
    """The dtype masked vectors travel in: uint32 when M ≤ 2^32, else uint64."""
    return np.dtype(np.uint32) if params.modulus_bits <= 32 else np.dtype(np.uint64)


def flat_length(shapes: Mapping[str, Sequence[int]], tensors: Sequence[str]) -> int:
    """The number of entries of ``tensors`` (in that order) flattened."""
    return int(sum(math.prod(shapes[name]) for name in tensors))
