"""``rvfedprs associate``: federated rare-variant association tests on exact sums."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from rvfedprs.federation import ENGINES

HELP = "federated rare-variant association (score, burden, SKAT, ACAT; pooled and by group)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs associate``."""
    parser.add_argument("--config", type=Path, help="YAML configuration (associate section)")
    parser.add_argument("--data", help="prepared per-site inputs (default: train.data)")
    parser.add_argument("--groups", help="TSV client/group, or a run's metrics.json (clusters)")
    parser.add_argument("--engine", choices=ENGINES, help="execution engine")
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if args.data is not None:
        out.setdefault("associate", {})["data"] = args.data
    if args.groups is not None:
        out.setdefault("associate", {})["groups"] = args.groups
    if args.engine is not None:
        out["train"] = {"engine": args.engine}
    return out


def run(args: argparse.Namespace) -> int:
    """Run the association on the configured engine; write the table, plots and summary."""
    from rvfedprs.association.runner import associate
    from rvfedprs.config import load_config

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    config = load_config(args.config, overrides=_overrides(args))
    result = associate(config, args.out)
    print(f"associate: {len(result.table)} rows -> {result.files['associations']}")
    return 0
