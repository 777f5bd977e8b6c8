"""``rvfedprs imaging``: the Riyadi et al. comparison of FL strategies on a MedMNIST file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rvfedprs.option_types import ROUNDS, SEED

HELP = "compare federated strategies on a MedMNIST .npz (Dirichlet non-IID clients, small CNN)"

#: the quick preset: a few rounds on a small subsample (tests, smoke runs)
QUICK = {"rounds": 2, "subsample": 300, "eval_rounds": None, "cv_folds": None}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs imaging``."""
    parser.add_argument("--config", type=Path, help="YAML file with an 'imaging:' section")
    parser.add_argument("--data", type=Path, help="MedMNIST .npz (overrides imaging.data)")
    parser.add_argument("--quick", action="store_true", help="2 rounds on 300 images")
    parser.add_argument("--seed", type=SEED, help="master seed (overrides imaging.seed)")
    parser.add_argument(
        "--strategies", nargs="+", metavar="NAME", help="strategies (overrides imaging.strategies)"
    )
    parser.add_argument("--rounds", type=ROUNDS, help="rounds (overrides imaging.rounds)")
    parser.add_argument(
        "--engine",
        help="where the clients train: inprocess, flower-sim or flower-deploy (overrides "
        "imaging.engine; docs/DEPLOYMENT.md)",
    )
    parser.add_argument(
        "--class-counts",
        type=Path,
        metavar="TSV",
        help="fixed per-client class counts (rows: client, columns: class 0..C-1) instead of a"
        " Dirichlet draw, e.g. a paper's published partition",
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    """Run the comparison; write metrics.json, table.csv, table.md and provenance.json.

    Every evaluated round is also appended to ``progress.jsonl`` (and a line printed) as soon as
    it is computed, so an interrupted run keeps what it had evaluated (on a Flower engine, when
    each strategy's run ends: the rounds are evaluated from its checkpoints).
    """
    from rvfedprs.config import load_config
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.imaging.benchmark import check_engine, write_benchmark

    overrides: dict[str, Any] = {}
    if args.quick:
        overrides.update(QUICK)
    if args.data is not None:
        overrides["data"] = str(args.data)
    if args.strategies:
        overrides["strategies"] = list(args.strategies)
    if args.rounds is not None:
        if args.rounds < 1:
            raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
        overrides["rounds"] = args.rounds
    if getattr(args, "engine", None) is not None:
        check_engine(args.engine)
        overrides["engine"] = args.engine
    if args.seed is not None:
        if args.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {args.seed}")
        overrides["seed"] = args.seed
    config = load_config(args.config, overrides={"imaging": overrides} if overrides else None)
    table = write_benchmark(config, args.out, class_counts_file=args.class_counts)
    print(f"wrote {args.out}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0
