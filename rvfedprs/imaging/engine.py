"""Run a strategy over imaging clients, one after another (the in-process pattern).

Seeds follow :mod:`rvfedprs.federation.inprocess`: w^0 from ``derive_seed(seed, 0)``, client
``c`` in round ``t`` from ``derive_seed(seed, t, c)``, so results do not depend on client order.
Also here: building a Dirichlet-partitioned federation from a MedMNIST file, evaluation of each
client's model on its test split, and the one-round FedAvg *probe* used by the embedding
distances (``003_*`` Alg. 1 phase 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.federation.inprocess import RunResult, derive_seed
from rvfedprs.imaging.client import (
    ImagingClient,
    ImagingTrainingConfig,
    build_cnn,
    embed,
    fit_imaging_client,
    get_cnn_parameters,
    predict_proba,
)
from rvfedprs.imaging.loader import ImageDataset
from rvfedprs.imaging.metrics import METRIC_NAMES, classification_metrics
from rvfedprs.imaging.partition import dirichlet_partition, fixed_count_partition
from rvfedprs.strategies.base import Strategy

__all__ = [
    "build_federation",
    "run_imaging",
    "evaluate_clients",
    "probe_parameters",
    "client_embeddings",
]


def build_federation(
    data: ImageDataset,
    n_classes: int,
    *,
    n_clients: int,
    alpha: float,
    random_seed: int,
    test_fraction: float = 0.2,
    fold: int | None = None,
    n_folds: int = 5,
    training: ImagingTrainingConfig | None = None,
    class_counts: np.ndarray | None = None,
) -> dict[str, ImagingClient]:
    """Dirichlet-partition ``data`` and split each client into train/test (stratified).

    Parameters
    ----------
    data : ImageDataset
    n_classes : int
    n_clients, alpha, random_seed
        Partition (:func:`dirichlet_partition`).
    test_fraction : float
        Test share when ``fold`` is None.
    fold : int, optional
        Use fold ``fold`` of a per-client stratified ``n_folds``-fold CV as the test split
        (``002_*`` Algorithm 1 step 3) instead of a single split.
    training : ImagingTrainingConfig, optional
    class_counts : array of int, shape (K, C), optional
        Use this fixed per-client class mix (:func:`fixed_count_partition`, seeded with
        ``random_seed``) instead of a Dirichlet draw; ``n_clients`` and ``alpha`` are then
        unused.

    Returns
    -------
    dict of client id (``client_1``…) to ImagingClient
    """
    from sklearn.model_selection import StratifiedKFold, train_test_split

    if class_counts is not None:
        parts = fixed_count_partition(data.labels, class_counts, random_seed=random_seed)
    else:
        parts = dirichlet_partition(
            data.labels, n_clients, alpha=alpha, random_seed=random_seed, min_size=2 * n_folds
        )
    clients = {}
    for k, idx in enumerate(parts):
        y = data.labels[idx]
        stratify = y if np.min(np.unique(y, return_counts=True)[1]) >= 2 else None
        seed = derive_seed(random_seed, "split", k)
        if fold is None:
            tr, te = train_test_split(
                np.arange(len(idx)), test_size=test_fraction, random_state=seed, stratify=stratify
            )
        else:
            counts = np.unique(y, return_counts=True)[1]
            if counts.min() >= n_folds:
                splitter = StratifiedKFold(n_folds, shuffle=True, random_state=seed)
                tr, te = list(splitter.split(np.zeros(len(y)), y))[fold]
            else:  # a class too rare to stratify: plain K-fold on a seeded permutation
                perm = np.random.default_rng(seed).permutation(len(y))
                te = np.sort(np.array_split(perm, n_folds)[fold])
                tr = np.setdiff1d(np.arange(len(y)), te)
        cid = f"client_{k + 1}"
        clients[cid] = ImagingClient(
            client_id=cid,
            train=data.subset(idx[np.sort(tr)]),
            test=data.subset(idx[np.sort(te)]),
            n_classes=n_classes,
            training=training or ImagingTrainingConfig(),
        )
    return clients


def _template(clients: Mapping[str, ImagingClient]) -> ImagingClient:
    return clients[sorted(clients)[0]]


def initial_cnn_parameters(clients: Mapping[str, ImagingClient], random_seed: int):
    """w^0 of the federation's CNN, seeded from ``derive_seed(seed, 0)``."""
    t = _template(clients)
    model = build_cnn(t.in_channels, t.n_classes, t.image_size, derive_seed(random_seed, 0))
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
    """Unweighted mean over clients (``002_*``: (1/K) Σ metric_k), NaNs ignored."""
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
    evaluate_round: Callable[[Strategy, int], Mapping[str, Any]] | None = None,
    initial: Mapping[str, np.ndarray] | None = None,
) -> RunResult:
    """Run ``rounds`` rounds of ``strategy`` on the imaging ``clients``.

    Parameters
    ----------
    clients : mapping of id to ImagingClient
    strategy : Strategy
        A fresh strategy (not ``pooled``).
    rounds : int
    random_seed : int
    evaluate_round : callable, optional
        ``f(strategy, round)``; its mapping is merged into the round's history entry.
    initial : dict, optional
        w^0 (default :func:`initial_cnn_parameters`).

    Returns
    -------
    RunResult
    """
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if strategy.pooled:
        raise ValueError(f"strategy {strategy.name!r} pools data; not supported for imaging")
    ids = sorted(clients)
    w0 = dict(initial) if initial is not None else initial_cnn_parameters(clients, random_seed)
    strategy.initialize(w0, ids)
    history: list[dict[str, Any]] = []
    for t in range(1, rounds + 1):
        instructions = strategy.configure_fit(t, ids)
        results = [
            fit_imaging_client(
                instructions[c], clients[c], random_seed=derive_seed(random_seed, t, c)
            )
            for c in ids
        ]
        strategy.aggregate_fit(t, results)
        n = np.array([r.n_samples for r in results], dtype=np.float64)
        entry: dict[str, Any] = {
            "round": t,
            "loss": float(np.average([r.metrics["loss"] for r in results], weights=n)),
        }
        if evaluate_round is not None:
            entry.update(evaluate_round(strategy, t))
        history.append(entry)
    return RunResult(strategy=strategy, history=history, seed=int(random_seed))


def probe_parameters(
    clients: Mapping[str, ImagingClient], random_seed: int
) -> dict[str, np.ndarray]:
    """The global model after one FedAvg round (``003_*`` Alg. 1 phase 1)."""
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
