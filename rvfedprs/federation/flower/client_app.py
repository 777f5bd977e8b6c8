"""The Flower ClientApp: one site's side of the federation, for any registered task.

Each SuperNode reads only its own site's files. Which site it serves comes from its node
configuration in a deployment (e.g. ``flower-supernode --node-config "data-dir='/data/results'
client-id='site1'"``) or, in Flower's simulation engine, from its ``partition-id`` and the run
configuration — the task decides (:meth:`~rvfedprs.federation.task.Task.locate`). Every message
names its task (``settings["task"]``, :mod:`rvfedprs.tasks`):

- ``query``: a step (:class:`~rvfedprs.federation.task.Request`) answered by
  :meth:`~rvfedprs.federation.task.Task.handle` — ``setup`` first (the site's id and its report),
  then whatever steps the task defines;
- ``train``: :meth:`~rvfedprs.federation.task.Task.fit` — the same call the in-process engine
  makes — on the instruction decoded from the message. In a securely aggregated round the
  update is held in the node's step state and the reply carries no parameters.

A site's persistent state (its DP accountant, say) lives in ``context.state`` between rounds,
one record per run of the job; what the task exports of it goes back with every reply, and a
node that starts empty on a resumed run is handed the server's saved copy.
"""

from __future__ import annotations

import json
import pickle
from collections import OrderedDict
from typing import Any

from flwr.app import ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from rvfedprs.federation.flower.records import (
    content_to_instruction,
    content_to_request,
    fit_result_to_content,
    payload_to_content,
)
from rvfedprs.federation.freeze import freeze_if_asked
from rvfedprs.federation.secagg.protocol import SECURE_FIT_KEY
from rvfedprs.federation.secagg.site import held_fit_result
from rvfedprs.federation.task import WARM_START_RUN, Task
from rvfedprs.tasks import get_task

__all__ = ["app", "node_site"]

app = ClientApp()

_STATE_RECORD = "rvfedprs-client-state"
_STEP_RECORD = "rvfedprs-step-state"

# Sites opened in this process (in simulation one process serves several nodes): the last few.
_SITES: OrderedDict[str, Any] = OrderedDict()
_SITES_KEPT = 8


def node_site(task: Task, context: Context, settings: dict[str, Any]) -> tuple[str, Any]:
    """(site id, site) of this node: located by the task, opened once per process and settings.

    Raises
    ------
    ConfigError
        When the node and run configuration do not say which site this is.
    InputDataError
        When the site's files are missing or malformed.
    """
    locator = task.locate(context.node_config, context.run_config, settings)
    key = json.dumps([task.name, locator, task.site_key(settings)], sort_keys=True)
    if key not in _SITES:
        while len(_SITES) >= _SITES_KEPT:
            _SITES.popitem(last=False)
        _SITES[key] = task.open_site(locator, settings)
    _SITES.move_to_end(key)
    return str(locator["client-id"]), _SITES[key]


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Answer a step (``setup`` first) on this node's site."""
    request, settings = content_to_request(msg.content)
    task = get_task(str(settings["task"]))
    client, site = node_site(task, context, settings)
    freeze_if_asked(client, request.step)  # a test hook; nothing unless the node is told
    state = _load_state(context, _STEP_RECORD)
    payload = task.handle(request, site, state)
    _save_state(context, state, _STEP_RECORD)
    return Message(payload_to_content(client, payload), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of local training through the task's :meth:`~Task.fit`."""
    instruction, server_round, seed, settings = content_to_instruction(msg.content)
    task = get_task(str(settings["task"]))
    client, site = node_site(task, context, settings)
    fit = "warm_start" if settings.get("run_index") == WARM_START_RUN else "train"
    freeze_if_asked(client, f"{fit}.{server_round}")  # a test hook, as in query
    record = f"{_STATE_RECORD}-{settings['run_index']}" if settings.get("run_index") else None
    state = _load_state(context, record or _STATE_RECORD)
    saved = settings.get("client_state")
    if not state and saved is not None:
        state = task.restore_state(saved)
    result = task.fit(instruction, site, settings, state, random_seed=seed)
    _save_state(context, state, record or _STATE_RECORD)
    if instruction.config.get(SECURE_FIT_KEY):  # the update stays here, in the step state
        steps = _load_state(context, _STEP_RECORD)
        result = held_fit_result(result, instruction, steps)
        _save_state(context, steps, _STEP_RECORD)
    return Message(fit_result_to_content(result, task.export_state(state)), reply_to=msg)


def _load_state(context: Context, name: str = _STATE_RECORD) -> dict[str, Any]:
    record = context.state.config_records.get(name)
    if record is None:
        return {}
    # Written by _save_state on this very node; never received over the network.
    return pickle.loads(bytes(record["state"]))  # noqa: S301


def _save_state(context: Context, state: dict[str, Any], name: str = _STATE_RECORD) -> None:
    context.state[name] = ConfigRecord({"state": pickle.dumps(state)})
