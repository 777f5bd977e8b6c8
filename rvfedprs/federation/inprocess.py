"""The in-process engine: every client runs in this process, one after another.

Deterministic for a master seed: the initial model is seeded from ``SeedSequence([seed, 0])``
and client ``c`` in round ``t`` trains with the seed ``SeedSequence([seed, t, crc32(c)])``, so
a result depends neither on the order of clients nor on a resume in between. After every round
the engine writes ``OUT/checkpoints/round_XXX.pt`` (the strategy's state, the round, the seed
scheme, the history); ``resume=True`` continues from the latest one.
"""

from __future__ import annotations

import logging
import re
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.client import ClientContext, fit_client
from rvfedprs.federation.data import Federation, pool_clients
from rvfedprs.federation.rounds import RunSetup, begin_run, client_seed, finish_round
from rvfedprs.model import get_parameters, model_from_config
from rvfedprs.strategies.base import Strategy
from rvfedprs.training import LocalTrainingConfig

__all__ = [
    "RunResult",
    "run_inprocess",
    "derive_seed",
    "initial_parameters",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "POOLED_CLIENT",
]

log = logging.getLogger(__name__)

#: Client id of the virtual client holding the pooled data (centralised baseline).
POOLED_CLIENT = "pooled"
_CHECKPOINT = re.compile(r"round_(\d+)\.pt$")


def derive_seed(master_seed: int, *words: int | str) -> int:
    """A 31-bit seed from the master seed and a path of ints/strings (strings via CRC-32)."""
    entropy = [int(master_seed)] + [
        zlib.crc32(w.encode()) if isinstance(w, str) else int(w) for w in words
    ]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] >> 1)


def initial_parameters(
    n_rare: int, model_config: Mapping[str, Any], random_seed: int
) -> dict[str, np.ndarray]:
    """w^0: a freshly initialised two-pathway model, seeded from ``SeedSequence([seed, 0])``."""
    model = model_from_config(n_rare, model_config, random_seed=derive_seed(random_seed, 0))
    return get_parameters(model)


@dataclass
class RunResult:
    """What a federated run leaves behind.

    Attributes
    ----------
    strategy : Strategy
        The trained strategy (``parameters_for(client)`` gives each client's model).
    history : list of dict
        Per round: ``round``, ``loss`` (n_k-weighted mean local training loss) and whatever the
        ``evaluate_round`` callback returned (e.g. ``auc``).
    seed : int
    checkpoints : list of Path
    """

    strategy: Strategy
    history: list[dict[str, Any]]
    seed: int
    checkpoints: list[Path] = field(default_factory=list)


def _to_saveable(value: Any) -> Any:
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


def _progress(total: int, start: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc="rounds", unit="round", leave=False)


def run_inprocess(
    federation: Federation,
    strategy: Strategy,
    *,
    rounds: int,
    model_config: Mapping[str, Any],
    training: LocalTrainingConfig,
    random_seed: int,
    out: str | Path | None = None,
    resume: bool = False,
    bloom_key: bytes | None = None,
    client_state: dict[str, dict[str, Any]] | None = None,
    evaluate_round: Callable[[Strategy], Mapping[str, Any]] | None = None,
    checkpoint_extra: Mapping[str, Any] | None = None,
    keep_checkpoints: int | None = None,
    progress: bool = False,
) -> RunResult:
    """Run ``rounds`` federated rounds of ``strategy`` on ``federation``.

    Parameters
    ----------
    federation : Federation
        Per-client train/test data (:func:`~rvfedprs.federation.data.load_federation`).
    strategy : Strategy
        A fresh strategy; a ``pooled`` one (centralised) trains one virtual client holding all
        training data.
    rounds : int
        Total number of rounds (a resumed run stops at the same total).
    model_config : mapping
        ``common_hidden``, ``rare_hidden``, ``dropout``.
    training : LocalTrainingConfig
        Local optimiser settings shared by the clients.
    random_seed : int
        Master seed.
    out : str or Path, optional
        Where ``checkpoints/round_XXX.pt`` go (none written when None).
    resume : bool
        Continue from the latest checkpoint in ``out`` (its seed must equal ``random_seed``).
    bloom_key : bytes, optional
        The clients' shared HMAC secret for keyed Bloom hashing.
    client_state : dict, optional
        Per-client persistent state (e.g. DP accountants), keyed by client id; created when None.
        Saved in every checkpoint and restored in place on ``resume``.
    evaluate_round : callable, optional
        Called with the strategy after every round; its mapping is merged into the history.
    checkpoint_extra : mapping, optional
        Saved in every checkpoint (configuration, strategy name, ...).
    keep_checkpoints : int, optional
        Keep only the latest this many checkpoints (None or 0: all).
    progress : bool
        Show a progress bar over rounds.

    Returns
    -------
    RunResult
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if strategy.pooled:
        train = {POOLED_CLIENT: pool_clients(federation.train, client_id=POOLED_CLIENT)}
    else:
        train = dict(federation.train)
    client_ids = sorted(train)
    client_state = client_state if client_state is not None else {}
    contexts = {
        c: ClientContext(
            data=train[c],
            variant_keys=federation.variant_keys,
            model_config=model_config,
            training=training,
            bloom_key=bloom_key,
            state=client_state.setdefault(c, {}),
        )
        for c in client_ids
    }
    setup = RunSetup(
        client_ids,
        n_rare=federation.n_rare,
        model_config=model_config,
        random_seed=random_seed,
        out=out,
        checkpoint_extra=checkpoint_extra,
        keep_checkpoints=keep_checkpoints,
    )
    start, history = begin_run(strategy, setup, resume=resume, client_state=client_state)
    checkpoints: list[Path] = []

    bar = _progress(rounds, start, progress)
    for server_round in range(start + 1, rounds + 1):
        instructions = strategy.configure_fit(server_round, client_ids)
        results = [
            fit_client(
                instructions[c],
                contexts[c],
                random_seed=client_seed(random_seed, server_round, c),
            )
            for c in client_ids
        ]
        entry, path = finish_round(
            strategy,
            setup,
            server_round,
            results,
            history,
            evaluate_round=evaluate_round,
            client_state=client_state,
        )
        loss = entry["loss"]
        if path is not None:
            checkpoints.append(path)
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.4f}")
    if bar is not None:
        bar.close()
    checkpoints = [p for p in checkpoints if p.exists()]  # pruned ones are gone
    return RunResult(
        strategy=strategy, history=history, seed=int(random_seed), checkpoints=checkpoints
    )
