"""Aggregation rules as pure functions over parameter dictionaries.

A parameter dictionary maps a tensor name (``common.0.weight``, ``rare.input.weight``, ...) to a
numpy array. Every function here is pure: it returns new arrays and never modifies its inputs.
Sums run in float64 in a fixed (sorted-name) order and are cast back to the input dtype, so the
result does not depend on the order in which clients are listed beyond float64 rounding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

__all__ = [
    "Parameters",
    "select_prefix",
    "parameter_delta",
    "weighted_average",
    "apply_weighted_delta",
    "flatten_parameters",
    "cosine_similarity_matrix",
    "copy_parameters",
]

Parameters = dict[str, np.ndarray]


def copy_parameters(parameters: Mapping[str, np.ndarray]) -> Parameters:
    """Deep copy of a parameter dictionary."""
    return {name: np.array(value, copy=True) for name, value in parameters.items()}


def select_prefix(parameters: Mapping[str, np.ndarray], prefixes: Iterable[str]) -> Parameters:
    """The entries whose name starts with one of ``prefixes`` (e.g. ``("rare.", "head.")``)."""
    prefixes = tuple(prefixes)
    return {name: value for name, value in parameters.items() if name.startswith(prefixes)}


def parameter_delta(
    updated: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]
) -> Parameters:
    """Δw = w_k − w^t for every tensor of ``reference``.

    Raises
    ------
    KeyError
        If ``updated`` lacks a tensor of ``reference``.
    """
    return {name: np.asarray(updated[name]) - np.asarray(ref) for name, ref in reference.items()}


def _normalised(weights: Sequence[float]) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError("weights must be a non-empty 1-D sequence")
    if np.any(w < 0) or not np.isfinite(w).all() or w.sum() <= 0:
        raise ValueError(f"weights must be finite, non-negative and sum > 0, got {w.tolist()}")
    return w / w.sum()


def weighted_average(
    parameters: Sequence[Mapping[str, np.ndarray]],
    weights: Sequence[float],
    *,
    names: Iterable[str] | None = None,
) -> Parameters:
    """Σ_k (n_k / N) w_k per tensor (McMahan et al. 2017, FedAvg).

    Parameters
    ----------
    parameters : sequence of dict
        One parameter dictionary per client, each with the same tensor shapes.
    weights : sequence of float, shape (n_clients,)
        Non-negative weights, typically the clients' sample counts n_k; normalised here.
    names : iterable of str, optional
        The tensors to average (default: all tensors of the first dictionary).

    Returns
    -------
    dict
        The weighted mean, in the dtype of the first client's tensors.
    """
    if len(parameters) != len(weights):
        raise ValueError(f"{len(parameters)} parameter sets but {len(weights)} weights")
    w = _normalised(weights)
    keys = sorted(parameters[0]) if names is None else sorted(names)
    out: Parameters = {}
    for name in keys:
        total = _weighted_sum([p[name] for p in parameters], w)
        out[name] = total.astype(np.asarray(parameters[0][name]).dtype)
    return out


def _weighted_sum(arrays: Sequence[np.ndarray], w: np.ndarray) -> np.ndarray:
    """Σ_k w_k a_k in float64, accumulated in place (no (K, ...) stack of a large layer)."""
    total = np.zeros(np.shape(arrays[0]), dtype=np.float64)
    for weight, array in zip(w, arrays, strict=True):
        total += weight * np.asarray(array, dtype=np.float64)
    return total


def apply_weighted_delta(
    base: Mapping[str, np.ndarray],
    deltas: Sequence[Mapping[str, np.ndarray]],
    weights: Sequence[float],
) -> Parameters:
    """Update w ← w + Σ_k (n_k / N) Δw_k for every tensor of ``base`` (paper eq. 4–5).

    Parameters
    ----------
    base : dict
        The current tensors w^t.
    deltas : sequence of dict
        One update Δw_k per client, with at least the tensors of ``base``.
    weights : sequence of float, shape (n_clients,)
        n_k; normalised here to n_k / N.
    """
    w = _normalised(weights)
    if len(deltas) != len(w):
        raise ValueError(f"{len(deltas)} updates but {len(w)} weights")
    out: Parameters = {}
    for name in sorted(base):
        step = _weighted_sum([d[name] for d in deltas], w)
        value = np.asarray(base[name], dtype=np.float64) + step
        out[name] = value.astype(np.asarray(base[name]).dtype)
    return out


def flatten_parameters(
    parameters: Mapping[str, np.ndarray], *, names: Iterable[str] | None = None
) -> np.ndarray:
    """Concatenate tensors (sorted by name) into one float64 vector."""
    keys = sorted(parameters) if names is None else sorted(names)
    if not keys:
        return np.zeros(0)
    return np.concatenate([np.asarray(parameters[k], dtype=np.float64).ravel() for k in keys])


def cosine_similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pairwise cosine similarity of the rows of ``vectors``.

    Parameters
    ----------
    vectors : array, shape (n_clients, n_parameters)

    Returns
    -------
    array, shape (n_clients, n_clients)
        In [-1, 1]; a zero row has similarity 0 with everything but itself (1 on the diagonal).
    """
    x = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(x, axis=1)
    safe = np.where(norms > 0, norms, 1.0)
    unit = x / safe[:, None]
    sim = np.clip(unit @ unit.T, -1.0, 1.0)
    np.fill_diagonal(sim, 1.0)
    return sim
