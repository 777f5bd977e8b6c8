"""Euclidean distance between clients' embeddings (Alekseenko et al. §2.2, eq. 1).

Each client encodes its images (or genotypes) with a shared encoder — a user-supplied
TorchScript file, or the federated model after one round used as a probe (Elhussein & Gürsoy) — and
the embeddings are compressed by PCA before they reach the server.  The distance between two clients
is the Euclidean distance between their mean compressed embeddings.

**Decisions.** Alekseenko et al. flattens per-sample PCA components and compares the resulting
vectors, which only works with equal client sizes; here each client is summarised by the mean of its
compressed embeddings, which is defined for any sizes.  PCA is fitted once on the pooled embeddings
of all clients (the basis is shared, so the clients' coordinates are comparable).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.decomposition import PCA

from rvfedprs.similarity import register

__all__ = ["euclidean_matrix"]


@register("euclidean", kind="distance")
def euclidean_matrix(
    embeddings: Sequence[np.ndarray], *, n_components: int | None = 2, random_seed: int = 0
) -> np.ndarray:
    """Pairwise Euclidean distances of the clients' mean PCA-compressed embeddings.

    Parameters
    ----------
    embeddings : sequence of array, each shape (n_k, d)
        One embedding matrix per client.
    n_components : int or None
        PCA components (Alekseenko et al. uses 2); None skips PCA (raw embeddings).
    random_seed : int
        Seed of the PCA solver.

    Returns
    -------
    ndarray of float64, shape (K, K)
        Symmetric, zero diagonal, unbounded.
    """
    arrays = [np.asarray(e, dtype=np.float64) for e in embeddings]
    for k, a in enumerate(arrays):
        if a.ndim != 2 or a.shape[0] == 0:
            raise ValueError(f"client {k}: embeddings must have shape (n_k > 0, d), got {a.shape}")
    dims = {a.shape[1] for a in arrays}
    if len(dims) != 1:
        raise ValueError(f"clients' embeddings have different dimensions: {sorted(dims)}")
    pooled = np.concatenate(arrays)
    if n_components is not None:
        n = min(int(n_components), pooled.shape[0], pooled.shape[1])
        pca = PCA(n_components=n, random_state=random_seed).fit(pooled)
        arrays = [pca.transform(a) for a in arrays]
    means = np.stack([a.mean(axis=0) for a in arrays])
    diff = means[:, None, :] - means[None, :, :]
    d = np.sqrt(np.sum(diff**2, axis=-1))
    np.fill_diagonal(d, 0.0)
    return (d + d.T) / 2.0
