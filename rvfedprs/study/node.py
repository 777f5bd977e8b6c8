"""A site's SuperNode for a consortium study: its command line, every file it reads checked.

:func:`site_node` reads the site's own configuration (``site:``, :func:`~rvfedprs.study.task.
load_site_config`), checks that every file the node will read exists — genotypes (each with
its companions: ``.bim``/``.fam``, ``.pvar``/``.psam``, ...), phenotypes, samples, truth, the
Bloom key, the SuperLink's CA certificate, the node's private key — and builds the
``flower-supernode`` command (``rvfedprs site``), through
:mod:`~rvfedprs.federation.flower.supernode` when the node polls faster than Flower's 3 s.
Flower's state and the apps it receives go to the node's FLWR_HOME, by default
``FOLDER/flower`` under the site's folder. With warm ClientApps (the default) the command is
the warm executor (:mod:`~rvfedprs.federation.flower.warm_clientapp`) starting the SuperNode with
``--isolation process`` and forking each message's ClientApp from its imports, done once.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.flower.processes import CLIENTAPP_MODES, executor_argv
from rvfedprs.federation.flower.supernode import (
    NODE_HEARTBEAT_SECONDS,
    NODE_POLL_SECONDS,
    check_heartbeat,
    supernode_argv,
)
from rvfedprs.genotypes.formats import genotype_files
from rvfedprs.study.task import load_site_config

__all__ = ["SiteNode", "site_node", "site_files"]


@dataclass(frozen=True)
class SiteNode:
    """What ``rvfedprs site`` runs: its argv (the SuperNode's, or the warm executor's) and home."""

    site: str
    argv: list[str]
    flwr_home: Path

    def shell_command(self) -> str:
        """The command as one shell-safe line (``env FLWR_HOME=... flower-supernode ...``)."""
        return shlex.join(["env", f"FLWR_HOME={self.flwr_home}", *self.argv])


def site_files(config: str | Path) -> dict[str, list[str]]:
    """Every file a site's node reads for a study, by the setting that names it.

    Genotype paths expand to their files (a PLINK prefix to ``.bed``/``.bim``/``.fam``).
    """
    inputs, _, key_file = load_site_config(config)
    files = {"site.genotypes": [f for g in inputs.genotypes for f in genotype_files(g)]}
    for setting, path in (
        ("site.phenotypes", inputs.phenotypes),
        ("site.samples", inputs.samples),
        ("site.truth", inputs.truth),
        ("site.bloom_key_file", key_file),
    ):
        if path:
            files[setting] = [path]
    return files


def site_node(
    config: str | Path,
    *,
    superlink: str,
    root_certificates: str | Path | None = None,
    auth_key: str | Path | None = None,
    host: str = "127.0.0.1",
    port: int = 9094,
    max_retries: int | None = None,
    max_wait_time: float | None = None,
    flwr_home: str | Path | None = None,
    clientapp: str = "warm",
    node_poll_seconds: float | None = NODE_POLL_SECONDS,
    node_heartbeat_seconds: float | None = NODE_HEARTBEAT_SECONDS,
) -> SiteNode:
    """The ``flower-supernode`` command of the site configured in ``config``, files checked.

    Parameters
    ----------
    config : str or Path
        The site's own YAML (``site:`` section).
    superlink : str
        The SuperLink's Fleet API, ``host:port``.
    root_certificates : str or Path, optional
        The CA that signed the SuperLink's certificate (TLS); None: plain HTTP (``--insecure``).
    auth_key : str or Path, optional
        The node's private key (SuperNode authentication; needs TLS).
    host, port
        The node's local ClientApp API (``--host``, ``--port``): each node on one machine needs
        its own port.
    max_retries, max_wait_time : optional
        How long the node keeps trying to reach the SuperLink (None: no limit).
    flwr_home : str or Path, optional
        Flower's state and received apps (default ``FOLDER/flower``, the site's folder).
    clientapp : {"warm", "cold"}
        ``warm``: the command is the warm ClientApp executor, which starts the SuperNode (with
        ``--isolation process``) and forks each message's ClientApp from a process that
        imported Flower and the tasks once; ``cold``: ``flower-supernode`` alone, a fresh
        ``flwr-clientapp`` per message.
    node_poll_seconds : float or None
        The longest wait between the node's asks for messages: the SuperNode then runs through
        :mod:`~rvfedprs.federation.flower.supernode`; None or 3 or more: Flower's own
        ``flower-supernode`` (3 s).
    node_heartbeat_seconds : float or None
        The heartbeat interval the node declares (the SuperLink takes it for lost after two
        without one); None: Flower's own 30 s.

    Raises
    ------
    ConfigError
        When the configuration is invalid, or any file the node would read is missing (every
        missing file named with its setting), or the options contradict each other.
    """
    config = Path(config).resolve()
    inputs, folder, _ = load_site_config(config)
    files = site_files(config)
    if root_certificates is not None:
        files["--root-certificates"] = [str(root_certificates)]
    if auth_key is not None:
        if root_certificates is None:
            raise ConfigError("--auth-key (SuperNode authentication) needs --root-certificates")
        files["--auth-key"] = [str(auth_key)]
    missing = [
        f"{setting}: {path}"
        for setting, paths in files.items()
        for path in paths
        if not Path(path).is_file()
    ]
    if missing:
        raise ConfigError(f"site {inputs.site}: files not found: " + "; ".join(missing))
    if not 0 < port < 65536:
        raise ConfigError(f"--port must be in [1, 65535], got {port}")
    if clientapp not in CLIENTAPP_MODES:
        raise ConfigError(f"--clientapp must be one of {CLIENTAPP_MODES}, got {clientapp!r}")
    if node_poll_seconds is not None and not node_poll_seconds > 0:
        raise ConfigError(f"--node-poll-seconds must be > 0 seconds, got {node_poll_seconds!r}")
    if node_heartbeat_seconds is not None:
        try:
            check_heartbeat(node_heartbeat_seconds)
        except ValueError as exc:
            raise ConfigError(f"--node-heartbeat-seconds: {exc}") from exc
    if '"' in str(config) or "\n" in str(config):
        raise ConfigError(f"the site configuration's path cannot hold '\"' or a newline: {config}")
    security = ["--insecure"]
    if root_certificates is not None:
        security = ["--root-certificates", str(Path(root_certificates).resolve())]
    if auth_key is not None:
        security += ["--auth-supernode-private-key", str(Path(auth_key).resolve())]
    retries = [] if max_retries is None else ["--max-retries", str(int(max_retries))]
    if max_wait_time is not None:
        retries += ["--max-wait-time", str(float(max_wait_time))]
    flower_args = [
        *security,
        "--superlink",
        superlink,
        "--host",
        host,
        "--port",
        str(int(port)),
        *retries,
        "--node-config",
        f"site-config={json.dumps(str(config))}",  # a TOML string, as Flower parses it
    ]
    argv = supernode_argv(node_poll_seconds, flower_args, node_heartbeat_seconds)
    if clientapp == "warm":  # the executor reaches the node's Runtime API where it listens
        local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
        address = f"[{local}]:{int(port)}" if ":" in local else f"{local}:{int(port)}"
        argv = [*executor_argv(address), "--", *argv, "--isolation", "process"]
    home = Path(flwr_home).resolve() if flwr_home is not None else folder / "flower"
    return SiteNode(site=inputs.site, argv=argv, flwr_home=home)
