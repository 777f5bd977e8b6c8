"""The column-sparse machinery shared by SGD and DP-SGD.

A variant no local sample carries has an exactly zero loss gradient in ``rare.input.weight``
(column ``j`` of the gradient is ``Σ_i a_ij δ_i``). Local training therefore runs on a *compact*
copy of the model whose first specialist layer keeps only the carried columns; the other columns
follow a data-free recursion (momentum, weight decay, the proximal pull, a SCAFFOLD correction)
that is linear in the state and applied once, in closed form.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rvfedprs.model import TwoPathwayModel, set_parameters
from rvfedprs.training.config import LocalTrainingConfig
from rvfedprs.training.data import ClientData

__all__ = [
    "RARE_INPUT",
    "compact_model",
    "take_columns",
    "data_free_coefficients",
    "data_free_columns",
]

#: The first specialist layer, one column per rare variant (shape (h, P)).
RARE_INPUT = "rare.input.weight"


def compact_model(
    model: TwoPathwayModel, data: ClientData, start: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, TwoPathwayModel]:
    """The columns ``data`` carries and a copy of ``model`` restricted to them, set to ``start``.

    A client carrying no rare variant keeps column 0 (data-free) so the layer is non-empty.
    """
    active = data.carried_variants()
    if active.size == 0:
        active = np.array([0], dtype=np.int64)
    compact = TwoPathwayModel(
        len(active),
        common_hidden=model.common_hidden,
        rare_hidden=model.rare_hidden,
        dropout=model.dropout,
        initialise=False,
    )
    set_parameters(compact, take_columns(start, active))
    return active, compact


def take_columns(params: Mapping[str, np.ndarray], columns: np.ndarray) -> dict[str, np.ndarray]:
    """``params`` as float32 arrays with the first specialist layer restricted to ``columns``."""
    out = {k: np.asarray(v, dtype=np.float32) for k, v in params.items()}
    out[RARE_INPUT] = np.ascontiguousarray(out[RARE_INPUT][:, columns])
    return out


def data_free_coefficients(config: LocalTrainingConfig, steps: int) -> np.ndarray:
    """Closed form of SGD steps whose loss gradient is zero, for 0..``steps`` steps.

    Each entry follows ``g = λw + μ(w − r) + k`` (``k`` the SCAFFOLD correction), ``v ← m·v + g``,
    ``w ← w − lr·v`` (torch's SGD: the first step's buffer is ``g``, i.e. ``v`` starts at 0).
    The state stays linear in ``(w, v, r, k)``: row ``t`` holds the coefficients after ``t``
    steps, ``[0]`` those of ``w`` and ``[1]`` those of ``v``.

    Returns
    -------
    ndarray of float64, shape (steps + 1, 2, 4)
    """
    lam, mu = float(config.weight_decay), float(config.proximal_mu)
    m, lr = float(config.momentum), float(config.lr)
    out = np.zeros((steps + 1, 2, 4))
    w = np.array([1.0, 0.0, 0.0, 0.0])  # w = 1·w0
    v = np.array([0.0, 1.0, 0.0, 0.0])  # v = 1·v0
    out[0] = w, v
    for t in range(1, steps + 1):
        g = (lam + mu) * w + np.array([0.0, 0.0, -mu, 1.0])
        v = m * v + g
        w = w - lr * v
        out[t] = w, v
    return out


def data_free_columns(
    w0: np.ndarray,
    ref: np.ndarray,
    config: LocalTrainingConfig,
    steps: int,
    *,
    correction: np.ndarray | None = None,
) -> np.ndarray:
    """Weights of columns no sample carries after ``steps`` SGD steps (from a zero buffer).

    With m = 0, λ = μ = 0 this is ``w0 − lr·steps·k``; without λ, μ and k the columns stay put.
    """
    if config.weight_decay == 0.0 and config.proximal_mu == 0.0 and correction is None:
        return w0.copy()
    a, _, e, f = data_free_coefficients(config, steps)[steps, 0]
    out = a * w0.astype(np.float64) + e * ref.astype(np.float64)
    if correction is not None:
        out += f * correction.astype(np.float64)
    return out.astype(np.float32)
