"""``rvfedprs train``: federated training on the pipeline's per-client outputs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rvfedprs.federation import ENGINES
from rvfedprs.option_types import ROUNDS, SEED

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
        "--seed", type=SEED, help="master random seed (default: train.seed or drawn)"
    )
    parser.add_argument(
        "--rounds", type=ROUNDS, help="communication rounds (default: train.rounds)"
    )
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
    from rvfedprs.config import load_config
    from rvfedprs.run import train
    from rvfedprs.strategies import strategy_class

    overrides = _overrides(args)
    name = overrides.get("train", {}).pop("strategy", None)
    if name is not None:
        strategy_class(name)  # an unknown name is named before anything else is read
    config = load_config(args.config, overrides=overrides)
    if name is not None:
        config["train"]["strategy"] = name
    record = train(config, args.out, resume=args.resume).metrics
    if record.get("metric") == "r2":  # a quantitative phenotype
        scores = (f"r2={record['r2']:.4f} incremental_r2={record['incremental_r2']:.4f} "
                  f"carrier_r2={record['carrier_r2']:.4f}")  # fmt: skip
    else:
        scores = (f"auc={_with_interval(record, 'auc')} auprc={record['auprc']:.4f} "
                  f"carrier_auc={_with_interval(record, 'carrier_auc')}")  # fmt: skip
        if record.get("n_carriers") is not None:
            scores += f" ({record['n_carriers']} carriers)"
    print(f"{record['strategy']}: {scores} -> {args.out / 'metrics.json'}")
    return 0


def _with_interval(record: dict, key: str) -> str:
    """``record[key]`` with its 95% DeLong interval where ``<key>_se`` is finite."""
    import math

    value, se = float(record[key]), float(record.get(f"{key}_se", float("nan")))
    if not (math.isfinite(value) and math.isfinite(se)):
        return f"{value:.4f}"
    return f"{value:.4f} [{value - 1.96 * se:.3f}, {value + 1.96 * se:.3f}]"
