"""The Flower engines' transport: one message per node and exchange on Flower's Grid.

The ServerApp runs the shared server loop (:func:`rvfedprs.federation.rounds.serve`) over this
transport. The first exchange (``setup``, a ``query`` message to every node that connected)
learns which node serves which site; then each step is one ``query`` per site and each training
round one ``train`` message per site, carrying that site's instruction (for FedCE its cluster's
personalised model), its seed, the run settings and, when the server holds it, the site's saved
state (a fresh node on a resumed run). Replies are checked before anything is aggregated
(:func:`~rvfedprs.federation.flower.records.reply_to_fit_result`): a site whose reply is
missing, an error, or malformed is recorded as a failure with its reason
(:func:`~rvfedprs.federation.replies.collect`). A securely aggregated round's replies must carry
no parameters at all.

An exchange pushes its messages with the grid's ``push_messages`` and asks for the replies with
``pull_messages`` every ``reply_poll`` seconds (:meth:`FlowerTransport._send_and_receive`), as
Flower's ``Grid.send_and_receive`` does but without its fixed wait: Flower 1.41's SuperLink grid
sleeps a hard-coded 3 s between its asks, so each exchange ended up to 3 s after its last reply.
On a SuperLink one ask is one small request to it (no reply waiting: nothing else moves).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from flwr.app import Message, MessageType, RecordDict
from flwr.serverapp import Grid

from rvfedprs.federation.flower.identity import bind_sites
from rvfedprs.federation.flower.records import (
    MalformedReplyError,
    content_to_payload,
    instruction_to_content,
    reply_to_fit_result,
    request_to_content,
)
from rvfedprs.federation.replies import NoReply, collect
from rvfedprs.federation.secagg.protocol import SECURE_FIT_KEY
from rvfedprs.federation.task import Replies, Request, Task, Transport
from rvfedprs.strategies.base import FitInstruction, FitResult

__all__ = ["FlowerTransport", "REPLY_POLL_SECONDS"]

log = logging.getLogger(__name__)

#: Default seconds between the server's asks for an exchange's replies (``flower.
#: reply_poll_seconds``); Flower's SuperLink grid waits 3.
REPLY_POLL_SECONDS = 0.1


#: What makes a node's reply a failure: none or an error (:class:`NoReply`), or a malformed one.
REPLY_FAILURES = (NoReply, MalformedReplyError)


def _content(reply: Message | None, missing: str) -> RecordDict:
    """A reply's content; :class:`NoReply` saying ``missing`` or the error when it has none."""
    if reply is None:
        raise NoReply(missing)
    if reply.has_error():
        reason = (reply.error.reason or "").strip().splitlines()
        raise NoReply(f"error {reply.error.code}: {reason[-1] if reason else 'no reason given'}")
    return reply.content


