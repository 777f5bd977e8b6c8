"""FedGLM: an L2-penalised logistic regression fitted exactly by federated Newton iterations.

What a consortium gets if federation costs nothing (SPEC §7): the pooled L2-penalised logistic
regression on [1, PRS, covariates (, rare dosages | burdens)] — by default with the penalty on
the rare features only (``penalize: rare``: the floor's coefficients are free, so the fit
shrinks towards the floor), or on every coefficient but the intercept (``penalize: all``:
scikit-learn's ``LogisticRegression(C = 1/l2)``). Every round the server sends the
coefficients β_t; each site returns its sums of log-loss, gradient and Hessian at β_t
(:func:`rvfedprs.training.glm.glm_reply`), as an update
whose n_k-weighted average is the pooled per-sample statistics — so the same aggregation runs in
the clear and under secure aggregation (one sum over every replying site). The server adds the
penalty and takes a Newton step, halving it when the penalised objective went up (the loss
at β_t arrives with the statistics at β_t). Converged when the Newton step's largest entry is
below ``tol`` (or, under secure aggregation, below what the sums' quantisation error allows);
the engine then stops the run early (:attr:`finished`).

The fitted model is served as two-pathway network parameters
(:func:`rvfedprs.model.linear_parameters`) whose logit is exactly the GLM's, so every evaluation,
checkpoint and engine treats it as any other strategy's model. With ``features: floor`` it is
the PRS-plus-covariates floor every network starts from (:mod:`rvfedprs.genomic.task`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.model import linear_parameters
from rvfedprs.strategies.aggregation import Parameters, copy_parameters
from rvfedprs.strategies.base import FitResult, GlobalModelStrategy
from rvfedprs.training.glm import GLM_FEATURES, glm_width

__all__ = ["PENALIZE", "FedGLM", "NewtonSearch", "glm_dimensions", "penalty_vector"]

#: What the L2 penalty applies to: ``rare`` — only the rare-variant features (the floor's
#: intercept, PRS and covariates are fitted unpenalised, as in a burden test's null model);
#: ``all`` — every coefficient but the intercept (scikit-learn's ``LogisticRegression``).
PENALIZE = ("rare", "all")


def penalty_vector(size: int, l2: float, penalize: str, n_covariates: int) -> np.ndarray:
    """λ per coefficient of [1, PRS, covariates, rare features...] under ``penalize``."""
    if penalize not in PENALIZE:
        raise ValueError(f"penalize {penalize!r} unknown; choose from {list(PENALIZE)}")
    penalty = np.full(size, float(l2))
    penalty[: 1 if penalize == "all" else 2 + n_covariates] = 0.0
    return penalty


def glm_dimensions(template: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """(n_covariates, n_rare) of a two-pathway model's parameters."""
    return (
        int(np.shape(template["common.fc0.weight"])[1]) - 1,
        int(np.shape(template["rare.input.weight"])[1]),
    )


