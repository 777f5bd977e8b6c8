"""Checkpoints of a federated run: one file per round, enough to resume it exactly.

``OUT/checkpoints/round_XXX.pt`` holds the round, the seed and its scheme, the strategy's state,
the history so far, the clients' persistent state when the engine keeps it (DP accountants and
whatever else a client stores between rounds) and what the task adds (model shape, the
configuration). Values are kept as they are (arrays, numbers, strings, nested mappings and
lists); an object with ``state_dict()`` and a ``from_state_dict`` classmethod (e.g.
:class:`~rvfedprs.training.dp.DPState`) is saved as its state and rebuilt on resume. Files load
with ``torch.load(weights_only=True)``: no pickled code. torch is imported when a checkpoint is
written or read, not with this module (an engine that writes none need not load it).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.exceptions import InputDataError

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "prune_checkpoints",
    "checkpoint_path",
    "encode_client_state",
    "decode_client_state",
]

_CHECKPOINT = re.compile(r"round_(\d+)\.pt$")


def checkpoint_path(out: str | Path, server_round: int) -> Path:
    """``out/checkpoints/round_XXX.pt``."""
    return Path(out) / "checkpoints" / f"round_{server_round:03d}.pt"


def _to_saveable(value: Any) -> Any:
    import torch

    if isinstance(value, np.ndarray):
        if value.dtype.kind in "US":
            return {"__str_array__": value.astype(str).tolist()}
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, Mapping):
        return {str(k): _to_saveable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_saveable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    return value


def _from_saved(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        if set(value) == {"__str_array__"}:
            return np.asarray(value["__str_array__"], dtype=str)
        return {k: _from_saved(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_saved(v) for v in value]
    return value


def save_checkpoint(path: str | Path, record: Mapping[str, Any]) -> Path:
    """Write a checkpoint (numpy arrays stored as tensors; loadable with ``weights_only``)."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".pt.tmp")
    torch.save(_to_saveable(record), tmp)
    tmp.replace(path)
    return path


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint written by :func:`save_checkpoint` (numpy arrays restored).

    Raises
    ------
    InputDataError
        When the file is missing or not a checkpoint.
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"checkpoint not found: {path}")
    try:
        record = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises several unrelated types for a bad file
        raise InputDataError(f"{path} is not an rvfedprs checkpoint: {exc}") from None
    if not isinstance(record, dict) or "strategy_state" not in record:
        raise InputDataError(f"{path} is not an rvfedprs checkpoint (no strategy_state)")
    return _from_saved(record)


def latest_checkpoint(out: str | Path) -> Path | None:
    """The checkpoint of the highest round in ``out/checkpoints``, or None."""
    folder = Path(out) / "checkpoints"
    found = [
        (int(m.group(1)), p) for p in folder.glob("round_*.pt") if (m := _CHECKPOINT.search(p.name))
    ]
    return max(found)[1] if found else None


def prune_checkpoints(folder: Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` highest-round ``round_XXX.pt`` files in ``folder``.

    Returns
    -------
    list of Path
        The files deleted.
    """
    saved = sorted(folder.glob("round_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    stale = saved[: max(len(saved) - keep, 0)]
    for old in stale:
        old.unlink()
    return stale


_OBJECT = "__rvfedprs_object__"
#: Modules renamed since checkpoints were written: old name → new name.
_MOVED = {"rvfedprs.privacy": "rvfedprs.training.dp"}
_PLAIN = (str, bytes, bool, int, float, type(None), np.ndarray, np.generic)


def encode_client_state(client_state: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The clients' persistent state in a form a checkpoint can hold.

    Parameters
    ----------
    client_state : mapping
        Client id → that client's state (a mapping of plain values, arrays, nested mappings
        and lists, and objects with ``state_dict()`` / ``from_state_dict``).

    Returns
    -------
    dict
        Objects replaced by ``{"__rvfedprs_object__": "module:Class", "state": ...}``.

    Raises
    ------
    TypeError
        For a value that cannot be saved, naming the client and the key.
    """

    def walk(value: Any, where: str) -> Any:
        if isinstance(value, _PLAIN):
            return value
        if isinstance(value, Mapping):
            return {str(k): walk(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        cls = type(value)
        if callable(getattr(value, "state_dict", None)) and hasattr(cls, "from_state_dict"):
            if not cls.__module__.startswith("rvfedprs."):
                raise TypeError(f"client state {where}: only rvfedprs classes can be saved")
            return {
                _OBJECT: f"{cls.__module__}:{cls.__qualname__}",
                "state": walk(value.state_dict(), where),
            }
        raise TypeError(
            f"client state {where} has type {cls.__name__}, which a checkpoint cannot hold "
            "(give it state_dict() and from_state_dict)"
        )

    return {str(c): walk(dict(state), str(c)) for c, state in client_state.items()}


def decode_client_state(saved: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Inverse of :func:`encode_client_state` (objects rebuilt with ``from_state_dict``)."""

    def walk(value: Any) -> Any:
        if isinstance(value, Mapping):
            if _OBJECT in value:
                module, _, name = str(value[_OBJECT]).partition(":")
                module = _MOVED.get(module, module)
                if not module.startswith("rvfedprs."):
                    raise InputDataError(f"checkpoint client state names {module!r}")
                cls = importlib.import_module(module)
                for part in name.split("."):
                    cls = getattr(cls, part)
                return cls.from_state_dict(walk(value["state"]))
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return {str(c): walk(state) for c, state in saved.items()}
