"""A GLM's candidates: converged fits along a path of penalties, the floor first.

A federated GLM (:mod:`rvfedprs.strategies.fedglm`) takes one Newton step a round. A
validation choice over rounds (:class:`~rvfedprs.evaluation.selection.RoundSelection`) must
not keep a half-way iterate — it is no model anyone fitted, and its validation score on a
few hundred cases says little about it (issue 40). So a GLM serves, every round, the last
**converged** fit (before the first: the model the run started from, the floor), and its
penalty λ may be a path: the largest λ is fitted first, starting from the floor, and each
next λ starts from the previous converged fit (a warm start, as glmnet's path). The
candidates a validation choice sees are then exactly the floor and one converged fit per λ.

A partially pooled GLM (:mod:`rvfedprs.strategies.fedce_glm`, ``l2_cluster``) has two
penalties, the shared part's λ and the clusters' deviations' λ_c: its path is the grid of pairs
(λ, λ_c), λ largest first and, within a λ, λ_c largest first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["PenaltyPath", "penalty_values", "penalty_grid"]


def penalty_values(l2: float | Sequence[float]) -> tuple[float, ...]:
    """λ of ``l2`` (one value or several), distinct, largest first.

    Raises
    ------
    ValueError
        For an empty path or a λ that is negative or not finite.
    """
    values = [l2] if np.isscalar(l2) else list(l2)
    if not values:
        raise ValueError("l2 must be a number >= 0 or a non-empty list of them, got []")
    for value in values:
        number = isinstance(value, int | float | np.number) and not isinstance(value, bool)
        if not (number and np.isfinite(value) and value >= 0):
            raise ValueError(f"l2 must be a finite number >= 0, got {value!r}")
    return tuple(sorted({float(v) for v in values}, reverse=True))


def penalty_grid(
    l2: float | Sequence[float], cluster: float | Sequence[float]
) -> tuple[tuple[float, float], ...]:
    """The pairs (λ, λ_c) of a partially pooled GLM's path, both > 0, largest first.

    Raises
    ------
    ValueError
        For a λ or λ_c that is 0 (the shared part and the deviations would not be identified)
        or not a valid penalty (:func:`penalty_values`).
    """
    shared, deviations = penalty_values(l2), penalty_values(cluster)
    if min(shared) == 0 or min(deviations) == 0:
        raise ValueError(
            f"partial pooling needs l2 > 0 and l2_cluster > 0 (with a 0 the shared rare part and "
            f"the clusters' deviations are not identified), got l2 {list(shared)}, "
            f"l2_cluster {list(deviations)}"
        )
    return tuple((a, b) for a in shared for b in deviations)


class PenaltyPath:
    """The λ being fitted and the converged fits so far.

    Parameters
    ----------
    l2 : float or sequence of float
        One λ or a path (:func:`penalty_values`).
    cluster : float or sequence of float, optional
        λ_c of a partially pooled GLM: the path is then the grid of (λ, λ_c)
        (:func:`penalty_grid`).

    Attributes
    ----------
    values : tuple of float, or of (float, float)
        The path, largest first.
    stage : int
        Index of the λ being fitted.
    fits : list of dict
        One per converged λ: ``l2``, ``coef`` (the fit) and ``round`` (where it converged).
    """

    def __init__(
        self, l2: float | Sequence[float], cluster: float | Sequence[float] | None = None
    ) -> None:
        self.values: tuple = penalty_values(l2) if cluster is None else penalty_grid(l2, cluster)
        self.stage = 0
        self.fits: list[dict[str, Any]] = []

    def restart(self) -> None:
        """A new run: the first λ, no fits."""
        self.stage = 0
        self.fits = []

    @property
    def l2(self) -> float | tuple[float, float]:
        """The λ being fitted ((λ, λ_c) on a grid)."""
        return self.values[self.stage]

    @property
    def done(self) -> bool:
        """True once every λ of the path converged."""
        return len(self.fits) == len(self.values)

    @property
    def latest(self) -> Any:
        """The last converged fit's coefficients, or None before the first."""
        return self.fits[-1]["coef"] if self.fits else None

    def served_at(self, server_round: float) -> float | list[float] | None:
        """λ of the fit served at ``server_round`` (the last converged by then), or None.

        On a grid, [λ, λ_c].
        """
        fits = [f for f in self.fits if f["round"] <= server_round]
        return _plain(fits[-1]["l2"]) if fits else None

    def converged(self, coef: Any, server_round: int) -> bool:
        """Record the fit of the current λ; True when a next λ starts (from ``coef``)."""
        self.fits.append({"l2": self.l2, "coef": coef, "round": int(server_round)})
        if self.done:
            return False
        self.stage += 1
        return True

    def __eq__(self, other: object) -> bool:
        """Same path, stage and fits (their λ and rounds)."""
        if not isinstance(other, PenaltyPath):
            return NotImplemented
        return (self.values, self.stage, self.summary()) == (
            other.values, other.stage, other.summary())  # fmt: skip

    __hash__ = None  # mutable

    def summary(self) -> list[dict[str, Any]]:
        """Each converged fit's λ and round."""
        return [{"l2": _plain(f["l2"]), "round": f["round"]} for f in self.fits]

    def state_dict(self) -> dict[str, Any]:
        """The path, the stage and the fits."""
        return {"values": [_plain(v) for v in self.values], "stage": self.stage,
                "fits": [dict(f) for f in self.fits]}  # fmt: skip

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> PenaltyPath:
        """Inverse of :meth:`state_dict`."""
        values = list(state["values"])
        if values and not np.isscalar(values[0]):  # a grid of (λ, λ_c)
            path = cls([v[0] for v in values], cluster=[v[1] for v in values])
        else:
            path = cls(values)
        path.stage = int(state["stage"])
        path.fits = [dict(f) for f in state["fits"]]
        for fit in path.fits:  # a checkpoint stores a grid's pair as a list
            if not np.isscalar(fit["l2"]):
                fit["l2"] = tuple(float(v) for v in fit["l2"])
        return path


def _plain(value: Any) -> float | list[float]:
    """λ as a JSON value: a float, or [λ, λ_c]."""
    return float(value) if np.isscalar(value) else [float(v) for v in value]