class FedGLM(GlobalModelStrategy):
    """Federated Newton–Raphson for an L2-penalised logistic regression.

    Parameters
    ----------
    features : {"floor", "dosages", "burden"}
        ``floor``: [PRS, covariates]; ``dosages``: and every rare-variant dosage column;
        ``burden``: and the region burdens of ``burden``.
    l2 : float
        λ ≥ 0 of the penalty λ/2‖β‖², added to the summed log-loss (scikit-learn's
        ``C = 1/λ``; 0 is unpenalised).
    penalize : {"rare", "all"}
        The coefficients the penalty applies to (:data:`PENALIZE`): ``rare`` leaves the
        floor's (intercept, PRS, covariates) unpenalised, so a large λ shrinks the rare
        features towards the floor rather than the PRS towards 0; ``all`` is scikit-learn's.
    tol : float
        Converged when max |Newton step| < tol.
    max_features : int
        The most coefficients the dense Newton system may have (each site sends a p × p
        Hessian); more is refused with advice.
    burden : BurdenMap, optional
        The region map (:mod:`rvfedprs.burden`) of ``features: burden``; sent to every site
        with each round (it is public: the federation's variant set and the region file).
    """

    name = "fedglm"

    def __init__(
        self,
        *,
        features: str = "dosages",
        l2: float = 1.0,
        penalize: str = "rare",
        tol: float = 1e-10,
        max_features: int = 2000,
        burden: Any = None,
    ) -> None:
        super().__init__()
        if penalize not in PENALIZE:
            raise ValueError(f"penalize {penalize!r} unknown; choose from {list(PENALIZE)}")
        if (features == "burden") != (burden is not None):
            raise ValueError("features 'burden' needs a burden map, and only it takes one")
        if features not in GLM_FEATURES:
            raise ValueError(f"features {features!r} unknown; choose from {list(GLM_FEATURES)}")
        if not (np.isfinite(l2) and l2 >= 0):
            raise ValueError(f"l2 must be a finite number >= 0, got {l2}")
        if not tol > 0:
            raise ValueError(f"tol must be > 0, got {tol}")
        self.features = features
        self.l2 = float(l2)
        self.penalize = penalize
        self.tol = float(tol)
        self.max_features = int(max_features)
        self.burden = burden
        self._burden_config = None if burden is None else burden.to_config()
        self.template: Parameters = {}
        self.coef = np.zeros(0)
        self._reset_search()

    def _reset_search(self) -> None:
        self.search = NewtonSearch(self.tol)
        self._noise = 0.0

    @property
    def iterations(self) -> int:
        """Newton rounds taken."""
        return self.search.iterations

    @property
    def converged(self) -> bool:
        """Whether the last accepted step was below the tolerance."""
        return self.search.converged

    @property
    def last_step(self) -> float:
        """Largest entry of the last step."""
        return self.search.last_step

    # --- rounds ----------------------------------------------------------------------------
    def initialize(self, global_parameters, client_ids):
        """Start from β = 0 for the network ``global_parameters`` describes (its input widths).

        Raises
        ------
        ConfigError
            When the GLM would have more than ``max_features`` coefficients.
        """
        self.template = copy_parameters(global_parameters)
        self.client_ids = sorted(client_ids)
        n_covariates, n_rare = glm_dimensions(self.template)
        n_burden = 0
        if self.burden is not None:
            n_burden = self.burden.n_regions
            if self.burden.matrix.shape[0] != n_rare:
                raise ConfigError(
                    f"the burden map has {self.burden.matrix.shape[0]} variant rows but the "
                    f"federation {n_rare} rare-variant columns"
                )
        width = glm_width(self.features, n_covariates, n_rare, n_burden)
        if width > self.max_features:
            raise ConfigError(
                f"a GLM on {self.features} has {width} coefficients, more than max_features "
                f"{self.max_features} (each site would send a {width} x {width} Hessian); use "
                "features: floor, or raise fedglm.max_features"
            )
        self.coef = np.zeros(width)
        self._reset_search()
        self.parameters = self._message(self.coef)

    def _message(self, coef: np.ndarray) -> Parameters:
        width = coef.size
        return {
            "glm.coef": np.asarray(coef, dtype=np.float64).copy(),
            "glm.gradient": np.zeros(width),
            "glm.hessian": np.zeros((width, width)),
        }

    @property
    def finished(self) -> bool:
        """True once the Newton iterations have converged (the engine stops the run)."""
        return self.converged

    def client_config(self, server_round: int) -> dict[str, Any]:
        """Every site computes its GLM sums on ``features``."""
        glm: dict[str, Any] = {"features": self.features, "hessian": True}
        if self._burden_config is not None:
            glm["burden"] = self._burden_config
        return {"glm": glm}

    def aggregate_fit(self, server_round, results):
        """Newton step from the n_k-weighted average of the sites' statistics."""
        self._n_total = float(sum(r.n_samples for r in results))
        self._mean_loss = _mean_loss(results)
        self._noise = 0.0
        super().aggregate_fit(server_round, results)

    def aggregate_sums(self, server_round, results, sums):
        """Newton step from the secure sum (its quantisation error bounds the tolerance)."""
        self._n_total = float(sum(r.n_samples for r in results))
        self._mean_loss = _mean_loss(results)
        self._noise = float(sums["model"].error_bound) / max(float(sums["model"].weight), 1e-300)
        super().aggregate_sums(server_round, results, sums)

    def server_update(self, server_round: int, average: Parameters) -> Parameters:
        """The next coefficients to evaluate (a Newton step, or a halved one)."""
        sent = self.parameters
        beta = np.asarray(sent["glm.coef"], dtype=np.float64)
        n = self._n_total
        gradient = n * (np.asarray(average["glm.gradient"]) - sent["glm.gradient"])
        hessian = n * (np.asarray(average["glm.hessian"]) - sent["glm.hessian"])
        n_covariates = glm_dimensions(self.template)[0]
        penalty = penalty_vector(beta.size, self.l2, self.penalize, n_covariates)
        self.coef = self.search.step(
            beta, n * self._mean_loss, gradient, hessian, penalty, noise=n * self._noise
        )
        return self._message(self.search.next_point)

    # --- the fitted model ------------------------------------------------------------------
    def network_parameters(self, coef: np.ndarray | None = None) -> Parameters:
        """Two-pathway parameters whose logit equals the GLM's (``coef`` default: the fit)."""
        coef = self.coef if coef is None else np.asarray(coef, dtype=np.float64)
        n_covariates, _ = glm_dimensions(self.template)
        common = coef[1 : 2 + n_covariates]
        rare = coef[2 + n_covariates :] if self.features != "floor" else None
        if self.burden is not None:
            rare = self.burden.matrix @ rare  # a burden GLM is linear in the dosages
        return linear_parameters(
            self.template, intercept=float(coef[0]), common_coef=common, rare_coef=rare
        )

    def parameters_for(self, client_id):
        """The fitted GLM as network parameters, whoever asks.

        Before the first Newton step, the network the run started from (the floor, when the
        task fitted it): a validation choice (:class:`~rvfedprs.evaluation.selection.BestRound`)
        sees the floor as its round-0 candidate, not the all-zero model.
        """
        if self.search.iterations == 0:
            return copy_parameters(self.template)
        return self.network_parameters()

    def state_dict(self):
        """Coefficients, the search state and the network template."""
        state = super().state_dict()
        state.update(
            template=copy_parameters(self.template),
            coef=self.coef.copy(),
            search=self.search.state_dict(),
        )
        return state

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict`."""
        super().load_state_dict(state)
        self.template = copy_parameters(state["template"])
        self.coef = np.asarray(state["coef"], dtype=np.float64).copy()
        self.search = NewtonSearch.from_state_dict(state["search"])

    def summary(self) -> dict[str, Any]:
        """``coef``, ``iterations``, ``converged`` and the last step's size."""
        return {
            "coef": self.coef.tolist(),
            "iterations": self.iterations,
            "converged": self.converged,
            "last_step": self.last_step,
        }


class NewtonSearch:
    """Damped Newton iterations on a penalised objective whose sums arrive one point a round.

    Each round brings the objective, gradient and Hessian at the point sent last. A point that
    made the objective worse is rejected: the next is half the previous step from the best
    point; otherwise the full Newton step is taken from it. Converged when the largest entry of
    an accepted step is below ``tol`` (plus what the sums' noise allows, under secure
    aggregation).

    Attributes
    ----------
    fit : array
        The best point evaluated, moved by its Newton step (the current estimate).
    next_point : array
        The point to evaluate next.
    """

    def __init__(self, tol: float) -> None:
        self.tol = float(tol)
        self.best: dict[str, Any] | None = None  # point, objective, direction
        self.scale = 1.0
        self.iterations = 0
        self.converged = False
        self.last_step = 0.0
        self.next_point = np.zeros(0)

    def step(
        self,
        point: np.ndarray,
        objective_loss: float,
        gradient: np.ndarray,
        hessian: np.ndarray,
        penalty: np.ndarray,
        *,
        noise: float = 0.0,
    ) -> np.ndarray:
        """Take the round's sums at ``point``; returns the current estimate.

        Parameters
        ----------
        point : array, shape (p,)
            Where the sums were taken (the point sent).
        objective_loss : float
            Σ log-loss at ``point`` (the penalty is added here).
        gradient, hessian : arrays, shapes (p,), (p, p)
            Σ of the log-loss's gradient and Hessian at ``point``.
        penalty : array, shape (p,)
            λ per coefficient (0: unpenalised).
        noise : float
            Largest error of an entry of the summed statistics (secure sums), else 0.
        """
        point = np.asarray(point, dtype=np.float64)
        objective = objective_loss + 0.5 * float(np.sum(penalty * point * point))
        self.iterations += 1
        best = self.best
        if best is not None and objective > best["objective"] * (1 + 1e-12) + 1e-12:
            self.scale *= 0.5  # the point made the objective worse: halve the step
            self.next_point = best["point"] - self.scale * best["direction"]
            self.last_step = float(np.max(np.abs(self.scale * best["direction"])))
            return best["point"].copy()
        system = 0.5 * (hessian + hessian.T) + np.diag(penalty)
        direction = _solve(system, gradient + penalty * point)
        self.best = {"point": point, "objective": objective, "direction": direction}
        self.scale = 1.0
        self.next_point = point - direction
        self.last_step = float(np.max(np.abs(direction)))
        allowed = self.tol
        if noise > 0:  # secure sums: the statistics carry quantisation error ≤ noise
            allowed += 10.0 * noise * float(np.abs(np.linalg.pinv(system)).sum(axis=1).max())
        self.converged = self.last_step < allowed
        return self.next_point.copy()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NewtonSearch):
            return NotImplemented
        return _same(self.state_dict(), other.state_dict())

    __hash__ = None  # mutable

    def state_dict(self) -> dict[str, Any]:
        """The search state (arrays, numbers)."""
        best = None
        if self.best is not None:
            best = {k: np.array(v, copy=True) if isinstance(v, np.ndarray) else v
                    for k, v in self.best.items()}  # fmt: skip
        return {"tol": self.tol, "best": best, "scale": self.scale, "iterations": self.iterations,
                "converged": self.converged, "last_step": self.last_step,
                "next_point": self.next_point.copy()}  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> NewtonSearch:
        """Inverse of :meth:`state_dict`."""
        search = cls(float(state["tol"]))
        best = state.get("best")
        search.best = None if best is None else {
            "point": np.asarray(best["point"], np.float64),
            "objective": float(best["objective"]),
            "direction": np.asarray(best["direction"], np.float64),
        }  # fmt: skip
        search.scale, search.iterations = float(state["scale"]), int(state["iterations"])
        search.converged, search.last_step = bool(state["converged"]), float(state["last_step"])
        search.next_point = np.asarray(state["next_point"], np.float64)
        return search


def _same(a: Any, b: Any) -> bool:
    """Equality of nested dicts holding arrays."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _mean_loss(results: Sequence[FitResult]) -> float:
    n = np.array([r.n_samples for r in results], dtype=np.float64)
    return float(np.average([r.metrics["loss"] for r in results], weights=n))


def _solve(system: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """system⁻¹ rhs by Cholesky, falling back to least squares for a singular system."""
    try:
        factor = np.linalg.cholesky(system)
        return np.linalg.solve(factor.T, np.linalg.solve(factor, rhs))
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(system, rhs, rcond=None)[0]
