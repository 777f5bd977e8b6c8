"""The Flower ClientApp: one biobank's side of the federation.

Each SuperNode reads only its own client's folder. In a deployment the node configuration names
it (``flower-supernode --node-config "data-dir='/data/results' client-id='site1'"``, optionally
``bloom-key-file='/secrets/bloom.key'``); in Flower's simulation engine the run configuration's
``data-dir`` is shared and the node's ``partition-id`` picks the client (sorted order of
``clients.tsv``).

Two message types:

- ``query`` (``setup``): the client's contribution to the federated PRS moments and case count,
  (n, Σx, Σx², n_cases) of its training split, and its client id;
- ``train``: :func:`~rvfedprs.federation.client.fit_client` — the same function the in-process
  engine calls — on the instruction decoded from the message.

Persistent client state (``ClientContext.state``) lives in ``context.state`` between rounds.
With DP on (the run settings carry ``dp``: σ, C, δ) that is the client's one
:class:`~rvfedprs.privacy.DPState`, created at its first round (or rebuilt from the state the
server hands back on a resumed run) and extended every round, so the ε it reports is cumulative;
every reply carries its state as JSON (``meta["dp-state"]``) for the server's checkpoint.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

if TYPE_CHECKING:
    from rvfedprs.privacy import DPState

__all__ = ["app", "LocalClient", "load_local_client", "node_client", "new_dp_state"]

app = ClientApp()

_STATE_RECORD = "rvfedprs-client-state"


@dataclass(frozen=True)
class LocalClient:
    """One client's training data as read from its own folder.

    Attributes
    ----------
    train : ClientData
        Training split; ``prs`` is replaced by the federated standardisation each round.
    raw_prs : array of float64, shape (n_train,)
        The unstandardised training PRS.
    variant_keys : list of str, shape (n_rare,)
    bloom_key : bytes or None
    """

    train: Any
    raw_prs: np.ndarray
    variant_keys: list[str]
    bloom_key: bytes | None

    def standardised(self, mean: float, sd: float):
        """The training split with the PRS standardised by the federated mean and sd."""
        prs = (self.raw_prs - float(mean)) / float(sd)
        return replace(self.train, prs=prs.astype(np.float32))


_CACHE: dict[tuple[str, str, str], LocalClient] = {}


def load_local_client(
    data_dir: str | Path, client_id: str, *, bloom_key_file: str | None = None
) -> LocalClient:
    """Read ``data_dir/clients/<client_id>`` (and the shared ``rare_variants.tsv``) only.

    Raises
    ------
    InputDataError
        As :func:`~rvfedprs.federation.data.load_federation` for this one client.
    ConfigError
        When ``bloom_key_file`` is missing or empty.
    """
    import pandas as pd

    from rvfedprs.federation.data import load_federation

    cache_key = (str(Path(data_dir).resolve()), client_id, str(bloom_key_file or ""))
    if cache_key in _CACHE:
        return _CACHE[cache_key]
    federation = load_federation(data_dir, clients=[client_id])
    samples = pd.read_parquet(Path(data_dir) / "clients" / client_id / "samples.parquet")
    is_train = (samples["split"].astype(str) == "train").to_numpy()
    raw = samples["prs"].to_numpy(np.float64)[np.flatnonzero(is_train)]
    local = LocalClient(
        train=federation.train[client_id],
        raw_prs=raw,
        variant_keys=federation.variant_keys,
        bloom_key=_read_key(bloom_key_file),
    )
    _CACHE[cache_key] = local
    return local


def _read_key(path: str | None) -> bytes | None:
    from rvfedprs.exceptions import ConfigError

    if not path:
        return None
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"bloom-key-file: {p} not found")
    key = p.read_bytes().strip()
    if not key:
        raise ConfigError(f"bloom-key-file: {p} is empty")
    return key


def node_client(context: Context) -> tuple[str, str, str | None]:
    """(data_dir, client_id, bloom_key_file) of this node.

    Deployment: node config ``data-dir`` and ``client-id``. Simulation: run config ``data-dir``
    and the node's ``partition-id`` into the sorted clients of ``clients.tsv``.
    """
    import pandas as pd

    from rvfedprs.exceptions import ConfigError

    node, run = context.node_config, context.run_config
    key_file = str(node.get("bloom-key-file", run.get("bloom-key-file", ""))) or None
    if "client-id" in node:
        if "data-dir" not in node:
            raise ConfigError(
                "node config has client-id but no data-dir; start the SuperNode with "
                "--node-config \"data-dir='...' client-id='...'\""
            )
        return str(node["data-dir"]), str(node["client-id"]), key_file
    if "partition-id" not in node or not run.get("data-dir"):
        raise ConfigError(
            f"cannot tell which client this node is: node config {dict(node)} has neither "
            "client-id nor (partition-id with run config data-dir)"
        )
    data_dir = str(run["data-dir"])
    listed = sorted(pd.read_csv(Path(data_dir) / "clients.tsv", sep="\t", dtype=str)["client"])
    index = int(node["partition-id"])
    if not 0 <= index < len(listed):
        raise ConfigError(f"partition-id {index} out of range: {len(listed)} clients in {data_dir}")
    return data_dir, listed[index], key_file


def _local(context: Context) -> LocalClient:
    data_dir, client_id, key_file = node_client(context)
    return load_local_client(data_dir, client_id, bloom_key_file=key_file)


@app.query()
def setup(msg: Message, context: Context) -> Message:
    """Reply with the client id and its (n, Σx, Σx², n_cases) over the training split."""
    from rvfedprs.federation.data import prs_moments

    local = _local(context)
    n, s, ss = prs_moments(local.raw_prs)
    content = RecordDict(
        {
            "meta": ConfigRecord({"client-id": local.train.client_id}),
            "moments": MetricRecord(
                {"n": n, "sum": s, "sumsq": ss, "n-cases": float(local.train.y.sum())}
            ),
        }
    )
    return Message(content, reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """One round of local training through :func:`~rvfedprs.federation.client.fit_client`."""
    from rvfedprs.federation.client import ClientContext, fit_client
    from rvfedprs.federation.flower.records import content_to_instruction, fit_result_to_content
    from rvfedprs.training import LocalTrainingConfig

    local = _local(context)
    instruction, _, seed, run = content_to_instruction(msg.content)
    state = _load_state(context)
    dp = run.get("dp")
    if dp is not None and "dp" not in state:
        state["dp"] = new_dp_state(dp, run.get("dp_state"))
    client = ClientContext(
        data=local.standardised(run["prs_mean"], run["prs_sd"]),
        variant_keys=local.variant_keys,
        model_config=run["model"],
        training=LocalTrainingConfig(**run["training"]),
        bloom_key=local.bloom_key,
        state=state,
    )
    result = fit_client(instruction, client, random_seed=seed)
    _save_state(context, client.state)
    content = fit_result_to_content(result)
    if dp is not None:
        content.config_records["meta"]["dp-state"] = json.dumps(client.state["dp"].state_dict())
    return Message(content, reply_to=msg)


def new_dp_state(settings: dict[str, Any], saved: dict[str, Any] | None = None) -> DPState:
    """A client's :class:`~rvfedprs.privacy.DPState`: fresh, or ``saved`` (a resumed run).

    Parameters
    ----------
    settings : dict
        ``noise_multiplier``, ``max_grad_norm``, ``delta`` of the run.
    saved : dict, optional
        ``DPState.state_dict()`` of this client from the server's checkpoint.
    """
    from rvfedprs.privacy import DPState

    if saved is not None:
        return DPState.from_state_dict(saved)
    return DPState(
        float(settings["noise_multiplier"]),
        float(settings["max_grad_norm"]),
        float(settings["delta"]),
    )


def _load_state(context: Context) -> dict[str, Any]:
    record = context.state.config_records.get(_STATE_RECORD)
    if record is None:
        return {}
    # Written by _save_state on this very node; never received over the network.
    return pickle.loads(bytes(record["state"]))  # noqa: S301


def _save_state(context: Context, state: dict[str, Any]) -> None:
    context.state[_STATE_RECORD] = ConfigRecord({"state": pickle.dumps(state)})
