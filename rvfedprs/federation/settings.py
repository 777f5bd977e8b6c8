"""Run-wide settings every engine derives the same way from the configuration.

One implementation for the in-process engine (``rvfedprs train``) and the Flower ServerApp, so
that both give the clients identical optimiser settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rvfedprs.exceptions import InputDataError
from rvfedprs.training import LocalTrainingConfig

__all__ = ["local_training_config"]


def local_training_config(
    train: Mapping[str, Any], *, n_samples: int, n_cases: float
) -> LocalTrainingConfig:
    """The clients' :class:`LocalTrainingConfig` from the ``train`` section.

    Parameters
    ----------
    train : mapping
        The validated ``train`` section (``local_epochs``, ``lr``, ``momentum``,
        ``batch_size``, ``pos_weight``, ``weight_decay``).
    n_samples : int
        Training samples over the whole federation.
    n_cases : float
        Cases among them; ``pos_weight: auto`` becomes ``(n_samples - n_cases) / n_cases``.

    Returns
    -------
    LocalTrainingConfig
        ``proximal_mu`` stays 0: a strategy sets it per round in its fit config.

    Raises
    ------
    InputDataError
        When ``pos_weight`` is ``auto`` and the federation has no cases or no controls.
    """
    pos_weight = train["pos_weight"]
    if pos_weight == "auto":
        if not 0 < n_cases < n_samples:
            raise InputDataError(
                f"train.pos_weight: 'auto' needs cases and controls; the federation's training "
                f"splits hold {n_cases:g} cases among {n_samples} samples"
            )
        pos_weight = (n_samples - n_cases) / n_cases
    return LocalTrainingConfig(
        epochs=int(train["local_epochs"]),
        lr=float(train["lr"]),
        momentum=float(train["momentum"]),
        batch_size=int(train["batch_size"]),
        pos_weight=None if pos_weight is None else float(pos_weight),
        weight_decay=float(train["weight_decay"]),
    )
