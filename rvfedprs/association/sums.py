"""A site's association sums under the floor model, and their layout over genes and groups.

Under the floor (null) model — the logistic regression on Z = [1, PRS, covariates] fitted on the
pooled training data, coefficients β̂ — every site holds its samples' fitted probabilities
μ_i = σ(z_i β̂) and weights w_i = μ_i (1 − μ_i). The rare-variant association tests need only
sums over samples, which add up across sites exactly (in the clear or as a secure sum):

- U = Aᵀ (y − μ), the scores of the rare dosage columns A;
- S = (A ∘ A)ᵀ w, their information (the diagonal of Aᵀ W A);
- C = Zᵀ W A, the cross-information with the floor's columns (to project them out);
- K_g = A_gᵀ W A_g for every gene/region g, its variants' information block;
- the minor-allele count Σ a_ij and the carrier count Σ 1[a_ij > 0] of each variant,
  the samples and the cases;

each kept per **group** (a FedCE cluster, a user's grouping of the sites): a site writes its sums
into its group's row and zeros elsewhere, so one sum over every site gives every group's sums, and
the pooled ones are their total. Zᵀ W Z, the floor's Hessian, comes from the floor's own sums.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import scipy.sparse as sp

from rvfedprs.outcomes import BINARY, Outcome

__all__ = [
    "UnitLayout",
    "ASSOCIATION_TENSORS",
    "association_sums",
    "empty_sums",
    "floor_scores",
    "summed",
]

#: The tensors of an association round (each with a leading group axis of size M).
ASSOCIATION_TENSORS: tuple[str, ...] = (
    "assoc.score",
    "assoc.information",
    "assoc.cross",
    "assoc.blocks",
    "assoc.mac",
    "assoc.carriers",
    "assoc.samples",
    "assoc.cases",
)


@dataclass(frozen=True)
class UnitLayout:
    """The rare-variant columns of each gene/region (a *unit*) and where its block is stored.

    Attributes
    ----------
    names : list of str
        Unit names.
    members : list of int arrays
        Each unit's columns, ascending.
    offsets : array of int, shape (n_units + 1,)
        Unit g's information block K_g (p_g × p_g, row-major) is entries
        ``offsets[g]:offsets[g + 1]`` of the flattened blocks.
    """

    names: list[str]
    members: list[np.ndarray]
    offsets: np.ndarray

    @classmethod
    def from_members(cls, names: Sequence[str], members: Sequence[Sequence[int]]) -> UnitLayout:
        """A layout from each unit's columns."""
        cols = [np.unique(np.asarray(m, dtype=np.int64)) for m in members]
        sizes = np.array([c.size**2 for c in cols], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        return cls(list(names), cols, offsets)

    @classmethod
    def from_matrix(cls, matrix: sp.spmatrix, names: Sequence[str] | None = None) -> UnitLayout:
        """A layout from a variant × unit map (a burden map's B: its non-zero pattern)."""
        csc = sp.csc_matrix(matrix)
        members = [csc.indices[csc.indptr[g] : csc.indptr[g + 1]] for g in range(csc.shape[1])]
        names = list(names) if names is not None else [str(g) for g in range(csc.shape[1])]
        return cls.from_members(names, members)

    @property
    def n_units(self) -> int:
        """G, the number of units."""
        return len(self.names)

    @property
    def block_size(self) -> int:
        """Σ_g p_g², the length of the flattened blocks."""
        return int(self.offsets[-1])

    @cached_property
    def _slots(self) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray, np.ndarray]:
        """(P, the unit of each slot, its position in the unit, each unit's p_g).

        A slot is one (unit, member) pair, the units' members laid end to end; P (variants ×
        slots) has a 1 where a slot holds a variant, so A P is A with each unit's columns of
        its own (a variant in two units is in two slots).
        """
        sizes = np.array([m.size for m in self.members], np.int64)
        columns = np.concatenate([np.zeros(0, np.int64), *self.members])
        unit = np.repeat(np.arange(len(self.members)), sizes)
        position = np.arange(columns.size) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        n_variants = int(columns.max()) + 1 if columns.size else 0
        slots = sp.csr_matrix((np.ones(columns.size), (columns, np.arange(columns.size))),
                              shape=(n_variants, columns.size))  # fmt: skip
        return slots, unit, position, sizes

    def weighted_blocks(self, dosages: sp.spmatrix, weight: np.ndarray) -> np.ndarray:
        """The flattened blocks K_g = A_gᵀ W A_g of every unit, from a site's dosages A.

        Only the pairs of one person's carried variants within one unit are formed (Σ_i Σ_g
        c_ig² products for c_ig variants of unit g carried by person i), not AᵀWA over every
        pair of the p variants: at exome density a person carries ~100 rare variants spread
        over hundreds of units, and AᵀWA's p² pairs were most of a site's time and memory.
        """
        slots, unit, position, p_g = self._slots
        a = sp.csr_matrix(dosages, dtype=np.float64)
        if a.shape[1] < slots.shape[0]:
            raise ValueError(f"{a.shape[1]} dosage columns; the units name column "
                             f"{slots.shape[0] - 1}")  # fmt: skip
        expanded = (a[:, : slots.shape[0]] @ slots).tocoo()
        person, slot, value = expanded.row, expanded.col, expanded.data
        group = unit[slot]
        order = np.lexsort((slot, group, person))
        person, slot, value, group = person[order], slot[order], value[order], group[order]
        # runs of one person's entries within one unit: every pair of a run is a block entry
        new_run = np.ones(person.size, bool)
        new_run[1:] = (person[1:] != person[:-1]) | (group[1:] != group[:-1])
        starts = np.flatnonzero(new_run)
        lengths = np.diff(np.append(starts, person.size))
        run_start = np.repeat(starts, lengths)
        run_length = np.repeat(lengths, lengths)
        left = np.repeat(np.arange(person.size), run_length)
        within = np.arange(left.size) - np.repeat(np.cumsum(run_length) - run_length, run_length)
        right = np.repeat(run_start, run_length) + within
        g = group[left]
        flat = self.offsets[g] + position[slot[left]] * p_g[g] + position[slot[right]]
        products = np.asarray(weight, np.float64)[person[left]] * value[left] * value[right]
        return np.bincount(flat, weights=products, minlength=self.block_size)

    def subset_entries(
        self, units: Sequence[int], keeps: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray]:
        """(the kept columns, shape (n, k); where their blocks' entries are, shape (n, k, k)).

        ``keeps[i]`` is a boolean subset of unit ``units[i]``'s variants, every one keeping k:
        entry (a, b) of unit g's block is ``offsets[g] + a p_g + b`` of the flattened blocks.
        """
        k = int(np.count_nonzero(keeps[0])) if len(keeps) else 0
        units = np.asarray(units, np.int64)
        positions = np.array([np.flatnonzero(keep) for keep in keeps], np.int64).reshape(-1, k)
        columns = np.array([self.members[g][p] for g, p in zip(units, positions, strict=True)],
                           np.int64).reshape(-1, k)  # fmt: skip
        sizes = np.array([self.members[g].size for g in units], np.int64)
        flat = (self.offsets[units][:, None, None]
                + positions[:, :, None] * sizes[:, None, None] + positions[:, None, :])  # fmt: skip
        return columns, flat


