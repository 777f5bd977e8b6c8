"""Flower's SuperNode with a shorter wait between its asks for messages and quicker heartbeats.

An idle Flower 1.41 SuperNode asks the SuperLink for a message, and when none is waiting sleeps
a hard-coded 3 s (``time.sleep(3)`` in ``flwr/supernode/start_client_internal.py``); while a
ClientApp works it checks for the reply every 0.5 s. A node so sees a message 1.5 s late on
average, and a round waits for the latest of its sites. This launcher gives that module a
``time`` whose ``sleep`` waits at most ``poll`` seconds (every other name is the real ``time``'s),
then runs Flower's own ``flower-supernode`` entry point with the remaining arguments::

    python -m rvfedprs.federation.flower.supernode --poll-seconds 0.25 -- <flower-supernode args>

Every wait in that module is a poll for something another process does (a message at the
SuperLink, a ClientApp's reply, a reply's contents), so all are capped, not only the 3 s: a
node reacts within ``poll`` to each. If the pinned Flower's module no longer has the wait to
patch, the launcher fails at start, naming the Flower version and what is missing, instead of
running with Flower's 3 s unnoticed.

The launcher can also shorten the node's heartbeat interval (``--heartbeat-seconds``). A node
declares it when it joins and with every heartbeat, and the SuperLink takes the node for lost
(its messages answered "Node Unavailable") once two intervals pass without one. Flower 1.41's
SuperNode declares a hard-coded 30 s (``HEARTBEAT_DEFAULT_INTERVAL``, read at call time in
``flwr.supernode.fleet_http_connection`` and ``flwr.supercore.heartbeat``), so an exchange
waits up to 60 s for a site whose node died; at the SuperLink's smallest accepted interval,
10 s, it waits at most 20 s (a heartbeat then goes every ≈ 4 s).
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from collections.abc import Sequence

from rvfedprs.federation.flower.processes import console_script

__all__ = [
    "NODE_POLL_SECONDS",
    "NODE_HEARTBEAT_SECONDS",
    "PATCHED_MODULE",
    "HEARTBEAT_MODULES",
    "ENTRY_POINT",
    "CappedSleep",
    "patch_node_poll",
    "patch_node_heartbeat",
    "set_flower_constant",
    "flower_entry_point",
    "heartbeat_range",
    "check_heartbeat",
    "supernode_argv",
    "main",
]

#: The default longest wait (s) between a SuperNode's asks for messages (``flower.
#: node_poll_seconds``, ``rvfedprs site --node-poll-seconds``); Flower's own is 3.
NODE_POLL_SECONDS = 0.25

#: The default heartbeat interval (s) a SuperNode declares (``flower.node_heartbeat_seconds``,
#: ``rvfedprs site --node-heartbeat-seconds``): the SuperLink's smallest; Flower's own is 30.
NODE_HEARTBEAT_SECONDS = 10.0

#: Flower's heartbeat interval, the name the launcher sets in each of these modules.
HEARTBEAT_NAME = "HEARTBEAT_DEFAULT_INTERVAL"
HEARTBEAT_MODULES = ("flwr.supernode.fleet_http_connection", "flwr.supercore.heartbeat")

#: The Flower module whose module-level ``time`` the launcher replaces.
PATCHED_MODULE = "flwr.supernode.start_client_internal"

#: Where ``flower-supernode`` (the console script) leads: module, function.
ENTRY_POINT = ("flwr.supernode.cli", "flower_supernode")


class CappedSleep(types.ModuleType):
    """The ``time`` module with ``sleep(seconds)`` waiting ``min(seconds, poll)``.

    Parameters
    ----------
    poll : float
        The longest wait, in seconds (> 0).

    Raises
    ------
    ValueError
        When ``poll`` is not a positive number.
    """

    def __init__(self, poll: float) -> None:
        super().__init__("time")
        if isinstance(poll, bool) or not isinstance(poll, (int, float)) or not poll > 0:
            raise ValueError(
                f"the SuperNode's poll must be a positive number of seconds, got {poll!r}"
            )
        self.poll = float(poll)

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, at most :attr:`poll`."""
        time.sleep(min(seconds, self.poll))

    def __getattr__(self, name: str):
        return getattr(time, name)


def patch_node_poll(poll: float) -> CappedSleep:
    """Cap every wait of Flower's SuperNode loop at ``poll`` seconds (in this process).

    Returns
    -------
    CappedSleep
        What the module's ``time`` now is.

    Raises
    ------
    RuntimeError
        When the installed Flower has no ``time`` module in :data:`PATCHED_MODULE` (or no such
        module): the poll cannot be changed, said with Flower's version.
    """
    import importlib

    try:
        module = importlib.import_module(PATCHED_MODULE)
    except ImportError as exc:
        raise RuntimeError(f"{_flower()}: cannot import {PATCHED_MODULE} ({exc}); the "
                           "SuperNode's poll cannot be changed") from exc  # fmt: skip
    current = getattr(module, "time", None)
    if current is not time and not isinstance(current, CappedSleep):
        raise RuntimeError(
            f"{_flower()}: {PATCHED_MODULE} has no module-level 'time' (found {current!r}), "
            "so its hard-coded 3 s wait between asks for messages cannot be changed; set "
            "flower.node_poll_seconds to null (rvfedprs site --node-poll-seconds 3) for "
            "Flower's own poll, or update rvfedprs.federation.flower.supernode"
        )
    capped = CappedSleep(poll)
    module.time = capped
    return capped


