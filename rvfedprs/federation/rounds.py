"""The server side of a federated run that every engine shares.

An engine (in-process, Flower simulation, Flower deployment) differs only in how it gets the
clients' :class:`~rvfedprs.strategies.base.FitResult` for a round; everything around that call
lives here so that all engines give the same model for the same seed:

- :func:`begin_run` — initialise the strategy with w^0 (seeded from ``SeedSequence([seed, 0])``)
  or restore it from the latest checkpoint;
- :func:`client_seed` — the seed client ``c`` trains with in round ``t``;
- :func:`finish_round` — aggregate, record the round's history entry, write the checkpoint.

A checkpoint also holds the clients' persistent state when the engine keeps it (the in-process
engine: DP accountants and whatever else a client stores in ``ClientContext.state``), so that a
resumed run equals an uninterrupted one. Values are kept as they are (arrays, numbers, strings,
nested mappings and lists); an object with ``state_dict()`` and a ``from_state_dict``
classmethod (e.g. :class:`~rvfedprs.training.dp.DPState`) is saved as its state and rebuilt on
resume. In a Flower deployment client state lives on the SuperNodes instead (``context.state``).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.exceptions import InputDataError
from rvfedprs.strategies.base import FitResult, Strategy

__all__ = [
    "RunSetup",
    "begin_run",
    "client_seed",
    "finish_round",
    "encode_client_state",
    "decode_client_state",
    "SEED_SCHEME",
]

log = logging.getLogger(__name__)

#: How per-(round, client) seeds are derived (recorded in every checkpoint).
SEED_SCHEME = "SeedSequence([seed, round, crc32(client_id)])"


class RunSetup:
    """What a run needs to checkpoint a round: fixed for the whole run.

    Parameters
    ----------
    client_ids : sequence of str
        The federation's clients, sorted.
    n_rare : int
    model_config : mapping
    random_seed : int
    out : str or Path, optional
        Where ``checkpoints/round_XXX.pt`` go (none written when None).
    checkpoint_extra : mapping, optional
        Saved in every checkpoint.
    keep_checkpoints : int, optional
        Keep only the latest this many checkpoints (older ones are deleted after each round is
        saved; a checkpoint holds the whole model, tens of MB with many rare variants). None or
        0 keeps them all. A resume needs only the latest.
    """

    def __init__(
        self,
        client_ids: Sequence[str],
        *,
        n_rare: int,
        model_config: Mapping[str, Any],
        random_seed: int,
        out: str | Path | None = None,
        checkpoint_extra: Mapping[str, Any] | None = None,
        keep_checkpoints: int | None = None,
    ) -> None:
        if keep_checkpoints is not None and keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints must be >= 0, got {keep_checkpoints}")
        self.client_ids = sorted(client_ids)
        self.n_rare = int(n_rare)
        self.model_config = dict(model_config)
        self.random_seed = int(random_seed)
        self.out = None if out is None else Path(out)
        self.checkpoint_extra = dict(checkpoint_extra or {})
        self.keep_checkpoints = keep_checkpoints or None


def client_seed(random_seed: int, server_round: int, client_id: str) -> int:
    """The seed of ``client_id`` in ``server_round`` (independent of client order and resume)."""
    from rvfedprs.federation.inprocess import derive_seed

    return derive_seed(random_seed, server_round, client_id)


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


def begin_run(
    strategy: Strategy,
    setup: RunSetup,
    *,
    resume: bool = False,
    client_state: dict[str, dict[str, Any]] | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Initialise ``strategy`` (or restore it from the latest checkpoint when ``resume``).

    When resuming and ``client_state`` is given, each client's dict in it is refilled in place
    from the checkpoint (so contexts holding those dicts see the restored state).

    Returns
    -------
    start : int
        The last completed round (0 for a fresh run).
    history : list of dict
        The history of the completed rounds.

    Raises
    ------
    InputDataError
        When the checkpoint to resume from was written with another seed.
    """
    from rvfedprs.federation.inprocess import (
        initial_parameters,
        latest_checkpoint,
        load_checkpoint,
    )

    latest = latest_checkpoint(setup.out) if (resume and setup.out is not None) else None
    if latest is None:
        w0 = initial_parameters(setup.n_rare, setup.model_config, setup.random_seed)
        strategy.initialize(w0, setup.client_ids)
        return 0, []
    record = load_checkpoint(latest)
    if int(record["seed"]) != setup.random_seed:
        raise InputDataError(
            f"cannot resume from {latest}: it was run with seed {record['seed']}, "
            f"not {setup.random_seed}"
        )
    strategy.load_state_dict(record["strategy_state"])
    if client_state is not None:
        for client, state in decode_client_state(record.get("client_state", {})).items():
            target = client_state.setdefault(client, {})
            target.clear()
            target.update(state)
    log.info("resuming from %s (round %d)", latest, int(record["round"]))
    return int(record["round"]), list(record.get("history", []))


def finish_round(
    strategy: Strategy,
    setup: RunSetup,
    server_round: int,
    results: Sequence[FitResult],
    history: list[dict[str, Any]],
    *,
    failures: Mapping[str, str] | None = None,
    evaluate_round: Callable[[Strategy], Mapping[str, Any]] | None = None,
    client_state: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """Aggregate ``results``, append the round's entry to ``history``, write the checkpoint.

    Parameters
    ----------
    strategy : Strategy
    setup : RunSetup
    server_round : int
    results : sequence of FitResult
        The replies that arrived and passed validation.
    history : list of dict
        Appended to in place.
    failures : mapping, optional
        Client id → reason, for clients whose reply was lost or rejected this round; recorded
        in the entry under ``failed`` (absent when every client replied).
    evaluate_round : callable, optional
        Called with the strategy after aggregation; its mapping is merged into the entry.
    client_state : mapping, optional
        Client id → persistent state after this round, saved in the checkpoint
        (:func:`encode_client_state`).

    Returns
    -------
    entry : dict
        ``round``, ``loss`` (n_k-weighted mean local training loss), ``failed`` if any, and the
        evaluation's keys.
    checkpoint : Path or None
    """
    from rvfedprs.federation.inprocess import save_checkpoint

    strategy.aggregate_fit(server_round, results)
    n = np.array([r.n_samples for r in results], dtype=np.float64)
    loss = float(np.average([r.metrics["loss"] for r in results], weights=n))
    entry: dict[str, Any] = {"round": server_round, "loss": loss}
    if failures:
        entry["failed"] = dict(sorted(failures.items()))
    if evaluate_round is not None:
        entry.update(evaluate_round(strategy))
    history.append(entry)
    if setup.out is None:
        return entry, None
    record = {
        "round": server_round,
        "seed": setup.random_seed,
        "rng": {"scheme": SEED_SCHEME},
        "strategy_name": strategy.name,
        "strategy_state": strategy.state_dict(),
        "clusters": strategy.clusters(),
        "history": history,
        "client_ids": list(setup.client_ids),
        "n_rare": setup.n_rare,
        "model_config": dict(setup.model_config),
        **setup.checkpoint_extra,
    }
    if client_state is not None:
        record["client_state"] = encode_client_state(client_state)
    path = save_checkpoint(setup.out / "checkpoints" / f"round_{server_round:03d}.pt", record)
    if setup.keep_checkpoints is not None:
        prune_checkpoints(path.parent, setup.keep_checkpoints)
    return entry, path


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
