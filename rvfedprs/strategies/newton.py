"""Damped Newton iterations on a penalised objective whose sums arrive one point a round.

The server half of every federated GLM (:mod:`rvfedprs.strategies.fedglm`,
:mod:`rvfedprs.strategies.fedce_glm`, the floor of :mod:`rvfedprs.strategies.top_variants`):
each round brings the summed loss, gradient and Hessian at the point sent last.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["NewtonSearch"]


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


def _solve(system: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """system⁻¹ rhs by Cholesky, falling back to least squares for a singular system."""
    try:
        factor = np.linalg.cholesky(system)
        return np.linalg.solve(factor.T, np.linalg.solve(factor, rhs))
    except np.linalg.LinAlgError:
        return np.linalg.lstsq(system, rhs, rcond=None)[0]
