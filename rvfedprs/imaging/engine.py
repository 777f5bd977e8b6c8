"""Running strategies over imaging clients: in this process, or on Flower.

Both go through the shared server loop (in-process: a run plan, :func:`rvfedprs.plan.run`) and
the same site code (:class:`~rvfedprs.imaging.task.ImagingTask`); seeds follow
:mod:`rvfedprs.federation.seeds`, so results depend neither on client order nor on the engine.
Also here: evaluation of each client's model on its test split, and the one-round FedAvg
*probe* used by the embedding distances (Elhussein & Gürsoy Alg. 1 phase 1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.federation.result import RunResult
from rvfedprs.federation.rounds import RoundCallback
from rvfedprs.federation.seeds import initial_seed
from rvfedprs.imaging.client import (
    ImagingClient,
    build_cnn,
    embed,
    get_cnn_parameters,
    predict_proba,
)
from rvfedprs.imaging.metrics import METRIC_NAMES, classification_metrics
from rvfedprs.imaging.task import ImagingTask, imaging_nodes, model_shape
from rvfedprs.plan import RunPlan, run
from rvfedprs.strategies.base import Strategy

__all__ = [
    "run_imaging",
    "ImagingRun",
    "imaging_session",
    "run_flower_imaging",
    "model_shape",
    "evaluate_clients",
    "probe_parameters",
    "client_embeddings",
]


def _template(clients: Mapping[str, ImagingClient]) -> ImagingClient:
    return clients[sorted(clients)[0]]


def initial_cnn_parameters(clients: Mapping[str, ImagingClient], random_seed: int):
    """w^0 of the federation's CNN, seeded from ``initial_seed(seed)``."""
    t = _template(clients)
    model = build_cnn(t.in_channels, t.n_classes, t.image_size, initial_seed(random_seed))
    return get_cnn_parameters(model)


def evaluate_clients(
    strategy: Strategy, clients: Mapping[str, ImagingClient]
) -> dict[str, dict[str, float]]:
    """Metrics of each client's model (``strategy.parameters_for``) on its test split."""
    out = {}
    for cid in sorted(clients):
        c = clients[cid]
        prob = predict_proba(strategy.parameters_for(cid), c.test.images, c.n_classes)
        out[cid] = classification_metrics(c.test.labels, prob, c.n_classes)
    return out