class FlowerTransport(Transport):
    """Requests and fit instructions as Flower messages, one per node.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    task : Task
        Used for the sites' exported state (:meth:`Task.check_state`,
        :meth:`Task.restore_state`).
    timeout : float, optional
        Seconds to wait for an exchange's replies (None: until every reply arrives).
    reply_poll : float
        Seconds between asks for an exchange's replies while some are missing.
    expected : int
        Nodes to wait for (up to ``node_wait`` seconds) before the setup exchange.
    node_wait : float
    client_node : mapping, optional
        Site → node id, when already known (:meth:`subset`).
    site_nodes : mapping, optional
        Site → the node id of its registered public key: the setup accepts a node's claim to
        be a site only from that node (:func:`~rvfedprs.federation.flower.identity.bind_sites`).
    """

    def __init__(
        self,
        grid: Grid,
        task: Task,
        *,
        timeout: float | None = None,
        reply_poll: float = REPLY_POLL_SECONDS,
        expected: int = 0,
        node_wait: float = 60.0,
        client_node: Mapping[str, int] | None = None,
        site_nodes: Mapping[str, int] | None = None,
    ) -> None:
        self.grid = grid
        self.task = task
        if not reply_poll > 0:
            raise ValueError(f"reply_poll must be > 0 seconds, got {reply_poll!r}")
        self.timeout = timeout
        self.reply_poll = float(reply_poll)
        self.expected = int(expected)
        self.node_wait = float(node_wait)
        self.client_node = dict(client_node or {})
        self.site_nodes = None if site_nodes is None else dict(site_nodes)
        self._exchanges = 0

    @property
    def client_ids(self) -> list[str]:
        """The sites whose node answered the setup, sorted."""
        return sorted(self.client_node)

    def subset(self, client_ids: Sequence[str]) -> FlowerTransport:
        """The same grid restricted to ``client_ids``."""
        return FlowerTransport(
            self.grid,
            self.task,
            timeout=self.timeout,
            reply_poll=self.reply_poll,
            expected=self.expected,
            node_wait=self.node_wait,
            client_node={c: self.client_node[c] for c in client_ids},
            site_nodes=self.site_nodes,
        )

    def _exchange(
        self, contents: Mapping[int, RecordDict], message_type: str, group: str
    ) -> dict[int, Message]:
        messages = [
            Message(content, dst_node_id=node, message_type=message_type, group_id=group)
            for node, content in contents.items()
        ]
        replies = self._send_and_receive(messages)
        # a SuperLink's grid gives each message its id when it pushes it
        addressed = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        addressed.pop("", None)
        by_node = {}
        for reply in replies:
            node = addressed.get(reply.metadata.reply_to_message_id)
            # the SuperLink answers for a node that stopped its heartbeats (NODE_UNAVAILABLE)
            # with an error reply of its own: keep it under the node it was sent to
            if node is None or not reply.has_error():
                node = reply.metadata.src_node_id
            by_node[node] = reply
        return by_node

    def _send_and_receive(self, messages: Sequence[Message]) -> list[Message]:
        """Push ``messages``; pull their replies every ``reply_poll`` s until all or the timeout.

        Flower's ``Grid.send_and_receive`` with a shorter wait: it waits for the ids the push
        returned, counts the timeout from the end of the push, and returns the replies that
        arrived by then (the rest are missing). A message the SuperLink refused (no id) gets no
        reply and is not waited for; one last ask is made at the deadline.
        """
        pending = {message_id for message_id in self.grid.push_messages(messages) if message_id}
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        replies: list[Message] = []
        while pending:
            pulled = list(self.grid.pull_messages(sorted(pending)))
            replies.extend(pulled)
            pending.difference_update(reply.metadata.reply_to_message_id for reply in pulled)
            left = math.inf if deadline is None else deadline - time.monotonic()
            if not pending or left <= 0:
                break
            time.sleep(min(self.reply_poll, left))
        return replies

    def _wait_for_nodes(self) -> list[int]:
        deadline = time.monotonic() + self.node_wait
        while True:
            nodes = sorted(self.grid.get_node_ids())
            if len(nodes) >= self.expected or time.monotonic() > deadline:
                return nodes
            time.sleep(0.2)

    def open(self, payload: Mapping[str, Any]) -> Replies:
        """Ask every connected node the ``setup`` step; learn which site each serves.

        Raises
        ------
        FederationError
            When two nodes claim the same site, or a node claims a site whose registered key
            is another node's (:func:`~rvfedprs.federation.flower.identity.bind_sites`).
        """
        nodes = self._wait_for_nodes()
        request = Request("setup", dict(payload))
        contents = {node: request_to_content(request, payload) for node in nodes}
        replies = self._exchange(contents, MessageType.QUERY, "setup")
        missing = f"no setup reply within {self.timeout} s"

        def claim(node: int) -> tuple[str, Any]:
            return content_to_payload(_content(replies.get(node), missing))

        answers, failed = collect(nodes, claim, REPLY_FAILURES)
        self.client_node = bind_sites(
            {node: client for node, (client, _) in answers.items()}, self.site_nodes
        )
        reports = {client: answers[node][1] for client, node in self.client_node.items()}
        return reports, {f"node {node}": why for node, why in failed.items()}

    def query(self, requests: Mapping[str, Request], settings: Mapping[str, Any]) -> Replies:
        """One ``query`` message per site (group ``<step>-<n>``)."""
        self._exchanges += 1
        steps = sorted({r.step for r in requests.values()})
        group = f"{'+'.join(steps)}-{self._exchanges}"
        contents = {
            self.client_node[c]: request_to_content(requests[c], settings) for c in requests
        }
        replies = self._exchange(contents, MessageType.QUERY, group)

        def answer(client: str) -> dict[str, Any]:
            return content_to_payload(self._reply_content(replies, client), client)[1]

        return collect(requests, answer, REPLY_FAILURES)

    def fit(
        self,
        server_round: int,
        instructions: Mapping[str, FitInstruction],
        seeds: Mapping[str, int],
        settings: Mapping[str, Any],
        client_state: dict[str, dict[str, Any]],
    ) -> Replies:
        """One ``train`` message per site (group ``<round>``); replies checked, state kept."""
        contents = {}
        for client, instruction in instructions.items():
            run = dict(settings)
            saved = self.task.export_state(client_state.get(client, {}))
            if saved is not None:
                run["client_state"] = saved  # a fresh node on a resumed run starts from it
            contents[self.client_node[client]] = instruction_to_content(
                instruction, server_round=server_round, seed=int(seeds[client]), run=run
            )
        replies = self._exchange(contents, MessageType.TRAIN, str(server_round))

        def result(client: str) -> FitResult:
            content = self._reply_content(replies, client)
            instruction = instructions[client]
            fitted = reply_to_fit_result(
                content,
                client_id=client,
                expected={} if instruction.config.get(SECURE_FIT_KEY) else instruction.parameters,
                bloom=instruction.config.get("bloom"),
            )
            saved = self._client_state(content, client, settings)
            if saved is not None:
                client_state[client] = self.task.restore_state(saved)
            return fitted

        return collect(instructions, result, REPLY_FAILURES)

    def _reply_content(self, replies: Mapping[int, Message], client: str) -> RecordDict:
        """The content of ``client``'s reply (:func:`_content`)."""
        return _content(replies.get(self.client_node[client]), f"no reply within {self.timeout} s")

    def _client_state(self, content: RecordDict, client: str, settings: Mapping) -> dict | None:
        meta = content.config_records.get("meta")
        raw = None if meta is None else meta.get("client-state")
        try:
            saved = None if raw is None else json.loads(str(raw))
        except ValueError as exc:
            raise MalformedReplyError(
                f"client {client!r} sent a malformed reply: unreadable client state ({exc})"
            ) from None
        problem = self.task.check_state(saved, settings)
        if problem is not None:
            raise MalformedReplyError(f"client {client!r} sent a malformed reply: {problem}")
        return saved
