"""Rare-variant influence (design §5 step 3): per-column gradient norms and the top variants.

The influence of variant ``j`` is the norm of the loss gradient with respect to column ``j`` of
the first specialist layer, accumulated over the local steps: ``∝ Σ_i |a_ij|·|δ_i|``, zero for a
variant no local sample carries. (The gradient with respect to the input ``a_j`` itself is not
carrier-specific and is not used.)
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["column_norms", "select_influential"]


def column_norms(grad: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of every column of a 2-D gradient (one per rare variant).

    ``sqrt(sum of squares)`` over dim 0 is ~10x faster on CPU than
    ``torch.linalg.vector_norm(..., dim=0)``, which reduces along the strided axis.
    """
    return grad.square().sum(0).sqrt()


def select_influential(
    influence: np.ndarray,
    *,
    top_k: int | None = None,
    relative_threshold: float | None = None,
) -> np.ndarray:
    """Indices of the most influential variants, most influential first.

    Only variants with non-zero influence are ever selected.  ``relative_threshold`` keeps those
    with influence ≥ threshold × max; ``top_k`` then keeps at most ``k`` (ties broken by the lower
    index).  With neither, all non-zero variants are returned.

    Parameters
    ----------
    influence : array of float, shape (P,)
    top_k : int, optional
    relative_threshold : float in (0, 1], optional

    Returns
    -------
    ndarray of int64, shape (n_selected,)
    """
    influence = np.asarray(influence, dtype=np.float64)
    if influence.ndim != 1:
        raise ValueError(f"influence must be 1-D, got shape {influence.shape}")
    if not np.all(np.isfinite(influence)) or np.any(influence < 0):
        raise ValueError("influence must be finite and non-negative")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if relative_threshold is not None and not 0 < relative_threshold <= 1:
        raise ValueError(f"relative_threshold must be in (0, 1], got {relative_threshold}")
    keep = influence > 0
    if relative_threshold is not None and keep.any():
        keep &= influence >= relative_threshold * influence.max()
    idx = np.flatnonzero(keep)
    order = np.lexsort((idx, -influence[idx]))  # by influence descending, then index
    idx = idx[order]
    if top_k is not None:
        idx = idx[:top_k]
    return idx.astype(np.int64)