def heartbeat_range() -> tuple[float, float]:
    """The heartbeat intervals (s) the installed Flower's SuperLink accepts: (least, most)."""
    from flwr.common.constant import HEARTBEAT_MAX_INTERVAL, HEARTBEAT_MIN_INTERVAL

    return float(HEARTBEAT_MIN_INTERVAL), float(HEARTBEAT_MAX_INTERVAL)


def check_heartbeat(seconds: float) -> float:
    """``seconds`` as a float when the SuperLink accepts it as a heartbeat interval.

    Raises
    ------
    ValueError
        When it is not a number in :func:`heartbeat_range`, naming the value and the range.
    """
    least, most = heartbeat_range()
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, (int, float))
        or not least <= seconds <= most
    ):
        raise ValueError(
            f"the SuperNode's heartbeat interval must be a number of seconds in "
            f"[{least:g}, {most:g}] (what the SuperLink accepts), got {seconds!r}"
        )
    return float(seconds)


def patch_node_heartbeat(seconds: float) -> float:
    """Make Flower's SuperNode declare (and keep) a heartbeat interval of ``seconds``.

    Returns
    -------
    float
        The interval set.

    Raises
    ------
    ValueError
        When ``seconds`` is outside :func:`heartbeat_range`.
    RuntimeError
        When a module of :data:`HEARTBEAT_MODULES` is missing or has no
        ``HEARTBEAT_DEFAULT_INTERVAL`` in the installed Flower, said with its version.
    """
    seconds = check_heartbeat(seconds)
    set_flower_constant(
        HEARTBEAT_MODULES,
        HEARTBEAT_NAME,
        seconds,
        what="the SuperNode's heartbeat interval",
        instead="set flower.node_heartbeat_seconds to null (rvfedprs site "
        "--node-heartbeat-seconds 30) for Flower's own, or update "
        "rvfedprs.federation.flower.supernode",
    )
    return seconds


def set_flower_constant(
    modules: Sequence[str], name: str, value: float, *, what: str, instead: str
) -> None:
    """Set the module constant ``name`` to ``value`` in each of ``modules`` of Flower.

    Every module is checked first (importable, holding a number under ``name``), so that a
    Flower release that moved the constant changes nothing and says so.

    Raises
    ------
    RuntimeError
        Naming the installed Flower, the module, ``what`` cannot be changed and ``instead``.
    """
    import importlib

    found = []
    for module_name in modules:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RuntimeError(f"{_flower()}: cannot import {module_name} ({exc}), so {what} "
                               f"cannot be changed; {instead}") from exc  # fmt: skip
        if not isinstance(getattr(module, name, None), (int, float)):
            raise RuntimeError(
                f"{_flower()}: {module_name} has no {name}, so {what} cannot be changed; {instead}"
            )
        found.append(module)
    for module in found:
        setattr(module, name, value)


def supernode_argv(
    poll: float | None, flower_args: Sequence[str], heartbeat: float | None = None
) -> list[str]:
    """The command that runs a SuperNode with ``flower_args``, this ``poll`` and ``heartbeat``.

    ``poll`` None (or 3 s or more: Flower's own wait) and ``heartbeat`` None (or Flower's own
    30 s) is the plain ``flower-supernode`` console script beside this interpreter; otherwise
    this module's launcher with the changed settings. A bad value fails here, not in the
    started process.
    """
    from flwr.common.constant import HEARTBEAT_DEFAULT_INTERVAL as FLOWERS_OWN

    options = []
    if poll is not None and poll < 3:
        CappedSleep(poll)
        options += ["--poll-seconds", repr(float(poll))]
    if heartbeat is not None and check_heartbeat(heartbeat) != FLOWERS_OWN:
        options += ["--heartbeat-seconds", repr(float(heartbeat))]
    if not options:
        return [console_script("flower-supernode"), *flower_args]
    return [sys.executable, "-m", __name__, *options, "--", *flower_args]


def flower_entry_point():
    """Flower's ``flower-supernode`` function (:data:`ENTRY_POINT`).

    Raises
    ------
    RuntimeError
        When the installed Flower has no such function, said with its version.
    """
    import importlib

    module, name = ENTRY_POINT
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"{_flower()}: flower-supernode's entry point {module}.{name} "
                           f"not found ({exc})") from exc  # fmt: skip


def _flower() -> str:
    """``Flower <version>`` (the installed one)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"Flower {version('flwr')}"
    except PackageNotFoundError:
        return "Flower (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``[--poll-seconds S] [--heartbeat-seconds H] -- <flower-supernode args>``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--poll-seconds", type=float,
                        help="longest wait between two asks for a message (Flower: 3)")  # fmt: skip
    parser.add_argument("--heartbeat-seconds", type=float,
                        help="heartbeat interval the node declares (Flower: 30)")  # fmt: skip
    parser.add_argument("flower", nargs=argparse.REMAINDER, help="-- flower-supernode arguments")
    args = parser.parse_args(argv)
    rest = args.flower[1:] if args.flower[:1] == ["--"] else args.flower
    said = []
    try:
        if args.poll_seconds is not None:
            patch_node_poll(args.poll_seconds)
            said.append(f"waits capped at {args.poll_seconds:g} s")
        if args.heartbeat_seconds is not None:
            patch_node_heartbeat(args.heartbeat_seconds)
            said.append(f"heartbeat every {args.heartbeat_seconds:g} s")
        entry = flower_entry_point()
    except (ValueError, RuntimeError) as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    print(f"rvfedprs: SuperNode {', '.join(said) or 'as Flower runs it'} ({_flower()})",
          file=sys.stderr, flush=True)  # fmt: skip
    sys.argv = ["flower-supernode", *rest]
    entry()
    return 0


if __name__ == "__main__":
    sys.exit(main())
