"""A SuperLink (and SuperNodes) on 127.0.0.1, with TLS and SuperNode authentication.

:func:`start_local` starts a SuperLink on a free loopback port — in simulation mode after a Ray
head that the simulation joins (or joining an existing Ray cluster), or with one SuperNode per
site, each given its own node configuration (so that it reads only its own site's files). With
a certificates folder the SuperLink serves TLS; with node keys it authenticates SuperNodes,
whose public keys are registered first. Every process is stopped when the block exits.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.flower.processes import (
    FlowerProcesses,
    FlowerRunError,
    console_script,
    flower_env,
    free_port,
    free_ports,
    start_ray_head,
    start_supernode,
    wait_port,
)
from rvfedprs.federation.flower.superlink_launcher import (
    SERVERAPP_PATIENCE_SECONDS,
    superlink_argv,
)
from rvfedprs.federation.flower.supernode import (
    NODE_HEARTBEAT_SECONDS,
    NODE_POLL_SECONDS,
    supernode_argv,
)

__all__ = ["LocalSuperLink", "local_options", "start_local", "write_connection"]


def write_connection(
    flwr_home: str | Path, address: str, *, root_certificates: str | Path | None = None
) -> Path:
    """Write ``FLWR_HOME/config.toml`` with one default SuperLink connection, ``rvfedprs``.

    Insecure (plain HTTP) unless ``root_certificates`` (the CA that signed the SuperLink's
    certificate) is given.
    """
    flwr_home = Path(flwr_home)
    flwr_home.mkdir(parents=True, exist_ok=True)
    security = (
        "insecure = true\n"
        if root_certificates is None
        else f'root-certificates = "{Path(root_certificates).resolve()}"\n'
    )
    path = flwr_home / "config.toml"
    path.write_text(
        f'[superlink]\ndefault = "rvfedprs"\n\n[superlink.rvfedprs]\naddress = "{address}"\n'
        + security
    )
    return path


@dataclass
class LocalSuperLink:
    """A SuperLink (and SuperNodes) started on 127.0.0.1 by :func:`start_local`.

    ``root_certificates`` is the CA that signed the SuperLink's certificate (None: plain HTTP).
    """

    address: str
    processes: FlowerProcesses
    simulation: bool
    root_certificates: Path | None = None

    @property
    def superlink(self) -> subprocess.Popen:
        """The SuperLink's process."""
        return self.processes.procs["superlink"]


def local_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The :func:`start_local` options a configuration's ``flower`` section sets."""
    return {
        "ray_address": settings.get("ray_address"),
        "clientapp": settings.get("clientapp", "warm"),
        "node_poll_seconds": settings.get("node_poll_seconds", NODE_POLL_SECONDS),
        "node_heartbeat_seconds": settings.get("node_heartbeat_seconds", NODE_HEARTBEAT_SECONDS),
        "serverapp_patience_seconds": settings.get(
            "serverapp_patience_seconds", SERVERAPP_PATIENCE_SECONDS
        ),
    }


