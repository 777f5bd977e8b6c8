"""The ``002_*`` comparison on a MedMNIST file (Algorithm 1 of ``002_*``).

Pool train+val+test, optionally subsample (seeded, stratified), Dirichlet(α) partition over K
clients, per-client stratified split (or K-fold CV), then for every strategy run the rounds and
record at the evaluation rounds the mean over clients of each client's metrics on its own test
split, using the model the client would use (global model; its own for Local, its personal
model for Ditto, its cluster's for cluster FedAvg).

The clients train in this process (``engine="inprocess"``) or on Flower (``flower-sim``,
``flower-deploy``: :func:`rvfedprs.imaging.engine.run_flower_imaging`, same rows for
the same seed); :func:`federation_from_section` is the one place that builds a fold's clients,
so that a Flower client process rebuilds exactly its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation import ENGINES
from rvfedprs.imaging.engine import evaluate_clients, mean_metrics, run_imaging
from rvfedprs.imaging.federation import benchmark_data, federation_from_section
from rvfedprs.imaging.loader import MedMNIST
from rvfedprs.imaging.metrics import METRIC_NAMES
from rvfedprs.imaging.task import strategy_for

__all__ = [
    "run_benchmark",
    "build_strategy",
    "strategy_distance",
    "results_table",
    "check_engine",
]


def strategy_distance(
    name: str, section: Mapping[str, Any], clients, random_seed: int
) -> dict[str, Any]:
    """``distance`` and ``distance_clients`` for ``fedavg_w`` / ``cluster_fedavg``, else {}."""
    if name not in ("fedavg_w", "cluster_fedavg"):
        return {}
    from rvfedprs.imaging.distances import imaging_distance

    d, ids = imaging_distance(clients, section["distance_method"], random_seed=random_seed)
    return {"distance": d, "distance_clients": ids}


def build_strategy(name: str, section: Mapping[str, Any], clients, random_seed: int):
    """The strategy ``name`` with its options from the ``imaging`` section."""
    return strategy_for(name, section, **strategy_distance(name, section, clients, random_seed))


def run_benchmark(
    dataset: MedMNIST,
    section: Mapping[str, Any],
    *,
    random_seed: int,
    progress=None,
    class_counts: np.ndarray | None = None,
    engine: str = "inprocess",
    flower: Mapping[str, Any] | None = None,
    out: str | Path | None = None,
) -> dict[str, Any]:
    """Run every strategy of ``section["strategies"]``.

    ``class_counts`` (K, C) replaces the Dirichlet draw by a fixed per-client class mix
    (:func:`~rvfedprs.imaging.partition.fixed_count_partition`); images it leaves out are
    counted in ``n_unassigned``.

    Parameters
    ----------
    dataset : MedMNIST
    section : mapping
        The validated ``imaging`` section.
    random_seed : int
    progress : callable, optional
        Called with every evaluated row as soon as it exists.
    class_counts : array of int, shape (K, C), optional
    engine : {"inprocess", "flower-sim", "flower-deploy"}
        Where the clients train: one after another in this process, or on Flower (one Flower
        SuperLink, and for ``flower-deploy`` one SuperNode per client, for the whole benchmark;
        one Flower run per fold holding every strategy, see
        :func:`rvfedprs.imaging.engine.run_flower_imaging`). Same rows for the same
        seed; on Flower a strategy's rows arrive when its fold's run ends.
    flower : mapping, optional
        The ``flower`` configuration section (Flower engines; defaults when None).
    out : str or Path, optional
        Output folder; the Flower engines need it (``OUT/flower`` holds the processes' logs,
        ``OUT/flower-runs/fold<k>/`` each fold's Flower run: job and status in ``flower/``,
        each strategy's last checkpoint in ``<strategy>/checkpoints/``).

    Returns
    -------
    dict
        ``clients`` (per fold: sizes and class counts), ``history`` (rows: strategy, fold,
        round, metrics…), ``n_images``, ``n_unassigned`` (images in no client).

    Raises
    ------
    ConfigError
        For an unknown engine, or a Flower engine without ``out``.
    """
    from contextlib import nullcontext

    check_engine(engine)
    if engine != "inprocess" and out is None:
        raise ConfigError(f"engine {engine!r} needs an output folder (out)")
    data = benchmark_data(dataset, section, random_seed)
    folds = list(range(section["cv_folds"])) if section.get("cv_folds") else [None]
    rounds = int(section["rounds"])
    eval_rounds = set(section.get("eval_rounds") or range(1, rounds + 1)) | {rounds}
    rows: list[dict[str, Any]] = []
    client_info: dict[str, Any] = {}
    session = nullcontext(None)
    if engine != "inprocess":
        from rvfedprs.imaging.engine import ImagingRun, imaging_session, run_flower_imaging

        n_clients = (
            section["n_clients"] if class_counts is None else int(np.asarray(class_counts).shape[0])
        )
        session = imaging_session(
            engine,
            Path(out) / "flower",
            data_file=dataset.path,
            client_ids=[f"client_{k + 1}" for k in range(n_clients)],
            flower=flower,
        )
    with session as link:
        for fold in folds:
            clients = federation_from_section(
                data,
                dataset.n_classes,
                section,
                random_seed=random_seed,
                fold=fold,
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
            runs = []
            for name in section["strategies"]:
                distance = strategy_distance(name, section, clients, random_seed)
                strategy = strategy_for(name, section, **distance)

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

                if engine == "inprocess":
                    run_imaging(
                        clients,
                        strategy,
                        rounds=rounds,
                        random_seed=random_seed,
                        evaluate_round=evaluate,
                    )
                else:
                    runs.append(ImagingRun(name, strategy, distance, evaluate))
            if runs:  # one Flower run per fold: every strategy, in the same order
                run_flower_imaging(
                    engine,
                    clients=clients,
                    runs=runs,
                    section=section,
                    data_file=dataset.path,
                    rounds=rounds,
                    random_seed=random_seed,
                    out=Path(out) / "flower-runs" / f"fold{fold or 0}",
                    fold=fold,
                    class_counts=class_counts,
                    flower=flower,
                    superlink=link,
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


def check_engine(engine: str) -> None:
    """Fail clearly on an engine name that is not one of :data:`ENGINES`."""
    if engine not in ENGINES:
        raise ConfigError(f"imaging.engine {engine!r} unknown; choose from {list(ENGINES)}")


def results_table(history: list[dict[str, Any]], rounds: list[int]):
    """Mean over folds per (strategy, round) at ``rounds`` (pandas DataFrame)."""
    import pandas as pd

    frame = pd.DataFrame([{k: v for k, v in r.items() if k != "per_client"} for r in history])
    frame = frame[frame["round"].isin(rounds)]
    return frame.groupby(["strategy", "round"], sort=False)[list(METRIC_NAMES)].mean().reset_index()
