"""What the server reads off a model update: the rare variants a client carries (design §6, §10).

Column ``j`` of the first specialist layer ``rare.input.weight`` (shape h × P) gets the loss
gradient ``Σ_i a_ij δ_i``: exactly zero unless some local sample carries variant ``j``. A column
nobody carries therefore comes back from local SGD either unchanged (plain SGD) or moved by a
data-free recursion that is linear in the column itself: with weight decay λ, momentum m and the
FedProx pull μ towards the weights received, ``w_j ← a·w_j`` with one scalar ``a`` that depends
only on the hyper-parameters and the number of steps. The server compares each column it
received with the one it sent:

- given the closed form (``expected``, e.g. from
  :func:`rvfedprs.training.compact.data_free_columns`), the deviation from it;
- otherwise it estimates ``a`` itself as the slope shared by the most columns (the untouched
  columns agree on it to float precision; carried columns scatter), so it needs no knowledge of
  the client's optimiser.

The same holds for a *sum* of updates — what a server behind secure aggregation sees — as long as
every summand was sent the same weights (a FedCE cluster, or every FedAvg client): a column none of
the summed clients carries is still ``(Σ_k c_k a_k)·w_j``. The carried set then inferred is the
union of the summed clients' sets, so each client's own set is only revealed up to it.
Anything that moves every column (DP-SGD noise) turns the exact rule into a ranking:
:func:`update_channel_scores` gives the continuous deviation, for ROC-type metrics.
"""

from __future__ import annotations

import numpy as np

from rvfedprs.exceptions import InputDataError

__all__ = ["DEFAULT_TOLERANCE", "shared_slope", "update_channel_scores", "carried_from_update"]

#: Relative deviation above which a column counts as touched by data (float32 rounding ≈ 1e-7).
DEFAULT_TOLERANCE = 1e-5
_SLOPE_AGREEMENT = 1e-6


def _checked(sent: np.ndarray, received: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(sent, dtype=np.float64)
    r = np.asarray(received, dtype=np.float64)
    if s.ndim != 2 or s.shape != r.shape:
        raise InputDataError(
            f"sent and received first-layer weights must be matrices of one shape (h, P); got "
            f"{s.shape} and {r.shape}"
        )
    if not (np.all(np.isfinite(s)) and np.all(np.isfinite(r))):
        raise InputDataError("sent or received weights contain NaN or infinite values")
    return s, r


def shared_slope(sent: np.ndarray, received: np.ndarray) -> float:
    """The scalar ``a`` with ``received[:, j] ≈ a·sent[:, j]`` for the most columns ``j``.

    Per column the least-squares slope ``<r_j, s_j> / <s_j, s_j>``; the answer is the median of
    the largest group of slopes agreeing to within ``1e-6·max(|a|, 1)`` (columns of zeros are
    ignored).

    Parameters
    ----------
    sent, received : arrays, shape (h, P)

    Returns
    -------
    float
        1.0 when every sent column is zero.
    """
    s, r = _checked(sent, received)
    norm2 = (s * s).sum(axis=0)
    usable = norm2 > 0
    if not usable.any():
        return 1.0
    slopes = np.sort((r * s).sum(axis=0)[usable] / norm2[usable])
    width = _SLOPE_AGREEMENT * np.maximum(np.abs(slopes), 1.0)
    # for each slope, how many slopes lie within [slope, slope + width]
    ends = np.searchsorted(slopes, slopes + width, side="right")
    start = int(np.argmax(ends - np.arange(slopes.size)))
    return float(np.median(slopes[start : ends[start]]))


def update_channel_scores(
    sent: np.ndarray, received: np.ndarray, *, expected: np.ndarray | None = None
) -> np.ndarray:
    """How far each column moved from its data-free prediction, relative to the weights' scale.

    Parameters
    ----------
    sent : array, shape (h, P)
        ``rare.input.weight`` as the server sent it.
    received : array, shape (h, P)
        What it got back: one client's weights or update, or a (weighted) sum over clients that
        were all sent ``sent``.
    expected : array, shape (h, P), optional
        The data-free prediction of ``received`` (the server's closed form); default
        ``a·sent`` with ``a`` from :func:`shared_slope`.

    Returns
    -------
    ndarray, shape (P,)
        ``max_i |received_ij − expected_ij| / d_j`` with ``d_j`` the column's largest weight
        sent or expected (at least the median of ``d`` over columns); 0 for a column no sample
        touched (up to rounding).
    """
    s, r = _checked(sent, received)
    if expected is None:
        e = shared_slope(s, r) * s
    else:
        e = np.asarray(expected, dtype=np.float64)
        if e.shape != s.shape:
            raise InputDataError(f"expected weights have shape {e.shape}, sent {s.shape}")
    scale = np.maximum(np.abs(s).max(axis=0), np.abs(e).max(axis=0))
    floor = float(np.median(scale)) or float(np.abs(r).max()) or 1.0
    return np.abs(r - e).max(axis=0) / np.maximum(scale, floor)


def carried_from_update(
    sent: np.ndarray,
    received: np.ndarray,
    *,
    expected: np.ndarray | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> np.ndarray:
    """The server's inferred carried set: the columns whose deviation exceeds ``tolerance``.

    Returns
    -------
    ndarray of bool, shape (P,)
    """
    return update_channel_scores(sent, received, expected=expected) > tolerance
