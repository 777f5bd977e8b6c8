"""The imaging task: a site's share of a MedMNIST file and the small CNN of Riyadi et al..

A site is named by its node configuration (``data-file``: its copy of the MedMNIST ``.npz``,
``client-id``) or, in simulation, by its ``partition-id`` into the job's sorted clients. It
rebuilds its own client's split from the file and the job's partition settings (the imaging
section, seed, fold, fixed class counts): deterministic, so every node derives the same
partition and keeps only its own client. Each round it trains with
:func:`~rvfedprs.imaging.client.fit_imaging_client`, the function the in-process engine calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.federation.plan import RunPlan
from rvfedprs.federation.task import Task
from rvfedprs.imaging.client import ImagingClient, build_cnn, fit_imaging_client, get_cnn_parameters
from rvfedprs.imaging.federation import benchmark_data, federation_from_section
from rvfedprs.imaging.loader import load_medmnist
from rvfedprs.strategies.base import FitInstruction, FitResult, Strategy

__all__ = [
    "ImagingTask",
    "model_shape",
    "imaging_nodes",
    "strategy_for",
    "strategy_config",
    "IMAGING_STRATEGIES",
    "PARTITION_KEYS",
]

#: The job settings a site's split depends on.
PARTITION_KEYS = ("imaging", "seed", "fold", "class_counts")

#: The strategies the imaging clients can run (the ``imaging.strategies`` schema enum).
IMAGING_STRATEGIES: tuple[str, ...] = (
    "fedavg",
    "fedprox",
    "fedsvrg",
    "scaffold",
    "fedatt",
    "fedatt_cosine",
    "ditto",
    "local",
    "fedavg_w",
    "cluster_fedavg",
    "fedadam",
)


def model_shape(clients: Mapping[str, ImagingClient]) -> dict[str, int]:
    """``in_channels``, ``n_classes``, ``image_size`` of the federation's CNN."""
    t = clients[sorted(clients)[0]]
    return {"in_channels": t.in_channels, "n_classes": t.n_classes, "image_size": t.image_size}


def imaging_nodes(data_file: str | Path, client_ids) -> dict[str, dict[str, str]]:
    """One SuperNode per imaging client: label ``supernode-<client>`` → its node config.

    The node config names the site's MedMNIST file (``data-file``) and its client
    (``client-id``); the partition settings come with the job.
    """
    data_file = str(Path(data_file).resolve())
    return {f"supernode-{c}": {"data-file": data_file, "client-id": c} for c in client_ids}


def strategy_config(section: Mapping[str, Any]) -> dict[str, Any]:
    """The ``imaging`` section's strategy options, as the configuration sections they mirror.

    The strategies read ``train`` and ``strategies`` (:meth:`Strategy.from_config`); options the
    imaging section does not set keep those sections' defaults.
    """
    return {
        "train": {"proximal_mu": section["proximal_mu"], "momentum": section["momentum"]},
        "strategies": {
            "fedatt_step": section["fedatt_step"],
            "ditto_lambda": section["ditto_lambda"],
            "omega": section["omega"],
        },
    }


def strategy_for(
    name: str,
    section: Mapping[str, Any],
    *,
    distance: np.ndarray | None = None,
    distance_clients: Sequence[str] | None = None,
) -> Strategy:
    """The strategy ``name`` with its options from the ``imaging`` section.

    ``fedavg_w`` and ``cluster_fedavg`` need their client distance matrix (shape (K, K), rows
    in ``distance_clients`` order), computed by the caller (:func:`build_strategy` does).

    Raises
    ------
    ConfigError
        For a name outside :data:`IMAGING_STRATEGIES`, or options the strategy refuses.
    ValueError
        For a distance strategy without its matrix.
    """
    from rvfedprs.strategies import DISTANCE_STRATEGIES, strategy_from_config

    if name not in IMAGING_STRATEGIES:
        raise ConfigError(
            f"strategy {name!r} cannot run on the imaging task; choose from "
            f"{sorted(IMAGING_STRATEGIES)}"
        )
    if name in DISTANCE_STRATEGIES and distance is None:
        raise ValueError(f"strategy {name!r} needs the client distance matrix")
    return strategy_from_config(
        name,
        strategy_config(section),
        distance=None if distance is None else np.asarray(distance),
        distance_clients=None if distance_clients is None else list(distance_clients),
    )


