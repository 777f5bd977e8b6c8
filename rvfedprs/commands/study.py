"""``rvfedprs study``: run a consortium study as its coordinator (prepare → train → evaluate)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "run a consortium study as the coordinator: every step at the sites, only aggregates back"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs study``."""
    parser.add_argument("--config", type=Path, required=True, help="consortium YAML (study, ...)")
    parser.add_argument("--samplesheet", type=Path, help="site sheet (default: study.samplesheet)")
    parser.add_argument(
        "--scoring-file", type=Path, help="PGS Catalog file (default: pipeline.cohort.scoring_file)"
    )
    parser.add_argument("--out", type=Path, help="coordinator folder (default: study.out)")
    parser.add_argument("--engine", help="inprocess, flower-sim or flower-deploy (study.engine)")


def run(args: argparse.Namespace) -> int:
    """Run the study; print its summary."""
    from rvfedprs.config import load_config
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.study.run import run_study_config

    overrides = {"study": {"engine": args.engine}} if args.engine else None
    config = load_config(args.config, overrides=overrides)
    scoring = args.scoring_file or config["pipeline"]["cohort"]["scoring_file"]
    if scoring is None:
        raise ConfigError("give --scoring-file or pipeline.cohort.scoring_file")
    summary = run_study_config(
        config, scoring_file=scoring, samplesheet=args.samplesheet, out=args.out
    )
    print(json.dumps(summary, indent=2, default=str))
    return 0
