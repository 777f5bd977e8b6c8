"""The imaging task's run plan: one strategy of an ``imaging`` section → a :class:`RunPlan`.

:func:`plan` is the imaging task's planner (``ImagingTask.planner``): the strategy with its
options from the ``imaging`` section (and, for ``fedavg_w`` and ``cluster_fedavg``, its client
distance matrix), the rounds, seed and engine, over an :class:`ImagingFederation` of one fold.
:func:`rvfedprs.plan.run` runs it in this process or on Flower; the benchmark runs every
strategy of a fold in one Flower job (:func:`rvfedprs.plan.run_plans`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.federation.plan import RunPlan
from rvfedprs.imaging.client import ImagingClient
from rvfedprs.imaging.federation import ImagingFederation
from rvfedprs.imaging.task import ImagingTask, strategy_for
from rvfedprs.strategies import DISTANCE_STRATEGIES

__all__ = ["plan", "strategy_distance"]


def strategy_distance(
    name: str, section: Mapping[str, Any], clients, random_seed: int
) -> dict[str, Any]:
    """``distance`` and ``distance_clients`` for a strategy that needs them, else {}.

    The strategies that do are :data:`~rvfedprs.strategies.DISTANCE_STRATEGIES`.
    """
    if name not in DISTANCE_STRATEGIES:
        return {}
    from rvfedprs.imaging.distances import imaging_distance

    d, ids = imaging_distance(clients, section["distance_method"], random_seed=random_seed)
    return {"distance": d, "distance_clients": ids}


def plan(
    config: Mapping[str, Any],
    out: str | Path | None = None,
    *,
    clients: Mapping[str, ImagingClient],
    strategy: str,
    seed: int | None = None,
    engine: str | None = None,
    data_file: str | Path | None = None,
    fold: int | None = None,
    class_counts: Any = None,
) -> RunPlan:
    """The run plan of strategy ``strategy`` of ``config["imaging"]`` over ``clients``.

    Parameters
    ----------
    config : mapping
        A validated configuration: its ``imaging`` section (strategy options, rounds, seed,
        engine) and ``flower`` section.
    out : str or Path, optional
        The run's folder: on Flower its ``checkpoints/`` (only the last round's is kept).
    clients : mapping of id to ImagingClient
        One fold's clients (:func:`~rvfedprs.imaging.federation.federation_from_section`).
    strategy : str
        One of :data:`~rvfedprs.imaging.task.IMAGING_STRATEGIES`.
    seed : int, optional
        The master seed (default: ``imaging.seed``): w^0, the distance probe and, on Flower,
        the partition every node rebuilds.
    engine : str, optional
        Default: ``imaging.engine``.
    data_file : str or Path, optional
        The MedMNIST file the clients were split from (default: ``imaging.data``).
    fold, class_counts
        The partition settings (:class:`~rvfedprs.imaging.federation.ImagingFederation`).

    Returns
    -------
    RunPlan
        On Flower, with ``min_replies`` every client unless ``flower.min_replies`` says less
        (not every node expected: a ghost node may connect).

    Raises
    ------
    ConfigError
        For a strategy the imaging task cannot run, or an unknown engine.
    """
    section = dict(config["imaging"])
    flower = dict(config.get("flower") or {})
    seed = int(section["seed"] if seed is None else seed)
    engine = section["engine"] if engine is None else engine
    distance = strategy_distance(strategy, section, clients, seed)
    spec: dict[str, Any] = {"strategy": strategy, "distance": None}
    if distance:
        spec["distance"] = {
            "matrix": np.asarray(distance["distance"], dtype=np.float64).tolist(),
            "clients": list(distance["distance_clients"]),
        }
    data_file = section.get("data") if data_file is None else data_file
    return RunPlan(
        task=ImagingTask.name,
        data=ImagingFederation(
            clients,
            data_file=None if data_file is None else str(Path(data_file).resolve()),
            fold=fold,
            class_counts=class_counts,
        ),
        strategy=strategy_for(strategy, section, **distance),
        rounds=int(section["rounds"]),
        seed=seed,
        strategy_spec=spec,
        engine=engine,
        flower=flower,
        config={"imaging": section, "flower": flower},
        out=None if out is None else Path(out).resolve(),
        keep_checkpoints=1,
        min_replies=None if engine == "inprocess" else flower.get("min_replies") or len(clients),
    )
