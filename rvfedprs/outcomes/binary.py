"""Case/control phenotypes: 0/1, BCE with logits, the logistic link, AUC and log-loss."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rvfedprs.exceptions import InputDataError
from rvfedprs.outcomes.base import Outcome

if TYPE_CHECKING:
    import torch

__all__ = ["Binary"]


class Binary(Outcome):
    """A binary phenotype (0 = control, 1 = case): the logistic model, AUC for choices."""

    kind = "binary"
    metric = "auc"
    loss_name = "log_loss"

    def check(self, y: np.ndarray, *, where: str) -> np.ndarray:
        """``y`` as float32 when every value is 0 or 1 (see :meth:`Outcome.check`)."""
        y = np.asarray(y, dtype=np.float32).reshape(-1)
        bad = ~np.isin(y, (0.0, 1.0))
        if bad.any():
            raise InputDataError(f"{where}: phenotype must be 0/1, found {np.unique(y[bad])[:5]}")
        return y

    def strata(self, y: np.ndarray) -> np.ndarray:
        """The classes themselves."""
        return np.asarray(y)

    def stratum_name(self, label) -> str:
        """``cases`` or ``controls``."""
        return "cases" if label == 1 else "controls"

    def counts(self, y: np.ndarray) -> dict[str, float]:
        """``n_cases``."""
        return {"n_cases": float(np.sum(y))}

    def check_training(self, y: np.ndarray, *, where: str) -> None:
        """A training split needs a case.

        Raises
        ------
        InputDataError
            When ``y`` holds no case.
        """
        if not np.any(np.asarray(y) == 1):
            raise InputDataError(f"{where} has no cases in its training split")

    def loss(self, eta, y, *, pos_weight=None, reduction="mean") -> torch.Tensor:
        """Binary cross-entropy with logits (cases weighted by ``pos_weight``)."""
        import torch
        from torch.nn import functional

        weight = None if pos_weight is None else torch.tensor(float(pos_weight))
        return functional.binary_cross_entropy_with_logits(
            eta, y, pos_weight=weight, reduction=reduction
        )

    def mean(self, eta: np.ndarray) -> np.ndarray:
        """σ(η), stable for any η."""
        return 0.5 * (1.0 + np.tanh(0.5 * np.asarray(eta, dtype=np.float64)))

    def torch_mean(self, eta: torch.Tensor) -> torch.Tensor:
        """σ(η)."""
        import torch

        return torch.sigmoid(eta)

    def variance(self, eta: np.ndarray) -> np.ndarray:
        """P (1 − p)."""
        p = self.mean(eta)
        return p * (1.0 - p)

    def unit_loss(self, eta: np.ndarray, y: np.ndarray) -> np.ndarray:
        """log(1 + e^η) − y η."""
        return np.logaddexp(0.0, eta) - y * eta

    def pos_weight(self, setting: Any, n_samples: int, counts: Mapping[str, float]) -> float | None:
        """``auto``: controls / cases of the samples trained on.

        Raises
        ------
        InputDataError
            When ``auto`` meets training samples without cases or controls.
        """
        if setting != "auto":
            return None if setting is None else float(setting)
        n_cases = float(counts["n_cases"])
        if not 0 < n_cases < n_samples:
            raise InputDataError(
                f"train.pos_weight: 'auto' needs cases and controls; the federation's training "
                f"splits hold {n_cases:g} cases among {n_samples} samples"
            )
        return (n_samples - n_cases) / n_cases

    def validation_summary(self, y, pred, *, bins):
        """Counts, sparse score histograms, Σ cross-entropy.

        :func:`~rvfedprs.evaluation.summaries.validation_summary`.
        """
        from rvfedprs.evaluation.summaries import validation_summary

        return validation_summary(y, pred, bins=bins)

    def pooled_validation(self, summaries):
        """``auc`` (histograms, with ``auc_tie_bound``) and ``log_loss`` (exact)."""
        from rvfedprs.evaluation.summaries import pooled_validation

        return pooled_validation(summaries)

    def secure_shapes(self, bins: int) -> dict[str, tuple[int, ...]]:
        """Dense case and control histograms, (n, cases), the fixed-point loss sum."""
        return {"cases": (bins,), "controls": (bins,), "counts": (2,), "log_loss": (1,)}

    def dense_validation(self, y, pred, *, bins):
        """:func:`~rvfedprs.evaluation.summaries.dense_validation`."""
        from rvfedprs.evaluation.summaries import dense_validation

        return dense_validation(y, pred, bins=bins)

    def summed_validation(self, total):
        """:func:`~rvfedprs.evaluation.summaries.summed_validation`."""
        from rvfedprs.evaluation.summaries import summed_validation

        return summed_validation(total)

    def test_summary(self, y, pred, *, carriers, prs, covariates, bins):
        """:func:`~rvfedprs.evaluation.summaries.site_summary` (exact site AUCs, histograms)."""
        from rvfedprs.evaluation.summaries import site_summary

        return site_summary(y, pred, carriers=carriers, prs=prs, bins=bins)

    def pooled_test_metrics(self, summaries):
        """:func:`~rvfedprs.evaluation.summaries.pooled_metrics`."""
        from rvfedprs.evaluation.summaries import pooled_metrics

        return pooled_metrics(summaries)

    def validation_scores(self, y, pred):
        """The exact pooled AUC and the mean cross-entropy."""
        from rvfedprs.evaluation.metrics import roc_auc
        from rvfedprs.evaluation.summaries import log_loss_sum

        return {"auc": roc_auc(y, pred), "log_loss": log_loss_sum(y, pred) / np.size(y)}
