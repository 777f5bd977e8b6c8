"""``rvfedprs site``: start this biobank's SuperNode for a consortium study.

The node reads only this site's configuration (``site:`` section: its files and folder) and
connects to the consortium's SuperLink; the coordinator's job then reaches it. It runs in the
foreground until stopped (Ctrl-C). Flower's state and the apps it receives (FABs) go under the
site's folder (``FOLDER/flower``, the node's FLWR_HOME), not the user's home.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rvfedprs.option_types import bounded

HELP = "start this site's Flower SuperNode for a consortium study (its own files only)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs site``."""
    from rvfedprs.federation.flower.supernode import NODE_HEARTBEAT_SECONDS, NODE_POLL_SECONDS

    parser.add_argument("--config", type=Path, required=True, help="this site's YAML (site:)")
    parser.add_argument("--superlink", required=True, help="the SuperLink's Fleet API host:port")
    security = parser.add_mutually_exclusive_group(required=True)
    security.add_argument(
        "--root-certificates", type=Path, help="CA of the SuperLink's certificate (TLS)"
    )
    security.add_argument(
        "--insecure", action="store_true", help="plain HTTP to the SuperLink (tests only)"
    )
    parser.add_argument(
        "--auth-key", type=Path, help="this node's private key (SuperNode authentication)"
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address of the node's local ClientApp API (default 127.0.0.1)",
    )
    parser.add_argument(
        "--port",
        type=bounded(int, 1, 65535),
        default=9094,
        help="port of the node's local ClientApp API: one per node on a host (default 9094)",
    )
    parser.add_argument(
        "--max-retries",
        type=bounded(int, 0),
        help="reconnection attempts before giving up (default: no limit)",
    )
    parser.add_argument(
        "--max-wait-time",
        type=bounded(float, 0, low_open=True),
        help="seconds to keep trying to reconnect before giving up (default: no limit)",
    )
    parser.add_argument(
        "--flwr-home",
        type=Path,
        help="Flower's state and received apps (default: FOLDER/flower of the site's config)",
    )
    parser.add_argument(
        "--clientapp",
        choices=("warm", "cold"),
        default="warm",
        help="warm (default): each message's ClientApp forked from a process that imported "
        "Flower and the tasks once; cold: Flower's fresh flwr-clientapp per message",
    )
    parser.add_argument(
        "--node-poll-seconds",
        type=float,
        default=NODE_POLL_SECONDS,
        help=f"longest wait between the node's asks for messages (default {NODE_POLL_SECONDS}; "
        "3: Flower's own flower-supernode)",
    )
    parser.add_argument(
        "--node-heartbeat-seconds",
        type=float,
        default=NODE_HEARTBEAT_SECONDS,
        help="heartbeat interval the node declares; the SuperLink takes it for lost after two "
        f"without one (default {NODE_HEARTBEAT_SECONDS:g}, the SuperLink's least; Flower: 30)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="check every file, print the command and exit"
    )


def run(args: argparse.Namespace) -> int:
    """Start the SuperNode (or print its command with ``--dry-run``)."""
    from rvfedprs.federation.flower.processes import flower_env, run_forwarding_signals
    from rvfedprs.study.node import SiteNode, site_node

    node: SiteNode = site_node(
        args.config,
        superlink=args.superlink,
        root_certificates=None if args.insecure else args.root_certificates,
        auth_key=args.auth_key,
        host=args.host,
        port=args.port,
        max_retries=args.max_retries,
        max_wait_time=args.max_wait_time,
        flwr_home=args.flwr_home,
        clientapp=args.clientapp,
        node_poll_seconds=args.node_poll_seconds,
        node_heartbeat_seconds=args.node_heartbeat_seconds,
    )
    if args.dry_run:
        print(node.shell_command())
        return 0
    node.flwr_home.mkdir(parents=True, exist_ok=True)
    return run_forwarding_signals(node.argv, env=flower_env(node.flwr_home))
