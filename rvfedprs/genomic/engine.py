"""Running a strategy over a genomic federation: in this process, or on Flower.

Both go through the same server loop (:func:`rvfedprs.federation.rounds.serve`) and the same
site code (:class:`~rvfedprs.genomic.task.GenomicTask`), so a fixed seed gives the same model
on every engine. :func:`run_inprocess` trains a loaded :class:`~rvfedprs.genomic.data.Federation`
with explicit optimiser settings (experiments, tests); :func:`run_flower` starts (or joins) a
Flower simulation or deployment whose nodes each read their own site's folder.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rvfedprs.federation.inprocess import InProcessTransport
from rvfedprs.federation.result import RunResult
from rvfedprs.federation.rounds import RoundCallback, RunSpec, serve
from rvfedprs.genomic.data import Federation
from rvfedprs.genomic.task import GenomicTask, client_nodes, sites_of
from rvfedprs.strategies.base import Strategy
from rvfedprs.training import LocalTrainingConfig

__all__ = ["run_inprocess", "run_flower", "genomic_settings"]


def genomic_settings(
    federation: Federation,
    *,
    model_config: Mapping[str, Any],
    training: LocalTrainingConfig,
    dp: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The run settings of a loaded federation (its PRS is standardised already)."""
    settings = {
        "task": GenomicTask.name,
        "training": dataclasses.asdict(training),
        "model": dict(model_config),
        "prs_mean": federation.prs_mean,
        "prs_sd": federation.prs_sd,
        "n_rare": federation.n_rare,
    }
    if dp is not None:
        settings["dp"] = dict(dp)
    return settings


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
    dp: Mapping[str, float] | None = None,
    client_state: dict[str, dict[str, Any]] | None = None,
    evaluate_round: RoundCallback | None = None,
    config: Mapping[str, Any] | None = None,
    keep_checkpoints: int | None = None,
    min_replies: int | None = None,
    progress: bool = False,
) -> RunResult:
    """Run ``rounds`` federated rounds of ``strategy`` on ``federation`` in this process.

    Parameters
    ----------
    federation : Federation
        Per-client train/test data (:func:`~rvfedprs.genomic.data.load_federation`).
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
    dp : mapping, optional
        DP-SGD settings (:func:`~rvfedprs.training.dp.dp_settings`): every client keeps one
        cumulative accountant (in ``RunResult.client_state``).
    client_state : dict, optional
        Per-client persistent state, keyed by client id; filled in place (and restored in
        place on ``resume``).
    evaluate_round : callable, optional
        ``f(strategy, round)`` after every round; its mapping is merged into the history.
    config : mapping, optional
        The validated configuration, saved in every checkpoint (``rvfedprs evaluate`` reads it).
    keep_checkpoints : int, optional
        Keep only the latest this many checkpoints (None or 0: all).
    min_replies : int, optional
        Fewest clients a round may aggregate (default: every client).
    progress : bool
        Show a progress bar over rounds.

    Returns
    -------
    RunResult
    """
    task = GenomicTask()
    transport = InProcessTransport(task, sites_of(federation, bloom_key=bloom_key))
    settings = genomic_settings(federation, model_config=model_config, training=training, dp=dp)
    job = {"seed": random_seed, "rounds": rounds, "resume": resume, "min_replies": min_replies}
    if config is not None:
        job["config"] = config
    run = RunSpec(strategy, out=None if out is None else Path(out),
                  evaluate_round=evaluate_round, keep_checkpoints=keep_checkpoints)  # fmt: skip
    return serve(
        task, transport, [run], job, settings, client_state=client_state, progress=progress
    )[0]


def run_flower(
    engine: str,
    *,
    federation: Federation,
    strategy: Strategy,
    config: Mapping[str, Any],
    rounds: int,
    random_seed: int,
    out: str | Path,
    resume: bool = False,
    bloom_key_file: str | None = None,
    evaluate_round: RoundCallback | None = None,
    min_replies: int | None = None,
    round_timeout: float | None = None,
    timeout: float | None = None,
    superlink=None,
    expected_nodes: int | None = None,
    client_state: dict[str, dict[str, Any]] | None = None,
    distance: Mapping[str, Any] | None = None,
) -> RunResult:
    """Run ``strategy`` over ``federation`` on Flower; returns what :func:`run_inprocess` does.

    Every node reads its own client's folder under ``federation.data_dir`` (a deployment: one
    SuperNode per client, ``data-dir`` and ``client-id`` in its node config); the server derives
    the run settings from the clients' setup reports.

    Parameters
    ----------
    engine : {"flower-sim", "flower-deploy"}
    federation : Federation
        Used for its folder and client ids only.
    strategy : Strategy
        A fresh strategy of the configured name (``config["train"]["strategy"]``); restored
        from the final checkpoint on return.
    config : mapping
        The validated configuration (its ``flower`` section: limits, a running SuperLink).
    rounds, random_seed : int
    out : str or Path
        Output folder: ``checkpoints/``, ``flower/`` (job, app, logs, status).
    resume : bool
    bloom_key_file : str, optional
        The clients' shared Bloom HMAC secret (given to each node, never the server).
    evaluate_round : callable, optional
        ``f(strategy, round)`` on the strategy restored from each round's checkpoint.
    min_replies, round_timeout, timeout, superlink, expected_nodes
        See :func:`rvfedprs.federation.flower.engine.run_job`.
    client_state : dict, optional
        Refilled in place with each client's state as the server last received it (with DP:
        its accountant, so ``epsilon()`` is the cumulative ε it spent).
    distance : mapping, optional
        ``matrix`` and ``clients`` of a client distance matrix (``fedavg_w``, ``cluster_fedavg``
        with a distance method), computed before the run.

    Returns
    -------
    RunResult
    """
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.federation.flower.engine import FlowerRun, check_flower_settings, run_job

    check_flower_settings(engine, config.get("flower"), superlink)  # before anything is read
    if strategy.pooled:
        raise ConfigError(
            f"strategy {strategy.name!r} pools every client's data and cannot run on Flower; "
            "use --engine inprocess"
        )
    data_dir = str(Path(federation.data_dir).resolve())
    key_file = str(Path(bloom_key_file).resolve()) if bloom_key_file else ""
    spec: dict[str, Any] = {"strategy": config["train"]["strategy"], "out": str(out)}
    if distance is not None:
        spec["distance"] = dict(distance)
    run = FlowerRun(spec, strategy, evaluate_round, config["train"].get("keep_checkpoints"))
    return run_job(
        engine,
        task=GenomicTask.name,
        config=config,
        runs=[run],
        rounds=rounds,
        random_seed=random_seed,
        out=out,
        n_sites=len(federation.client_ids),
        nodes=client_nodes(data_dir, federation.client_ids, bloom_key_file=key_file),
        run_config={"data-dir": data_dir, "bloom-key-file": key_file},
        flower=config.get("flower"),
        superlink=superlink,
        resume=resume,
        min_replies=min_replies,
        round_timeout=round_timeout,
        timeout=timeout,
        expected_nodes=expected_nodes,
        client_state=client_state,
    )[0]
