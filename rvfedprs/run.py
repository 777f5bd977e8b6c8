"""Assemble a training run from a validated configuration, and write what it leaves behind.

The one place every entry point (``rvfedprs train`` and its siblings, the Snakemake rules, the
Flower ServerApp, the paper driver) turns configuration sections into the objects a run needs:
the clients' optimiser settings, the DP accountants, the truth to score against, and the
``metrics.json`` record.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation import ENGINES

__all__ = [
    "check_engine",
    "training_config",
    "dp_client_state",
    "dp_training",
    "dp_epsilon",
    "load_truth_from_config",
    "client_clusters",
    "jsonable",
    "write_metrics",
]


def check_engine(engine: str) -> None:
    """Fail clearly on an engine name that is not one of :data:`ENGINES`."""
    if engine not in ENGINES:
        raise ConfigError(f"engine {engine!r} unknown; choose from {list(ENGINES)}")


def training_config(config: Mapping[str, Any], federation) -> Any:
    """The clients' :class:`LocalTrainingConfig` from the ``train`` section."""
    from rvfedprs.federation.settings import local_training_config

    return local_training_config(
        config["train"],
        n_samples=sum(d.n_samples for d in federation.train.values()),
        n_cases=sum(float(d.y.sum()) for d in federation.train.values()),
    )


def dp_client_state(config: Mapping[str, Any], client_ids) -> dict[str, dict[str, Any]] | None:
    """Per-client state holding a fresh :class:`~rvfedprs.training.dp.DPState` when ``dp.enabled``.

    Each client (and the pooled client of the centralised baseline) gets its own accountant,
    kept across rounds so that ε is cumulative. None when DP is off.
    """
    dp = config.get("dp", {})
    if not dp.get("enabled", False):
        return None
    from rvfedprs.federation.inprocess import POOLED_CLIENT
    from rvfedprs.training.dp import DPState

    return {
        c: {"dp": DPState(dp["noise_multiplier"], dp["max_grad_norm"], dp["delta"])}
        for c in [*client_ids, POOLED_CLIENT]
    }


def dp_training(config: Mapping[str, Any], training: Any) -> Any:
    """``training`` with ``dp.batch_size`` as the batch size when DP is on and it is set."""
    from dataclasses import replace

    dp = config.get("dp", {})
    if dp.get("enabled", False) and dp.get("batch_size") is not None:
        return replace(training, batch_size=int(dp["batch_size"]))
    return training


def dp_epsilon(client_state: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """``{"epsilon": max over clients, "epsilon_clients": {...}}`` of trained DP states, or {}."""
    if client_state is None:
        return {}
    eps = {c: s["dp"].epsilon() for c, s in client_state.items() if s["dp"].rounds > 0}
    return {"epsilon": max(eps.values()) if eps else 0.0, "epsilon_clients": eps}


def load_truth_from_config(config: Mapping[str, Any]):
    """The simulator's truth named in the ``evaluate`` section, or None."""
    from rvfedprs.evaluation import load_truth

    section = config["evaluate"]
    if section["samples"] is None:
        return None
    return load_truth(section["truth"], section["samples"])


def client_clusters(strategy, client_ids) -> dict[str, Any]:
    """Each real client's cluster (a pooled strategy puts everyone in cluster 0)."""
    found = strategy.clusters()
    return {c: found.get(c, 0) for c in client_ids}


def jsonable(value: Any) -> Any:
    """NaN → null and numpy scalars → Python, recursively."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_metrics(out: Path, metrics: Mapping[str, Any]) -> Path:
    """Write ``out/metrics.json``."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / "metrics.json"
    path.write_text(json.dumps(jsonable(metrics), indent=2) + "\n")
    return path
