"""``rvfedprs report``: Tables II–V, privacy–utility, Bloom attack and figures from run folders."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "build the paper's tables (mean ± 95% CI over seeds) and figures from run folders"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs report``."""
    parser.add_argument("--config", type=Path, help="YAML configuration (sections report, ...)")
    parser.add_argument("--runs", type=Path, required=True, help="folder holding run folders")
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    """Build the report."""
    from rvfedprs.config import load_config
    from rvfedprs.evaluation.report import build_report
    from rvfedprs.run import load_truth_from_config

    config = load_config(args.config)
    truth = load_truth_from_config(config) if config["evaluate"]["samples"] else None
    paths = build_report(args.runs, args.out, config, truth=truth)
    print(f"report: {len(paths)} files in {args.out}")
    return 0