def empty_sums(n_groups: int, n_floor: int, n_rare: int, layout: UnitLayout) -> dict:
    """Zeros of every association tensor (the message an association round sends)."""
    m, q, p = int(n_groups), int(n_floor), int(n_rare)
    return {
        "assoc.score": np.zeros((m, p)),
        "assoc.information": np.zeros((m, p)),
        "assoc.cross": np.zeros((m, q, p)),
        "assoc.blocks": np.zeros((m, layout.block_size)),
        "assoc.mac": np.zeros((m, p)),
        "assoc.carriers": np.zeros((m, p)),
        "assoc.samples": np.zeros(m),
        "assoc.cases": np.zeros(m),
    }


def association_sums(
    floor_design: sp.spmatrix | np.ndarray,
    rare: sp.spmatrix,
    y: np.ndarray,
    coef: np.ndarray,
    layout: UnitLayout,
    *,
    group: int,
    n_groups: int,
    kind: Outcome = BINARY,
) -> dict[str, np.ndarray]:
    """One site's association sums at the floor's coefficients, in its group's row.

    Parameters
    ----------
    floor_design : matrix, shape (n, q)
        Z = [1, PRS, covariates] of the site's training samples.
    rare : sparse matrix, shape (n, p)
        Their minor-allele dosages.
    y : array, shape (n,)
        0/1 outcomes.
    coef : array, shape (q,)
        β̂, the pooled floor's coefficients.
    layout : UnitLayout
        The genes/regions whose information blocks are summed.
    group, n_groups : int
        The site's group (its row) and the number of groups M.
    kind : Outcome
        The phenotype's outcome (μ and w of :func:`floor_scores`).

    Returns
    -------
    dict of str to float64 array
        :data:`ASSOCIATION_TENSORS`, each with leading axis M (zeros outside row ``group``).
    """
    if not 0 <= int(group) < int(n_groups):
        raise ValueError(f"group {group} is outside the {n_groups} groups")
    a = sp.csr_matrix(rare, dtype=np.float64)
    _, weight = _floor_fit(floor_design, coef, kind)
    out = empty_sums(n_groups, floor_design.shape[1], a.shape[1], layout)
    row = int(group)
    score, information, cross = floor_scores(floor_design, a, y, coef, kind)
    out["assoc.score"][row], out["assoc.information"][row] = score, information
    out["assoc.cross"][row] = cross
    if layout.block_size:
        out["assoc.blocks"][row] = layout.weighted_blocks(a, weight)
    out["assoc.mac"][row] = np.asarray(a.sum(axis=0)).reshape(-1)
    out["assoc.carriers"][row] = np.asarray((a > 0).sum(axis=0)).reshape(-1)
    out["assoc.samples"][row] = float(a.shape[0])
    out["assoc.cases"][row] = float(np.sum(y))
    return out


