"""Group testing under secure aggregation: the culprit is found from subset sums, and the sums
taken never let the server compute a sum of fewer than ``min_clients`` honest members.

The predicate stands for a secure sum's norm check (a subset is implausible exactly when it
holds the member that did not clip); the protocol itself runs in test_secagg_training.
"""

from __future__ import annotations

import numpy as np
import pytest

from rvfedprs.federation.secagg.group_testing import DisclosureGuard, isolate_culprit
from rvfedprs.federation.secagg.protocol import ImplausibleSumError


def _members(n):
    return [f"site{i}" for i in range(n)]


def _search(members, culprit, min_clients=3):
    asked = []

    def is_implausible(subset):
        assert len(subset) >= min_clients
        asked.append(tuple(subset))
        return culprit in subset, f"sum of {subset}"

    found = isolate_culprit(members, is_implausible, min_clients=min_clients, seed=0, what="g")
    return found, asked


@pytest.mark.parametrize("n", [8, 9, 10, 13])
def test_every_culprit_is_found_and_no_honest_sum_below_the_minimum_is_revealed(n):
    members = _members(n)
    for culprit in members:
        (found, rest, n_sums), asked = _search(members, culprit)
        assert found == culprit and n_sums == len(asked)
        assert asked[-1] == tuple(sorted(m for m in members if m != culprit))
        assert rest == f"sum of {asked[-1]}"
        guard = DisclosureGuard(members, 3)
        for subset in asked:
            guard.learn(subset)
        assert not guard.reveals(guard.rows, {culprit})  # the culprit's own vector only


@pytest.mark.parametrize("n", [4, 5, 6, 7])
def test_a_group_too_small_to_search_stops_without_a_revealing_sum(n):
    members = _members(n)
    with pytest.raises(ImplausibleSumError, match="without revealing an honest member's update"):
        _search(members, members[1])


def test_the_guard_sees_through_sums_of_allowed_sizes():
    guard = DisclosureGuard(_members(6), 3)
    assert not guard.reveals(guard.rows, set())
    # two sums of >= 3 members that differ by one reveal it: sizes alone do not protect
    rows = [*guard.rows, guard.indicator(["site0", "site1", "site2"])]
    assert guard.reveals([*rows, guard.indicator(["site0", "site1", "site2", "site3"])], set())
    assert not guard.reveals(rows, set())  # {0, 1, 2} and {3, 4, 5}: two sums of three


def test_several_culprits_stop_the_run():
    members = _members(9)

    def is_implausible(subset):
        return bool({"site1", "site6"} & set(subset)), None

    with pytest.raises(ImplausibleSumError, match="more than one member|inconsistent"):
        isolate_culprit(members, is_implausible, min_clients=3, seed=0, what="g")


def test_large_groups_are_searched_from_a_seeded_sample():
    members = _members(20)
    (found, _, n_sums), asked = _search(members, "site13")
    assert found == "site13" and n_sums <= 12
    again = _search(members, "site13")[1]
    assert again == asked and all(np.all(len(s) >= 3) for s in asked)
