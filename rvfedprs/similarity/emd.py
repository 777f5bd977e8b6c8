"""Earth Mover's Distance between clients' metadata distributions (Alekseenko et al. §2.1, App. C).

Each client sends the server a vector of metadata values (imaging: per-image maximum intensity,
label histogram; genomics: PRS values, allele-frequency spectrum); the server computes the 1-D
Wasserstein distance (``scipy.stats.wasserstein_distance``) between every pair of clients, one
matrix per metadata.  Several matrices are combined as in Alekseenko et al. App. C: within each
*group* of metadata (intensity modalities, labels) the matrix with the largest EMD is kept
(EMD_maxI, EMD_maxL) and the kept matrices are averaged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from scipy.stats import wasserstein_distance

from rvfedprs.similarity import register

__all__ = ["emd_pairwise", "combine_emd", "emd_matrix"]


def emd_pairwise(values: Sequence[np.ndarray]) -> np.ndarray:
    """Pairwise 1-D Wasserstein distances between the clients' value distributions.

    Parameters
    ----------
    values : sequence of array, each shape (n_k,)
        One sample of a metadata value per client (empirical distribution, equal mass per value).

    Returns
    -------
    ndarray of float64, shape (K, K)
        Symmetric, non-negative, zero diagonal; in the units of the metadata.

    Raises
    ------
    ValueError
        When a client has no finite value.
    """
    arrays = []
    for k, v in enumerate(values):
        a = np.asarray(v, dtype=np.float64).ravel()
        a = a[np.isfinite(a)]
        if a.size == 0:
            raise ValueError(f"client {k} has no finite metadata values")
        arrays.append(a)
    n = len(arrays)
    d = np.zeros((n, n), dtype=np.float64)
    for i in range(n):
        for j in range(i + 1, n):
            d[i, j] = d[j, i] = wasserstein_distance(arrays[i], arrays[j])
    return d


def combine_emd(
    matrices: Mapping[str, np.ndarray], groups: Mapping[str, str] | None = None
) -> np.ndarray:
    """Combine per-metadata EMD matrices as in Alekseenko et al. App. C.

    Within each group the matrix with the largest entry is kept (App. C selects EMD_maxI among
    the intensity modalities and EMD_maxL among the labels); the kept matrices are averaged.

    Parameters
    ----------
    matrices : mapping of str to array, each shape (K, K)
        One EMD matrix per metadata name.
    groups : mapping of str to str, optional
        Metadata name → group name; by default every metadata is its own group (plain mean).

    Returns
    -------
    ndarray, shape (K, K)
    """
    if not matrices:
        raise ValueError("combine_emd needs at least one matrix")
    groups = dict(groups or {name: name for name in matrices})
    missing = sorted(set(matrices) - set(groups))
    if missing:
        raise ValueError(f"metadata without a group: {missing}")
    kept = []
    for group in sorted(set(groups[name] for name in matrices)):
        members = sorted(name for name in matrices if groups[name] == group)
        best = max(members, key=lambda name: float(np.max(matrices[name])))
        kept.append(np.asarray(matrices[best], dtype=np.float64))
    return np.mean(kept, axis=0)


@register("emd", kind="distance")
def emd_matrix(
    metadata: Mapping[str, Sequence[np.ndarray]], *, groups: Mapping[str, str] | None = None
) -> np.ndarray:
    """EMD distance matrix over clients from one or more metadata (Alekseenko et al. §2.1, App. C).

    Parameters
    ----------
    metadata : mapping of str to sequence of array
        Metadata name → one value array per client (same client order for every name).
    groups : mapping of str to str, optional
        Metadata name → group for :func:`combine_emd`.

    Returns
    -------
    ndarray of float64, shape (K, K)
        Symmetric, zero diagonal, unbounded (units of the metadata).
    """
    sizes = {name: len(v) for name, v in metadata.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"metadata have different numbers of clients: {sizes}")
    return combine_emd({name: emd_pairwise(v) for name, v in metadata.items()}, groups)
