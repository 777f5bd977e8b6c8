"""Which node is which site: the site ↔ node binding, checked at the setup exchange.

A node says which site it serves (its node configuration). With SuperNode authentication
(``flower-superlink --enable-supernode-auth``) the SuperLink assigns every registered public
key (``flwr supernode register KEY.pub``) a node id and accepts a node's requests only under
the id of the key it signs with; a reply counts only from the node its instruction went to.
The ServerApp sees node ids, never keys. So the consortium's map site → public key
(``flower.node_keys``) becomes site → node id on the launching side (:func:`registered_nodes`
asks the SuperLink's Control API which node holds each key), travels in the job
(``site_nodes``), and :func:`bind_sites` accepts a node's claim to be a site only from the node
of that site's key.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.flower.processes import FlowerRunError
from rvfedprs.federation.rounds import FederationError

__all__ = ["public_key_pem", "list_nodes", "registered_nodes", "bind_sites"]

# Lists the SuperLink's nodes (id, status, public key, declared heartbeat interval, online
# until) through the Control API client of the pinned flwr (``flwr supernode ls --format json``
# leaves the keys and heartbeats out). Run in a child process: flwr reads FLWR_HOME (the
# connection) when its modules are imported.
_LIST_NODES = """
import json, sys
from flwr.cli.flower_config import read_superlink_connection
from flwr.cli.utils import init_http_client_from_connection
from flwr.proto.control_pb2 import ListNodesRequest
client = init_http_client_from_connection(read_superlink_connection(sys.argv[1]))
try:
    nodes = client.ListNodes(ListNodesRequest()).nodes_info
finally:
    client.close()
print(json.dumps([{"node_id": n.node_id, "status": n.status, "public_key": n.public_key.decode(),
                   "heartbeat_interval": n.heartbeat_interval, "online_until": n.online_until}
                  for n in nodes]))
"""


def public_key_pem(path: str | Path) -> bytes:
    """An OpenSSH EC public key file as the SuperLink stores it (PEM SubjectPublicKeyInfo).

    Raises
    ------
    ConfigError
        When the file is missing or holds no EC public key.
    """
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"flower.node_keys: public key file not found: {path}")
    try:
        key = serialization.load_ssh_public_key(path.read_bytes())
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ConfigError(
            f"flower.node_keys: {path} is not an OpenSSH public key ({exc})"
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise ConfigError(f"flower.node_keys: {path} is not an EC key (got {type(key).__name__})")
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def list_nodes(env: Mapping[str, str], connection: str = "rvfedprs") -> list[dict]:
    """What the SuperLink knows of each of its nodes, asked through its Control API.

    Parameters
    ----------
    env : mapping
        The environment of ``flwr`` (its FLWR_HOME holds the ``connection``).
    connection : str
        The connection's name in FLWR_HOME's ``config.toml``.

    Returns
    -------
    list of dict
        One per node: ``node_id``, ``status`` (``online``, ``offline``, ``registered``,
        ``unregistered``), ``public_key`` (PEM; empty without SuperNode authentication),
        ``heartbeat_interval`` (s, as the node declared it) and ``online_until`` (ISO time).

    Raises
    ------
    FlowerRunError
        When the SuperLink cannot be asked.
    """
    argv = [sys.executable, "-c", _LIST_NODES, connection]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=120)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])  # after flwr's own notes
    except (ValueError, IndexError):
        raise FlowerRunError(
            f"could not list the SuperLink's nodes (status {done.returncode}): "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        ) from None


def registered_nodes(
    node_keys: Mapping[str, str | Path], env: Mapping[str, str], connection: str = "rvfedprs"
) -> dict[str, int]:
    """Site → the node id the SuperLink gave its registered public key.

    Parameters
    ----------
    node_keys : mapping
        Site → its node's public key file (``flower.node_keys``).
    env : mapping
        The environment of ``flwr`` (its FLWR_HOME holds the ``connection``).

    Raises
    ------
    ConfigError
        When a key file is unreadable, two sites share a key, or a site's key is not
        registered with the SuperLink (each named).
    FlowerRunError
        When the SuperLink cannot be asked.
    """
    wanted = {site: public_key_pem(path) for site, path in sorted(node_keys.items())}
    shared = sorted(s for s in wanted if list(wanted.values()).count(wanted[s]) > 1)
    if shared:
        raise ConfigError(f"flower.node_keys: sites {shared} share one public key")
    listing = list_nodes(env, connection)
    by_key = {
        node["public_key"].encode(): int(node["node_id"])
        for node in listing
        if node["status"] != "unregistered"
    }
    missing = {site: str(node_keys[site]) for site, pem in wanted.items() if pem not in by_key}
    if missing:
        raise ConfigError(
            f"flower.node_keys: the keys of these sites are not registered with the SuperLink: "
            f"{missing} (register each with `flwr supernode register KEY.pub`)"
        )
    return {site: by_key[pem] for site, pem in wanted.items()}


def bind_sites(claims: Mapping[int, str], site_nodes: Mapping[str, int] | None) -> dict[str, int]:
    """Site → node from the setup replies, each claim checked against the registered keys.

    Parameters
    ----------
    claims : mapping
        Node id → the site its setup reply names.
    site_nodes : mapping, optional
        Site → the node id of its registered key (:func:`registered_nodes`); None: no binding
        (only two nodes claiming one site are refused).

    Raises
    ------
    FederationError
        Naming every refused claim: a node claiming a site whose key is another node's (or a
        site the binding does not list), or two nodes claiming one site.
    """
    refused = []
    if site_nodes is not None:
        key_site = {int(node): site for site, node in site_nodes.items()}
        for node, site in sorted(claims.items()):
            owner = site_nodes.get(site)
            if owner is not None and int(owner) == node:
                continue
            holder = key_site.get(node)
            who = (
                f"node {node} (the registered key of site {holder!r})"
                if holder is not None
                else f"node {node} (a key of no site in flower.node_keys)"
            )
            why = (
                f"site {site!r}, which flower.node_keys does not list"
                if owner is None
                else f"site {site!r}, whose registered key is node {owner}"
            )
            refused.append(f"{who} claims {why}")
    by_site: dict[str, int] = {}
    for node, site in sorted(claims.items()):
        if site in by_site and site_nodes is None:
            refused.append(f"nodes {by_site[site]} and {node} both claim site {site!r}")
        by_site.setdefault(site, node)
    if refused:
        raise FederationError("setup refused: " + "; ".join(refused))
    return by_site
