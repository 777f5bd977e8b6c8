"""The files between the launcher and the ServerApp: the Flower App, the job, the status.

- the **Flower App** is one ``pyproject.toml`` (package data ``app.toml``; the repository's
  ``flower_app/pyproject.toml`` links to it): its components are imported from the installed
  rvfedprs, so the FAB holds that file only;
- the **job** (``job-file`` in the run configuration) is JSON: the task's registered name, the
  validated configuration, the runs (strategy and output folder each), rounds, seed, the fault
  settings and the task's job-level settings; on a SuperLink that authenticates its nodes,
  ``site_nodes`` (site → the node id of its registered key, :func:`bind_site_nodes`);
- the **status** (``<job out>/flower/status.json``) is written by the ServerApp as it goes and
  at the end (``completed`` or ``failed`` with the error): ``flwr run`` itself always exits 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError

__all__ = [
    "APP_PYPROJECT",
    "STATUS_FILE",
    "SERVER_LOG_FILE",
    "write_app",
    "write_job",
    "bind_site_nodes",
    "read_job",
    "write_status",
]

#: ``pyproject.toml`` of the Flower App (package data; ``flower_app/pyproject.toml`` links here).
APP_PYPROJECT = resources.files("rvfedprs.federation.flower").joinpath("app.toml").read_text()

STATUS_FILE = "status.json"
#: Beside the status: the ServerApp's rvfedprs log lines, which the launcher echoes as they come.
SERVER_LOG_FILE = "serverapp.log"


def write_app(folder: str | Path) -> Path:
    """Write the Flower App (its ``pyproject.toml``) into ``folder``; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(APP_PYPROJECT)
    return folder


def write_job(
    path: str | Path,
    *,
    config: Mapping[str, Any],
    rounds: int,
    seed: int,
    out: str | Path,
    expected_clients: int,
    runs: Sequence[Mapping[str, Any]] | None = None,
    strategy: str | None = None,
    task: str = "genomic",
    resume: bool = False,
    min_replies: int | None = None,
    round_timeout: float | None = None,
    reply_poll_seconds: float | None = None,
    node_wait: float = 60.0,
    task_settings: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write the JSON job the ServerApp reads (run config ``job-file``).

    Parameters
    ----------
    config : mapping
        The validated rvfedprs configuration (sections ``train``, ``fedce``, ``model``, ...).
    rounds, seed : int
    out : str or Path
        Where the ServerApp writes ``flower/status.json`` (and the one run's ``checkpoints/``
        when ``strategy`` is given).
    expected_clients : int
        SuperNodes to wait for (up to ``node_wait`` seconds) before the setup step.
    runs : sequence of mapping, optional
        One per strategy run in this job: ``strategy``, ``out`` and the task's options (e.g.
        ``distance``: a client distance matrix).
    strategy : str, optional
        Shorthand for one run of ``strategy`` into ``out``.
    task : str
        A registered task name (:mod:`rvfedprs.tasks`).
    resume : bool
        Continue every run from its latest checkpoint.
    min_replies : int, optional
        Fewest clients a round may aggregate (default: all expected clients).
    round_timeout : float, optional
        Seconds to wait for replies each round (None: until every reply arrives).
    reply_poll_seconds : float, optional
        Seconds between the server's asks for an exchange's replies (None: the transport's
        default, :data:`~rvfedprs.federation.flower.transport.REPLY_POLL_SECONDS`).
    task_settings : mapping, optional
        JSON-serialisable job-level settings of the task, sent with the setup request (the
        imaging task's partition: ``data``, ``client_ids``, ``fold``, ``class_counts``, ...).
    extra : mapping, optional
        More JSON-serialisable entries of the job (a study's ``study`` section).

    Raises
    ------
    ConfigError
        For an unknown task, no runs, ``min_replies`` outside [1, expected_clients], or
        ``reply_poll_seconds`` not > 0.
    """
    from rvfedprs.tasks import TASK_NAMES

    if task not in TASK_NAMES:
        raise ConfigError(f"job task {task!r} unknown; choose from {list(TASK_NAMES)}")
    if runs is None:
        runs = [] if strategy is None else [{"strategy": strategy, "out": str(out)}]
    if not runs:
        raise ConfigError("a job needs at least one run (strategy)")
    job = {
        "task": task,
        "config": json.loads(json.dumps(config)),
        "runs": [
            {**json.loads(json.dumps(dict(r))), "out": str(Path(r["out"]).resolve())} for r in runs
        ],
        "rounds": int(rounds),
        "seed": int(seed),
        "out": str(Path(out).resolve()),
        "expected_clients": int(expected_clients),
        "resume": bool(resume),
        "min_replies": int(expected_clients if min_replies is None else min_replies),
        "round_timeout": None if round_timeout is None else float(round_timeout),
        "reply_poll_seconds": None if reply_poll_seconds is None else float(reply_poll_seconds),
        "node_wait": float(node_wait),
        "task_settings": json.loads(json.dumps(dict(task_settings or {}))),
        **json.loads(json.dumps(dict(extra or {}))),
    }
    if not 1 <= job["min_replies"] <= job["expected_clients"]:
        raise ConfigError(
            f"min_replies must be in [1, {expected_clients}] (the number of clients), "
            f"got {min_replies}"
        )
    if reply_poll_seconds is not None and not job["reply_poll_seconds"] > 0:
        raise ConfigError(f"reply_poll_seconds must be > 0 seconds, got {reply_poll_seconds!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job, indent=2))
    return path


def bind_site_nodes(path: str | Path, site_nodes: Mapping[str, int]) -> Path:
    """Add ``site_nodes`` (site → node id of its registered key) to the job at ``path``.

    The ServerApp then accepts a node's claim to be a site only from that node
    (:func:`~rvfedprs.federation.flower.identity.bind_sites`).
    """
    path = Path(path)
    job = read_job(path)
    job["site_nodes"] = {str(site): int(node) for site, node in site_nodes.items()}
    path.write_text(json.dumps(job, indent=2))
    return path


def read_job(path: str | Path) -> dict[str, Any]:
    """The job written by :func:`write_job`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"run config job-file: {path} not found")
    return json.loads(path.read_text())


def write_status(out: str | Path, status: str, **fields: Any) -> Path:
    """Write ``OUT/flower/status.json`` atomically: ``{"status": ..., **fields}``."""
    folder = Path(out) / "flower"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / STATUS_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"status": status, "time": time.time(), **fields}, indent=2))
    tmp.replace(path)
    return path
