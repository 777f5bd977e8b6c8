"""``rvfedprs evaluate``: recompute the metrics of a trained federation from a checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "recompute metrics.json from a training checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs evaluate``."""
    parser.add_argument("--checkpoint", type=Path, required=True, help="a round_XXX.pt file")
    parser.add_argument("--data", type=Path, help="per-client inputs (default: the training data)")
    parser.add_argument(
        "--config", type=Path, help="YAML whose evaluate section overrides the checkpoint's"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint's strategy, evaluate every client, write metrics.json + provenance."""
    from rvfedprs.config import load_config, validate_config
    from rvfedprs.evaluation import evaluate_models
    from rvfedprs.exceptions import InputDataError
    from rvfedprs.federation.data import load_federation
    from rvfedprs.federation.inprocess import load_checkpoint
    from rvfedprs.provenance import write_provenance
    from rvfedprs.run import client_clusters, load_truth_from_config, write_metrics
    from rvfedprs.strategies import strategy_from_config

    record = load_checkpoint(args.checkpoint)
    if "config" not in record:
        raise InputDataError(
            f"{args.checkpoint} holds no configuration; was it written by rvfedprs train?"
        )
    config = validate_config(record["config"])
    if args.config is not None:
        config["evaluate"] = load_config(args.config)["evaluate"]
    data = args.data if args.data is not None else Path(config["train"]["data"])
    federation = load_federation(data)
    if federation.n_rare != int(record["n_rare"]):
        raise InputDataError(
            f"{data} has {federation.n_rare} rare variants but the checkpoint's model expects "
            f"{record['n_rare']}"
        )
    name = record["strategy_name"]
    strategy = strategy_from_config(name, config)
    strategy.load_state_dict(record["strategy_state"])
    metrics = evaluate_models(
        strategy.parameters_for,
        client_clusters(strategy, federation.client_ids),
        federation.test,
        federation.variant_keys,
        record["model_config"],
        truth=load_truth_from_config(config),
        score_clusters=strategy.forms_clusters,
    )
    out = {
        "strategy": name,
        "seed": int(record["seed"]),
        "round": int(record["round"]),
        **metrics,
        "history": record.get("history", []),
    }
    path = write_metrics(args.out, out)
    write_provenance(
        args.out,
        command="rvfedprs evaluate",
        parameters=config,
        seed=int(record["seed"]),
        inputs=[args.checkpoint],
        extra={"metrics": str(path)},
    )
    print(f"{name} (round {out['round']}): auc={out['auc']:.4f} -> {path}")
    return 0
