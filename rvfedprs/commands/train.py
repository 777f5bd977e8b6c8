"""``rvfedprs train``: federated training on the pipeline's per-client outputs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rvfedprs.federation import ENGINES

HELP = "train a strategy (FedCE or a baseline) on per-client inputs and write metrics.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs train``."""
    parser.add_argument(
        "--config", type=Path, help="YAML configuration (sections train, fedce, ...)"
    )
    parser.add_argument("--strategy", help="strategy name (default: train.strategy)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("--engine", choices=ENGINES, help="execution engine")
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


def run(args: argparse.Namespace) -> int:
    """Train, evaluate every client on its test split, write metrics, checkpoints, provenance."""
    from rvfedprs.bloom import read_bloom_key
    from rvfedprs.commands.distance import strategy_distance
    from rvfedprs.config import load_config
    from rvfedprs.evaluation import evaluate_models
    from rvfedprs.federation.data import load_federation
    from rvfedprs.federation.inprocess import run_inprocess
    from rvfedprs.provenance import draw_seed, write_provenance
    from rvfedprs.run import (
        check_engine,
        client_clusters,
        dp_client_state,
        dp_epsilon,
        dp_training,
        load_truth_from_config,
        training_config,
        write_metrics,
    )
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
