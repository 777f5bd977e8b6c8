"""Clustering clients on a precomputed distance matrix, and keeping cluster identities (design §6).

``ClientClusterer`` is agglomerative clustering (scikit-learn, ``metric="precomputed"``, average
linkage by default) on ``D = 1 − S``.  Labels are canonical: clusters are numbered in the order
their first member appears, so the labels depend only on the partition.

``n_clusters="auto"`` rule: if every pairwise distance is at most ``single_cluster_distance``
(default 0.5, i.e. all clients share at least half of their influential variants) the federation
is one cluster; otherwise M maximises the silhouette score (precomputed distances) over
M = 2..K−1 (M = 2 when K ≤ 3, where the silhouette range is empty or has one value).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import AgglomerativeClustering
from sklearn.metrics import silhouette_score

from rvfedprs.bloom import BloomSpec, estimate_jaccard
from rvfedprs.exceptions import ConfigError

__all__ = ["ClientClusterer", "match_labels", "nearest_cluster", "canonical_labels"]

_LINKAGES = ("average", "complete", "single")


def canonical_labels(labels: Sequence[int]) -> np.ndarray:
    """Relabel clusters 0, 1, ... in the order of their first member, shape (K,)."""
    labels = np.asarray(labels)
    mapping: dict[Any, int] = {}
    out = np.empty(len(labels), dtype=np.int64)
    for i, lab in enumerate(labels.tolist()):
        out[i] = mapping.setdefault(lab, len(mapping))
    return out


def _check_distance(d: np.ndarray) -> np.ndarray:
    d = np.asarray(d, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"distance matrix must be square, got shape {d.shape}")
    if not np.all(np.isfinite(d)):
        raise ValueError("distance matrix contains NaN or infinite values")
    if np.any(d < -1e-12):
        raise ValueError(f"distance matrix has negative entries (min {d.min():.3g})")
    if not np.allclose(d, d.T, atol=1e-9):
        raise ValueError("distance matrix is not symmetric")
    d = np.clip((d + d.T) / 2, 0.0, None)
    np.fill_diagonal(d, 0.0)
    return d


class ClientClusterer:
    """Agglomerative clustering of clients from a precomputed distance matrix.

    Parameters
    ----------
    n_clusters : int, "auto" or None
        Fixed number of clusters M, ``"auto"`` (silhouette, see module notes), or None to cut at
        ``distance_threshold`` (``"auto"`` when that is None too).
    distance_threshold : float, optional
        Linkage distance above which clusters are not merged (overrides ``n_clusters``).
    linkage : {"average", "complete", "single"}
    single_cluster_distance : float
        ``"auto"`` puts every client in one cluster when all distances are at most this.

    Attributes
    ----------
    labels_ : ndarray of int64, shape (K,)
        Canonical cluster labels.
    n_clusters_ : int
    silhouette_ : dict of int to float
        Silhouette score per candidate M (``"auto"`` only).
    """

    def __init__(
        self,
        n_clusters: int | str | None = None,
        *,
        distance_threshold: float | None = None,
        linkage: str = "average",
        single_cluster_distance: float = 0.5,
    ) -> None:
        self.n_clusters = n_clusters
        self.distance_threshold = distance_threshold
        self.linkage = linkage
        self.single_cluster_distance = single_cluster_distance

    def fit(self, distance_matrix: np.ndarray) -> ClientClusterer:
        """Cluster the K clients of ``distance_matrix`` (shape (K, K)); returns ``self``."""
        if self.linkage not in _LINKAGES:
            raise ValueError(
                f"linkage {self.linkage!r} unknown for precomputed distances; "
                f"choose from {list(_LINKAGES)}"
            )
        d = _check_distance(distance_matrix)
        k = d.shape[0]
        if k == 0:
            raise ValueError("cannot cluster zero clients")
        self.silhouette_: dict[int, float] = {}
        if self.distance_threshold is not None:
            if self.distance_threshold < 0:
                raise ValueError(f"distance_threshold must be >= 0, got {self.distance_threshold}")
            labels = self._agglomerate(d, None) if k > 1 else np.zeros(1, dtype=np.int64)
        elif self.n_clusters is None or self.n_clusters == "auto":
            labels = self._auto(d)
        else:
            m = self.n_clusters
            if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
                raise ValueError(f"n_clusters must be a positive integer or 'auto', got {m!r}")
            if m > k:
                raise ConfigError(
                    f"n_clusters = {m} exceeds the number of clients {k} "
                    f"(fedce.n_clusters: at most {k}, or auto)"
                )
            labels = np.zeros(k, dtype=np.int64) if m == 1 else self._agglomerate(d, int(m))
        self.labels_ = canonical_labels(labels)
        self.n_clusters_ = int(self.labels_.max()) + 1
        return self

    def fit_predict(self, distance_matrix: np.ndarray) -> np.ndarray:
        """``fit(distance_matrix).labels_``."""
        return self.fit(distance_matrix).labels_

    def _agglomerate(self, d: np.ndarray, m: int | None) -> np.ndarray:
        model = AgglomerativeClustering(
            n_clusters=m,
            distance_threshold=None if m is not None else self.distance_threshold,
            metric="precomputed",
            linkage=self.linkage,
        )
        return model.fit_predict(d)

    def _auto(self, d: np.ndarray) -> np.ndarray:
        k = d.shape[0]
        if k == 1 or d.max() <= self.single_cluster_distance:
            return np.zeros(k, dtype=np.int64)
        if k <= 3:
            return self._agglomerate(d, 2)
        best_m, best_score, best_labels = 0, -np.inf, None
        for m in range(2, k):
            labels = self._agglomerate(d, m)
            score = float(silhouette_score(d, labels, metric="precomputed"))
            self.silhouette_[m] = score
            if score > best_score + 1e-12:
                best_m, best_score, best_labels = m, score, labels
        assert best_labels is not None and best_m >= 2
        return best_labels


def match_labels(
    previous: Mapping[str, int] | Sequence[int], current: Mapping[str, int] | Sequence[int]
) -> Any:
    """Relabel ``current`` clusters to maximise member overlap with ``previous`` (Hungarian).

    Parameters
    ----------
    previous, current : mapping client → label, or label arrays aligned on the same clients
        Clients absent from either side (joined or left) do not count towards the overlap.

    Returns
    -------
    Same type as ``current``
        Labels where each current cluster takes the previous label it shares most members with
        (a one-to-one assignment maximising the total overlap); clusters left unmatched get new
        labels above every previous one, in order of their first member.
    """
    as_mapping = isinstance(current, Mapping)
    if as_mapping != isinstance(previous, Mapping):
        raise TypeError("previous and current must both be mappings or both be sequences")
    if as_mapping:
        prev_map = {str(k): int(v) for k, v in previous.items()}  # type: ignore[union-attr]
        cur_keys = list(current)  # type: ignore[arg-type]
        cur = [int(current[c]) for c in cur_keys]  # type: ignore[index]
        prev = [prev_map.get(str(c)) for c in cur_keys]
    else:
        cur = [int(v) for v in current]
        prev = [int(v) for v in previous]  # type: ignore[union-attr]
        if len(prev) != len(cur):
            raise ValueError(
                f"previous has {len(prev)} labels and current {len(cur)}; "
                f"pass mappings client → label when clients differ"
            )
    cur_ids = list(dict.fromkeys(cur))
    prev_ids = sorted({p for p in prev if p is not None})
    overlap = np.zeros((len(cur_ids), len(prev_ids)), dtype=np.int64)
    ci = {c: i for i, c in enumerate(cur_ids)}
    pi = {p: i for i, p in enumerate(prev_ids)}
    for c, p in zip(cur, prev, strict=True):
        if p is not None:
            overlap[ci[c], pi[p]] += 1
    mapping: dict[int, int] = {}
    if overlap.size:
        rows, cols = linear_sum_assignment(overlap, maximize=True)
        for r, c in zip(rows, cols, strict=True):
            if overlap[r, c] > 0:
                mapping[cur_ids[r]] = prev_ids[c]
    next_label = (max(prev_ids) + 1) if prev_ids else 0
    for c in cur_ids:
        if c not in mapping:
            mapping[c] = next_label
            next_label += 1
    if as_mapping:
        return {key: mapping[c] for key, c in zip(cur_keys, cur, strict=True)}
    return np.array([mapping[c] for c in cur], dtype=np.int64)


def nearest_cluster(
    bits: np.ndarray, cluster_members: Mapping[int, Sequence[np.ndarray]], spec: BloomSpec
) -> int:
    """Cluster whose members' filters are most similar to ``bits`` (mean estimated Jaccard).

    The mean over members matches average linkage; ties go to the smallest label.

    Parameters
    ----------
    bits : ndarray of uint8
        The unseen client's filter.
    cluster_members : mapping label → sequence of member filters
    spec : BloomSpec
    """
    if not cluster_members:
        raise ValueError("no clusters to choose from")
    best_label, best_score = None, -np.inf
    for label in sorted(cluster_members):
        members = cluster_members[label]
        if len(members) == 0:
            raise ValueError(f"cluster {label} has no member filters")
        score = float(np.mean([estimate_jaccard(bits, b, spec) for b in members]))
        if score > best_score + 1e-12:
            best_label, best_score = label, score
    return int(best_label)  # type: ignore[arg-type]
