"""The in-process engine: every site lives in this process and is called one after another.

Deterministic for a master seed (:mod:`rvfedprs.federation.seeds`), so a result depends neither
on the order of sites nor on a resume in between, and equals what the Flower engines give: the
server loop (:func:`~rvfedprs.federation.rounds.serve`) and the site code
(:class:`~rvfedprs.federation.task.Task`) are the same; only the delivery differs.

A site whose data are wrong (an :class:`~rvfedprs.exceptions.InputDataError` raised on it) is
recorded as a failure with its reason, as a Flower node's error is; the server loop then stops
or goes on without it according to ``min_replies``. Any other exception is a bug and propagates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.replies import collect
from rvfedprs.federation.secagg.protocol import SECURE_FIT_KEY
from rvfedprs.federation.task import Replies, Request, Task, Transport
from rvfedprs.strategies.base import FitInstruction, FitResult

__all__ = ["InProcessTransport", "POOLED_CLIENT"]

#: Client id of the virtual site holding the pooled data (centralised baseline).
POOLED_CLIENT = "pooled"


class InProcessTransport(Transport):
    """Delivers requests and fit instructions by calling the task on sites held in memory.

    Parameters
    ----------
    task : Task
    sites : mapping of str to site
        What :meth:`Task.open_site` returned for each site (or an equivalent object).
    """

    def __init__(self, task: Task, sites: Mapping[str, Any]) -> None:
        if not sites:
            raise ValueError("an in-process federation needs at least one site")
        self.task = task
        self.sites = dict(sites)
        #: Per-site state of the analytics steps (kept between steps, like a node's).
        self.step_state: dict[str, dict[str, Any]] = {c: {} for c in self.sites}

    @property
    def client_ids(self) -> list[str]:
        """The sites, sorted."""
        return sorted(self.sites)

    def subset(self, client_ids: Sequence[str]) -> InProcessTransport:
        """The same engine restricted to ``client_ids`` (their step state kept)."""
        out = InProcessTransport(self.task, {c: self.sites[c] for c in client_ids})
        out.step_state = {c: self.step_state[c] for c in client_ids}
        return out

    def open(self, payload: Mapping[str, Any]) -> Replies:
        """The ``setup`` step on every site."""
        return self.query({c: Request("setup", dict(payload)) for c in self.client_ids}, payload)

    def query(self, requests: Mapping[str, Request], settings: Mapping[str, Any]) -> Replies:
        """Answer each request on its site; a site's InputDataError becomes its failure."""

        def answer(client: str) -> dict[str, Any]:
            return self.task.handle(requests[client], self.sites[client], self.step_state[client])

        return collect(requests, answer, (InputDataError,))

    def fit(
        self,
        server_round: int,
        instructions: Mapping[str, FitInstruction],
        seeds: Mapping[str, int],
        settings: Mapping[str, Any],
        client_state: dict[str, dict[str, Any]],
    ) -> Replies:
        """Train every site in turn; its state dict is the server's copy itself.

        In a securely aggregated round the site holds its update in its step state and the
        result carries no parameters (:func:`~rvfedprs.federation.secagg.site.held_fit_result`).
        """

        def train(client: str) -> FitResult:
            result = self.task.fit(
                instructions[client],
                self.sites[client],
                settings,
                client_state.setdefault(client, {}),
                random_seed=int(seeds[client]),
            )
            if not instructions[client].config.get(SECURE_FIT_KEY):
                return result
            # the site's half of a secure sum (its import loads Flower's cryptography)
            from rvfedprs.federation.secagg.site import held_fit_result

            return held_fit_result(
                result, instructions[client], self.step_state.setdefault(client, {})
            )

        return collect(instructions, train, (InputDataError,))

    def pooled(self, task: Task) -> InProcessTransport:
        """One virtual site, :data:`POOLED_CLIENT`, holding every site's data."""
        return InProcessTransport(task, {POOLED_CLIENT: task.pool_sites(self.sites)})
