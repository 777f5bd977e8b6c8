"""The ``rvfedprs`` command line: one entry point, one sub-command per module in ``commands/``.

Each ``rvfedprs/commands/<name>.py`` defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``. Command modules import heavy libraries (torch, msprime) inside ``run`` so
that ``rvfedprs --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from rvfedprs import __version__
from rvfedprs.exceptions import RvfedprsError

__all__ = ["main", "COMMANDS"]

COMMANDS = (
    "simulate",
    "prepare",
    "train",
    "evaluate",
    "mia",
    "distance",
    "imaging",
    "report",
    "study",
    "site",
)


def _available_commands() -> dict[str, object]:
    modules = {}
    for name in COMMANDS:
        try:
            modules[name] = importlib.import_module(f"rvfedprs.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"rvfedprs.commands.{name}":
                raise
    return modules


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available sub-command."""
    parser = argparse.ArgumentParser(
        prog="rvfedprs",
        description="Federated polygenic risk scores that keep rare-variant signals alive.",
    )
    parser.add_argument("--version", action="version", version=f"rvfedprs {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _available_commands().items():
        # argparse %-formats help strings: a literal "95%" must reach it as "95%%".
        sub = subparsers.add_parser(
            name, help=module.HELP.replace("%", "%%"), description=module.HELP
        )
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 success, 2 bad input or failure)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args._run(args) or 0)
    except RvfedprsError as exc:
        print(f"rvfedprs {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