def _floor_fit(floor_design: sp.spmatrix | np.ndarray, coef: np.ndarray, kind: Outcome):
    """(μ, w) of the floor at ``coef``: the outcome's mean and working weights at Z β."""
    eta = np.asarray(floor_design @ np.asarray(coef, np.float64), np.float64).reshape(-1)
    return kind.mean(eta), kind.variance(eta)


def floor_scores(
    floor_design: sp.spmatrix | np.ndarray,
    rare: sp.spmatrix,
    y: np.ndarray,
    coef: np.ndarray,
    kind: Outcome = BINARY,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A site's score sums of every rare variant under the floor at ``coef``.

    With μ_i = σ(z_i β) and w_i = μ_i (1 − μ_i) for a binary outcome (μ_i = z_i β and
    w_i = 1 for a quantitative one, whose V is then in units of the residual variance): the
    pooled efficient score of variant j is U_j = Σ_i a_ij (y_i − μ_i) and its variance
    V_j = S_j − c_jᵀ (Zᵀ W Z)⁻¹ c_j; a site returns its part of the sums U, S and C.

    Returns
    -------
    score : array, shape (n_rare,)
        U = Aᵀ (y − μ).
    information : array, shape (n_rare,)
        S = (A ∘ A)ᵀ w.
    cross : array, shape (n_floor, n_rare)
        C = Zᵀ W A.
    """
    mu, weight = _floor_fit(floor_design, coef, kind)
    a = sp.csr_matrix(rare, dtype=np.float64)
    score = np.asarray(a.T @ (np.asarray(y, np.float64).reshape(-1) - mu)).reshape(-1)
    information = np.asarray(a.multiply(a).T @ weight).reshape(-1)
    weighted = sp.csr_matrix(a.multiply(weight[:, None]))
    cross = (sp.csr_matrix(floor_design).T @ weighted).toarray()
    return score, information, np.asarray(cross, dtype=np.float64)


def summed(replies: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The element-wise sum of several sites' :func:`association_sums` (the pooled sums)."""
    names = ASSOCIATION_TENSORS
    return {
        name: np.sum([np.asarray(r[name], np.float64) for r in replies], axis=0) for name in names
    }
