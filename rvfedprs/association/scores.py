"""Efficient scores and their null covariance from the summed association statistics.

With the floor's information H = Zᵀ W Z (pooled) and the sums of :mod:`rvfedprs.association.sums`
per group m — U_m, S_m, C_m, K_{m,g} — the scores of the rare columns with the floor's covariates
projected out have, under the null, the covariance

    Cov(U_m, U_m') = δ_mm' A_mᵀ W_m A_m − C_mᵀ H⁻¹ C_m'

(the floor is fitted once on everybody, so the projection couples the groups). Summed over the
groups this is the pooled Φ = Aᵀ W A − Cᵀ H⁻¹ C of a single pooled score test; kept apart it is
the covariance of the stacked per-group scores the heterogeneous tests use. Exactly what the
pooled data would give: the sums are the pooled sums.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np

from rvfedprs.association.sums import UnitLayout

__all__ = ["EfficientScores", "group_covariances", "floor_dispersion"]


def floor_dispersion(summed_loss: float, n_samples: float, n_floor: int, estimates: bool) -> float:
    """φ of the floor at its fit: 1 for a logistic floor; RSS / (n − q) for a linear one.

    A linear floor's summed loss is ½ RSS (:meth:`~rvfedprs.outcomes.base.Outcome.unit_loss`).
    """
    if not estimates:
        return 1.0
    return 2.0 * float(summed_loss) / max(float(n_samples) - int(n_floor), 1.0)


def group_covariances(
    information: np.ndarray, cross: np.ndarray, hessian: np.ndarray, columns: np.ndarray
) -> np.ndarray:
    """Cov(U_m,j, U_m',j) = δ_mm' S_m,j − c_m,jᵀ H⁻¹ c_m',j of each variant j of ``columns``.

    Parameters
    ----------
    information : array, shape (M, p)
        S_m, each group's Σ w a² (its diagonal information).
    cross : array, shape (M, q, p)
        C_m = Z_mᵀ W_m A_m.
    hessian : array, shape (q, q)
        H = Zᵀ W Z of the floor fitted on every group together (least squares where singular).
    columns : array of int
        The variants j.

    Returns
    -------
    array, shape (len(columns), M, M)
    """
    cols = np.asarray(columns, np.int64)
    c = np.asarray(cross, np.float64)[:, :, cols]  # (M, q, k)
    h = np.asarray(hessian, np.float64)
    solved = np.stack([np.linalg.lstsq(h, c[m], rcond=None)[0] for m in range(c.shape[0])])
    projected = np.einsum("mqj,nqj->jmn", c, solved)
    info = np.asarray(information, np.float64)[:, cols]
    return np.einsum("mj,mn->jmn", info, np.eye(c.shape[0])) - projected


class EfficientScores:
    """The summed statistics, and the scores and covariances the tests read.

    Parameters
    ----------
    sums : mapping
        The summed :data:`~rvfedprs.association.sums.ASSOCIATION_TENSORS`.
    floor_hessian : array, shape (q, q)
        H = Zᵀ W Z at the floor's coefficients, summed over the sites.
    layout : UnitLayout
        The units the blocks are of.
    dispersion : float
        φ of the floor model: 1 for a logistic floor, the residual variance RSS/(n − q) of a
        linear one, whose score variances are φ (S − cᵀ(ZᵀZ)⁻¹c): the information sums, the
        cross-information and H are scaled by it.
    """

    def __init__(
        self,
        sums: Mapping[str, np.ndarray],
        floor_hessian: np.ndarray,
        layout: UnitLayout,
        *,
        dispersion: float = 1.0,
    ) -> None:
        phi = float(dispersion)
        self.dispersion = phi
        self.score = np.asarray(sums["assoc.score"], np.float64)  # (M, p)
        self.information = phi * np.asarray(sums["assoc.information"], np.float64)
        self.cross = phi * np.asarray(sums["assoc.cross"], np.float64)  # (M, q, p)
        self.blocks = phi * np.asarray(sums["assoc.blocks"], np.float64)
        # counts arrive as (secure) sums: round away the quantisation error (a dosage MAC to
        # 0.001, finer than a .pgen dosage's 1/16384 summed over a few carriers needs)
        self.mac = np.round(np.asarray(sums["assoc.mac"], np.float64), 3)
        self.carriers = np.round(np.asarray(sums["assoc.carriers"], np.float64))
        self.samples = np.round(np.asarray(sums["assoc.samples"], np.float64))
        self.cases = np.round(np.asarray(sums["assoc.cases"], np.float64))
        self.hessian = phi * np.asarray(floor_hessian, np.float64)
        self.layout = layout
        self._solved = self._solve(self.cross.sum(axis=0))  # H⁻¹ C of the pooled C, (q, p)

    def _solve(self, rhs: np.ndarray) -> np.ndarray:
        """H⁻¹ rhs (least squares: H may be singular when a covariate is constant)."""
        return np.linalg.lstsq(self.hessian, rhs, rcond=None)[0]

    @property
    def n_groups(self) -> int:
        """M, the groups the sums are kept for."""
        return int(self.score.shape[0])

    @property
    def n_rare(self) -> int:
        """p, the rare-variant columns."""
        return int(self.score.shape[1])

    # --- single variants -------------------------------------------------------------------
    def pooled_variance(self) -> np.ndarray:
        """V_j = S_j − c_jᵀ H⁻¹ c_j of the pooled score of every variant, shape (p,)."""
        c = self.cross.sum(axis=0)
        return self.information.sum(axis=0) - np.einsum("qj,qj->j", c, self._solved)

    def group_covariances(self, columns: np.ndarray | None = None) -> np.ndarray:
        """Cov(U_m,j, U_m',j) for each variant: shape (p, M, M) (or of ``columns`` only)."""
        cols = np.arange(self.n_rare) if columns is None else columns
        return group_covariances(self.information, self.cross, self.hessian, cols)

    # --- units: n units at once, each keeping k of its variants ----------------------------
    def unit_columns(self, unit: int) -> np.ndarray:
        """The columns of unit ``unit``."""
        return self.layout.members[unit]

    def unit_scores(self, units: Sequence[int], keeps: Sequence[np.ndarray]) -> np.ndarray:
        """The pooled scores of each unit's kept variants (``keeps``: boolean), shape (n, k)."""
        return self.score.sum(axis=0)[self.layout.subset_entries(units, keeps)[0]]

    def unit_covariances(self, units: Sequence[int], keeps: Sequence[np.ndarray]) -> np.ndarray:
        """The pooled Φ of each unit's kept variants, shape (n, k, k)."""
        columns, flat = self.layout.subset_entries(units, keeps)
        gram = self.blocks.sum(axis=0)[flat]
        c, solved = self.cross.sum(axis=0).T[columns], self._solved.T[columns]  # (n, k, q)
        return gram - c @ np.swapaxes(solved, 1, 2)

    def stacked_scores(self, units: Sequence[int], keeps: Sequence[np.ndarray]) -> np.ndarray:
        """The per-group scores of each unit's kept variants, stacked group by group: (n, M k)."""
        columns = self.layout.subset_entries(units, keeps)[0]
        return np.moveaxis(self.score[:, columns], 0, 1).reshape(columns.shape[0], -1)

    def stacked_covariances(self, units: Sequence[int], keeps: Sequence[np.ndarray]) -> np.ndarray:
        """Φ of the per-group scores of each unit's kept variants, stacked group by group.

        Shape (n, M k, M k): block (m, m') is δ_mm' K_{m,g} − C_mᵀ H⁻¹ C_m'.
        """
        columns, flat = self.layout.subset_entries(units, keeps)
        n, k, m_groups = columns.shape[0], columns.shape[1], self.n_groups
        c = np.moveaxis(self.cross[:, :, columns], (2, 0, 3), (0, 1, 2))  # (n, M, k, q)
        solved = np.moveaxis(self._group_solved[:, :, columns], (2, 0, 3), (0, 1, 2))
        c = c.reshape(n, m_groups * k, -1)
        out = -(c @ np.swapaxes(solved.reshape(n, m_groups * k, -1), 1, 2))
        for m in range(m_groups):
            out[:, m * k : (m + 1) * k, m * k : (m + 1) * k] += self.blocks[m][flat]
        return out

    @cached_property
    def _group_solved(self) -> np.ndarray:
        """H⁻¹ C_m of each group, shape (M, q, p)."""
        return np.stack([self._solve(self.cross[m]) for m in range(self.n_groups)])
