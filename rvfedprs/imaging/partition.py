"""Label partitions of a dataset over K clients.

:func:`dirichlet_partition` draws them (Riyadi et al. eq. 1); :func:`fixed_count_partition` takes a
published realisation (e.g. Riyadi et al. Table 2: each client's count of every class) so that a
reproduction can use the paper's own client label mix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rvfedprs.exceptions import InputDataError

__all__ = ["dirichlet_partition", "fixed_count_partition", "read_class_counts"]


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


def fixed_count_partition(
    labels: np.ndarray, counts: np.ndarray, *, random_seed: int
) -> list[np.ndarray]:
    """Give client k exactly ``counts[k, c]`` samples of class c, drawn at random (seeded).

    Samples of a class beyond ``counts[:, c].sum()`` are assigned to no client (the caller
    reports how many).

    Parameters
    ----------
    labels : array of int, shape (n,)
        Classes 0 … C−1.
    counts : array of int, shape (K, C)
        Non-negative; every client gets at least one sample.
    random_seed : int

    Returns
    -------
    list of ndarray of int64
        K sorted, disjoint index arrays; client k has ``counts[k].sum()`` samples.

    Raises
    ------
    InputDataError
        When ``counts`` is not (K, C) with C = the number of classes, is negative, leaves a
        client empty, or asks for more samples of a class than the data hold.
    """
    labels = np.asarray(labels).ravel()
    counts = np.asarray(counts)
    n_classes = int(labels.max()) + 1 if len(labels) else 0
    if counts.ndim != 2 or counts.shape[1] != n_classes:
        raise InputDataError(
            f"class counts must have shape (clients, {n_classes} classes), got {counts.shape}"
        )
    if not np.issubdtype(counts.dtype, np.integer) or counts.min() < 0:
        raise InputDataError(f"class counts must be non-negative integers, got {counts.tolist()}")
    if counts.sum(axis=1).min() < 1:
        raise InputDataError(f"every client needs at least one sample, got {counts.tolist()}")
    available = np.bincount(labels, minlength=n_classes)
    wanted = counts.sum(axis=0)
    if np.any(wanted > available):
        c = int(np.argmax(wanted > available))
        raise InputDataError(
            f"class counts ask for {int(wanted[c])} samples of class {c}; "
            f"the data hold {int(available[c])}"
        )
    rng = np.random.default_rng(random_seed)
    parts: list[list[np.ndarray]] = [[] for _ in range(counts.shape[0])]
    for c in range(n_classes):
        idx = rng.permutation(np.flatnonzero(labels == c))
        cuts = np.cumsum(counts[:, c])
        for k in range(counts.shape[0]):
            parts[k].append(idx[cuts[k] - counts[k, c] : cuts[k]])
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]


def read_class_counts(path: str | Path, n_classes: int) -> np.ndarray:
    """A (K, C) integer matrix from a TSV with a header row and the client id in column 1.

    Raises
    ------
    InputDataError
        Missing file, non-integer cells, or a column count other than ``n_classes``.
    """
    import pandas as pd

    if not Path(path).is_file():
        raise InputDataError(f"class counts file not found: {path}")
    table = pd.read_csv(path, sep="\t", index_col=0, comment="#")
    if table.shape[1] != n_classes:
        raise InputDataError(
            f"{path}: {table.shape[1]} class columns {list(table.columns)}, the data have "
            f"{n_classes} classes"
        )
    values = table.to_numpy()
    if not np.issubdtype(values.dtype, np.integer):
        raise InputDataError(f"{path}: class counts must be integers, got {values.tolist()}")
    return values.astype(np.int64)
