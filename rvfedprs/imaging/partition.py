"""Dirichlet(α) label partition of a dataset over K clients (``002_*`` eq. 1)."""

from __future__ import annotations

import numpy as np

from rvfedprs.exceptions import InputDataError

__all__ = ["dirichlet_partition"]


def dirichlet_partition(
    labels: np.ndarray,
    n_clients: int,
    *,
    alpha: float,
    random_seed: int,
    min_size: int = 1,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Split sample indices over clients with class proportions π_c ~ Dirichlet(α·1_K).

    For each class c, a proportion vector π_c is drawn and the (shuffled) samples of class c
    are cut at the cumulative proportions, so every sample goes to exactly one client. Draws
    are repeated (same generator) until every client holds at least ``min_size`` samples.

    Parameters
    ----------
    labels : array of int, shape (n,)
    n_clients : int
        K ≥ 1.
    alpha : float
        Concentration α > 0 (small α = strongly non-IID).
    random_seed : int
    min_size : int
        Smallest allowed client.
    max_tries : int

    Returns
    -------
    list of ndarray of int64
        K sorted index arrays, disjoint, covering ``range(n)``.

    Raises
    ------
    InputDataError
        When no draw within ``max_tries`` gives every client ``min_size`` samples.
    """
    labels = np.asarray(labels).ravel()
    if n_clients < 1:
        raise ValueError(f"n_clients must be >= 1, got {n_clients}")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    if len(labels) < n_clients * min_size:
        raise InputDataError(
            f"{len(labels)} samples cannot give {n_clients} clients {min_size} sample(s) each"
        )
    rng = np.random.default_rng(random_seed)
    classes = np.unique(labels)
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            pi = rng.dirichlet(np.full(n_clients, alpha))
            cuts = (np.cumsum(pi)[:-1] * len(idx)).astype(int)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].append(chunk)
        out = [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
        if min(len(p) for p in out) >= min_size:
            return out
    raise InputDataError(
        f"no Dirichlet(alpha={alpha}) draw in {max_tries} tries gave each of {n_clients} "
        f"clients at least {min_size} samples; raise alpha or lower min_size"
    )
