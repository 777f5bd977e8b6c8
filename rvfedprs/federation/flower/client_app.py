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
:class:`~rvfedprs.training.dp.DPState`, created at its first round (or rebuilt from the state the
server hands back on a resumed run) and extended every round, so the ε it reports is cumulative;
every reply carries its state as JSON (``meta["dp-state"]``) for the server's checkpoint.

Imaging runs (the run settings carry ``task: imaging``, see
:func:`~rvfedprs.federation.flower.server_app.run_imaging_server`): the node is named by its
node config (``data-file``, ``client-id``) or, in simulation, by its ``partition-id``; it
rebuilds its own client's split from the MedMNIST file and the run's partition settings and
trains with :func:`~rvfedprs.imaging.client.fit_imaging_client`, the in-process function.
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
    from rvfedprs.training.dp import DPState

__all__ = [
    "app",
    "LocalClient",
    "load_local_client",
    "node_client",
    "new_dp_state",
    "imaging_node_client",
    "load_imaging_client",
    "imaging_local",
]

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

    from rvfedprs.bloom import read_bloom_key
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
        bloom_key=read_bloom_key(bloom_key_file, setting="bloom-key-file"),
    )
    _CACHE[cache_key] = local
    return local


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
    """Reply with the client id and its (n, Σx, Σx², n_cases) over the training split.

    An imaging setup (``task: imaging``) is answered with the client id only (after checking
    that the run lists it and that its file exists).
    """
    from rvfedprs.federation.data import prs_moments

    request = msg.content.config_records.get("setup")
    if request is not None and str(request.get("task", "genomic")) == "imaging":
        # who this node is, checked without reading the images (nor importing torch): the
        # split is built at the first round
        data_file, client_id = imaging_node_client(context, json.loads(str(request["run"])))
        if not Path(data_file).is_file():
            from rvfedprs.exceptions import InputDataError

            raise InputDataError(f"client {client_id}: MedMNIST file not found: {data_file}")
        return Message(RecordDict({"meta": ConfigRecord({"client-id": client_id})}), reply_to=msg)
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

    instruction, _, seed, run = content_to_instruction(msg.content)
    if run.get("task") == "imaging":
        return _train_imaging(msg, context, instruction, seed, run)
    local = _local(context)
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


def _train_imaging(msg: Message, context: Context, instruction, seed: int, run) -> Message:
    """One round of :func:`~rvfedprs.imaging.client.fit_imaging_client` on this node's client."""
    from rvfedprs.federation.flower.records import fit_result_to_content
    from rvfedprs.imaging.client import fit_imaging_client

    threads = run["imaging"].get("torch_threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    # one Flower run holds several strategies: each keeps its own client state
    record = f"{_STATE_RECORD}-imaging-{run.get('run_index', 0)}"
    client = replace(imaging_local(context, run), state=_load_state(context, record))
    result = fit_imaging_client(instruction, client, random_seed=seed)
    _save_state(context, client.state, record)
    return Message(fit_result_to_content(result), reply_to=msg)


_IMAGING_CACHE: dict[str, Any] = {}
_IMAGING_CACHE_SIZE = 8


def imaging_node_client(context: Context, run: dict[str, Any]) -> tuple[str, str]:
    """(MedMNIST file, client id) of this node for an imaging run.

    Deployment: node config ``client-id`` and ``data-file`` (this site's copy of the file).
    Simulation: the run's ``data`` and the node's ``partition-id`` into the run's sorted
    ``client_ids``.

    Raises
    ------
    ConfigError
        When the node config names a client but no file, a client the run does not list, or
        neither a client nor a partition.
    """
    from rvfedprs.exceptions import ConfigError

    node = context.node_config
    if "client-id" in node:
        if "data-file" not in node:
            raise ConfigError(
                "node config has client-id but no data-file for an imaging run; start the "
                "SuperNode with --node-config \"data-file='...npz' client-id='client_1'\""
            )
        data_file, client_id = str(node["data-file"]), str(node["client-id"])
        listed = sorted(run.get("client_ids") or [])
        if listed and client_id not in listed:
            raise ConfigError(
                f"client-id {client_id!r} is not a client of this imaging run: {listed}"
            )
        return data_file, client_id
    listed = sorted(run.get("client_ids") or [])
    if "partition-id" not in node or not listed:
        raise ConfigError(
            f"cannot tell which imaging client this node is: node config {dict(node)} has "
            "neither client-id nor partition-id"
        )
    index = int(node["partition-id"])
    if not 0 <= index < len(listed):
        raise ConfigError(f"partition-id {index} out of range: {len(listed)} imaging clients")
    return str(run["data"]), listed[index]


def load_imaging_client(data_file: str | Path, client_id: str, run: dict[str, Any]):
    """The :class:`~rvfedprs.imaging.client.ImagingClient` ``client_id``, rebuilt from the file.

    The split is :func:`~rvfedprs.imaging.benchmark.federation_from_section` of the file with
    the run's partition settings (``imaging`` section, ``seed``, ``fold``, ``class_counts``):
    deterministic, so every node derives the same partition and keeps only its own client.
    Cached per (file, client, settings) in the process (the last few: in simulation one
    process serves several clients).

    Raises
    ------
    ConfigError
        When ``client_id`` is not one of the partition's clients.
    InputDataError
        For an unreadable MedMNIST file.
    """
    import numpy as np

    from rvfedprs.exceptions import ConfigError
    from rvfedprs.imaging.benchmark import benchmark_data, federation_from_section
    from rvfedprs.imaging.loader import load_medmnist

    settings = {k: run.get(k) for k in ("imaging", "seed", "fold", "class_counts")}
    key = json.dumps([str(Path(data_file).resolve()), client_id, settings], sort_keys=True)
    if key in _IMAGING_CACHE:
        return _IMAGING_CACHE[key]
    dataset = load_medmnist(data_file)
    seed = int(run["seed"])
    counts = run.get("class_counts")
    clients = federation_from_section(
        benchmark_data(dataset, run["imaging"], seed),
        dataset.n_classes,
        run["imaging"],
        random_seed=seed,
        fold=run.get("fold"),
        class_counts=None if counts is None else np.asarray(counts, dtype=np.int64),
    )
    if client_id not in clients:
        raise ConfigError(
            f"client-id {client_id!r} is not a client of this imaging run: {sorted(clients)}"
        )
    while len(_IMAGING_CACHE) >= _IMAGING_CACHE_SIZE:
        _IMAGING_CACHE.pop(next(iter(_IMAGING_CACHE)))
    _IMAGING_CACHE[key] = clients[client_id]
    return clients[client_id]


def imaging_local(context: Context, run: dict[str, Any]):
    """The node's imaging client (:func:`imaging_node_client`, :func:`load_imaging_client`)."""
    data_file, client_id = imaging_node_client(context, run)
    return load_imaging_client(data_file, client_id, run)


def new_dp_state(settings: dict[str, Any], saved: dict[str, Any] | None = None) -> DPState:
    """A client's :class:`~rvfedprs.training.dp.DPState`: fresh, or ``saved`` (a resumed run).

    Parameters
    ----------
    settings : dict
        ``noise_multiplier``, ``max_grad_norm``, ``delta`` of the run.
    saved : dict, optional
        ``DPState.state_dict()`` of this client from the server's checkpoint.
    """
    from rvfedprs.training.dp import DPState

    if saved is not None:
        return DPState.from_state_dict(saved)
    return DPState(
        float(settings["noise_multiplier"]),
        float(settings["max_grad_norm"]),
        float(settings["delta"]),
    )


def _load_state(context: Context, name: str = _STATE_RECORD) -> dict[str, Any]:
    record = context.state.config_records.get(name)
    if record is None:
        return {}
    # Written by _save_state on this very node; never received over the network.
    return pickle.loads(bytes(record["state"]))  # noqa: S301


def _save_state(context: Context, state: dict[str, Any], name: str = _STATE_RECORD) -> None:
    context.state[name] = ConfigRecord({"state": pickle.dumps(state)})
