"""Flower's SuperLink with a longer patience for a run's missing ServerApp heartbeats.

A SuperLink fails a run (``finished:failed``, "No heartbeat received from the task") when its
ServerApp sends no heartbeat for ``HEARTBEAT_PATIENCE × HEARTBEAT_DEFAULT_INTERVAL`` = 2 × 30 s
(Flower 1.41; the two names are read at call time in the SuperLink's task state,
:data:`PATIENCE_MODULES`). A ServerApp beats every ≈ 20 s from a thread, so a 2-core machine
loaded by other work (a CI run, a site's preparation beside the SuperLink) can starve it for a
minute and lose a run that was working — seen in this project's CI on a 2-round imaging run.
The SuperLinks rvfedprs starts itself run through this launcher with
``flower.serverapp_patience_seconds`` (default :data:`SERVERAPP_PATIENCE_SECONDS`); a ServerApp
that really died is still named, that much later::

    python -m rvfedprs.federation.flower.superlink_launcher --patience-seconds 180 -- <args>

A SuperLink an operator runs (``flower.superlink``) keeps its own setting.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rvfedprs.federation.flower.processes import console_script
from rvfedprs.federation.flower.supernode import set_flower_constant

__all__ = [
    "SERVERAPP_PATIENCE_SECONDS",
    "PATIENCE_MODULES",
    "flowers_patience",
    "check_patience",
    "patch_serverapp_patience",
    "superlink_argv",
    "main",
]

#: The default seconds a SuperLink started here waits without a ServerApp heartbeat.
SERVERAPP_PATIENCE_SECONDS = 180.0

#: The SuperLink's task-state modules that read ``HEARTBEAT_PATIENCE`` at call time.
PATIENCE_MODULES = (
    "flwr.supercore.corestate.in_memory_corestate",
    "flwr.supercore.corestate.sql_corestate",
)
PATIENCE_NAME = "HEARTBEAT_PATIENCE"


def flowers_patience() -> float:
    """The seconds Flower's own SuperLink waits without a ServerApp heartbeat (60 in 1.41)."""
    from flwr.common.constant import HEARTBEAT_DEFAULT_INTERVAL, HEARTBEAT_PATIENCE

    return float(HEARTBEAT_PATIENCE * HEARTBEAT_DEFAULT_INTERVAL)


def check_patience(seconds: float) -> float:
    """``seconds`` as a float when it is at least Flower's own patience; else a ValueError."""
    if not (isinstance(seconds, (int, float)) and seconds >= flowers_patience()):
        raise ValueError(
            f"flower.serverapp_patience_seconds must be at least Flower's own "
            f"{flowers_patience():g} s, got {seconds!r}"
        )
    return float(seconds)


def patch_serverapp_patience(seconds: float) -> float:
    """Make this process's SuperLink wait ``seconds`` without a ServerApp heartbeat.

    Returns
    -------
    float
        The patience set, in seconds.

    Raises
    ------
    ValueError
        When ``seconds`` is shorter than Flower's own patience (:func:`flowers_patience`).
    RuntimeError
        When a module of :data:`PATIENCE_MODULES` is missing or has no ``HEARTBEAT_PATIENCE``
        in the installed Flower.
    """
    from flwr.common.constant import HEARTBEAT_DEFAULT_INTERVAL

    seconds = check_patience(seconds)
    set_flower_constant(
        PATIENCE_MODULES,
        PATIENCE_NAME,
        seconds / HEARTBEAT_DEFAULT_INTERVAL,  # Flower multiplies it by the interval
        what="the SuperLink's patience for ServerApp heartbeats",
        instead="set flower.serverapp_patience_seconds to null or update "
        "rvfedprs.federation.flower.superlink_launcher",
    )
    return seconds


def superlink_argv(patience: float | None, flower_args: Sequence[str]) -> list[str]:
    """The command that runs a SuperLink with ``flower_args`` and this ServerApp ``patience``.

    None (or Flower's own patience) is the plain ``flower-superlink`` console script.
    """
    if patience is None or check_patience(patience) == flowers_patience():
        return [console_script("flower-superlink"), *flower_args]
    options = ["--patience-seconds", repr(float(patience))]
    return [sys.executable, "-m", __name__, *options, "--", *flower_args]


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--patience-seconds S -- <flower-superlink args>``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patience-seconds", type=float, required=True,
                        help="seconds without a ServerApp beat before a run fails")  # fmt: skip
    parser.add_argument("flower", nargs=argparse.REMAINDER, help="-- flower-superlink arguments")
    args = parser.parse_args(argv)
    rest = args.flower[1:] if args.flower[:1] == ["--"] else args.flower
    try:
        patch_serverapp_patience(args.patience_seconds)
    except (ValueError, RuntimeError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    print(f"rvfedprs: SuperLink fails a run after {args.patience_seconds:g} s without a "
          "ServerApp heartbeat", file=sys.stderr, flush=True)  # fmt: skip
    from flwr.superlink.cli import flower_superlink

    sys.argv = ["flower-superlink", *rest]
    flower_superlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
