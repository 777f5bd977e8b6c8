"""FedGLM: an L2-penalised logistic regression fitted exactly by federated Newton iterations.

What a consortium gets if federation costs nothing (SPEC §7): the pooled L2-penalised logistic
regression on [1, PRS, covariates (, rare features)] — by default with the penalty on
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

The rare features are every dosage column, region burdens, the dosages of the top-k variants,
or burdens and top-k dosages (``features``, :data:`~rvfedprs.training.glm.GLM_FEATURES`). With
top-k features the fit has two phases: the floor's Newton rounds, which also carry the sites'
score sums, until the floor converged and the server chose the k variants
(:class:`~rvfedprs.strategies.top_variants.FloorScreen`); then the Newton rounds of the whole
GLM, starting from the floor (its rare coefficients 0). ``features: floor`` with ``top_k`` is the
first phase alone: the floor, whose rounds also choose the k variants (:attr:`top`) — the warm
start of a network reading top-k dosages (``model.rare_input``, :mod:`rvfedprs.genomic.task`).

**Candidates are converged fits** (:mod:`rvfedprs.strategies.penalty_path`): Newton starts
from the floor the run started from (its coefficients read off the network,
:func:`rvfedprs.model.linear_floor`; β = 0 without one), ``l2`` may be a path of λ fitted
largest first, each from the previous fit, and every round serves the last converged fit
(before the first, the floor) — a validation choice over rounds never keeps a half-way iterate.

The fitted model is served as two-pathway network parameters
(:func:`rvfedprs.model.linear_parameters`) whose logit is exactly the GLM's, so every evaluation,
checkpoint and engine treats it as any other strategy's model. With ``features: floor`` it is
the PRS-plus-covariates floor every network starts from (:mod:`rvfedprs.genomic.task`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.architecture import linear_floor, linear_parameters
from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies.aggregation import Parameters, copy_parameters
from rvfedprs.strategies.base import FitResult, GlobalModelStrategy
from rvfedprs.strategies.burden_delivery import BurdenDelivery
from rvfedprs.strategies.newton import NewtonSearch
from rvfedprs.strategies.penalty_path import PenaltyPath
from rvfedprs.strategies.top_variants import FloorScreen, ScreenedGLM
from rvfedprs.training.glm import (
    BURDEN_FEATURES,
    GLM_FEATURES,
    TOP_K_FEATURES,
    glm_width,
    resolved_top_k,
)

__all__ = [
    "PENALIZE",
    "FedGLM",
    "NewtonSearch",
    "glm_dimensions",
    "glm_message",
    "penalty_vector",
    "check_glm_features",
    "narrower_glm",
    "check_top_k",
    "rare_dosage_coef",
]

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


def glm_message(coef: np.ndarray) -> Parameters:
    """A GLM round's message: the coefficients to evaluate and zeroed statistics to fill."""
    width = np.size(coef)
    return {
        "glm.coef": np.asarray(coef, dtype=np.float64).copy(),
        "glm.gradient": np.zeros(width),
        "glm.hessian": np.zeros((width, width)),
    }


def glm_dimensions(template: Mapping[str, np.ndarray]) -> tuple[int, int]:
    """(n_covariates, n_rare) of a two-pathway model's parameters."""
    return (
        int(np.shape(template["common.fc0.weight"])[1]) - 1,
        int(np.shape(template["rare.input.weight"])[1]),
    )


def narrower_glm(features: str, top_k: int) -> str:
    """What to change when a GLM on ``features`` has more coefficients than ``max_features``."""
    raise_it = "or raise fedglm.max_features"
    if features == "dosages":
        return (
            "collapse the rare variants with fedglm.features: top_k (the default, 30 variants), "
            f"burden or burden+top_k, {raise_it}"
        )
    if features == "burden":
        return f"use fewer, larger burden regions or fedglm.features: top_k, {raise_it}"
    if features in TOP_K_FEATURES:
        regions = " or fewer burden regions" if features == "burden+top_k" else ""
        return f"lower fedglm.top_k (now {top_k}){regions}, {raise_it}"
    return raise_it


