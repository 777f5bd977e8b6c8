"""Continuous phenotypes (LDL, HbA1c, height): the Gaussian loss, the identity link, R².

The trait is standardised with its federated training mean and sd before anything is fitted
(as the PRS is), so a loss, a learning rate and a penalty mean the same whatever the trait's
units. A site's validation summary is six sums (n, Σy, Σy², Σŷ, Σŷ², Σyŷ), from which the pooled
``r2`` (the squared correlation of prediction and trait, PRSice-2's PRS.R2 for a score alone)
and ``mse`` follow exactly; summed securely they are fixed-point integers (a signed sum as its
positive and negative parts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.outcomes.base import Outcome

if TYPE_CHECKING:
    import torch

__all__ = ["Quantitative", "SUM_SCALE"]

#: Fixed point of a securely summed validation sum (resolution 2^-24 per site).
SUM_SCALE = 1 << 24
#: The sums that can be negative: summed securely as their positive and negative parts, since a
#: secure sum takes non-negative integers.
_SIGNED = ("sum_y", "sum_p", "sum_yp")
#: Strata of a quantitative trait's stratified splits: its quantiles.
STRATA = 5


class Quantitative(Outcome):
    """A continuous phenotype: linear model, Gaussian loss, R² for choices."""

    kind = "quantitative"
    metric = "r2"
    loss_name = "mse"

    def check(self, y: np.ndarray, *, where: str) -> np.ndarray:
        """``y`` as float32 when every value is finite (see :meth:`Outcome.check`)."""
        y = np.asarray(y, dtype=np.float32).reshape(-1)
        bad = ~np.isfinite(y)
        if bad.any():
            raise InputDataError(
                f"{where}: a quantitative phenotype must be finite, found {np.unique(y[bad])[:5]}"
            )
        return y

    def strata(self, y: np.ndarray) -> np.ndarray:
        """The trait's quintile (ranks, so ties and outliers do not matter), shape (n,)."""
        y = np.asarray(y, dtype=np.float64)
        if y.size == 0:
            return np.zeros(0, dtype=np.int64)
        ranks = np.argsort(np.argsort(y, kind="stable"), kind="stable")
        return (ranks * min(STRATA, y.size) // y.size).astype(np.int64)

    standardises = True
    estimates_dispersion = True

    def stratum_name(self, label) -> str:
        """``samples of quintile k``."""
        return f"samples of phenotype quintile {int(label) + 1}"

    def counts(self, y: np.ndarray) -> dict[str, float]:
        """Nothing beside n."""
        return {}

    def check_training(self, y: np.ndarray, *, where: str) -> None:
        """A training split needs two different values.

        Raises
        ------
        InputDataError
            When ``y`` is constant.
        """
        if np.unique(np.asarray(y)).size < 2:
            raise InputDataError(f"{where} has a constant phenotype in its training split")

    def pos_weight(self, setting, n_samples, counts):
        """None (``auto`` or null); a number is a configuration error.

        Raises
        ------
        ConfigError
            For a number: a quantitative trait has no positive class.
        """
        if setting in (None, "auto"):
            return None
        raise ConfigError(
            f"train.pos_weight {setting!r} weighs cases, but the phenotype is quantitative; "
            "use 'auto' or null"
        )

    def loss(self, eta, y, *, pos_weight=None, reduction="mean") -> torch.Tensor:
        """½ (y − η)²: the Gaussian negative log-likelihood at unit variance."""
        losses = 0.5 * (eta - y).square()
        if reduction == "none":
            return losses
        return losses.sum() if reduction == "sum" else losses.mean()

    def mean(self, eta: np.ndarray) -> np.ndarray:
        """The identity."""
        return np.asarray(eta, dtype=np.float64)

    def torch_mean(self, eta: torch.Tensor) -> torch.Tensor:
        """The identity."""
        return eta

    def variance(self, eta: np.ndarray) -> np.ndarray:
        """1 for every sample."""
        return np.ones(np.shape(eta), dtype=np.float64)

    def unit_loss(self, eta: np.ndarray, y: np.ndarray) -> np.ndarray:
        """½ (y − η)²."""
        return 0.5 * (np.asarray(y, np.float64) - eta) ** 2

    def validation_summary(self, y, pred, *, bins):
        """The six sums of the site's validation samples (``bins`` unused).

        :func:`~rvfedprs.evaluation.quantitative.trait_sums`.
        """
        from rvfedprs.evaluation.quantitative import trait_sums

        return trait_sums(y, pred)

    def pooled_validation(self, summaries):
        """``r2`` and ``mse`` of the summed sums (exact)."""
        from rvfedprs.evaluation.quantitative import SUMS, pooled_sums

        total = {k: sum(float(s[k]) for s in summaries.values()) for k in SUMS}
        scores = pooled_sums(total)
        return {"r2": scores["r2"], "mse": scores["mse"]}

    def secure_shapes(self, bins: int) -> dict[str, tuple[int, ...]]:
        """One vector of the fixed-point sums."""
        return {"sums": (6 + len(_SIGNED),)}  # the six sums, the signed ones split in two

    def dense_validation(self, y, pred, *, bins):
        """:data:`SUMS` as round(2^24 · sum), the signed ones as (positive, negative) parts."""
        y = np.asarray(y, dtype=np.float64)
        p = np.asarray(pred, dtype=np.float64)
        from rvfedprs.evaluation.quantitative import SUMS

        summary = self.validation_summary(y, p, bins=bins)
        terms = {"sum_y": y, "sum_p": p, "sum_yp": y * p}
        values = [summary[k] for k in SUMS if k not in _SIGNED]
        for k in _SIGNED:
            values += [np.maximum(terms[k], 0).sum(), np.maximum(-terms[k], 0).sum()]
        return {"sums": np.array([round(float(v) * SUM_SCALE) for v in values], dtype=np.int64)}

    def summed_validation(self, total):
        """:meth:`pooled_validation` from the secure sum of :meth:`dense_validation`."""
        from rvfedprs.evaluation.quantitative import SUMS, pooled_sums

        values = [int(v) / SUM_SCALE for v in np.asarray(total["sums"])]
        unsigned = [k for k in SUMS if k not in _SIGNED]
        sums = dict(zip(unsigned, values[: len(unsigned)], strict=True))
        parts = values[len(unsigned) :]
        for i, k in enumerate(_SIGNED):
            sums[k] = parts[2 * i] - parts[2 * i + 1]
        scores = pooled_sums(sums)
        return {"r2": scores["r2"], "mse": scores["mse"]}

    def test_summary(self, y, pred, *, carriers, prs, covariates, bins):
        """:func:`~rvfedprs.evaluation.quantitative.test_summary` (sums, the site's own R²)."""
        from rvfedprs.evaluation.quantitative import test_summary

        return test_summary(y, pred, carriers=carriers, prs=prs, covariates=covariates)

    def pooled_test_metrics(self, summaries):
        """:func:`~rvfedprs.evaluation.quantitative.pooled_test_metrics`."""
        from rvfedprs.evaluation.quantitative import pooled_test_metrics

        return pooled_test_metrics(summaries)

    def validation_scores(self, y, pred):
        """The pooled ``r2`` and ``mse`` of predictions held in one process."""
        return self.pooled_validation({"all": self.validation_summary(y, pred, bins=0)})
