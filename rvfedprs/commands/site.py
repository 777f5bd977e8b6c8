"""``rvfedprs site``: start this biobank's SuperNode for a consortium study.

The node reads only this site's configuration (``site:`` section: its files and folder) and
connects to the consortium's SuperLink; the coordinator's job then reaches it. It runs in the
foreground until stopped (Ctrl-C).
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "start this site's Flower SuperNode for a consortium study (its own files only)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs site``."""
    parser.add_argument("--config", type=Path, required=True, help="this site's YAML (site:)")
    parser.add_argument("--superlink", required=True, help="the SuperLink's Fleet API host:port")
    parser.add_argument("--root-certificates", type=Path, help="CA of the SuperLink (TLS)")
    parser.add_argument(
        "--auth-key", type=Path, help="this node's private key (SuperNode authentication)"
    )
    parser.add_argument("--dry-run", action="store_true", help="check the files, print the command")


def supernode_command(args: argparse.Namespace) -> list[str]:
    """The ``flower-supernode`` command line for this site (its configuration checked first)."""
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.federation.flower.processes import console_script
    from rvfedprs.study.task import load_site_config

    inputs, folder, _ = load_site_config(args.config)
    missing = [p for p in (inputs.phenotypes, inputs.samples) if p and not Path(p).is_file()]
    if missing:
        raise ConfigError(f"site {inputs.site}: files not found: {missing}")
    security = ["--insecure"]
    if args.root_certificates is not None:
        security = ["--root-certificates", str(args.root_certificates)]
    if args.auth_key is not None:
        security += ["--auth-supernode-private-key", str(args.auth_key)]
    node_config = f"site-config={str(Path(args.config).resolve())!r}"
    return [
        console_script("flower-supernode"),
        *security,
        "--superlink",
        args.superlink,
        "--node-config",
        node_config,
    ]


def run(args: argparse.Namespace) -> int:
    """Start the SuperNode (or print its command with ``--dry-run``)."""
    import os
    import subprocess

    argv = supernode_command(args)
    if args.dry_run:
        print(" ".join(argv))
        return 0
    env = {**os.environ, "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    return subprocess.call(argv, env=env)