def check_glm_features(features: str, burden: Any, top_k: int) -> None:
    """Refuse ``features`` without what they need (a burden map, k ≥ 1) or with what they don't.

    Raises
    ------
    ValueError
        Naming the features and the value at fault.
    """
    if features not in GLM_FEATURES:
        raise ValueError(f"features {features!r} unknown; choose from {list(GLM_FEATURES)}")
    if features in BURDEN_FEATURES and burden is None:
        raise ValueError(f"features {features!r} needs a burden map (the burden section)")
    if features not in BURDEN_FEATURES and burden is not None:
        raise ValueError(
            f"features {features!r} takes no burden map (only {list(BURDEN_FEATURES)} do)"
        )
    if isinstance(top_k, bool) or int(top_k) != top_k or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0, got {top_k!r}")
    if features in TOP_K_FEATURES and top_k < 1:
        raise ValueError(f"features {features!r} need top_k >= 1 variants, got top_k {top_k}")
    if features not in (*TOP_K_FEATURES, "floor") and top_k > 0:
        raise ValueError(
            f"top_k {top_k} is used only by features {list(TOP_K_FEATURES)} (and floor, whose "
            f"rounds then choose the variants), not {features!r}"
        )


def check_top_k(top_k: int, n_rare: int) -> None:
    """Refuse more top-k variants than the federation's rare-variant columns (ConfigError)."""
    if top_k > n_rare:
        raise ConfigError(
            f"fedglm.top_k {top_k} is more than the federation's {n_rare} rare variants"
        )


def rare_dosage_coef(
    rare: np.ndarray, features: str, burden: Any, top: np.ndarray | None, n_rare: int
) -> np.ndarray:
    """A GLM's rare coefficients as coefficients of the dosages (it is linear in them).

    Burden coefficients β_b become B β_b; top-k coefficients land on their variants' columns;
    a variant in a burden and in the top k gets both.
    """
    rare = np.asarray(rare, dtype=np.float64)
    if features == "dosages":
        return rare
    out = np.zeros(int(n_rare))
    n_burden = 0
    if features in BURDEN_FEATURES:
        n_burden = burden.n_regions
        out += burden.matrix @ rare[:n_burden]
    if features in TOP_K_FEATURES:
        np.add.at(out, np.asarray(top, dtype=np.int64), rare[n_burden:])
    return out


