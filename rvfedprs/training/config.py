"""The settings of a client's local training, what a round of it returns, and DP's settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["LocalTrainingConfig", "LocalResult", "dp_settings"]


@dataclass(frozen=True)
class LocalTrainingConfig:
    """Client optimiser settings (design §5).

    Attributes
    ----------
    epochs : int
        Local epochs E.
    lr, momentum : float
        SGD learning rate and momentum (PyTorch convention, no dampening).
    batch_size : int
    pos_weight : float or None
        Weight of cases in BCE-with-logits (None = 1).
    proximal_mu : float
        FedProx μ of the term μ/2‖w − w^t‖² (0 disables it).
    weight_decay : float
        L2 weight decay, added to the gradient as in ``torch.optim.SGD``.
    """

    epochs: int = 1
    lr: float = 0.05
    momentum: float = 0.9
    batch_size: int = 256
    pos_weight: float | None = None
    proximal_mu: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        checks = {
            "epochs": self.epochs >= 1,
            "lr": self.lr > 0,
            "momentum": 0 <= self.momentum <= 1,
            "batch_size": self.batch_size >= 1,
            "pos_weight": self.pos_weight is None or self.pos_weight > 0,
            "proximal_mu": self.proximal_mu >= 0,
            "weight_decay": self.weight_decay >= 0,
        }
        for key, ok in checks.items():
            if not ok:
                raise ValueError(f"LocalTrainingConfig.{key} = {getattr(self, key)!r} is invalid")


@dataclass
class LocalResult:
    """What a client returns after :func:`local_update`.

    Attributes
    ----------
    parameters : dict of str to ndarray
        Trained parameters, same names/shapes as :func:`rvfedprs.model.get_parameters`.
    n_samples : int
    loss : float
        Mean BCE (without the proximal term) over the last local epoch.
    influence : ndarray of float64, shape (P,), or None
        Σ over local steps of ‖∂L/∂W[:, j]‖₂ for ``W = rare.input.weight``; 0 where no local
        sample carries variant j.
    steps : int
        Number of optimiser steps taken.
    """

    parameters: dict[str, np.ndarray]
    n_samples: int
    loss: float
    influence: np.ndarray | None
    steps: int = 0


def dp_settings(section: Mapping[str, Any] | None) -> dict[str, float] | None:
    """σ, C and δ of an enabled ``dp`` configuration section (None when DP is off).

    The one place a configuration becomes DP settings: every engine sends these to the clients,
    which build their :class:`DPState` with :meth:`DPState.from_settings`.
    """
    section = section or {}
    if not section.get("enabled", False):
        return None
    return {
        "noise_multiplier": float(section["noise_multiplier"]),
        "max_grad_norm": float(section["max_grad_norm"]),
        "delta": float(section["delta"]),
    }
