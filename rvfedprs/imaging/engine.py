"""Imaging runs around their run plans: evaluation, the distance probe, the Flower processes.

Every imaging run is a run plan (:func:`rvfedprs.imaging.plan.plan`) run by
:func:`rvfedprs.plan.run`, in this process or on Flower, through the shared server loop and the
same site code (:class:`~rvfedprs.imaging.task.ImagingTask`); seeds follow
:mod:`rvfedprs.federation.seeds`, so results depend neither on client order nor on the engine.
Here: evaluation of each client's model on its test split, the one-round FedAvg *probe* used by
the embedding distances (Elhussein & Gürsoy Alg. 1 phase 1), and the Flower processes of a
benchmark started once for all its jobs (:func:`imaging_session`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.federation.seeds import initial_seed
from rvfedprs.imaging.client import (
    ImagingClient,
    build_cnn,
    embed,
    get_cnn_parameters,
    predict_proba,
)
from rvfedprs.imaging.federation import ImagingFederation
from rvfedprs.imaging.metrics import METRIC_NAMES, classification_metrics
from rvfedprs.imaging.task import ImagingTask, imaging_nodes, model_shape
from rvfedprs.plan import RunPlan, run
from rvfedprs.strategies.base import Strategy

__all__ = [
    "imaging_session",
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


def probe_parameters(
    clients: Mapping[str, ImagingClient], random_seed: int
) -> dict[str, np.ndarray]:
    """The global model after one FedAvg round (Elhussein & Gürsoy Alg. 1 phase 1)."""
    from rvfedprs.strategies.fedavg import FedAvg

    probe = RunPlan(
        task=ImagingTask.name,
        data=ImagingFederation(clients),
        strategy=FedAvg(),
        rounds=1,
        seed=random_seed,
    )
    result = run(probe)
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
