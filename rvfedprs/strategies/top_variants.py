"""The top-k rare variants by score test under the floor, chosen on federated sums.

A GLM on ``top_k`` (or ``burden+top_k``) features adds the dosages of the k rare variants most
associated with the outcome beyond the floor (PRS + covariates), chosen on the training data of
every site together. The floor model is fitted first, by the same federated Newton rounds as any
GLM (:class:`~rvfedprs.strategies.newton.NewtonSearch`, unpenalised); its rounds also carry each
site's score sums (:func:`rvfedprs.training.glm.score_sums`) at the coefficients sent, which add up
across sites exactly — in the clear or as a secure sum. At the round where the floor converged,
the server has, at the floor's coefficients β̂ and with p_i = σ(z_i β̂), w_i = p_i (1 − p_i):

- the efficient score U_j = Σ_i a_ij (y_i − p_i),
- its variance under the null, the **efficient information** (the nuisance parameters —
  intercept, PRS, covariates — projected out): V_j = Σ_i w_i a_ij² − c_jᵀ (Zᵀ W Z)⁻¹ c_j with
  c_j = Σ_i w_i z_i a_ij and Zᵀ W Z the floor's Hessian,

and ranks the variants by the score statistic U_j² / V_j (a 1-df χ² under the null). The k
largest are kept, ties broken by the lower column index, so the choice is deterministic and
equals the ranking on the pooled data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.strategies.aggregation import Parameters
from rvfedprs.strategies.newton import NewtonSearch
from rvfedprs.training.glm import SCORE_TENSORS

__all__ = ["score_test", "top_variants", "FloorScreen", "ScreenedGLM"]

#: A variance below this share of the largest is taken as 0 (a variant nobody carries, or one
#: the floor's columns explain entirely): its statistic is 0.
_RELATIVE_VARIANCE_FLOOR = 1e-12


def score_test(
    score: np.ndarray, information: np.ndarray, cross: np.ndarray, floor_hessian: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(U, V): the efficient scores and their variances from the summed statistics.

    Parameters
    ----------
    score, information : arrays, shape (n_rare,)
        Σ U and Σ S of :func:`~rvfedprs.training.glm.score_sums`.
    cross : array, shape (n_floor, n_rare)
        Σ C = Zᵀ W A.
    floor_hessian : array, shape (n_floor, n_floor)
        Zᵀ W Z at the same coefficients.
    """
    cross = np.asarray(cross, dtype=np.float64)
    solved = np.linalg.lstsq(np.asarray(floor_hessian, np.float64), cross, rcond=None)[0]
    variance = np.asarray(information, np.float64) - np.einsum("ij,ij->j", cross, solved)
    return np.asarray(score, np.float64), variance


def top_variants(score: np.ndarray, variance: np.ndarray, k: int) -> np.ndarray:
    """The columns of the k largest U² / V, largest first (ties: lower column first).

    Raises
    ------
    ValueError
        When k is negative or more than the number of variants.
    """
    score, variance = np.asarray(score, np.float64), np.asarray(variance, np.float64)
    if not 0 <= int(k) <= score.size:
        raise ValueError(f"top_k must be in [0, {score.size}] (the rare variants), got {k}")
    statistic = score_statistic(score, variance)
    order = np.lexsort((np.arange(score.size), -statistic))  # last key sorts first
    return order[: int(k)].astype(np.int64)


