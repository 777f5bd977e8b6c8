"""The server side of a federated run that every engine shares.

An engine (in-process, Flower simulation, Flower deployment) differs only in how it gets the
clients' :class:`~rvfedprs.strategies.base.FitResult` for a round; everything around that call
lives here so that all engines give the same model for the same seed:

- :func:`begin_run` — initialise the strategy with w^0 (seeded from ``SeedSequence([seed, 0])``)
  or restore it from the latest checkpoint;
- :func:`client_seed` — the seed client ``c`` trains with in round ``t``;
- :func:`finish_round` — aggregate, record the round's history entry, write the checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.exceptions import InputDataError
from rvfedprs.strategies.base import FitResult, Strategy

__all__ = ["RunSetup", "begin_run", "client_seed", "finish_round", "SEED_SCHEME"]

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
    ) -> None:
        self.client_ids = sorted(client_ids)
        self.n_rare = int(n_rare)
        self.model_config = dict(model_config)
        self.random_seed = int(random_seed)
        self.out = None if out is None else Path(out)
        self.checkpoint_extra = dict(checkpoint_extra or {})


def client_seed(random_seed: int, server_round: int, client_id: str) -> int:
    """The seed of ``client_id`` in ``server_round`` (independent of client order and resume)."""
    from rvfedprs.federation.inprocess import derive_seed

    return derive_seed(random_seed, server_round, client_id)


def begin_run(
    strategy: Strategy, setup: RunSetup, *, resume: bool = False
) -> tuple[int, list[dict[str, Any]]]:
    """Initialise ``strategy`` (or restore it from the latest checkpoint when ``resume``).

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
    path = setup.out / "checkpoints" / f"round_{server_round:03d}.pt"
    return entry, save_checkpoint(path, record)
