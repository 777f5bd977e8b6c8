"""The reply collector every transport uses (rvfedprs.federation.replies)."""

from __future__ import annotations

import pytest

from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.replies import NoReply, collect


def test_each_site_answers_or_is_a_failure_with_its_reason_in_sorted_order():
    asked = []

    def answer(site: str) -> int:
        asked.append(site)
        if site == "b":
            raise NoReply("no reply within 5 s")
        if site == "d":
            raise InputDataError("client 'd' has no cases")
        return len(site)

    replies, failures = collect(["d", "c", "b", "aa"], answer, (NoReply, InputDataError))
    assert asked == ["aa", "b", "c", "d"]
    assert list(replies.items()) == [("aa", 2), ("c", 1)]
    assert list(failures.items()) == [
        ("b", "no reply within 5 s"),
        ("d", "client 'd' has no cases"),
    ]


def test_node_ids_sort_as_numbers_and_a_mapping_gives_its_keys():
    replies, failures = collect({10: "x", 9: "y"}, lambda node: node * 2)
    assert list(replies) == [9, 10] and failures == {}


def test_an_exception_not_named_as_a_failure_propagates():
    def bug(site: str) -> None:
        raise KeyError(site)

    def bad_data(site: str) -> None:
        raise InputDataError(f"client {site!r} has no cases")

    with pytest.raises(KeyError, match="a"):
        collect(["a"], bug, (InputDataError,))
    with pytest.raises(InputDataError, match="no cases"):  # only NoReply by default
        collect(["a"], bad_data)