def score_statistic(score: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """U² / V, 0 where V is (numerically) 0."""
    usable = variance > _RELATIVE_VARIANCE_FLOOR * max(float(np.max(variance, initial=0.0)), 1e-300)
    statistic = np.zeros(score.size)
    statistic[usable] = score[usable] ** 2 / variance[usable]
    return statistic


class FloorScreen:
    """The floor's federated Newton fit whose rounds carry score sums; the top k at its end.

    Parameters
    ----------
    k : int
        The number of variants to keep.
    n_floor : int
        Coefficients of the floor (intercept, PRS, covariates).
    n_rare : int
        Rare-variant columns.
    tol : float
        The floor's Newton tolerance.
    start : array, optional
        Where the floor's Newton iterations start (the floor the run started from); zeros
        without it.

    Attributes
    ----------
    floor : array or None
        The coefficients the chosen scores were taken at (the converged floor).
    score, variance : arrays or None
        U and V there (:func:`score_test`).
    selected : array of int or None
        The top-k columns, largest statistic first; None until the floor converged.
    """

    def __init__(
        self, k: int, n_floor: int, n_rare: int, tol: float, *, start: np.ndarray | None = None
    ) -> None:
        self.k, self.n_floor, self.n_rare = int(k), int(n_floor), int(n_rare)
        self.search = NewtonSearch(tol)
        self.search.next_point = (
            np.zeros(self.n_floor) if start is None else np.asarray(start, np.float64).copy()
        )
        self.floor: np.ndarray | None = None
        self.score: np.ndarray | None = None
        self.variance: np.ndarray | None = None
        self.selected: np.ndarray | None = None

    @property
    def done(self) -> bool:
        """True once the floor converged and the top k are chosen."""
        return self.selected is not None

    @property
    def iterations(self) -> int:
        """Floor rounds taken."""
        return self.search.iterations

    @property
    def estimate(self) -> np.ndarray:
        """The floor's current coefficients."""
        return self.search.next_point.copy()

    def message(self) -> Parameters:
        """The next floor round's tensors: coefficients, zeroed statistics and score sums."""
        q, p = self.n_floor, self.n_rare
        return {
            "glm.coef": self.search.next_point.astype(np.float64).copy(),
            "glm.gradient": np.zeros(q),
            "glm.hessian": np.zeros((q, q)),
            "glm.score": np.zeros(p),
            "glm.score_information": np.zeros(p),
            "glm.score_cross": np.zeros((q, p)),
        }

    @staticmethod
    def config() -> dict[str, Any]:
        """A floor round's ``glm`` client config: floor sums plus score sums."""
        return {"features": "floor", "hessian": True, "score": True}

    def step(
        self,
        sent: Mapping[str, np.ndarray],
        average: Mapping[str, np.ndarray],
        n_total: float,
        loss: float,
        *,
        noise: float = 0.0,
    ) -> None:
        """Take a floor round's pooled per-sample statistics (sent + Σ sums / N).

        Parameters
        ----------
        sent, average : mappings
            The message sent and the n_k-weighted average of the replies.
        n_total : float
            N, the samples summed.
        loss : float
            Σ log-loss at the coefficients sent.
        noise : float
            Largest error of an entry of the summed statistics (secure sums), else 0.
        """

        def summed(name: str) -> np.ndarray:
            return n_total * (np.asarray(average[name], np.float64) - sent[name])

        point = np.asarray(sent["glm.coef"], np.float64)
        hessian = summed("glm.hessian")
        penalty = np.zeros(point.size)  # the floor is unpenalised
        self.search.step(point, loss, summed("glm.gradient"), hessian, penalty, noise=noise)
        if self.search.converged:
            score, information, cross = (summed(name) for name in SCORE_TENSORS)
            self.score, self.variance = score_test(score, information, cross, hessian)
            self.floor = point.copy()
            self.selected = top_variants(self.score, self.variance, self.k)

    def state_dict(self) -> dict[str, Any]:
        """k, widths, the floor's search and what it chose."""

        def copy(value):
            return None if value is None else np.array(value, copy=True)

        return {
            "k": self.k, "n_floor": self.n_floor, "n_rare": self.n_rare,
            "search": self.search.state_dict(), "floor": copy(self.floor),
            "score": copy(self.score), "variance": copy(self.variance),
            "selected": copy(self.selected),
        }  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> FloorScreen:
        """Inverse of :meth:`state_dict`."""
        screen = cls(int(state["k"]), int(state["n_floor"]), int(state["n_rare"]), 1.0)
        screen.search = NewtonSearch.from_state_dict(state["search"])
        for name in ("floor", "score", "variance"):
            value = state.get(name)
            setattr(screen, name, None if value is None else np.asarray(value, np.float64))
        selected = state.get("selected")
        screen.selected = None if selected is None else np.asarray(selected, np.int64)
        return screen


class ScreenedGLM:
    """The views of a GLM strategy's top-k screen, shared by FedGLM and FedCE-GLM.

    The strategy holds ``screen``: a :class:`FloorScreen`, or None without top-k features.
    """

    screen: FloorScreen | None

    @property
    def top(self) -> np.ndarray | None:
        """The top-k variants' columns once chosen (largest statistic first), else None."""
        return None if self.screen is None else self.screen.selected

    @property
    def screening(self) -> bool:
        """True while the floor's rounds (before the top k are chosen) run."""
        return self.screen is not None and not self.screen.done
