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
    "assess",
    "mia",
    "distance",
    "imaging",
    "report",
    "study",
    "site",
    "ancestry",
    "associate",
)


def _available_commands(names: Sequence[str] = COMMANDS) -> dict[str, object]:
    """Each command's module; one that is missing is a broken installation, said by name."""
    modules = {}
    for name in names:
        try:
            modules[name] = importlib.import_module(f"rvfedprs.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"rvfedprs.commands.{name}":
                raise RuntimeError(
                    f"the {name!r} command's module rvfedprs.commands.{name} is missing: the "
                    "installation is incomplete (reinstall: bash scripts/install.sh)"
                ) from exc
            raise
    return modules


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser with every available sub-command, or with ``only`` that one.

    Building one sub-command's options imports only its module: a genotype pass started from
    the shell does not pay for the simulator's or the trainer's imports.
    """
    parser = argparse.ArgumentParser(
        prog="rvfedprs",
        description="Federated polygenic risk scores that keep rare-variant signals alive.",
    )
    parser.add_argument("--version", action="version", version=f"rvfedprs {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _available_commands(COMMANDS if only is None else (only,)).items():
        # argparse %-formats help strings: a literal "95%" must reach it as "95%%".
        sub = subparsers.add_parser(
            name, help=module.HELP.replace("%", "%%"), description=module.HELP
        )
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 success, 2 bad input or failure)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    named = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(named if named in COMMANDS else None)
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