def mean_metrics(per_client: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Unweighted mean over clients (Riyadi et al.: (1/K) Σ metric_k), NaNs ignored."""
    return {
        m: float(np.nanmean([v[m] for v in per_client.values()]))
        if any(np.isfinite(v[m]) for v in per_client.values())
        else float("nan")
        for m in METRIC_NAMES
    }


def run_imaging(
    clients: Mapping[str, ImagingClient],
    strategy: Strategy,
    *,
    rounds: int,
    random_seed: int,
    evaluate_round: RoundCallback | None = None,
) -> RunResult:
    """Run ``rounds`` rounds of ``strategy`` on the imaging ``clients`` in this process.

    Parameters
    ----------
    clients : mapping of id to ImagingClient
    strategy : Strategy
        A fresh strategy (not ``pooled``).
    rounds : int
    random_seed : int
        w^0 from ``initial_seed(seed)`` (:func:`initial_cnn_parameters`).
    evaluate_round : callable, optional
        ``f(strategy, round)``; its mapping is merged into the round's history entry.

    Returns
    -------
    RunResult
    """
    if strategy.pooled:
        raise ValueError(f"strategy {strategy.name!r} pools data; not supported for imaging")
    plan = RunPlan(
        task=ImagingTask.name,
        data=clients,
        strategy=strategy,
        rounds=rounds,
        seed=random_seed,
        evaluate_round=evaluate_round,
    )
    return run(plan)


@dataclass
class ImagingRun:
    """One strategy of an imaging Flower job (:func:`run_flower_imaging`).

    Attributes
    ----------
    name : str
        The strategy's registry name (the ServerApp builds its own copy).
    strategy : Strategy
        A fresh strategy ``name``; restored from the run's final checkpoint on return.
    distance : mapping, optional
        ``distance`` (K, K) and ``distance_clients`` of ``fedavg_w`` / ``cluster_fedavg``
        (:func:`rvfedprs.imaging.benchmark.strategy_distance`, computed by the caller).
    evaluate_round : callable, optional
        ``f(strategy, round)`` on the strategy restored from each round's checkpoint; merged
        into the history, as the in-process engine's callback.
    """

    name: str
    strategy: Strategy
    distance: Mapping[str, Any] | None = None
    evaluate_round: RoundCallback | None = None


@contextmanager
def imaging_session(
    engine: str,
    work: str | Path,
    *,
    data_file: str | Path,
    client_ids: Sequence[str],
    flower: Mapping[str, Any] | None = None,
    certificates: str | Path | None = None,
    node_keys: Mapping[str, str | Path] | None = None,
):
    """The Flower processes of an imaging benchmark, started once for all its jobs.

    One SuperNode per client (:func:`~rvfedprs.imaging.task.imaging_nodes`) for
    ``flower-deploy``; see :func:`rvfedprs.federation.flower.engine.flower_session`.
    """
    from rvfedprs.federation.flower.engine import flower_session

    with flower_session(
        engine,
        work,
        nodes=imaging_nodes(data_file, client_ids),
        flower=flower,
        certificates=certificates,
        node_keys=node_keys,
    ) as link:
        yield link


def run_flower_imaging(
    engine: str,
    *,
    clients: Mapping[str, ImagingClient],
    runs: Sequence[ImagingRun],
    section: Mapping[str, Any],
    data_file: str | Path,
    rounds: int,
    random_seed: int,
    out: str | Path,
    fold: int | None = None,
    class_counts: Any = None,
    flower: Mapping[str, Any] | None = None,
    superlink=None,
    min_replies: int | None = None,
    round_timeout: float | None = None,
    timeout: float | None = None,
    expected_nodes: int | None = None,
) -> list[RunResult]:
    """Run imaging strategies on Flower, one after another in one Flower job.

    Every node rebuilds its own client's split from ``data_file`` and the partition settings
    and trains with :func:`~rvfedprs.imaging.client.fit_imaging_client`; each result equals
    :func:`run_imaging`'s for the same seed. One job for all strategies saves Flower's per-run
    start (server and client processes).

    Parameters
    ----------
    engine : {"flower-sim", "flower-deploy"}
    clients : mapping of id to ImagingClient
        This process's copy of the federation: its ids and CNN shape (and the evaluation).
    runs : sequence of ImagingRun
        The strategies, run in this order.
    section : mapping
        The validated ``imaging`` section.
    data_file : str or Path
        The MedMNIST file (simulation: read by every client; deployment: each SuperNode's node
        config names its own copy, ``data-file``).
    rounds, random_seed : int
    out : str or Path
        ``flower/`` (job, status, logs) and, per strategy, ``<name>/checkpoints/`` (the last
        round's is kept).
    fold : int, optional
        The CV fold (``imaging.cv_folds``).
    class_counts : array of int, shape (K, C), optional
        A fixed partition instead of the Dirichlet draw.
    flower : mapping, optional
        The ``flower`` configuration section.
    superlink : LocalSuperLink, optional
        Submit to this running SuperLink (:func:`imaging_session`) instead of starting one.
    min_replies, round_timeout, timeout, expected_nodes
        See :func:`rvfedprs.federation.flower.engine.run_job`.

    Returns
    -------
    list of RunResult
        One per run, in order.
    """
    from rvfedprs.federation.flower.engine import FlowerRun, run_job

    ids = sorted(clients)
    out = Path(out).resolve()
    data_file = str(Path(data_file).resolve())

    def distance_of(run: ImagingRun):
        if not run.distance:
            return None
        return {
            "matrix": np.asarray(run.distance["distance"], dtype=np.float64).tolist(),
            "clients": list(run.distance["distance_clients"]),
        }

    task_settings = {
        "imaging": dict(section),
        "seed": int(random_seed),
        "fold": fold,
        "class_counts": None if class_counts is None else np.asarray(class_counts).tolist(),
        "data": data_file,
        "client_ids": ids,
        "model": model_shape(clients),
    }
    flower_runs = [
        FlowerRun(
            {"strategy": run.name, "out": str(out / run.name), "distance": distance_of(run)},
            run.strategy,
            run.evaluate_round,
            keep_checkpoints=1,
        )
        for run in runs
    ]
    return run_job(
        engine,
        task=ImagingTask.name,
        config={"imaging": dict(section), "flower": dict(flower or {})},
        runs=flower_runs,
        rounds=rounds,
        random_seed=random_seed,
        out=out,
        n_sites=len(ids),
        nodes=imaging_nodes(data_file, ids),
        task_settings=task_settings,
        flower=flower,
        superlink=superlink,
        # every client by default, not every node expected (a ghost node may connect)
        min_replies=min_replies or (flower or {}).get("min_replies") or len(ids),
        round_timeout=round_timeout,
        timeout=timeout,
        expected_nodes=expected_nodes,
    )


def probe_parameters(
    clients: Mapping[str, ImagingClient], random_seed: int
) -> dict[str, np.ndarray]:
    """The global model after one FedAvg round (Elhussein & Gürsoy Alg. 1 phase 1)."""
    from rvfedprs.strategies.fedavg import FedAvg

    result = run_imaging(clients, FedAvg(), rounds=1, random_seed=random_seed)
    return result.strategy.parameters_for(sorted(clients)[0])


def client_embeddings(
    clients: Mapping[str, ImagingClient],
    parameters: Mapping[str, np.ndarray] | None = None,
    *,
    encoder: str | None = None,
    split: str = "train",
    ids: Sequence[str] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-client embeddings and labels of ``split``.

    Either the CNN's penultimate activations under ``parameters`` (the probe), or the output of
    a user-supplied TorchScript ``encoder`` file (flattened to (n, d)).

    Returns
    -------
    embeddings : list of array, each shape (n_k, d)
    labels : list of array, each shape (n_k,)
    """
    import torch

    ids = sorted(clients) if ids is None else list(ids)
    module = None
    if encoder is not None:
        from pathlib import Path

        from rvfedprs.exceptions import InputDataError

        if not Path(encoder).is_file():
            raise InputDataError(f"encoder TorchScript file not found: {encoder}")
        try:
            module = torch.jit.load(encoder, map_location="cpu").eval()
        except Exception as exc:  # torch raises RuntimeError/ValueError for a bad archive
            raise InputDataError(f"{encoder} is not a TorchScript module: {exc}") from None
    elif parameters is None:
        raise ValueError("client_embeddings needs the probe parameters or an encoder")
    embs, labels = [], []
    for cid in ids:
        data = getattr(clients[cid], split)
        if module is not None:
            with torch.no_grad():
                out = module(torch.from_numpy(data.images))
            embs.append(out.reshape(len(data), -1).numpy().astype(np.float64))
        else:
            embs.append(embed(parameters, data.images, clients[cid].n_classes))
        labels.append(data.labels)
    return embs, labels
