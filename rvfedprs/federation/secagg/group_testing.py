"""Finding a member whose update exceeds the norm bound from secure sums only (group testing).

Every honest member scales its update to L2 norm ≤ B before masking it, so by the triangle
inequality a sum over honest members S has norm ≤ B·Σ_{k∈S} ω_k. A sum beyond that contains
a member that did not clip. While the members still hold their updates, the server re-runs
secure sums over subsets of the group and narrows down the candidates: an implausible subset
sum keeps the candidates inside it, a plausible one removes them. The member x left is
convicted when the sum over the others is plausible (the group's sum without it: the round's).

**What the server may learn.** Each sum is over at least ``min_clients`` members, but sizes
alone do not protect: the sums of S and S ∪ {k} give v_k. The server learns every linear
combination of the sums it sees, so :class:`DisclosureGuard` keeps the indicator vectors of
the sums taken (the group's own sum first) and allows a subset only if, whichever candidate
turns out to be the culprit — and its vector then becomes known from the last sum — the span
holds no indicator of fewer than ``min_clients`` other members. Group testing therefore needs
enough members: with ``min_clients`` = 3 a group of 8 or more can always be searched, smaller
ones cannot, and :class:`~.protocol.ImplausibleSumError` stops the run instead.

One culprit per group is isolated; a group whose sum stays implausible without it (several
members did not clip) stops the run too: convicting a second member would need a sum that
could reveal an honest one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from rvfedprs.federation.secagg.protocol import ImplausibleSumError

__all__ = ["DisclosureGuard", "isolate_culprit"]

#: Groups up to this size have every subset considered; larger ones a seeded sample.
_EXHAUSTIVE_UP_TO = 12
_SAMPLED_SUBSETS = 400
_TOL = 1e-8


class DisclosureGuard:
    """The sums the server has learned over a group's members, as indicator vectors.

    Parameters
    ----------
    members : sequence of str
        The group's members whose vectors are in its (implausible) sum.
    min_clients : int
        The fewest members whose sum the server may learn.
    """

    def __init__(self, members: Sequence[str], min_clients: int) -> None:
        self.members = tuple(sorted(members))
        self.min_clients = int(min_clients)
        self.rows: list[np.ndarray] = [np.ones(len(self.members))]

    def indicator(self, subset) -> np.ndarray:
        """1 for the members in ``subset``, 0 elsewhere."""
        chosen = set(subset)
        return np.array([1.0 if m in chosen else 0.0 for m in self.members])

    def learn(self, subset) -> None:
        """Record that the server has seen the sum over ``subset``."""
        self.rows.append(self.indicator(subset))

    def reveals(self, rows: Sequence[np.ndarray], exempt) -> bool:
        """Whether ``rows`` span the sum of fewer than ``min_clients`` members not in ``exempt``."""
        basis = np.linalg.svd(np.vstack(rows), full_matrices=False)
        u, singular, vt = basis
        rank = int(np.count_nonzero(singular > _TOL * max(1.0, singular[0])))
        residual = np.eye(len(self.members)) - vt[:rank].T @ vt[:rank]  # onto the span's complement
        others = [i for i, m in enumerate(self.members) if m not in set(exempt)]
        for size in range(1, self.min_clients):
            for combo in itertools.combinations(others, size):
                if np.linalg.norm(residual[:, list(combo)].sum(axis=1)) < 1e-6:
                    return True
        return False

    def allows(self, subset, candidates) -> bool:
        """Whether the server may take the sum over ``subset`` while ``candidates`` are suspect.

        True when, for every candidate x, the sums so far, this one and the final sum without x
        reveal no sum of fewer than ``min_clients`` members other than x.
        """
        rows = [*self.rows, self.indicator(subset)]
        return not any(
            self.reveals([*rows, self.indicator(set(self.members) - {x})], {x}) for x in candidates
        )

    def next_subset(self, candidates, rng: np.random.Generator) -> tuple[str, ...] | None:
        """A subset that splits ``candidates`` as evenly as the guard allows (None if none does)."""
        candidates = set(candidates)
        ok = [
            s
            for s in _subsets(self.members, candidates, self.min_clients, rng)
            if 0 < len(candidates & set(s)) < len(candidates)
        ]
        ok.sort(key=lambda s: (abs(len(candidates & set(s)) - len(candidates) / 2), len(s), s))
        return next((s for s in ok if self.allows(s, candidates)), None)


def _subsets(members, candidates, min_size: int, rng: np.random.Generator):
    """Subsets of ``members`` of at least ``min_size`` (every one, or a sample), not all."""
    n = len(members)
    if n <= _EXHAUSTIVE_UP_TO:
        for size in range(min_size, n):
            yield from itertools.combinations(members, size)
        return
    inside, outside = sorted(candidates), sorted(set(members) - set(candidates))
    seen = set()
    for _ in range(_SAMPLED_SUBSETS):
        half = rng.choice(inside, size=max(1, len(inside) // 2), replace=False).tolist()
        filler_size = int(rng.integers(max(0, min_size - len(half)), len(outside) + 1))
        filler = rng.choice(outside, size=filler_size, replace=False).tolist() if outside else []
        subset = tuple(sorted(half + filler))
        if len(subset) >= min_size and subset not in seen:
            seen.add(subset)
            yield subset


def isolate_culprit(
    members: Sequence[str],
    is_implausible: Callable[[tuple[str, ...]], tuple[bool, object]],
    *,
    min_clients: int,
    seed: int,
    what: str,
) -> tuple[str, object, int]:
    """The one member whose presence makes the group's sum implausible, from subset sums.

    Parameters
    ----------
    members : sequence of str
        The members whose vectors are in the implausible sum.
    is_implausible : callable
        ``is_implausible(subset)`` → (the subset's sum exceeds its norm bounds, the sum): one
        more secure sum over ``subset`` (never fewer than ``min_clients`` members).
    min_clients : int
    seed : int
        Seeds the sample of subsets of a large group.
    what : str
        Names the group in errors (e.g. ``"run 0 round 2: 'model'"``).

    Returns
    -------
    culprit : str
    rest : object
        The sum over the other members (what ``is_implausible`` returned for it).
    n_sums : int
        How many secure sums the search took (the last over the others included).

    Raises
    ------
    ImplausibleSumError
        When no subset sum can narrow the candidates without revealing an honest member's
        update (the group is too small), when the answers are inconsistent, or when the sum
        without the member found is still implausible (several members did not clip).
    """
    guard = DisclosureGuard(members, min_clients)
    members = guard.members
    rng = np.random.default_rng(seed)
    candidates, n_sums = set(members), 0
    while len(candidates) > 1:
        subset = guard.next_subset(candidates, rng)
        if subset is None:
            raise ImplausibleSumError(
                f"{what}: the secure sum of {len(members)} members {list(members)} exceeds what "
                f"their norm bounds allow (a member did not clip its update), and no sum over "
                f"{min_clients} or more of them can narrow down the {len(candidates)} suspects "
                f"{sorted(candidates)} without revealing an honest member's update "
                f"(after {n_sums} group-testing sums); the round is not applied. Group testing "
                f"needs about {_members_needed(min_clients)} members per sum"
            )
        implausible, _ = is_implausible(subset)
        guard.learn(subset)
        n_sums += 1
        candidates = candidates & set(subset) if implausible else candidates - set(subset)
        if not candidates:
            raise ImplausibleSumError(
                f"{what}: group testing over sums of {min_clients} or more of the members "
                f"{list(members)} found no single member whose update exceeds the norm bound "
                f"(the answers are inconsistent: several members did not clip?); the round is "
                "not applied"
            )
    (culprit,) = candidates
    rest = tuple(m for m in members if m != culprit)
    if len(rest) < min_clients or guard.reveals(
        [*guard.rows, guard.indicator(rest)], {culprit}
    ):  # only when the group is too small to have searched at all
        raise ImplausibleSumError(
            f"{what}: the secure sum of {list(members)} exceeds what their norm bounds allow, "
            f"and the sum without one member would reveal an honest member's update; the "
            "round is not applied"
        )
    implausible, rest_sum = is_implausible(rest)
    n_sums += 1
    if implausible:
        raise ImplausibleSumError(
            f"{what}: without {culprit!r} the secure sum of {list(rest)} still exceeds what "
            "their norm bounds allow: more than one member did not clip its update, and "
            "convicting another would need a sum that can reveal an honest update; the round "
            "is not applied"
        )
    return culprit, rest_sum, n_sums


def _members_needed(min_clients: int) -> int:
    """A rough size from which a group can be searched: 8 for ``min_clients`` = 3."""
    return int(math.ceil(8 * min_clients / 3))
