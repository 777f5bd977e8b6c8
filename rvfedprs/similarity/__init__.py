"""Client×client similarity / distance matrices by name (design §8).

Every method is a function returning a ``(K, K)`` matrix over the clients, registered under a
name with its *kind* (``"similarity"`` in [0, 1] with ones on the diagonal, or ``"distance"``
with zeros on the diagonal).  Strategies pick a method by its config string and convert with
:func:`to_distance`, so any clustering or down-weighting strategy can use any method.

Adding a method: write ``rvfedprs/similarity/<name>.py`` with a function decorated by
``@register("<name>", kind=...)`` and add ``"<name>": "rvfedprs.similarity.<name>"`` to
``_BUILTIN`` (modules are imported on first use, so heavy dependencies load only when needed).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "METHODS",
    "Method",
    "register",
    "get_method",
    "available",
    "compute",
    "to_distance",
]

Kind = Literal["similarity", "distance"]

#: name → module that registers it (imported lazily by :func:`get_method`)
_BUILTIN: dict[str, str] = {
    "jaccard": "rvfedprs.similarity.jaccard",
    "emd": "rvfedprs.similarity.emd",
    "euclidean": "rvfedprs.similarity.euclidean",
    "ot": "rvfedprs.similarity.ot",
}

#: The built-in method names (``distance.method``, ``strategies.distance``, ``--method``).
METHODS: tuple[str, ...] = tuple(_BUILTIN)

_REGISTRY: dict[str, Method] = {}


@dataclass(frozen=True)
class Method:
    """A registered matrix method: ``func(...) -> ndarray (K, K)`` of the given ``kind``."""

    name: str
    func: Callable[..., np.ndarray]
    kind: Kind


def register(name: str, *, kind: Kind) -> Callable[[Callable[..., np.ndarray]], Callable]:
    """Decorator registering ``func`` under ``name`` (a second registration is an error)."""
    if kind not in ("similarity", "distance"):
        raise ValueError(f"kind must be 'similarity' or 'distance', got {kind!r}")

    def deco(func: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        existing = _REGISTRY.get(name)
        if existing is not None and existing.func is not func:
            raise ValueError(f"similarity method {name!r} is already registered")
        _REGISTRY[name] = Method(name, func, kind)
        return func

    return deco


def available() -> list[str]:
    """Names of all known methods, sorted."""
    return sorted(set(_BUILTIN) | set(_REGISTRY))


def get_method(name: str) -> Method:
    """The method registered as ``name``; raises ``ValueError`` naming the choices."""
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    if name not in _REGISTRY:
        raise ValueError(f"similarity method {name!r} unknown; choose from {available()}")
    return _REGISTRY[name]


def compute(name: str, *args, **kwargs) -> np.ndarray:
    """Run method ``name``; returns its ``(K, K)`` matrix."""
    return get_method(name).func(*args, **kwargs)


def to_distance(matrix: np.ndarray, kind: Kind) -> np.ndarray:
    """A ``(K, K)`` distance matrix: ``1 − S`` for a similarity, the matrix itself otherwise.

    The result is symmetrised, clipped at 0 and has a zero diagonal.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {m.shape}")
    if kind == "similarity":
        d = 1.0 - m
    elif kind == "distance":
        d = m.copy()
    else:
        raise ValueError(f"kind must be 'similarity' or 'distance', got {kind!r}")
    d = np.clip((d + d.T) / 2.0, 0.0, None)
    np.fill_diagonal(d, 0.0)
    return d
