"""``rvfedprs evaluate``: recompute the metrics of a trained federation from a checkpoint."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "recompute metrics.json from a training checkpoint"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs evaluate``."""
    parser.add_argument(
        "--checkpoint", type=Path, required=True,
        help="a round_XXX.pt file, or a run's folder (its latest)",
    )  # fmt: skip
    parser.add_argument("--data", type=Path, help="per-client inputs (default: the training data)")
    parser.add_argument(
        "--config", type=Path, help="YAML whose evaluate section overrides the checkpoint's"
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    """Load the checkpoint's strategy, evaluate every client, write metrics.json + provenance."""
    from rvfedprs.config import load_config
    from rvfedprs.run import evaluate_checkpoint

    evaluate = None if args.config is None else load_config(args.config)["evaluate"]
    out = evaluate_checkpoint(args.checkpoint, args.out, data=args.data, evaluate=evaluate)
    metric = out.get("metric", "auc")
    print(f"{out['strategy']} (round {out['round']}): {metric}={out[metric]:.4f} -> {args.out}")
    return 0
