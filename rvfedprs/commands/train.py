"""``rvfedprs train``: federated training on the pipeline's per-client outputs."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HELP = "train a strategy (FedCE or a baseline) on per-client inputs and write metrics.json"

ENGINE_CHOICES = ("inprocess", "flower-sim", "flower-deploy")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs train``."""
    parser.add_argument(
        "--config", type=Path, help="YAML configuration (sections train, fedce, ...)"
    )
    parser.add_argument("--strategy", help="strategy name (default: train.strategy)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--engine", choices=ENGINE_CHOICES, help="execution engine")
    parser.add_argument(
        "--seed", type=int, help="master random seed (default: train.seed or drawn)"
    )
    parser.add_argument("--rounds", type=int, help="communication rounds (default: train.rounds)")
    parser.add_argument("--data", type=Path, help="per-client inputs folder (default: train.data)")
    parser.add_argument("--resume", action="store_true", help="continue from OUT/checkpoints")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    train: dict[str, Any] = {}
    for flag, key in (
        ("strategy", "strategy"),
        ("engine", "engine"),
        ("seed", "seed"),
        ("rounds", "rounds"),
    ):
        if getattr(args, flag, None) is not None:
            train[key] = getattr(args, flag)
    if getattr(args, "data", None) is not None:
        train["data"] = str(args.data)
    if getattr(args, "no_progress", False):
        train["progress"] = False
    return {"train": train} if train else {}


def check_engine(engine: str) -> None:
    """Fail clearly on an engine name that is not one of :data:`ENGINE_CHOICES`."""
    from rvfedprs.exceptions import ConfigError

    if engine not in ENGINE_CHOICES:
        raise ConfigError(f"engine {engine!r} unknown; choose from {list(ENGINE_CHOICES)}")


def read_bloom_key(path: str | None) -> bytes | None:
    """The clients' shared HMAC secret (file bytes, surrounding whitespace stripped)."""
    from rvfedprs.exceptions import ConfigError

    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"fedce.bloom_key_file: {p} not found")
    key = p.read_bytes().strip()
    if not key:
        raise ConfigError(f"fedce.bloom_key_file: {p} is empty")
    return key


def training_config(config: Mapping[str, Any], federation) -> Any:
    """The clients' :class:`LocalTrainingConfig` from the ``train`` section."""
    from rvfedprs.federation.settings import local_training_config

    return local_training_config(
        config["train"],
        n_samples=sum(d.n_samples for d in federation.train.values()),
        n_cases=sum(float(d.y.sum()) for d in federation.train.values()),
    )


def dp_client_state(config: Mapping[str, Any], client_ids) -> dict[str, dict[str, Any]] | None:
    """Per-client state holding a fresh :class:`~rvfedprs.privacy.DPState` when ``dp.enabled``.

    Each client (and the pooled client of the centralised baseline) gets its own accountant,
    kept across rounds so that ε is cumulative. None when DP is off.
    """
    dp = config.get("dp", {})
    if not dp.get("enabled", False):
        return None
    from rvfedprs.federation.inprocess import POOLED_CLIENT
    from rvfedprs.privacy import DPState

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


def run(args: argparse.Namespace) -> int:
    """Train, evaluate every client on its test split, write metrics, checkpoints, provenance."""
    from rvfedprs.commands.distance import strategy_distance
    from rvfedprs.config import load_config
    from rvfedprs.evaluation import evaluate_models
    from rvfedprs.federation.data import load_federation
    from rvfedprs.federation.inprocess import run_inprocess
    from rvfedprs.provenance import draw_seed, write_provenance
    from rvfedprs.strategies import strategy_class, strategy_from_config

    overrides = _overrides(args)
    name = overrides.get("train", {}).pop("strategy", None)
    config = load_config(args.config, overrides=overrides)
    name = name or config["train"]["strategy"]
    strategy_class(name)  # unknown names fail before anything is loaded
    config["train"]["strategy"] = name
    check_engine(config["train"]["engine"])
    seed = draw_seed(config["train"]["seed"])
    config["train"]["seed"] = seed
    federation = load_federation(config["train"]["data"])
    truth = load_truth_from_config(config)
    distance = strategy_distance(name, config, federation, seed)  # fedavg_w / cluster_fedavg
    strategy = strategy_from_config(name, config, **distance)
    model_config = dict(config["model"])

    def per_round(s) -> dict[str, float]:
        m = evaluate_models(
            s.parameters_for, {}, federation.test, federation.variant_keys, model_config
        )
        return {"auc": m["auc"]}

    client_state = dp_client_state(config, federation.client_ids)
    if config["train"]["engine"] == "inprocess":
        result = run_inprocess(
            federation,
            strategy,
            rounds=config["train"]["rounds"],
            model_config=model_config,
            training=dp_training(config, training_config(config, federation)),
            random_seed=seed,
            out=args.out,
            resume=args.resume,
            bloom_key=read_bloom_key(config["fedce"]["bloom_key_file"]),
            client_state=client_state,
            evaluate_round=per_round,
            checkpoint_extra={"config": config, "strategy_name": name},
            keep_checkpoints=config["train"]["keep_checkpoints"],
            progress=config["train"]["progress"],
        )
    else:  # flower-sim / flower-deploy: the same strategy and client code on Flower
        from rvfedprs.federation.flower.launch import run_flower

        result = run_flower(
            config["train"]["engine"],
            federation=federation,
            strategy=strategy,
            config=config,
            rounds=config["train"]["rounds"],
            random_seed=seed,
            out=args.out,
            resume=args.resume,
            bloom_key_file=config["fedce"]["bloom_key_file"],
            evaluate_round=per_round,
            client_state=client_state,
        )
    metrics = evaluate_models(
        strategy.parameters_for,
        client_clusters(strategy, federation.client_ids),
        federation.test,
        federation.variant_keys,
        model_config,
        truth=truth,
        score_clusters=strategy.forms_clusters,
    )
    record = {"strategy": name, "seed": seed, **metrics, "history": result.history}
    record.update(dp_epsilon(client_state))
    path = write_metrics(args.out, record)
    inputs = [federation.data_dir / "rare_variants.tsv", federation.data_dir / "clients.tsv"]
    for client in federation.client_ids:
        folder = federation.data_dir / "clients" / client
        inputs += [folder / "samples.parquet", folder / "rare_dosages.npz"]
    write_provenance(
        args.out,
        command="rvfedprs train",
        parameters=config,
        seed=seed,
        inputs=inputs,
        extra={"metrics": str(path), "checkpoints": [str(p) for p in result.checkpoints]},
    )
    print(
        f"{name}: auc={record['auc']:.4f} auprc={record['auprc']:.4f} "
        f"carrier_auc={record['carrier_auc']:.4f} -> {path}"
    )
    return 0
