"""``rvfedprs prepare run``: run the Snakemake preparation workflow up to the per-client inputs.

Equivalent to ``snakemake --snakefile Snakefile --configfile F --cores N <prepare targets>`` in
the repository that holds this package (the workflow files are not part of a wheel).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from rvfedprs.option_types import COUNT

HELP = "run the Snakemake preparation pipeline (validate, QC, PRS, rare dosages, report)"

#: what ``prepare run`` builds: the per-client contract plus logs and the data report
PREPARE_TARGETS = (
    "results/clients.tsv",
    "results/rare_variants.tsv",
    "results/outcome.json",
    "results/logs/exclusions.tsv",
    "results/logs/score_match.tsv",
    "results/report/data_report.html",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs prepare run``."""
    parser.add_argument("--config", metavar="FILE", help="YAML configuration (default: embedded)")
    parser.add_argument("--cores", type=COUNT, default=2, help="cores Snakemake may use")
    parser.add_argument(
        "--directory", metavar="DIR", help="working directory for results/ (default: current)"
    )
    parser.add_argument("--dry-run", action="store_true", help="list the jobs, run nothing")


def snakefile() -> Path:
    """The workflow's Snakefile, at the root of the repository holding this package."""
    path = Path(__file__).resolve().parents[2] / "Snakefile"
    if not path.is_file():
        from rvfedprs.exceptions import ConfigError

        raise ConfigError(
            f"Snakefile not found at {path}; `prepare run` needs the repository checkout"
        )
    return path


def run(args: argparse.Namespace) -> int:
    """Run Snakemake on the prepare targets; return its exit status."""
    from rvfedprs.config import load_config

    if args.config is not None:
        load_config(args.config)  # fail early, naming the bad key
    return subprocess.call(snakemake_command(args))


def snakemake_command(args: argparse.Namespace) -> list[str]:
    """The Snakemake command line of ``args``.

    The targets come before ``--configfile``, which takes several values and would swallow them.
    """
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(snakefile())]
    command += [*PREPARE_TARGETS, "--cores", str(args.cores)]
    if args.config is not None:
        command += ["--configfile", str(Path(args.config).resolve())]
    if args.directory is not None:
        command += ["--directory", str(args.directory)]
    if args.dry_run:
        command.append("--dry-run")
    return command
