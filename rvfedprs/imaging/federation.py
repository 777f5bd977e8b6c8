"""A Dirichlet-partitioned imaging federation built from a MedMNIST file.

Pool train+val+test, optionally subsample (seeded, stratified), Dirichlet(α) partition over K
clients (or a fixed per-client class mix), then a per-client stratified train/test split (or one
fold of a per-client K-fold CV). :func:`federation_from_section` is the one place that builds a
fold's clients, so that a Flower node rebuilds exactly its own; an
:class:`ImagingFederation` is what an imaging run plan trains on (``RunPlan.data``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rvfedprs.federation.seeds import derive_seed
from rvfedprs.imaging.client import ImagingClient, ImagingTrainingConfig
from rvfedprs.imaging.loader import ImageDataset, MedMNIST
from rvfedprs.imaging.partition import dirichlet_partition, fixed_count_partition

__all__ = [
    "ImagingFederation",
    "build_federation",
    "stratified_subsample",
    "training_config",
    "benchmark_data",
    "federation_from_section",
]


@dataclass(frozen=True)
class ImagingFederation:
    """The clients of an imaging run plan, and what a Flower node rebuilds its own from.

    Attributes
    ----------
    clients : mapping of id to ImagingClient
        This process's copy: the in-process sites, the CNN's shape, the evaluation.
    data_file : str, optional
        The MedMNIST file the clients were split from (a Flower engine's nodes read it).
    fold : int, optional
        The CV fold (``imaging.cv_folds``).
    class_counts : array of int, shape (K, C), optional
        A fixed partition instead of the Dirichlet draw.
    """

    clients: Mapping[str, ImagingClient]
    data_file: str | None = None
    fold: int | None = None
    class_counts: Any = None


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
        (Riyadi et al. Algorithm 1 step 3) instead of a single split.
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


def stratified_subsample(data: ImageDataset, n: int, random_seed: int) -> ImageDataset:
    """At most ``n`` samples, class proportions kept (seeded)."""
    if n >= len(data):
        return data
    from sklearn.model_selection import train_test_split

    keep, _ = train_test_split(
        np.arange(len(data)), train_size=n, random_state=random_seed, stratify=data.labels
    )
    return data.subset(np.sort(keep))


def training_config(section: Mapping[str, Any]) -> ImagingTrainingConfig:
    """The clients' local optimiser settings of the ``imaging`` section."""
    return ImagingTrainingConfig(
        epochs=section["local_epochs"],
        lr=section["lr"],
        momentum=section["momentum"],
        batch_size=section["batch_size"],
    )


def benchmark_data(dataset: MedMNIST, section: Mapping[str, Any], random_seed: int) -> ImageDataset:
    """The images the clients share out: every split pooled, subsampled when asked."""
    data = dataset.pooled()
    if section.get("subsample"):
        data = stratified_subsample(data, int(section["subsample"]), random_seed)
    return data


def federation_from_section(
    data: ImageDataset,
    n_classes: int,
    section: Mapping[str, Any],
    *,
    random_seed: int,
    fold: int | None = None,
    class_counts: np.ndarray | None = None,
) -> dict[str, ImagingClient]:
    """The clients of one fold, as :func:`run_benchmark` builds them from ``data``.

    Deterministic in (``data``, the partition settings of ``section``, ``random_seed``,
    ``fold``, ``class_counts``): a Flower client process rebuilds its own client from the same
    file and settings (:mod:`rvfedprs.federation.flower.client_app`).

    Parameters
    ----------
    data : ImageDataset
        From :func:`benchmark_data`.
    n_classes : int
    section : mapping
        ``n_clients``, ``alpha``, ``test_fraction``, ``cv_folds`` and the training settings.
    random_seed : int
    fold : int, optional
    class_counts : array of int, shape (K, C), optional

    Returns
    -------
    dict of client id to ImagingClient
    """
    return build_federation(
        data,
        n_classes,
        n_clients=section["n_clients"],
        alpha=section["alpha"],
        random_seed=random_seed,
        test_fraction=section["test_fraction"],
        fold=fold,
        n_folds=section.get("cv_folds") or 5,
        training=training_config(section),
        class_counts=class_counts,
    )
