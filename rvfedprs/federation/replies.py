"""Collecting one exchange's replies: site → reply, and site → why it has none.

Every transport (:mod:`rvfedprs.federation.inprocess`, :mod:`rvfedprs.federation.flower.transport`)
delivers an exchange its own way, then collects the replies the same way, with
:func:`collect`: each site, in sorted order, either answers or is recorded as a failure with its
reason — a missing reply, an error raised on the site, or a reply that fails its checks. The
transport says which exceptions mean "this site failed"; any other propagates (a bug). Whether
enough sites answered is the server loop's decision
(:func:`~rvfedprs.federation.rounds.require_replies`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["NoReply", "collect"]

Site = TypeVar("Site")


class NoReply(Exception):
    """A site sent no usable reply (none arrived, or an error did); the message says why."""


def collect(
    sites: Iterable[Site],
    answer: Callable[[Site], Any],
    failed: tuple[type[Exception], ...] = (NoReply,),
) -> tuple[dict[Site, Any], dict[Site, str]]:
    """Each site's answer, in sorted order; a site whose answer raises ``failed`` is a failure.

    Parameters
    ----------
    sites : iterable
        The sites of the exchange (client ids, or a Flower engine's node ids).
    answer : callable
        ``answer(site)``: the site's reply, decoded and checked.
    failed : tuple of exception types
        What ``answer`` raises for a site that failed; the exception's message is the reason.

    Returns
    -------
    replies : dict
        Site → its answer, in sorted order of sites.
    failures : dict
        Site → why it has no answer, in sorted order of sites.
    """
    replies: dict[Site, Any] = {}
    failures: dict[Site, str] = {}
    for site in sorted(sites):
        try:
            replies[site] = answer(site)
        except failed as exc:
            failures[site] = str(exc)
    return replies, failures
