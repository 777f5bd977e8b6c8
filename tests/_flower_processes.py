"""Shared by the Flower engine tests: process checks, the deployment's test certificates and
its site nodes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def processes_using(home: Path) -> list[int]:
    """Pids of live processes whose environment names ``home`` as FLWR_HOME."""
    needle = f"FLWR_HOME={home}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                found.append(int(entry.name))
        except (PermissionError, FileNotFoundError, ProcessLookupError):
            continue
    return found


def make_certificates(certs: Path, sites: Iterable[str]) -> None:
    """``scripts/make_test_certificates.sh``: a CA, the SuperLink's certificate and a key pair
    per site under ``certs/keys/<site>``."""
    args = [a for label in sites for a in ("--site", label)]
    made = subprocess.run(
        ["bash", str(REPO / "scripts" / "make_test_certificates.sh"), str(certs), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr


def site_nodes(
    inputs: Mapping, sites: Iterable[str], sites_dir: Path, node_dir: Path
) -> dict[str, dict[str, str]]:
    """``supernode-<site>`` → the node configuration of each of ``sites``: its own site
    configuration only (``node_dir/<site>/site.yaml``, its outputs under ``sites_dir/<site>``),
    as ``rvfedprs site`` gives a study's node."""
    from rvfedprs.study.run import write_site_config

    return {
        f"supernode-{s}": {
            "site-config": str(
                write_site_config(inputs[s], sites_dir / s, node_dir / s / "site.yaml")
            )
        }
        for s in sites
    }