@contextmanager
def start_local(
    work: str | Path,
    *,
    simulation: bool,
    nodes: Mapping[str, Mapping[str, str]] | None = None,
    certificates: str | Path | None = None,
    node_keys: Mapping[str, str | Path] | None = None,
    ray_address: str | None = None,
    clientapp: str = "cold",
    node_poll_seconds: float | None = NODE_POLL_SECONDS,
    node_heartbeat_seconds: float | None = NODE_HEARTBEAT_SECONDS,
    serverapp_patience_seconds: float | None = SERVERAPP_PATIENCE_SECONDS,
):
    """Start a SuperLink on a free loopback port (and one SuperNode per entry of ``nodes``).

    Parameters
    ----------
    work : str or Path
        Holds ``logs/`` and the private ``home/`` (FLWR_HOME).
    simulation : bool
        Start the SuperLink in simulation mode (no SuperNodes then), after a Ray head with
        fixed ports that the simulation joins
        (:func:`~rvfedprs.federation.flower.processes.start_ray_head`).
    nodes : mapping, optional
        Label → node config (``data-dir``, ``client-id``, ``bloom-key-file``) of each SuperNode.
    certificates : str or Path, optional
        A folder written by ``scripts/make_test_certificates.sh`` (``ca.crt``, ``server.pem``,
        ``server.key``): the SuperLink serves TLS with them and the SuperNodes and ``flwr``
        verify it against ``ca.crt``. None: plain HTTP (``--insecure``).
    node_keys : mapping, optional
        Label → private key (EC, OpenSSH or PEM; the public key beside it as ``<key>.pub``) of
        each SuperNode: the SuperLink then runs with ``--enable-supernode-auth``, every public
        key is registered (``flwr supernode register``) before the SuperNodes start, and each
        SuperNode authenticates with its key. Needs ``certificates``.
    ray_address : str, optional
        Simulation only: the address of a running Ray cluster (``ray start --head`` on a
        cluster, ``flower.ray_address``) that the simulation joins instead of a private local
        head, so many simulated sites can spread over several machines.
    clientapp : {"warm", "cold"}
        How each SuperNode runs its ClientApps
        (:func:`~rvfedprs.federation.flower.processes.start_supernode`): ``warm`` forks each
        message's process from one that imported Flower and the tasks once; ``cold`` (the
        default here; a configuration's ``flower.clientapp`` defaults to ``warm``) is Flower's
        fresh ``flwr-clientapp`` per message.
    node_poll_seconds : float or None
        The longest wait between a SuperNode's asks for messages
        (:mod:`~rvfedprs.federation.flower.supernode`); None: Flower's own 3 s.
    node_heartbeat_seconds : float or None
        The heartbeat interval each SuperNode declares: the SuperLink takes a node for lost
        after two without a heartbeat; None: Flower's own 30 s.
    serverapp_patience_seconds : float or None
        How long the SuperLink waits without a heartbeat from a run's ServerApp before it fails
        the run (:mod:`~rvfedprs.federation.flower.superlink_launcher`); None: Flower's own 60 s.

    Yields
    ------
    LocalSuperLink
        Every process is stopped (by process group) when the block exits, however it exits.
    """
    work = Path(work).resolve()
    tls = _tls_files(certificates)
    node_keys = {label: Path(key).resolve() for label, key in (node_keys or {}).items()}
    if node_keys and tls is None:
        raise ConfigError("SuperNode authentication (node_keys) needs TLS certificates")
    unkeyed = sorted(set(nodes or {}) - set(node_keys)) if node_keys else []
    if unkeyed:
        raise ConfigError(f"SuperNode authentication is on but these nodes have no key: {unkeyed}")
    for label, key in node_keys.items():
        for path in (key, Path(f"{key}.pub")):
            if not path.is_file():
                raise ConfigError(f"node_keys[{label!r}]: {path} not found")
    procs = FlowerProcesses(logs=work / "logs", env=flower_env(work / "home"))
    try:
        if simulation:
            if ray_address is None:
                ray_address, _ = start_ray_head(procs)
            procs.env["RAY_ADDRESS"] = ray_address  # the SuperLink's simulation joins it
        port = free_port()
        address = f"127.0.0.1:{port}"
        security = (
            ["--insecure"]
            if tls is None
            else [
                "--ssl-ca-certfile",
                str(tls["ca.crt"]),
                "--ssl-certfile",
                str(tls["server.pem"]),
                "--ssl-keyfile",
                str(tls["server.key"]),
            ]
        )
        if node_keys:
            security.append("--enable-supernode-auth")
        flower_args = [
            *security,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--isolation",
            "subprocess",
            "--disable-runtime-dependency-installation",
        ]
        if simulation:
            flower_args.append("--simulation")
        superlink = procs.start(
            "superlink", superlink_argv(serverapp_patience_seconds, flower_args)
        )
        procs.vital["superlink"] = "the SuperLink"
        wait_port(port, superlink, "superlink", procs.logs, 120)
        ca = None if tls is None else tls["ca.crt"]
        if node_keys:
            write_connection(work / "home", address, root_certificates=ca)
            for label in nodes or {}:
                _register_node(label, node_keys[label], procs)
        # distinct ports, chosen together: one at a time they can repeat (free_ports)
        node_ports = free_ports(len(nodes or {}))
        for (label, node_config), node_port in zip((nodes or {}).items(), node_ports, strict=True):
            node_security = ["--insecure"] if ca is None else ["--root-certificates", str(ca)]
            if node_keys:
                node_security += ["--auth-supernode-private-key", str(node_keys[label])]
            start_supernode(
                procs,
                label,
                supernode_argv(
                    node_poll_seconds,
                    [
                        *node_security,
                        "--superlink",
                        address,
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(node_port),
                        "--node-config",
                        " ".join(f"{k}={json.dumps(str(v))}" for k, v in node_config.items()),
                    ],
                    node_heartbeat_seconds,
                ),
                port=node_port,
                clientapp=clientapp,
            )
        yield LocalSuperLink(
            address=address, processes=procs, simulation=simulation, root_certificates=ca
        )
    finally:
        procs.stop()


def _tls_files(certificates: str | Path | None) -> dict[str, Path] | None:
    """``ca.crt``, ``server.pem``, ``server.key`` of a certificates folder, checked."""
    if certificates is None:
        return None
    folder = Path(certificates).resolve()
    files = {name: folder / name for name in ("ca.crt", "server.pem", "server.key")}
    missing = [str(p) for p in files.values() if not p.is_file()]
    if missing:
        raise ConfigError(
            f"certificates folder {folder} lacks {missing} (make it with "
            "scripts/make_test_certificates.sh)"
        )
    return files


def _register_node(label: str, key: Path, procs: FlowerProcesses) -> None:
    """``flwr supernode register <key>.pub`` on the SuperLink of ``procs``' FLWR_HOME."""
    argv = [
        console_script("flwr"),
        "supernode",
        "register",
        f"{key}.pub",
        "rvfedprs",
        "--name",
        label,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, env=procs.env, timeout=120)
    procs.logs.mkdir(parents=True, exist_ok=True)
    with open(procs.logs / "register.log", "a") as sink:
        sink.write(" ".join(argv) + "\n" + done.stdout + done.stderr + "\n")
    if done.returncode != 0:
        raise FlowerRunError(
            f"registering the public key of {label} failed with status {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )
