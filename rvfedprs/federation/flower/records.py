"""Strategy messages ⇄ Flower records, and the server's check of every client reply.

A fit instruction travels as a :class:`~flwr.app.RecordDict` with

- ``"parameters"``: :class:`~flwr.app.ArrayRecord` holding one array, every tensor packed
  into it (:func:`parameters_to_record`: Flower sends each array as its own objects);
- ``"config"``: :class:`~flwr.app.ConfigRecord` with ``fit-config`` (the strategy's
  :attr:`FitInstruction.config` as JSON), ``seed`` (the client's seed for this round),
  ``round`` and ``run`` (JSON: local training settings, model shape, federated PRS moments);
- ``"config-arrays"``: :class:`~flwr.app.ArrayRecord`, packed likewise, present when the
  config holds numpy arrays (SCAFFOLD's ``scaffold_correction``, Ditto's ``ditto_personal``:
  dicts of arrays).

Any config travels (:func:`encode_config` / :func:`decode_config`): ``None`` as JSON ``null``,
numpy scalars as Python numbers, and every numpy array, at any depth, as an entry of
``config-arrays`` named by its path (``ditto_personal/head.bias``), its place in the JSON held by
``{"__array__": <path>}``. Tuples come back as lists.

A reply carries ``"parameters"`` (the full updated model), ``"metrics"``
(:class:`~flwr.app.MetricRecord`: ``loss``, ``num-examples``) and ``"meta"`` (ConfigRecord:
``client-id``, for FedCE ``bloom-bits`` as bytes, and ``client-state``, the JSON of what the
task exports of the site's persistent state, e.g. its DP accountant).
:func:`reply_to_fit_result` rejects replies with missing or extra tensors, wrong shapes or
dtypes, non-finite values, or a missing Bloom filter, naming the client. Besides the tensors
sent, a reply may carry companion tensors ``<prefix>/<name>`` of a tensor sent (Ditto's
``personal/<name>``), held to the same shape and dtype.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from rvfedprs.exceptions import RvfedprsError
from rvfedprs.federation.flower.packing import pack_arrays, unpack_arrays
from rvfedprs.federation.task import Request
from rvfedprs.strategies.base import FitInstruction, FitResult

__all__ = [
    "MalformedReplyError",
    "PACKED",
    "parameters_to_record",
    "record_to_parameters",
    "encode_config",
    "decode_config",
    "instruction_to_content",
    "content_to_instruction",
    "fit_result_to_content",
    "reply_to_fit_result",
    "request_to_content",
    "content_to_request",
    "payload_to_content",
    "content_to_payload",
]


class MalformedReplyError(RvfedprsError):
    """A client's reply cannot be aggregated (the message names the client and the fault)."""


#: The one array of a non-empty parameters record: every tensor, packed (:mod:`.packing`).
PACKED = "packed"


def parameters_to_record(parameters: Mapping[str, np.ndarray]) -> ArrayRecord:
    """An :class:`ArrayRecord` holding every named array packed into one ``uint8`` array.

    Flower moves each array of a message as its own objects (one HTTP round trip apiece
    between a SuperNode and its ClientApp), so the tensors travel together as the single
    array :data:`PACKED` (:func:`~rvfedprs.federation.flower.packing.pack_arrays`: names,
    dtypes, shapes and order kept). No parameters give an empty record.
    """
    if not parameters:
        return ArrayRecord()
    packed = np.frombuffer(pack_arrays(parameters), dtype=np.uint8)
    return ArrayRecord({PACKED: Array(packed)})


def record_to_parameters(record: ArrayRecord) -> dict[str, np.ndarray]:
    """Inverse of :func:`parameters_to_record`: the named arrays, in order (writable copies).

    Raises
    ------
    ValueError
        When the record holds anything but the one packed array, or that array is not a
        packing of named arrays.
    """
    if len(record) == 0:
        return {}
    if list(record) != [PACKED]:
        raise ValueError(f"a parameters record holds arrays {list(record)}, expected [{PACKED!r}]")
    try:
        packed = record[PACKED].numpy()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a parameters record's {PACKED!r} array is unreadable ({exc})") from None
    if packed.dtype != np.uint8 or packed.ndim != 1:
        raise ValueError(
            f"a parameters record's {PACKED!r} array has dtype {packed.dtype} and shape "
            f"{packed.shape}, expected 1-d uint8"
        )
    return unpack_arrays(packed)


_ARRAY = "__array__"


def encode_config(config: Mapping[str, Any]) -> tuple[str, dict[str, np.ndarray]]:
    """Split a strategy config into JSON text and the numpy arrays it holds.

    Parameters
    ----------
    config : mapping
        JSON-like values, ``None``, numpy scalars and numpy arrays at any depth (in mappings
        with string keys, lists or tuples).

    Returns
    -------
    text : str
        JSON; each array replaced by ``{"__array__": path}``.
    arrays : dict of str to array
        Path (keys and list indices joined by ``/``) → array.

    Raises
    ------
    TypeError
        For a value JSON cannot hold (naming its path) or a mapping that uses ``__array__``
        as a key.
    """
    arrays: dict[str, np.ndarray] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, np.ndarray):
            arrays[path] = np.ascontiguousarray(value)
            return {_ARRAY: path}
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, Mapping):
            if _ARRAY in value:
                raise TypeError(f"config key {path or '<top>'!r} uses the reserved key {_ARRAY!r}")
            return {str(k): walk(v, f"{path}/{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(value)]
        if value is None or isinstance(value, (str, bool, int, float)):
            return value
        raise TypeError(
            f"config value at {path or '<top>'!r} has type {type(value).__name__}; "
            "cannot send it to a Flower client"
        )

    return json.dumps(walk(dict(config), "")), arrays


def decode_config(text: str, arrays: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
    """Inverse of :func:`encode_config`."""
    arrays = arrays or {}

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {_ARRAY}:
                return np.array(arrays[value[_ARRAY]], copy=True)
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(json.loads(text))


def instruction_to_content(
    instruction: FitInstruction,
    *,
    server_round: int,
    seed: int,
    run: Mapping[str, Any],
) -> RecordDict:
    """The content of the fit message for one client.

    Parameters
    ----------
    instruction : FitInstruction
        What the strategy asks of this client.
    server_round : int
    seed : int
        The client's training seed for this round.
    run : mapping
        JSON-serialisable run-wide settings (``training``, ``model``, ``prs_mean``,
        ``prs_sd``).
    """
    text, arrays = encode_config(instruction.config)
    content = RecordDict(
        {
            "parameters": parameters_to_record(instruction.parameters),
            "config": ConfigRecord(
                {
                    "fit-config": text,
                    "seed": int(seed),
                    "round": int(server_round),
                    "run": json.dumps(dict(run)),
                }
            ),
        }
    )
    if arrays:
        content["config-arrays"] = parameters_to_record(arrays)
    return content


def content_to_instruction(content: RecordDict) -> tuple[FitInstruction, int, int, dict]:
    """Inverse of :func:`instruction_to_content`: (instruction, round, seed, run)."""
    config = content.config_records["config"]
    arrays = content.array_records.get("config-arrays")
    instruction = FitInstruction(
        parameters=record_to_parameters(content.array_records["parameters"]),
        config=decode_config(
            str(config["fit-config"]), None if arrays is None else record_to_parameters(arrays)
        ),
    )
    return instruction, int(config["round"]), int(config["seed"]), json.loads(str(config["run"]))


def fit_result_to_content(
    result: FitResult, client_state: Mapping[str, Any] | None = None
) -> RecordDict:
    """The content of a client's reply (``client_state``: what the task exports of its state)."""
    meta: dict[str, Any] = {"client-id": result.client_id}
    if client_state is not None:
        meta["client-state"] = json.dumps(dict(client_state))
    if result.bloom_bits is not None:
        meta["bloom-bits"] = np.ascontiguousarray(result.bloom_bits, dtype=np.uint8).tobytes()
    if result.secure_keys is not None:
        meta["secagg-keys"] = json.dumps({k: list(v) for k, v in result.secure_keys.items()})
    metrics = {"num-examples": int(result.n_samples)}
    metrics.update({k: float(v) for k, v in result.metrics.items()})
    return RecordDict(
        {
            "parameters": parameters_to_record(result.parameters),
            "metrics": MetricRecord(metrics),
            "meta": ConfigRecord(meta),
        }
    )


def _companion_of(name: str) -> str | None:
    """``personal/head.bias`` → ``head.bias``; None for a name without a prefix."""
    prefix, sep, rest = name.partition("/")
    return rest if sep and prefix else None


def reply_to_fit_result(
    content: RecordDict,
    *,
    client_id: str,
    expected: Mapping[str, np.ndarray],
    bloom: Mapping[str, Any] | None,
) -> FitResult:
    """Decode and check a client's reply.

    Parameters
    ----------
    content : RecordDict
        The reply's content.
    client_id : str
        The client the reply should come from (the node it was sent to).
    expected : mapping of str to array
        The parameters sent: the reply must hold the same names, shapes and dtypes.
    bloom : mapping or None
        The round's ``bloom`` request (``capacity``, ``error_rate``; FedCE), or None: the
        reply must then carry a filter of exactly the size this layout gives.

    Returns
    -------
    FitResult

    Raises
    ------
    MalformedReplyError
        Naming the client: missing records, a client id that differs from the node's, a
        parameters record that is not a packing of arrays, missing or extra tensors, a wrong
        shape or dtype, NaN/inf values, a non-positive sample count, a non-finite loss, a
        missing Bloom filter or one of the wrong size.
    """

    def bad(what: str) -> MalformedReplyError:
        return MalformedReplyError(f"client {client_id!r} sent a malformed reply: {what}")

    for kind, records in (
        ("parameters", content.array_records),
        ("metrics", content.metric_records),
        ("meta", content.config_records),
    ):
        if kind not in records:
            raise bad(f"no {kind!r} record")
    meta = content.config_records["meta"]
    sender = str(meta.get("client-id", ""))
    if sender != client_id:
        raise bad(f"it names itself {sender!r}")
    try:
        parameters = record_to_parameters(content.array_records["parameters"])
    except ValueError as exc:
        raise bad(str(exc)) from None
    missing = sorted(set(expected) - set(parameters))
    extra = sorted(n for n in set(parameters) - set(expected) if _companion_of(n) not in expected)
    if missing or extra:
        raise bad(f"tensors missing {missing}, unexpected {extra}")
    for name, got in parameters.items():
        ref = expected[name if name in expected else _companion_of(name)]
        if got.shape != ref.shape:
            raise bad(f"tensor {name!r} has shape {got.shape}, expected {ref.shape}")
        if got.dtype != ref.dtype:
            raise bad(f"tensor {name!r} has dtype {got.dtype}, expected {ref.dtype}")
        if not np.all(np.isfinite(got)):
            raise bad(f"tensor {name!r} holds {int((~np.isfinite(got)).sum())} NaN/inf values")
    metrics = content.metric_records["metrics"]
    n_samples = int(metrics.get("num-examples", 0))
    if n_samples <= 0:
        raise bad(f"num-examples is {n_samples}")
    loss = float(metrics.get("loss", float("nan")))
    if not np.isfinite(loss):
        raise bad(f"loss is {loss}")
    bits = None
    if "bloom-bits" in meta:
        bits = np.frombuffer(bytes(meta["bloom-bits"]), dtype=np.uint8).copy()
    if bloom is not None:
        from rvfedprs.bloom import BloomSpec, n_bytes

        if bits is None:
            raise bad("the round asked for a Bloom filter and none came back")
        size = n_bytes(BloomSpec(int(bloom["capacity"]), float(bloom["error_rate"]), None))
        if bits.size != size:
            raise bad(f"its Bloom filter has {bits.size} bytes, expected {size}")
    keys = None
    if "secagg-keys" in meta:  # checked by the secure sum that uses them
        try:
            keys = {str(k): tuple(v) for k, v in json.loads(str(meta["secagg-keys"])).items()}
        except (ValueError, TypeError, AttributeError):
            raise bad("its public keys for the secure sums are not a JSON mapping") from None
    return FitResult(
        client_id=client_id,
        n_samples=n_samples,
        parameters=parameters,
        metrics={k: float(v) for k, v in metrics.items() if k != "num-examples"},
        bloom_bits=bits,
        secure_keys=keys,
    )


def _with_arrays(records: dict[str, Any], arrays: Mapping[str, np.ndarray]) -> RecordDict:
    content = RecordDict(records)
    if arrays:
        content["config-arrays"] = parameters_to_record(arrays)
    return content


def _arrays_of(content: RecordDict) -> dict[str, np.ndarray] | None:
    arrays = content.array_records.get("config-arrays")
    return None if arrays is None else record_to_parameters(arrays)


def request_to_content(request: Request, settings: Mapping[str, Any]) -> RecordDict:
    """The content of a step request: ``request`` (step and payload) and the run ``settings``."""
    text, arrays = encode_config({"step": request.step, "payload": dict(request.payload)})
    config = ConfigRecord({"request": text, "settings": json.dumps(dict(settings))})
    return _with_arrays({"config": config}, arrays)


def content_to_request(content: RecordDict) -> tuple[Request, dict[str, Any]]:
    """Inverse of :func:`request_to_content`: (request, settings)."""
    config = content.config_records["config"]
    body = decode_config(str(config["request"]), _arrays_of(content))
    return Request(str(body["step"]), dict(body["payload"])), json.loads(str(config["settings"]))


def payload_to_content(client_id: str, payload: Mapping[str, Any]) -> RecordDict:
    """The content of a site's answer to a step."""
    text, arrays = encode_config(payload)
    meta = ConfigRecord({"client-id": client_id, "reply": text})
    return _with_arrays({"meta": meta}, arrays)


def content_to_payload(content: RecordDict, client_id: str | None = None) -> tuple[str, dict]:
    """Inverse of :func:`payload_to_content`: (the site's id, its payload).

    Raises
    ------
    MalformedReplyError
        When the reply lacks its records, names another site than ``client_id``, or its
        ``config-arrays`` record is not a packing of arrays.
    """
    meta = content.config_records.get("meta")
    if meta is None or "reply" not in meta or "client-id" not in meta:
        raise MalformedReplyError(f"client {client_id!r} sent a malformed reply: no 'meta' reply")
    sender = str(meta["client-id"])
    if client_id is not None and sender != client_id:
        raise MalformedReplyError(
            f"client {client_id!r} sent a malformed reply: it names itself {sender!r}"
        )
    try:
        arrays = _arrays_of(content)
    except ValueError as exc:
        raise MalformedReplyError(f"client {sender!r} sent a malformed reply: {exc}") from None
    return sender, decode_config(str(meta["reply"]), arrays)
