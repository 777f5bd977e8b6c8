"""Jaccard similarity of clients' influential-variant sets from their Bloom filters (design §6)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rvfedprs.bloom import BloomSpec, _cardinality, _check_bits
from rvfedprs.similarity import register

__all__ = ["jaccard_matrix"]


@register("jaccard", kind="similarity")
def jaccard_matrix(bits_list: Sequence[np.ndarray], spec: BloomSpec) -> np.ndarray:
    """Pairwise estimated Jaccard similarities of the clients' filters.

    Each pair uses :func:`rvfedprs.bloom.estimate_jaccard` (OR-union estimator); per-filter
    cardinalities are computed once.

    Parameters
    ----------
    bits_list : sequence of ndarray of uint8, each shape (ceil(m / 8),)
        One filter per client, in client order.
    spec : BloomSpec
        The federation's filter parameters.

    Returns
    -------
    ndarray of float64, shape (K, K)
        Symmetric, in [0, 1], ones on the diagonal.
    """
    filters = [_check_bits(b, spec, f"filter {i}") for i, b in enumerate(bits_list)]
    k = len(filters)
    card = [_cardinality(f, spec) for f in filters]
    s = np.eye(k, dtype=np.float64)
    for i in range(k):
        for j in range(i + 1, k):
            union = _cardinality(filters[i] | filters[j], spec)
            if union == 0.0:
                value = 0.0
            else:
                value = min(max((card[i] + card[j] - union) / union, 0.0), 1.0)
            s[i, j] = s[j, i] = value
    return s
