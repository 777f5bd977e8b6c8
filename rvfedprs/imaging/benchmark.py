"""The ``002_*`` comparison on a MedMNIST file (Algorithm 1 of ``002_*``).

Pool train+val+test, optionally subsample (seeded, stratified), Dirichlet(α) partition over K
clients, per-client stratified split (or K-fold CV), then for every strategy run the rounds and
record at the evaluation rounds the mean over clients of each client's metrics on its own test
split, using the model the client would use (global model; its own for Local, its personal
model for Ditto, its cluster's for cluster FedAvg).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.imaging.client import ImagingTrainingConfig
from rvfedprs.imaging.engine import build_federation, evaluate_clients, mean_metrics, run_imaging
from rvfedprs.imaging.loader import ImageDataset, MedMNIST
from rvfedprs.imaging.metrics import METRIC_NAMES

__all__ = ["run_benchmark", "stratified_subsample", "build_strategy", "results_table"]


def stratified_subsample(data: ImageDataset, n: int, random_seed: int) -> ImageDataset:
    """At most ``n`` samples, class proportions kept (seeded)."""
    if n >= len(data):
        return data
    from sklearn.model_selection import train_test_split

    keep, _ = train_test_split(
        np.arange(len(data)), train_size=n, random_state=random_seed, stratify=data.labels
    )
    return data.subset(np.sort(keep))


def build_strategy(name: str, section: Mapping[str, Any], clients, random_seed: int):
    """The strategy ``name`` with its options from the ``imaging`` section."""
    from rvfedprs.strategies import get_strategy

    if name == "fedprox":
        return get_strategy(name, proximal_mu=section["proximal_mu"])
    if name == "fedatt":
        return get_strategy(name, step=section["fedatt_step"])
    if name == "ditto":
        return get_strategy(name, lam=section["ditto_lambda"])
    if name in ("fedavg_w", "cluster_fedavg"):
        from rvfedprs.imaging.distances import imaging_distance

        d, ids = imaging_distance(clients, section["distance_method"], random_seed=random_seed)
        extra = {"omega": section["omega"]} if name == "fedavg_w" else {}
        return get_strategy(name, distance=d, distance_clients=ids, **extra)
    return get_strategy(name)


def run_benchmark(
    dataset: MedMNIST,
    section: Mapping[str, Any],
    *,
    random_seed: int,
    progress=None,
    class_counts: np.ndarray | None = None,
) -> dict[str, Any]:
    """Run every strategy of ``section["strategies"]``.

    ``class_counts`` (K, C) replaces the Dirichlet draw by a fixed per-client class mix
    (:func:`~rvfedprs.imaging.partition.fixed_count_partition`); images it leaves out are
    counted in ``n_unassigned``.

    Returns
    -------
    dict
        ``clients`` (per fold: sizes and class counts), ``history`` (rows: strategy, fold,
        round, metrics…), ``n_images``, ``n_unassigned`` (images in no client).
    """
    data = dataset.pooled()
    if section.get("subsample"):
        data = stratified_subsample(data, int(section["subsample"]), random_seed)
    training = ImagingTrainingConfig(
        epochs=section["local_epochs"],
        lr=section["lr"],
        momentum=section["momentum"],
        batch_size=section["batch_size"],
    )
    folds = list(range(section["cv_folds"])) if section.get("cv_folds") else [None]
    rounds = int(section["rounds"])
    eval_rounds = set(section.get("eval_rounds") or range(1, rounds + 1)) | {rounds}
    rows: list[dict[str, Any]] = []
    client_info: dict[str, Any] = {}
    for fold in folds:
        clients = build_federation(
            data,
            dataset.n_classes,
            n_clients=section["n_clients"],
            alpha=section["alpha"],
            random_seed=random_seed,
            test_fraction=section["test_fraction"],
            fold=fold,
            n_folds=section.get("cv_folds") or 5,
            training=training,
            class_counts=class_counts,
        )
        client_info[str(fold if fold is not None else 0)] = {
            cid: {
                "n_train": len(c.train),
                "n_test": len(c.test),
                "train_class_counts": np.bincount(
                    c.train.labels, minlength=dataset.n_classes
                ).tolist(),
            }
            for cid, c in clients.items()
        }
        for name in section["strategies"]:
            strategy = build_strategy(name, section, clients, random_seed)

            def evaluate(strat, t, _name=name, _fold=fold, _clients=clients):
                if t not in eval_rounds:
                    return {}
                per_client = evaluate_clients(strat, _clients)
                row = {"strategy": _name, "fold": _fold or 0, "round": t}
                row.update(mean_metrics(per_client))
                row["per_client"] = per_client
                rows.append(row)
                if progress is not None:
                    progress(row)
                return {}

            run_imaging(
                clients, strategy, rounds=rounds, random_seed=random_seed, evaluate_round=evaluate
            )
    n_assigned = sum(
        info["n_train"] + info["n_test"] for info in client_info[str(folds[0] or 0)].values()
    )
    return {
        "n_images": len(data),
        "n_unassigned": len(data) - n_assigned,
        "clients": client_info,
        "history": rows,
    }


def results_table(history: list[dict[str, Any]], rounds: list[int]):
    """Mean over folds per (strategy, round) at ``rounds`` (pandas DataFrame)."""
    import pandas as pd

    frame = pd.DataFrame([{k: v for k, v in r.items() if k != "per_client"} for r in history])
    frame = frame[frame["round"].isin(rounds)]
    return frame.groupby(["strategy", "round"], sort=False)[list(METRIC_NAMES)].mean().reset_index()
