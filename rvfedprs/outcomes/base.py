"""What every outcome kind answers: the phenotype's checks, split strata, loss, link and sums.

An :class:`Outcome` is the one place that knows what the phenotype *is*. The layers above ask
it instead of assuming 0/1: the site data check their values with it (:meth:`Outcome.check`),
splits stratify on :meth:`Outcome.strata`, training takes its loss (:meth:`Outcome.loss`) and
predictions its inverse link (:meth:`Outcome.mean`), the exact federated GLMs its sums at given
coefficients (:meth:`Outcome.glm_sums`), a site's validation exchange its summary and the
server its pooling (:meth:`Outcome.validation_summary`, :meth:`Outcome.pooled_validation` and
their secure twins), and every choice its primary metric (:attr:`Outcome.metric`, higher is
better) and loss (:attr:`Outcome.loss_name`, lower is better). A new kind (time-to-event) is a
new subclass in its own file, registered in :data:`rvfedprs.outcomes.OUTCOMES`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    import torch

__all__ = ["Outcome"]


class Outcome(ABC):
    """One kind of phenotype (stateless: every instance of a kind is interchangeable).

    Attributes
    ----------
    kind : str
        The name a configuration and ``outcome.json`` use (``binary``, ``quantitative``).
    metric : str
        The primary metric of choices on validation data (higher is better): ``auc``, ``r2``.
    loss_name : str
        The loss a choice can be made on instead (lower is better): ``log_loss``, ``mse``.
    """

    kind: ClassVar[str]
    metric: ClassVar[str]
    loss_name: ClassVar[str]
    #: Whether the phenotype is standardised with its federated training moments before use.
    standardises: ClassVar[bool] = False
    #: Whether the GLM has a dispersion to estimate (the Gaussian's residual variance), which
    #: scales the score tests' variances; 1 for a binary outcome.
    estimates_dispersion: ClassVar[bool] = False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outcome) and other.kind == self.kind

    def __hash__(self) -> int:
        return hash(self.kind)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    # --- the phenotype ------------------------------------------------------------------------
    @abstractmethod
    def check(self, y: np.ndarray, *, where: str) -> np.ndarray:
        """``y`` as float32 when every value is one this outcome takes.

        Raises
        ------
        InputDataError
            Naming ``where`` and up to five offending values.
        """

    @abstractmethod
    def strata(self, y: np.ndarray) -> np.ndarray:
        """A label per sample that stratified splits keep in proportion, shape (n,)."""

    @abstractmethod
    def stratum_name(self, label: Any) -> str:
        """What the samples of stratum ``label`` are called in a message (``cases``)."""

    @abstractmethod
    def counts(self, y: np.ndarray) -> dict[str, float]:
        """What a report counts of ``y`` beside n (``n_cases``; nothing for a quantitative)."""

    @abstractmethod
    def check_training(self, y: np.ndarray, *, where: str) -> None:
        """Raise InputDataError when a site's training split cannot be learned from."""

    # --- training -----------------------------------------------------------------------------
    @abstractmethod
    def loss(
        self, eta: torch.Tensor, y: torch.Tensor, *, pos_weight: float | None = None,
        reduction: str = "mean",
    ) -> torch.Tensor:  # fmt: skip
        """The training loss of linear predictors ``eta`` for ``y`` (torch, differentiable)."""

    @abstractmethod
    def mean(self, eta: np.ndarray) -> np.ndarray:
        """The inverse link: the predicted mean of ``y`` at linear predictors ``eta``."""

    @abstractmethod
    def torch_mean(self, eta: torch.Tensor) -> torch.Tensor:
        """:meth:`mean` on a torch tensor."""

    @abstractmethod
    def variance(self, eta: np.ndarray) -> np.ndarray:
        """The GLM working weights at ``eta`` (p(1 − p); 1 for the Gaussian)."""

    def glm_sums(
        self, x: sp.csr_matrix | np.ndarray, y: np.ndarray, coef: np.ndarray, *,
        hessian: bool = True,
    ) -> tuple[float, np.ndarray, np.ndarray | None]:  # fmt: skip
        """Σ loss, Σ gradient and (optionally) Σ Hessian of the GLM at ``coef``.

        Parameters
        ----------
        x : sparse or dense matrix, shape (n, p)
        y : array, shape (n,)
        coef : array, shape (p,)

        Returns
        -------
        loss : float
            Σ_i of the negative log-likelihood (:meth:`unit_loss`).
        gradient : array of float64, shape (p,)
            xᵀ (μ(η) − y).
        hessian : array of float64, shape (p, p), or None
            xᵀ diag(:meth:`variance`) x.
        """
        coef = np.asarray(coef, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        eta = np.asarray(x @ coef, dtype=np.float64).reshape(-1)
        loss = float(np.sum(self.unit_loss(eta, y)))
        gradient = np.asarray(x.T @ (self.mean(eta) - y), dtype=np.float64).reshape(-1)
        if not hessian:
            return loss, gradient, None
        weight = self.variance(eta)
        if sp.issparse(x):
            matrix = (x.T @ sp.csr_matrix(x.multiply(weight[:, None]))).toarray()
        else:
            matrix = x.T @ (x * weight[:, None])
        return loss, gradient, np.asarray(matrix, dtype=np.float64)

    @abstractmethod
    def unit_loss(self, eta: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Each sample's negative log-likelihood at ``eta`` (float64, no overflow)."""

    def pos_weight(self, setting: Any, n_samples: int, counts: Mapping[str, float]) -> float | None:
        """The loss's positive-class weight for ``train.pos_weight`` (None: unweighted)."""
        return None if setting in (None, "auto") else float(setting)

    # --- validation summaries -----------------------------------------------------------------
    @abstractmethod
    def validation_summary(self, y: np.ndarray, pred: np.ndarray, *, bins: int) -> dict:
        """What a site sends of its validation samples' predictions (nothing per sample)."""

    @abstractmethod
    def pooled_validation(self, summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
        """:attr:`metric`, :attr:`loss_name` (and a tie bound) of the sites' summaries."""

    @abstractmethod
    def secure_shapes(self, bins: int) -> dict[str, tuple[int, ...]]:
        """The integer tensors of a securely summed summary and their shapes."""

    @abstractmethod
    def dense_validation(self, y: np.ndarray, pred: np.ndarray, *, bins: int) -> dict:
        """:meth:`validation_summary` as integer vectors for a secure sum."""

    @abstractmethod
    def summed_validation(self, total: Mapping[str, np.ndarray]) -> dict[str, float]:
        """:meth:`pooled_validation` from the secure sum of :meth:`dense_validation`."""

    @abstractmethod
    def test_summary(
        self, y: np.ndarray, pred: np.ndarray, *, carriers: np.ndarray | None,
        prs: np.ndarray, covariates: np.ndarray, bins: int,
    ) -> dict[str, Any]:  # fmt: skip
        """What a site sends of its test split under its model (a study's evaluation)."""

    @abstractmethod
    def pooled_test_metrics(self, summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The pooled and per-site test metrics of the sites' :meth:`test_summary`."""

    @abstractmethod
    def validation_scores(self, y: np.ndarray, pred: np.ndarray) -> dict[str, float]:
        """:attr:`metric` and :attr:`loss_name` of predictions pooled in one process (exact)."""