class FedGLM(ScreenedGLM, GlobalModelStrategy):
    """Federated Newton–Raphson for an L2-penalised logistic regression.

    Parameters
    ----------
    features : {"floor", "dosages", "burden", "top_k", "burden+top_k"}
        ``floor``: [PRS, covariates]; ``dosages``: and every rare-variant dosage column;
        ``burden``: and the region burdens of ``burden``; ``top_k``: and the dosages of the
        ``top_k`` variants chosen by score test under the floor; ``burden+top_k``: the burdens,
        then those dosages.
    l2 : float or sequence of float
        λ ≥ 0 of the penalty λ/2‖β‖², added to the summed log-loss (scikit-learn's
        ``C = 1/λ``; 0 is unpenalised); several: a path, fitted largest first, each from the
        previous converged fit, each fit a candidate (:attr:`path`).
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
        The region map (:mod:`rvfedprs.burden`) of the burden features (public: the
        federation's variant set and the region file); sent to each site once per run,
        later rounds naming it by fingerprint (:mod:`rvfedprs.strategies.burden_delivery`).
    top_k : int, optional
        k of the top-k features (None: 30 with them, 0 otherwise): the variants with the
        largest score statistic U² / V under the floor on the pooled training data
        (:mod:`rvfedprs.strategies.top_variants`). With ``features: floor``, the floor's rounds
        choose them (:attr:`top`) and the fit ends there.
    selection, l2_cluster
        FedCE-GLM's per-cluster options (:class:`~rvfedprs.strategies.fedce_glm.FedCEGLM`):
        a global model has no clusters, so only their defaults ("pooled", None) are taken.
    """

    name = "fedglm"
    tuning_axes = {"fedglm.top_k": [10, 30, 100]}
    #: λ coarse to fine: every tuning trial fits the whole path (rvfedprs.strategies.penalty_path).
    tuning_path = {"fedglm.l2": [30000.0, 3000.0, 300.0, 30.0, 3.0, 0.3]}

    def __init__(
        self,
        *,
        features: str = "top_k",
        l2: float | Sequence[float] = 1.0,
        penalize: str = "rare",
        tol: float = 1e-10,
        max_features: int = 2000,
        burden: Any = None,
        top_k: int | None = None,
        selection: str = "pooled",
        l2_cluster: float | Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        if selection != "pooled":
            raise ValueError(
                f"fedglm.selection {selection!r} ranks variants per cluster: strategy fedce_glm "
                "takes it, the global fedglm has no clusters"
            )
        if l2_cluster is not None:
            raise ValueError(
                f"fedglm.l2_cluster {l2_cluster} pools per-cluster effects: strategy fedce_glm "
                "takes it, the global fedglm has no clusters"
            )
        self.selection, self.l2_cluster = selection, l2_cluster
        if penalize not in PENALIZE:
            raise ValueError(f"penalize {penalize!r} unknown; choose from {list(PENALIZE)}")
        top_k = resolved_top_k(features, top_k)
        check_glm_features(features, burden, top_k)
        self.path = PenaltyPath(l2)  # refuses a negative, infinite or empty l2
        if not tol > 0:
            raise ValueError(f"tol must be > 0, got {tol}")
        self.features = features
        self.penalize = penalize
        self.tol = float(tol)
        self.max_features = int(max_features)
        self.burden = burden
        self._delivery = None if burden is None else BurdenDelivery(burden)
        self.top_k = int(top_k)
        self.template: Parameters = {}
        self.coef = np.zeros(0)
        self._reset_search()

    def _reset_search(self) -> None:
        self.search = NewtonSearch(self.tol)
        self.path.restart()
        self.screen: FloorScreen | None = None
        self._noise = 0.0

    @property
    def l2(self) -> float:
        """The λ being fitted (the path's current one)."""
        return self.path.l2

    @property
    def iterations(self) -> int:
        """Newton rounds taken (the floor's before the top-k choice included)."""
        return self.search.iterations + (0 if self.screen is None else self.screen.iterations)

    @property
    def _fit_search(self) -> NewtonSearch:
        """The Newton search of the final coefficients (a screened floor's is the screen's)."""
        if self.features == "floor" and self.screen is not None:
            return self.screen.search
        return self.search

    @property
    def converged(self) -> bool:
        """Whether the last accepted step was below the tolerance."""
        return self._fit_search.converged

    @property
    def last_step(self) -> float:
        """Largest entry of the last step."""
        return self._fit_search.last_step

    # --- rounds ----------------------------------------------------------------------------
    def initialize(self, global_parameters, client_ids):
        """Start from the floor ``global_parameters`` holds (β = 0 without one), rare part 0.

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
        check_top_k(self.top_k, n_rare)
        width = glm_width(self.features, n_covariates, n_rare, n_burden, self.top_k)
        if width > self.max_features:
            raise ConfigError(
                f"a GLM on {self.features} has {width} coefficients, more than max_features "
                f"{self.max_features} (each site would send a {width} x {width} Hessian); "
                + narrower_glm(self.features, self.top_k)
            )
        floor = linear_floor(self.template)
        start = np.zeros(2 + n_covariates) if floor is None else floor
        self.coef = np.concatenate([start, np.zeros(width - start.size)])
        self._reset_search()
        self.search.next_point = self.coef.copy()
        if self._delivery is not None:  # a new run: no site holds the map yet
            self._delivery.holders.clear()
        self.parameters = glm_message(self.coef)
        if self.top_k > 0:  # the floor's rounds first, then the top-k choice (and the rest)
            self.screen = FloorScreen(self.top_k, 2 + n_covariates, n_rare, self.tol, start=start)
            self.coef = start.copy()
            self.parameters = self.screen.message()

    @property
    def finished(self) -> bool:
        """True once every λ of the path converged (the engine stops the run)."""
        return self.path.done

    def client_config(self, server_round: int) -> dict[str, Any]:
        """Every site's GLM sums on ``features`` (top-k: the floor's and scores first)."""
        if self.screening:
            return {"glm": FloorScreen.config()}
        glm: dict[str, Any] = {"features": self.features, "hessian": True}
        if self.top is not None:
            glm["top_k"] = self.top.tolist()
        return {"glm": glm}

    def configure_fit(self, server_round, client_ids):
        """Every site's GLM instruction; the burden map only to sites not known to hold it."""
        instructions = super().configure_fit(server_round, client_ids)
        return instructions if self._delivery is None else self._delivery.attach(instructions)

    def aggregate_fit(self, server_round, results):
        """Newton step from the n_k-weighted average of the sites' statistics."""
        self._received(results)
        self._n_total = float(sum(r.n_samples for r in results))
        self._mean_loss = _mean_loss(results)
        self._noise = 0.0
        super().aggregate_fit(server_round, results)

    def aggregate_sums(self, server_round, results, sums):
        """Newton step from the secure sum (its quantisation error bounds the tolerance)."""
        self._received(results)
        self._n_total = float(sum(r.n_samples for r in results))
        self._mean_loss = _mean_loss(results)
        self._noise = float(sums["model"].error_bound) / max(float(sums["model"].weight), 1e-300)
        super().aggregate_sums(server_round, results, sums)

    def _received(self, results: Sequence[FitResult]) -> None:
        if self._delivery is not None:
            self._delivery.received(r.client_id for r in results)

    def server_update(self, server_round: int, average: Parameters) -> Parameters:
        """The next coefficients to evaluate (a Newton step, or a halved one)."""
        sent = self.parameters
        beta = np.asarray(sent["glm.coef"], dtype=np.float64)
        n = self._n_total
        if self.screening:
            self.screen.step(sent, {0: (average, n)}, n * self._mean_loss, noise=n * self._noise)
            self.coef = self.screen.estimate
            if not self.screen.done:
                return self.screen.message()
            if self.features == "floor":  # the screened floor is the fit
                self.path.converged(self.coef.copy(), server_round)
            n_burden = 0 if self.burden is None else self.burden.n_regions
            dimensions = glm_dimensions(self.template)
            width = glm_width(self.features, *dimensions, n_burden, self.top_k)
            self.coef = np.concatenate([self.coef, np.zeros(width - self.coef.size)])
            return glm_message(self.coef)  # the whole GLM, from the floor (or the floor)
        gradient = n * (np.asarray(average["glm.gradient"]) - sent["glm.gradient"])
        hessian = n * (np.asarray(average["glm.hessian"]) - sent["glm.hessian"])
        n_covariates = glm_dimensions(self.template)[0]
        penalty = penalty_vector(beta.size, self.l2, self.penalize, n_covariates)
        self.coef = self.search.step(
            beta, n * self._mean_loss, gradient, hessian, penalty, noise=n * self._noise
        )
        if self.search.converged and self.path.converged(self.coef.copy(), server_round):
            self.search = NewtonSearch(self.tol)  # the next λ, from this fit
            self.search.next_point = self.coef.copy()
        return glm_message(self.search.next_point)

    # --- the fitted model ------------------------------------------------------------------
    def network_parameters(self, coef: np.ndarray | None = None) -> Parameters:
        """Two-pathway parameters whose logit equals the GLM's (``coef`` default: the fit)."""
        coef = self.coef if coef is None else np.asarray(coef, dtype=np.float64)
        n_covariates, n_rare = glm_dimensions(self.template)
        common = coef[1 : 2 + n_covariates]
        rare = None
        if coef.size > 2 + n_covariates:  # not the floor (nor the floor's rounds of top-k)
            rare = rare_dosage_coef(coef[2 + n_covariates :], self.features, self.burden,
                                    self.top, n_rare)  # fmt: skip
        return linear_parameters(
            self.template, intercept=float(coef[0]), common_coef=common, rare_coef=rare
        )

    def parameters_for(self, client_id):
        """The fitted GLM as network parameters, whoever asks.

        The last converged fit of the path; before it, the network the run started from (the
        floor, when the task fitted it): a validation choice
        (:class:`~rvfedprs.evaluation.selection.BestRound`) sees the floor and converged fits
        only, never a half-way Newton iterate nor the all-zero model.
        """
        if self.path.latest is None:
            return copy_parameters(self.template)
        return self.network_parameters(self.path.latest)

    def state_dict(self):
        """Coefficients, the search state and the network template."""
        state = super().state_dict()
        state.update(
            template=copy_parameters(self.template),
            coef=self.coef.copy(),
            search=self.search.state_dict(),
            path=self.path.state_dict(),
            screen=None if self.screen is None else self.screen.state_dict(),
        )
        return state

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict`."""
        super().load_state_dict(state)
        self.template = copy_parameters(state["template"])
        self.coef = np.asarray(state["coef"], dtype=np.float64).copy()
        self.search = NewtonSearch.from_state_dict(state["search"])
        self.path = PenaltyPath.from_state_dict(state["path"])
        screen = state.get("screen")
        self.screen = None if screen is None else FloorScreen.from_state_dict(screen)

    def summary(self) -> dict[str, Any]:
        """``coef``, ``iterations``, ``converged``, the last step, ``path`` (and ``top_k``).

        ``path`` lists the converged fits' λ and rounds.
        """
        out = {
            "coef": self.coef.tolist(),
            "iterations": self.iterations,
            "converged": self.converged,
            "last_step": self.last_step,
            "path": self.path.summary(),
        }
        if self.top is not None:
            out["top_k"] = self.top.tolist()
        return out


def _mean_loss(results: Sequence[FitResult]) -> float:
    n = np.array([r.n_samples for r in results], dtype=np.float64)
    return float(np.average([r.metrics["loss"] for r in results], weights=n))