class ImagingTask(Task):
    """The Riyadi et al. MedMNIST benchmark as a federated task."""

    name = "imaging"
    planner = "rvfedprs.imaging.plan:plan"

    def locate(
        self, node_config: Mapping[str, Any], run_config: Mapping[str, Any], settings: Mapping
    ) -> dict[str, str]:
        """(``data-file``, ``client-id``) of this node.

        Deployment: node config ``client-id`` and ``data-file`` (this site's copy of the file).
        Simulation: the job's ``data`` and the node's ``partition-id`` into the job's sorted
        ``client_ids``.

        Raises
        ------
        ConfigError
            When the node config names a client but no file, a client the job does not list,
            or neither a client nor a partition.
        """
        node = node_config
        listed = sorted(settings.get("client_ids") or [])
        if "client-id" in node:
            if "data-file" not in node:
                raise ConfigError(
                    "node config has client-id but no data-file for an imaging run; start the "
                    "SuperNode with --node-config \"data-file='...npz' client-id='client_1'\""
                )
            client_id = str(node["client-id"])
            if listed and client_id not in listed:
                raise ConfigError(
                    f"client-id {client_id!r} is not a client of this imaging run: {listed}"
                )
            return {"data-file": str(node["data-file"]), "client-id": client_id}
        if "partition-id" not in node or not listed:
            raise ConfigError(
                f"cannot tell which imaging client this node is: node config {dict(node)} has "
                "neither client-id nor partition-id"
            )
        index = int(node["partition-id"])
        if not 0 <= index < len(listed):
            raise ConfigError(f"partition-id {index} out of range: {len(listed)} imaging clients")
        return {"data-file": str(settings["data"]), "client-id": listed[index]}

    def open_site(self, locator: Mapping[str, str], settings: Mapping[str, Any]) -> ImagingClient:
        """The client ``client-id``, rebuilt from its file with the job's partition settings.

        The split is :func:`~rvfedprs.imaging.benchmark.federation_from_section` of the file
        (the in-process benchmark's).

        Raises
        ------
        ConfigError
            When ``client-id`` is not one of the partition's clients.
        InputDataError
            For a missing or unreadable MedMNIST file.
        """
        data_file, client_id = locator["data-file"], locator["client-id"]
        if not Path(data_file).is_file():
            raise InputDataError(f"client {client_id}: MedMNIST file not found: {data_file}")
        dataset = load_medmnist(data_file)
        seed = int(settings["seed"])
        counts = settings.get("class_counts")
        clients = federation_from_section(
            benchmark_data(dataset, settings["imaging"], seed),
            dataset.n_classes,
            settings["imaging"],
            random_seed=seed,
            fold=settings.get("fold"),
            class_counts=None if counts is None else np.asarray(counts, dtype=np.int64),
        )
        if client_id not in clients:
            raise ConfigError(
                f"client-id {client_id!r} is not a client of this imaging run: {sorted(clients)}"
            )
        return clients[client_id]

    def site_key(self, settings: Mapping[str, Any]) -> str:
        """The partition settings (a node rebuilds its split when they change)."""
        return json.dumps({k: settings.get(k) for k in PARTITION_KEYS}, sort_keys=True)

    def setup_report(self, site: ImagingClient, payload: Mapping[str, Any], state: dict) -> dict:
        """The client's split sizes."""
        return {"n-train": len(site.train), "n-test": len(site.test)}

    def declared_samples(self, report: Mapping[str, Any]) -> int | None:
        """The training split's size (``n-train``)."""
        return int(report["n-train"]) if "n-train" in report else None

    def fit(
        self,
        instruction: FitInstruction,
        site: ImagingClient,
        settings: Mapping[str, Any],
        state: dict[str, Any],
        *,
        random_seed: int,
    ) -> FitResult:
        """One round of :func:`~rvfedprs.imaging.client.fit_imaging_client`."""
        threads = (settings.get("imaging") or {}).get("torch_threads")
        if threads:
            import torch

            torch.set_num_threads(int(threads))
        return fit_imaging_client(instruction, replace(site, state=state), random_seed=random_seed)

    # --- run plans --------------------------------------------------------------------------
    def plan_sites(self, plan: RunPlan) -> Mapping[str, ImagingClient]:
        """The plan's clients (``RunPlan.data``: an :class:`ImagingFederation`)."""
        return plan.data.clients

    def plan_settings(self, plan: RunPlan) -> dict[str, Any]:
        """The CNN's shape; the clients are split already (no partition settings)."""
        return {"task": self.name, "model": model_shape(plan.data.clients), "imaging": {}}

    def plan_nodes(self, plan: RunPlan) -> dict[str, Any]:
        """One node per client, each rebuilding its own split of the plan's MedMNIST file.

        The partition settings (the ``imaging`` section, seed, fold, fixed class counts) go
        with the job (``task_settings``).

        Raises
        ------
        ConfigError
            For a plan whose federation names no MedMNIST file.
        """
        federation = plan.data
        if federation.data_file is None:
            raise ConfigError("an imaging run on Flower needs the MedMNIST file (data_file)")
        ids = sorted(federation.clients)
        data_file = str(Path(federation.data_file).resolve())
        counts = federation.class_counts
        return {
            "n_sites": len(ids),
            "nodes": imaging_nodes(data_file, ids),
            "task_settings": {
                "imaging": dict(plan.config["imaging"]),
                "seed": int(plan.seed),
                "fold": federation.fold,
                "class_counts": None if counts is None else np.asarray(counts).tolist(),
                "data": data_file,
                "client_ids": ids,
                "model": model_shape(federation.clients),
            },
        }

    # --- server side -----------------------------------------------------------------------
    def run_settings(
        self, job: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The job's partition and model settings (fixed before the run; nothing to derive)."""
        return dict(job["task_settings"])

    def initial_parameters(self, settings: Mapping[str, Any], random_seed: int) -> dict:
        """The CNN of the job's shape, freshly seeded."""
        shape = settings["model"]
        cnn = build_cnn(
            int(shape["in_channels"]),
            int(shape["n_classes"]),
            int(shape["image_size"]),
            random_seed,
        )
        return get_cnn_parameters(cnn)

    def build_strategy(self, spec: Mapping[str, Any], job: Mapping[str, Any]) -> Strategy:
        """Strategy ``spec["strategy"]`` with the imaging section's options (and distance)."""
        distance = spec.get("distance")
        return strategy_for(
            spec["strategy"],
            job["config"]["imaging"],
            distance=None if not distance else np.asarray(distance["matrix"], np.float64),
            distance_clients=None if not distance else distance["clients"],
        )

    def checkpoint_extra(self, settings: Mapping[str, Any], job: Mapping[str, Any]) -> dict:
        """The task and the CNN's shape."""
        extra: dict[str, Any] = {"task": self.name, "model_config": dict(settings["model"])}
        if job.get("config") is not None:
            extra["config"] = job["config"]
        return extra
