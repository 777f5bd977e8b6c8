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

**Heterogeneous selection** (``selection: clusters`` or ``both``, FedCE-GLM): with opposite
effects in two ancestry groups the pooled U_j sums to ≈ 0, so a pooled ranking misses exactly
the variants a per-cluster model needs (issue 40). The floor's rounds are then summed per
cluster (the clusters of the sites' Bloom filters at the floor, one secure sum per cluster),
and each variant is ranked by the heterogeneous score test of
:mod:`rvfedprs.association` — U_·jᵀ Σ_j⁺ U_·j over the clusters' scores U_m,j, with
Σ_j[m, m'] = δ_mm' S_m,j − c_m,jᵀ H⁻¹ c_m',j (the floor fitted on everybody couples the
clusters), a χ² with rank(Σ_j) degrees of freedom — by its p-value; ``both`` ranks by the
Bonferroni minimum 2 · min(p_pooled, p_clusters), so a shared effect and a flipped one both
rank high. k is the knob to choose on validation (a grid over ``fedglm.top_k``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.association.gene_tests import quadratic_test
from rvfedprs.association.scores import floor_dispersion, group_covariances
from rvfedprs.strategies.aggregation import Parameters
from rvfedprs.strategies.newton import NewtonSearch
from rvfedprs.training.glm import SCORE_TENSORS

__all__ = [
    "SELECTIONS",
    "score_test",
    "top_variants",
    "heterogeneous_log_p",
    "ranked_variants",
    "FloorScreen",
    "ScreenedGLM",
]

#: How the top k are ranked: ``pooled`` — U² / V on every site together; ``clusters`` — the
#: heterogeneous score test over the clusters' scores; ``both`` — the Bonferroni minimum of the
#: two p-values.
SELECTIONS = ("pooled", "clusters", "both")

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
    return ranked_variants(-score_statistic(score, variance), k)


def score_statistic(score: np.ndarray, variance: np.ndarray) -> np.ndarray:
    """U² / V, 0 where V is (numerically) 0."""
    usable = variance > _RELATIVE_VARIANCE_FLOOR * max(float(np.max(variance, initial=0.0)), 1e-300)
    statistic = np.zeros(score.size)
    statistic[usable] = score[usable] ** 2 / variance[usable]
    return statistic


def heterogeneous_log_p(
    score: np.ndarray, information: np.ndarray, cross: np.ndarray, hessian: np.ndarray
) -> np.ndarray:
    """Each variant's log p-value of the heterogeneous score test over M groups (0: no carrier).

    Parameters
    ----------
    score, information : arrays, shape (M, p)
        Each group's Σ U and Σ S.
    cross : array, shape (M, q, p)
        Each group's Σ C.
    hessian : array, shape (q, q)
        The floor's Zᵀ W Z summed over every group.
    """
    from scipy import stats  # imported where a screen runs: not for every GLM or association

    score = np.asarray(score, np.float64)
    covariances = group_covariances(information, cross, hessian, np.arange(score.shape[1]))
    log_p = np.zeros(score.shape[1])
    for j, covariance in enumerate(covariances):
        statistic, _, df = quadratic_test(score[:, j], covariance)
        if df:
            log_p[j] = stats.chi2.logsf(statistic, df)
    return log_p


def ranked_variants(log_p: np.ndarray, k: int) -> np.ndarray:
    """The columns of the k smallest log p-values (or any key; ties: lower column first).

    Raises
    ------
    ValueError
        When k is negative or more than the number of variants.
    """
    log_p = np.asarray(log_p, np.float64)
    if not 0 <= int(k) <= log_p.size:
        raise ValueError(f"top_k must be in [0, {log_p.size}] (the rare variants), got {k}")
    return np.lexsort((np.arange(log_p.size), log_p))[: int(k)].astype(np.int64)  # last key first


def _pooled_log_p(score: np.ndarray, variance: np.ndarray) -> np.ndarray:
    from scipy import stats

    statistic = score_statistic(score, variance)
    return np.where(statistic > 0, stats.chi2.logsf(statistic, 1), 0.0)


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
    selection : {"pooled", "clusters", "both"}
        How the k are ranked (:data:`SELECTIONS`); the per-cluster ones need the rounds'
        sums per cluster (:meth:`step`).

    Attributes
    ----------
    floor : array or None
        The coefficients the chosen scores were taken at (the converged floor).
    score, variance : arrays or None
        The pooled U and V there (:func:`score_test`).
    group_score : array or None, shape (M, p)
        Each group's U there (one row when the rounds were summed over every site).
    log_p : array or None
        The log p-value each variant was ranked by (``selection``'s test).
    selected : array of int or None
        The top-k columns, most significant first; None until the floor converged.
    """

    def __init__(
        self,
        k: int,
        n_floor: int,
        n_rare: int,
        tol: float,
        *,
        start: np.ndarray | None = None,
        selection: str = "pooled",
    ) -> None:
        if selection not in SELECTIONS:
            raise ValueError(f"selection {selection!r} unknown; choose from {list(SELECTIONS)}")
        self.k, self.n_floor, self.n_rare = int(k), int(n_floor), int(n_rare)
        self.selection = selection
        self.search = NewtonSearch(tol)
        self.search.next_point = (
            np.zeros(self.n_floor) if start is None else np.asarray(start, np.float64).copy()
        )
        self.floor: np.ndarray | None = None
        self.score: np.ndarray | None = None
        self.variance: np.ndarray | None = None
        self.group_score: np.ndarray | None = None
        self.log_p: np.ndarray | None = None
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
        groups: Mapping[Any, tuple[Mapping[str, np.ndarray], float]],
        loss: float,
        *,
        noise: float = 0.0,
        estimates_dispersion: bool = False,
    ) -> None:
        """Take a floor round's statistics, summed per group (one group: every site).

        Parameters
        ----------
        sent : mapping
            The message sent.
        groups : mapping
            Per group (its label): the n_k-weighted average of its members' replies and n,
            their samples summed — the group's statistics are n × (average − sent).
        loss : float
            Σ log-loss at the coefficients sent, over every group.
        noise : float
            Largest error of an entry of the statistics summed over every group (secure
            sums), else 0.
        estimates_dispersion : bool
            A linear floor (a quantitative trait): the scores' covariance is φ times the summed
            information, φ = RSS / (n − q) (:func:`~rvfedprs.association.scores.floor_dispersion`)
            — it matters to the per-cluster test, whose degrees of freedom differ by variant.
        """
        labels = sorted(groups)

        def summed(name: str) -> np.ndarray:  # (M, ...) per group
            return np.stack([
                groups[m][1] * (np.asarray(groups[m][0][name], np.float64) - sent[name])
                for m in labels
            ])  # fmt: skip

        point = np.asarray(sent["glm.coef"], np.float64)
        hessian = summed("glm.hessian").sum(axis=0)
        penalty = np.zeros(point.size)  # the floor is unpenalised
        gradient = summed("glm.gradient").sum(axis=0)
        self.search.step(point, loss, gradient, hessian, penalty, noise=noise)
        if not self.search.converged:
            return
        score, information, cross = (summed(name) for name in SCORE_TENSORS)
        self.score, self.variance = score_test(score.sum(0), information.sum(0), cross.sum(0),
                                               hessian)  # fmt: skip
        self.group_score = score
        self.floor = point.copy()
        pooled = _pooled_log_p(self.score, self.variance)
        if self.selection == "pooled":
            self.log_p = pooled
            self.selected = top_variants(self.score, self.variance, self.k)
            return
        n = sum(float(groups[m][1]) for m in labels)
        phi = floor_dispersion(loss, n, self.n_floor, estimates_dispersion)
        clusters = heterogeneous_log_p(score, phi * information, phi * cross, phi * hessian)
        self.log_p = clusters if self.selection == "clusters" else np.minimum(
            0.0, np.log(2.0) + np.minimum(pooled, clusters))  # fmt: skip
        self.selected = ranked_variants(self.log_p, self.k)

    def state_dict(self) -> dict[str, Any]:
        """k, widths, the selection, the floor's search and what it chose."""

        def copy(value):
            return None if value is None else np.array(value, copy=True)

        return {
            "k": self.k, "n_floor": self.n_floor, "n_rare": self.n_rare,
            "selection": self.selection, "search": self.search.state_dict(),
            "floor": copy(self.floor), "score": copy(self.score),
            "variance": copy(self.variance), "group_score": copy(self.group_score),
            "log_p": copy(self.log_p), "selected": copy(self.selected),
        }  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> FloorScreen:
        """Inverse of :meth:`state_dict`."""
        screen = cls(int(state["k"]), int(state["n_floor"]), int(state["n_rare"]), 1.0,
                     selection=str(state.get("selection", "pooled")))  # fmt: skip
        screen.search = NewtonSearch.from_state_dict(state["search"])
        for name in ("floor", "score", "variance", "group_score", "log_p"):
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
