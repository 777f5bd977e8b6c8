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
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the study in OUT (study_state.json): finished stages are not run again, "
        "each run goes on from its latest checkpoint",
    )
    parser.add_argument(
        "--attach",
        nargs="?",
        const="",
        metavar="RUN_ID",
        help="Flower engines: wait for the run (default: the latest submitted from OUT) of a "
        "coordinator that died and collect its summary; submits nothing",
    )


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
    if args.resume and args.attach is not None:
        raise ConfigError("give --resume or --attach, not both")
    summary = run_study_config(
        config,
        scoring_file=scoring,
        samplesheet=args.samplesheet,
        out=args.out,
        resume=args.resume,
        attach=args.attach,
    )
    print(json.dumps(summary, indent=2, default=str))
    return 0
