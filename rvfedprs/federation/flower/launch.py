"""Starting, watching and stopping the Flower processes of a run (loopback only).

``flower-sim``: a Ray head (``ray start --head`` with every port fixed, see :func:`start_local`),
a SuperLink in simulation mode (``flower-superlink --simulation``) whose simulation joins that Ray
cluster (``RAY_ADDRESS``), and ``flwr run APP <connection> --federation-config
num-supernodes=N``; the simulation engine runs the ClientApps on Ray. ``flower-deploy``: a
SuperLink and one ``flower-supernode`` per client, each with ``--node-config "data-dir='…'
client-id='…'"`` so that it reads only its own client's folder; then ``flwr run``. Both bind to
127.0.0.1 on free ports, use a private ``FLWR_HOME`` under ``OUT/flower/``, install nothing at
run time (``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1``), and log every process to
``OUT/flower/logs/``.

``flwr run`` returns as soon as the run is submitted (exit 0 even if the run later fails), so
success is read from ``OUT/flower/status.json``, which the ServerApp writes; the launcher also
watches the SuperLink process and a deadline. Every process started here is stopped by its
process-group id when the run ends, however it ends; their ids are listed in
``OUT/flower/logs/processes.json``.

With ``flower.superlink`` set (a real deployment), ``flower-deploy`` starts nothing: it submits
the run to that SuperLink (TLS with ``flower.root_certificates``) and waits for the status file,
which the ServerApp must be able to write (run the command on the SuperLink's machine or share
``OUT``).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError, RvfedprsError

__all__ = [
    "FlowerRunError",
    "FlowerProcesses",
    "LocalSuperLink",
    "APP_PYPROJECT",
    "start_local",
    "client_nodes",
    "write_connection",
    "write_app",
    "write_job",
    "run_flower",
    "run_flower_imaging",
    "ImagingRun",
    "imaging_session",
    "imaging_nodes",
    "free_port",
]

log = logging.getLogger(__name__)

#: ``pyproject.toml`` of the Flower App: components come from the installed rvfedprs package,
#: so the FAB holds this file only. ``flower_app/pyproject.toml`` in the repository is the same.
APP_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "rvfedprs-app"
version = "0.1.0"
description = "RV-FedPRS / FedCE on Flower: the ServerApp and ClientApp of the installed rvfedprs"
license = "MIT"
dependencies = ["flwr==1.41.0", "rvfedprs"]

[tool.flwr.app]
publisher = "rvfedprs"

[tool.flwr.app.components]
serverapp = "rvfedprs.federation.flower.server_app:app"
clientapp = "rvfedprs.federation.flower.client_app:app"

[tool.flwr.app.config]
# JSON job written by `rvfedprs train --engine flower-*` (rvfedprs.federation.flower.launch).
job-file = ""
# Simulation only: the per-client inputs folder; node partition-id i is the i-th client.
data-dir = ""
# Simulation only: the clients' shared Bloom HMAC secret (in a deployment: node config).
bloom-key-file = ""
"""


#: What a job trains (``job["task"]``): the ServerApp and ClientApp dispatch on it.
TASKS = ("genomic", "imaging")

#: Written beside the logs: label → pid of every process a launcher started (for operators
#: and tests; each is stopped by its process group when the run ends).
PROCESSES_FILE = "processes.json"


class FlowerRunError(RvfedprsError):
    """A Flower run failed: the message says why and where the logs are."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    strategy: str,
    rounds: int,
    seed: int,
    out: str | Path,
    n_rare: int,
    expected_clients: int,
    resume: bool = False,
    min_replies: int | None = None,
    round_timeout: float | None = None,
    node_wait: float = 60.0,
    task: str = "genomic",
    task_settings: Mapping[str, Any] | None = None,
) -> Path:
    """Write the JSON job the ServerApp reads (run config ``job-file``).

    Parameters
    ----------
    config : mapping
        The validated rvfedprs configuration (sections ``train``, ``fedce``, ``model``, ...).
    strategy : str
    rounds, seed : int
    out : str or Path
        Where the ServerApp writes ``checkpoints/`` and ``flower/status.json``.
    n_rare : int
        Number of rare-variant columns (the model's input width).
    expected_clients : int
        SuperNodes to wait for (up to ``node_wait`` seconds) before the setup step.
    resume : bool
        Continue from the latest checkpoint in ``out``.
    min_replies : int, optional
        Fewest clients a round may aggregate (default: all expected clients).
    round_timeout : float, optional
        Seconds to wait for replies each round (None: until every reply arrives).
    task : {"genomic", "imaging"}
        What the clients train: the PRS model on their per-client folders, or the imaging
        CNN on their share of a MedMNIST file (:func:`run_flower_imaging`).
    task_settings : mapping, optional
        JSON-serialisable settings of the task (imaging: ``data``, ``client_ids``, ``fold``,
        ``class_counts``, ``model``, ``distance``).
    """
    if task not in TASKS:
        raise ConfigError(f"job task {task!r} unknown; choose from {list(TASKS)}")
    job = {
        "task": task,
        "config": json.loads(json.dumps(config)),
        "strategy": strategy,
        "rounds": int(rounds),
        "seed": int(seed),
        "out": str(Path(out).resolve()),
        "n_rare": int(n_rare),
        "expected_clients": int(expected_clients),
        "resume": bool(resume),
        "min_replies": int(expected_clients if min_replies is None else min_replies),
        "round_timeout": None if round_timeout is None else float(round_timeout),
        "node_wait": float(node_wait),
    }
    if task_settings is not None:
        job["task_settings"] = json.loads(json.dumps(task_settings))
    if not 1 <= job["min_replies"] <= job["expected_clients"]:
        raise ConfigError(
            f"min_replies must be in [1, {expected_clients}] (the number of clients), "
            f"got {min_replies}"
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(job, indent=2))
    return path


def _env(flwr_home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "FLWR_HOME": str(flwr_home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def _bin(name: str) -> str:
    """The console script ``name`` next to this interpreter (else on PATH)."""
    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else name


@dataclass
class FlowerProcesses:
    """The processes a launcher started; :meth:`stop` ends each by its process group."""

    logs: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    #: Folders removed after the processes are stopped (the Ray head's temporary files).
    cleanup: list[Path] = field(default_factory=list)

    def start(self, label: str, argv: Sequence[str]) -> subprocess.Popen:
        """Start ``argv`` in its own session, output to ``logs/<label>.log``."""
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{label}.log", "ab") as sink:
            proc = subprocess.Popen(
                list(argv),
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        self.procs[label] = proc
        log.info("started %s (pid %d): %s", label, proc.pid, " ".join(argv))
        (self.logs / PROCESSES_FILE).write_text(json.dumps(self.pids(), indent=2))
        return proc

    def pids(self) -> dict[str, int]:
        """Label → pid of every process started."""
        return {label: p.pid for label, p in self.procs.items()}

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM each process group, SIGKILL what is left after ``grace`` seconds."""
        for proc in self.procs.values():
            if proc.poll() is None:
                _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            # The group may hold children (flwr-serverapp, flwr-clientapp) even after the
            # leader exited: kill the whole group by the leader's id.
            _signal_group(proc.pid, signal.SIGKILL)
            if proc.poll() is None:
                proc.wait(timeout=5)
        # Some descendants leave the group (the simulation backend's daemons start their own
        # sessions); each carries this run's private FLWR_HOME in its environment: end those
        # by pid too.
        home = self.env.get("FLWR_HOME")
        if home:
            for pid in _pids_with_env(f"FLWR_HOME={home}"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        for folder in self.cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def _pids_with_env(entry: str) -> list[int]:
    """Pids of this user's processes whose environment holds ``entry`` (``NAME=value``)."""
    needle = entry.encode()
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for folder in proc.iterdir():
        if not folder.name.isdigit() or int(folder.name) == os.getpid():
            continue
        try:
            if needle in (folder / "environ").read_bytes().split(b"\0"):
                found.append(int(folder.name))
        except OSError:
            continue
    return found


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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


def _start_ray(
    procs: FlowerProcesses, timeout: float = 180.0, attempts: int = 3
) -> tuple[str, Path]:
    """Start a local Ray head with every port fixed; returns (GCS address, its temp dir).

    Flower's simulation otherwise starts Ray itself (``ray.init()``) with the dashboard agent's
    ports left to the agent, and the raylet then waits a hard-coded 15 s for the agent to write
    its port files; on a loaded machine the agent (a Python process importing its modules) takes
    longer and the raylet aborts ("Timed out waiting for file .../metrics_agent_port_<node>",
    ray-project/ray#65983): the simulation dies before the first message. With the ports given
    on the command line the raylet waits for no file. ``ray start`` has one more hard-coded
    limit (30 s for the raylet to register with the GCS, ``ray/_private/node.py``) that a
    heavily loaded machine can exceed: it then exits non-zero and is tried again, up to
    ``attempts`` times (labels ``ray``, ``ray-2``, ...). The Ray files go to a private temporary
    folder (not ``/tmp/ray``, so that ``ray_current_cluster`` never points other Ray users at
    this cluster); it is removed when the processes stop.
    """
    for attempt in range(1, attempts + 1):
        ports = [free_port() for _ in range(5)]
        temp = Path(tempfile.mkdtemp(prefix="rvfray-", dir="/tmp"))  # short: socket paths <108
        procs.cleanup.append(temp)
        argv = [
            _bin("ray"),
            "start",
            "--head",
            "--block",
            "--disable-usage-stats",
            "--include-dashboard=false",
            "--node-ip-address=127.0.0.1",
            f"--port={ports[0]}",
            f"--metrics-export-port={ports[1]}",
            f"--dashboard-agent-grpc-port={ports[2]}",
            f"--dashboard-agent-listen-port={ports[3]}",
            f"--runtime-env-agent-port={ports[4]}",
            f"--temp-dir={temp}",
        ]
        label = "ray" if attempt == 1 else f"ray-{attempt}"
        proc = procs.start(label, argv)
        log_file = procs.logs / f"{label}.log"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if "Ray runtime started" in log_file.read_text(errors="replace"):
                return f"127.0.0.1:{ports[0]}", temp
            time.sleep(0.2)
        if proc.poll() is None:
            raise FlowerRunError(
                f"the Ray head did not start within {timeout:.0f} s; see {log_file}"
            )
        _signal_group(proc.pid, signal.SIGKILL)  # what the failed start left behind
        log.warning("ray start failed (attempt %d of %d); see %s", attempt, attempts, log_file)
    raise FlowerRunError(
        f"ray start failed {attempts} times (last status {proc.returncode}; Ray's startup "
        f"limits are fixed, a heavily loaded machine can exceed them); see {log_file}"
    )


@contextmanager
def start_local(
    work: str | Path,
    *,
    simulation: bool,
    nodes: Mapping[str, Mapping[str, str]] | None = None,
    certificates: str | Path | None = None,
    node_keys: Mapping[str, str | Path] | None = None,
):
    """Start a SuperLink on a free loopback port (and one SuperNode per entry of ``nodes``).

    Parameters
    ----------
    work : str or Path
        Holds ``logs/`` and the private ``home/`` (FLWR_HOME).
    simulation : bool
        Start the SuperLink in simulation mode (no SuperNodes then), after a Ray head with
        fixed ports that the simulation joins (see :func:`_start_ray`).
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
    procs = FlowerProcesses(logs=work / "logs", env=_env(work / "home"))
    try:
        if simulation:
            ray_address, _ = _start_ray(procs)
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
        argv = [
            _bin("flower-superlink"),
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
            argv.append("--simulation")
        superlink = procs.start("superlink", argv)
        _wait_port(port, superlink, "superlink", procs.logs, 120)
        ca = None if tls is None else tls["ca.crt"]
        if node_keys:
            write_connection(work / "home", address, root_certificates=ca)
            for label in nodes or {}:
                _register_node(label, node_keys[label], procs)
        for label, node_config in (nodes or {}).items():
            node_security = ["--insecure"] if ca is None else ["--root-certificates", str(ca)]
            if node_keys:
                node_security += ["--auth-supernode-private-key", str(node_keys[label])]
            procs.start(
                label,
                [
                    _bin("flower-supernode"),
                    *node_security,
                    "--superlink",
                    address,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(free_port()),
                    "--node-config",
                    " ".join(f"{k}={json.dumps(str(v))}" for k, v in node_config.items()),
                ],
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
    argv = [_bin("flwr"), "supernode", "register", f"{key}.pub", "rvfedprs", "--name", label]
    done = subprocess.run(argv, capture_output=True, text=True, env=procs.env, timeout=120)
    procs.logs.mkdir(parents=True, exist_ok=True)
    with open(procs.logs / "register.log", "a") as sink:
        sink.write(" ".join(argv) + "\n" + done.stdout + done.stderr + "\n")
    if done.returncode != 0:
        raise FlowerRunError(
            f"registering the public key of {label} failed with status {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )


def client_nodes(
    data_dir: str | Path, clients: Sequence[str], *, bloom_key_file: str | None = None
) -> dict[str, dict[str, str]]:
    """One SuperNode per client: label ``supernode-<client>`` → its node config."""
    nodes = {}
    for client in clients:
        config = {"data-dir": str(Path(data_dir).resolve()), "client-id": client}
        if bloom_key_file:
            config["bloom-key-file"] = str(Path(bloom_key_file).resolve())
        nodes[f"supernode-{client}"] = config
    return nodes


def _wait_port(port: int, proc: subprocess.Popen, label: str, logs: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise FlowerRunError(
                f"{label} exited with status {proc.returncode} while starting; "
                f"see {logs / (label + '.log')}"
            )
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise FlowerRunError(f"{label} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def _submit(
    app: Path, env: Mapping[str, str], logs: Path, run_config: Mapping[str, str], extra: list[str]
) -> str | None:
    overrides = " ".join(f"{k}={json.dumps(str(v))}" for k, v in run_config.items())
    argv = [_bin("flwr"), "run", str(app), "rvfedprs", "--run-config", overrides, *extra]
    argv += ["--format", "json"]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=300)
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "flwr-run.log").write_text(" ".join(argv) + "\n" + done.stdout + done.stderr)
    if done.returncode != 0:
        raise FlowerRunError(
            f"flwr run failed with status {done.returncode}: "
            f"{(done.stderr or done.stdout).strip()[-800:]}"
        )
    try:
        reply = json.loads(done.stdout[done.stdout.index("{") :])
    except ValueError:
        raise FlowerRunError(f"flwr run printed no run id: {done.stdout.strip()[-800:]}") from None
    if not reply.get("success"):
        raise FlowerRunError(f"flwr run did not start the run: {reply}")
    return reply.get("run-id")


def _run_state(run_id: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """(status, details) of ``run_id`` as the SuperLink reports it (``flwr ls``).

    ("", "") when the SuperLink cannot be asked.
    """
    if not run_id:
        return "", ""
    argv = [_bin("flwr"), "ls", "rvfedprs", "--run-id", str(run_id), "--format", "json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=60)
        runs = json.loads(done.stdout[done.stdout.index("{") :]).get("runs", [])
    except (ValueError, OSError, subprocess.TimeoutExpired):
        return "", ""
    if not runs:
        return "", ""
    return str(runs[0].get("status", "")), str(runs[0].get("status-details", ""))


def _wait_status(
    status_path: Path,
    superlink: subprocess.Popen | None,
    logs: Path,
    timeout: float,
    *,
    run_id: str | None = None,
    env: Mapping[str, str] | None = None,
    poll_run: float = 10.0,
) -> dict:
    deadline = time.monotonic() + timeout
    next_poll = time.monotonic() + poll_run
    while time.monotonic() < deadline:
        if status_path.is_file():
            status = json.loads(status_path.read_text())
            if status["status"] in ("completed", "failed"):
                return status
        if run_id and env is not None and time.monotonic() >= next_poll:
            # The ServerApp cannot write a status when the runtime around it dies (the
            # simulation backend failing, a killed process): ask the SuperLink.
            next_poll = time.monotonic() + poll_run
            state, details = _run_state(run_id, env)
            if state.startswith("finished"):  # yet no final status from the ServerApp
                time.sleep(1.0)  # a status written just now still wins
                if status_path.is_file():
                    status = json.loads(status_path.read_text())
                    if status["status"] in ("completed", "failed"):
                        return status
                return {"status": "failed", "error": f"Flower reports the run {state}: {details}"}
        if superlink is not None and superlink.poll() is not None:
            raise FlowerRunError(
                f"the SuperLink exited with status {superlink.returncode} during the run; "
                f"see {logs / 'superlink.log'}"
            )
        time.sleep(0.25)
    raise FlowerRunError(
        f"the run did not finish within {timeout:.0f} s (no final status in {status_path}); "
        f"see the logs in {logs}"
    )


def run_flower(
    engine: str,
    *,
    federation,
    strategy,
    config: Mapping[str, Any],
    rounds: int,
    random_seed: int,
    out: str | Path,
    resume: bool = False,
    bloom_key_file: str | None = None,
    evaluate_round: Callable[[Any], Mapping[str, Any]] | None = None,
    min_replies: int | None = None,
    round_timeout: float | None = None,
    timeout: float | None = None,
    superlink: LocalSuperLink | None = None,
    expected_nodes: int | None = None,
    client_state: dict[str, dict[str, Any]] | None = None,
):
    """Run ``strategy`` over ``federation`` on Flower and return what the in-process engine does.

    Parameters
    ----------
    engine : {"flower-sim", "flower-deploy"}
    federation : Federation
        Used for its folder, client ids and width only: every client process reads its own
        client folder itself.
    strategy : Strategy
        A fresh strategy of the configured name; restored from the final checkpoint on return.
    config : mapping
        The validated configuration (``train.strategy`` names the strategy). Its ``flower``
        section gives the defaults of ``min_replies``, ``round_timeout``, ``timeout``, the
        SuperNode wait and, for ``flower-deploy``, a running SuperLink to submit to
        (``superlink``, ``root_certificates``) instead of starting one on 127.0.0.1.
    rounds, random_seed : int
    out : str or Path
        Output folder: ``checkpoints/``, ``flower/`` (job, app, logs, status).
    resume : bool
        Continue from the latest checkpoint in ``out``.
    bloom_key_file : str, optional
        The clients' shared Bloom HMAC secret (given to each client process, never the server).
    evaluate_round : callable, optional
        Applied after the run to the strategy restored from each round's checkpoint; merged
        into the history like the in-process engine's callback.
    min_replies : int, optional
        Fewest clients a round may aggregate (default: ``flower.min_replies``, else all).
    round_timeout : float, optional
        Seconds to wait for a round's replies (default: ``flower.round_timeout``, else no
        limit).
    timeout : float, optional
        Limit for the whole run (default: ``flower.timeout``, else 3600).
    superlink : LocalSuperLink, optional
        Submit to this running SuperLink (from :func:`start_local`; simulation mode for
        ``flower-sim``) instead of starting and stopping one (with SuperNodes) for this run.
    expected_nodes : int, optional
        SuperNodes to wait for before the setup step (default: one per client).
    client_state : dict, optional
        As for :func:`~rvfedprs.federation.inprocess.run_inprocess`: on return each client's
        dict is refilled in place with the state the server last received from that client
        (with ``dp.enabled``: its :class:`~rvfedprs.training.dp.DPState`, so ``epsilon()`` is the
        cumulative ε it spent). The clients' own state lives on their nodes; this is a copy.

    Returns
    -------
    RunResult

    Raises
    ------
    FlowerRunError
        When a process fails to start, the run fails (the ServerApp's error is quoted), or the
        deadline passes. Every process started here is stopped before this returns or raises.
    """
    simulation = _flower_engine(engine, superlink)
    if strategy.pooled:
        raise ConfigError(
            f"strategy {strategy.name!r} pools every client's data and cannot run on Flower; "
            "use --engine inprocess"
        )
    settings = dict(config.get("flower") or {})
    min_replies, round_timeout, timeout, remote = _run_limits(
        settings, simulation, superlink, min_replies, round_timeout, timeout
    )
    out, work = _work_folder(out)
    clients = federation.client_ids
    job = write_job(
        work / "job.json",
        config=config,
        strategy=config["train"]["strategy"],
        rounds=rounds,
        seed=random_seed,
        out=out,
        n_rare=federation.n_rare,
        expected_clients=len(clients) if expected_nodes is None else expected_nodes,
        resume=resume,
        min_replies=min_replies,
        round_timeout=round_timeout,
        node_wait=float(settings.get("node_wait") or 60.0),
    )
    data_dir = str(Path(federation.data_dir).resolve())
    key_file = str(Path(bloom_key_file).resolve()) if bloom_key_file else ""
    run_config = {"job-file": str(job), "data-dir": data_dir, "bloom-key-file": key_file}
    nodes = None if simulation else client_nodes(data_dir, clients, bloom_key_file=key_file)
    status = _launch(
        simulation,
        work,
        run_config,
        n_clients=len(clients),
        nodes=nodes,
        superlink=superlink,
        remote=remote,
        settings=settings,
        timeout=timeout,
    )
    for who, why in status.get("setup_failures", {}).items():
        log.warning("%s was left out of the run: %s", who, why)
    result = _collect(out, strategy, rounds, random_seed, evaluate_round, client_state)
    keep = config["train"].get("keep_checkpoints")
    if keep:  # the server keeps every round's for the evaluation above; prune now
        from rvfedprs.federation.rounds import prune_checkpoints

        prune_checkpoints(out / "checkpoints", keep)
        result.checkpoints = [p for p in result.checkpoints if p.exists()]
    return result


def _launch(
    simulation: bool,
    work: Path,
    run_config: Mapping[str, str],
    *,
    n_clients: int,
    nodes: Mapping[str, Mapping[str, str]] | None,
    superlink: LocalSuperLink | None,
    remote: str | None,
    settings: Mapping[str, Any],
    timeout: float,
) -> dict:
    """Submit the job of ``run_config`` and wait for its final status (raises unless completed).

    To ``superlink`` when given, else to the ``remote`` SuperLink, else to a SuperLink (with
    ``nodes`` for a deployment) started here and stopped when the run ends.
    """
    app = write_app(work / "app")
    status_path = work / "status.json"
    extra = ["--federation-config", f"num-supernodes={n_clients}"] if simulation else []

    def submit_and_wait(address: str, process, logs: Path, certificates=None) -> dict:
        home = work / "home"
        write_connection(home, address, root_certificates=certificates)
        env = _env(home)
        run_id = _submit(app, env, work / "logs", run_config, extra)
        return _wait_status(status_path, process, logs, timeout, run_id=run_id, env=env)

    if superlink is not None:
        status = submit_and_wait(
            superlink.address,
            superlink.superlink,
            superlink.processes.logs,
            superlink.root_certificates,
        )
    elif remote:
        certificates = settings.get("root_certificates")
        if certificates and not Path(certificates).is_file():
            raise ConfigError(f"flower.root_certificates: {certificates} not found")
        status = submit_and_wait(remote, None, work / "logs", certificates)
    else:
        with start_local(work, simulation=simulation, nodes=nodes) as link:
            status = submit_and_wait(link.address, link.superlink, link.processes.logs)
    if status["status"] != "completed":
        raise FlowerRunError(
            f"the Flower run failed: {status.get('error', 'no reason recorded')} "
            f"(logs in {work / 'logs'})"
        )
    return status


def _collect(
    out: Path,
    strategy,
    rounds: int,
    random_seed: int,
    evaluate_round,
    client_state=None,
    *,
    with_round: bool = False,
):
    """The RunResult of a finished run, from its checkpoints.

    ``evaluate_round`` is called as ``f(strategy)``, or ``f(strategy, round)`` with
    ``with_round`` (the imaging engine's callback).
    """
    from rvfedprs.federation.inprocess import RunResult, load_checkpoint
    from rvfedprs.federation.rounds import decode_client_state

    # Every round's checkpoint, except those pruned by a previous run this one resumed
    # (train.keep_checkpoints): their history entries keep what was recorded then.
    checkpoints = [out / "checkpoints" / f"round_{r:03d}.pt" for r in range(1, rounds + 1)]
    if not checkpoints[-1].is_file():
        raise FlowerRunError(
            f"the Flower run completed but its final checkpoint is missing: {checkpoints[-1]}"
        )
    checkpoints = [p for p in checkpoints if p.is_file()]
    final = load_checkpoint(checkpoints[-1])
    history = list(final.get("history", []))
    if evaluate_round is not None:
        by_round = {int(p.stem.split("_")[1]): p for p in checkpoints}
        for entry in history:
            path = by_round.get(int(entry["round"]))
            if path is None:
                continue
            at_round = copy.deepcopy(strategy)
            at_round.load_state_dict(load_checkpoint(path)["strategy_state"])
            if with_round:
                entry.update(evaluate_round(at_round, int(entry["round"])))
            else:
                entry.update(evaluate_round(at_round))
    strategy.load_state_dict(final["strategy_state"])
    if client_state is not None:
        for client, state in decode_client_state(final.get("client_state", {})).items():
            target = client_state.setdefault(client, {})
            target.clear()
            target.update(state)
    return RunResult(
        strategy=strategy, history=history, seed=int(random_seed), checkpoints=checkpoints
    )


def imaging_nodes(data_file: str | Path, client_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """One SuperNode per imaging client: label ``supernode-<client>`` → its node config.

    The node config names the site's MedMNIST file (``data-file``) and its client
    (``client-id``); the partition settings come with the run (every node rebuilds only its own
    client's split, see :func:`~rvfedprs.federation.flower.client_app.load_imaging_client`).
    """
    data_file = str(Path(data_file).resolve())
    return {f"supernode-{c}": {"data-file": data_file, "client-id": c} for c in client_ids}


def _flower_engine(engine: str, superlink: LocalSuperLink | None) -> bool:
    """True for ``flower-sim``; raises ConfigError for a non-Flower engine or a wrong link."""
    if engine not in ("flower-sim", "flower-deploy"):
        raise ConfigError(f"engine {engine!r} is not a Flower engine (flower-sim, flower-deploy)")
    simulation = engine == "flower-sim"
    if superlink is not None and superlink.simulation != simulation:
        raise ConfigError(f"engine {engine!r} needs a SuperLink with simulation={simulation}")
    return simulation


def _run_limits(
    settings: Mapping[str, Any],
    simulation: bool,
    superlink: LocalSuperLink | None,
    min_replies: int | None,
    round_timeout: float | None,
    timeout: float | None,
) -> tuple[int | None, float | None, float, str | None]:
    """Limits of a Flower run and the remote SuperLink address (or None).

    ``min_replies``, ``round_timeout`` and ``timeout`` given as arguments win over the
    ``flower`` section ``settings``; a remote SuperLink with flower-sim is a ConfigError.
    """
    min_replies = settings.get("min_replies") if min_replies is None else min_replies
    round_timeout = settings.get("round_timeout") if round_timeout is None else round_timeout
    timeout = float(settings.get("timeout") or 3600.0) if timeout is None else float(timeout)
    remote = settings.get("superlink") if superlink is None else None
    if remote and simulation:
        raise ConfigError(
            f"flower.superlink ({remote!r}) applies to engine flower-deploy only; "
            "flower-sim always runs on a SuperLink it starts itself"
        )
    return min_replies, round_timeout, timeout, remote


def _work_folder(out: str | Path) -> tuple[Path, Path]:
    """``out`` resolved and its ``flower/`` work folder, created, without a stale status."""
    out = Path(out).resolve()
    work = out / "flower"
    work.mkdir(parents=True, exist_ok=True)
    (work / "status.json").unlink(missing_ok=True)
    return out, work


@contextmanager
def imaging_session(
    engine: str,
    work: str | Path,
    *,
    data_file: str | Path,
    client_ids: Sequence[str],
    flower: Mapping[str, Any] | None = None,
    certificates: str | Path | None = None,
    node_keys: Mapping[str, str | Path] | None = None,
):
    """The Flower processes of an imaging benchmark, started once for all its runs.

    ``flower-sim``: a Ray head and a simulation SuperLink; ``flower-deploy``: a SuperLink and
    one SuperNode per client (:func:`imaging_nodes`), TLS and SuperNode authentication with
    ``certificates`` and ``node_keys`` as in :func:`start_local`. With ``flower.superlink``
    set (``flower-deploy`` only) nothing is started and None is yielded: every run is submitted
    to that SuperLink.

    Yields
    ------
    LocalSuperLink or None
        Every process is stopped when the block exits, however it exits.
    """
    simulation = _flower_engine(engine, None)
    remote = (flower or {}).get("superlink")
    if remote and simulation:
        raise ConfigError(
            f"flower.superlink ({remote!r}) applies to engine flower-deploy only; "
            "flower-sim always runs on a SuperLink it starts itself"
        )
    if remote:
        yield None
        return
    nodes = None if simulation else imaging_nodes(data_file, client_ids)
    with start_local(
        work, simulation=simulation, nodes=nodes, certificates=certificates, node_keys=node_keys
    ) as link:
        yield link


@dataclass
class ImagingRun:
    """One strategy of an imaging Flower run (:func:`run_flower_imaging`).

    Attributes
    ----------
    name : str
        The strategy's registry name (the ServerApp builds its own copy).
    strategy : Strategy
        A fresh strategy ``name``; restored from the run's final checkpoint on return.
    distance : mapping, optional
        ``distance`` (K, K) and ``distance_clients`` of ``fedavg_w`` / ``cluster_fedavg``
        (:func:`rvfedprs.imaging.benchmark.strategy_distance`, computed by the caller).
    evaluate_round : callable, optional
        ``f(strategy, round)`` on the strategy restored from each round's checkpoint; merged
        into the history, as the in-process engine's callback.
    """

    name: str
    strategy: Any
    distance: Mapping[str, Any] | None = None
    evaluate_round: Callable[[Any, int], Mapping[str, Any]] | None = None


def run_flower_imaging(
    engine: str,
    *,
    clients: Mapping[str, Any],
    runs: Sequence[ImagingRun],
    section: Mapping[str, Any],
    data_file: str | Path,
    rounds: int,
    random_seed: int,
    out: str | Path,
    fold: int | None = None,
    class_counts: Any = None,
    flower: Mapping[str, Any] | None = None,
    superlink: LocalSuperLink | None = None,
    min_replies: int | None = None,
    round_timeout: float | None = None,
    timeout: float | None = None,
    expected_nodes: int | None = None,
) -> list:
    """Run imaging strategies on Flower, one after another in one Flower run.

    The job's ``task`` is ``imaging``: the ServerApp builds each strategy with the imaging
    section's options (:func:`rvfedprs.imaging.benchmark.strategy_for`) and every ClientApp
    trains its own client with :func:`~rvfedprs.imaging.client.fit_imaging_client`, rebuilding
    its split from ``data_file`` and the partition settings. Seeds as in-process (w^0 from
    ``derive_seed(seed, 0)``, client ``c`` in round ``t`` from ``derive_seed(seed, t, c)``), so
    each result equals :func:`~rvfedprs.imaging.engine.run_imaging`'s for the same seed. One
    Flower run for all strategies saves Flower's per-run start (server and client processes).

    Parameters
    ----------
    engine : {"flower-sim", "flower-deploy"}
    clients : mapping of id to ImagingClient
        This process's copy of the federation: its ids and CNN shape (and the evaluation).
    runs : sequence of ImagingRun
        The strategies, run in this order.
    section : mapping
        The validated ``imaging`` section.
    data_file : str or Path
        The MedMNIST file (simulation: read by every client; deployment: each SuperNode's node
        config names its own copy, ``data-file``).
    rounds, random_seed : int
    out : str or Path
        ``flower/`` (job, status, logs) and, per strategy, ``<name>/checkpoints/`` (the last
        round's is kept).
    fold : int, optional
        The CV fold (``imaging.cv_folds``).
    class_counts : array of int, shape (K, C), optional
        A fixed partition instead of the Dirichlet draw.
    flower : mapping, optional
        The ``flower`` configuration section (defaults of the keyword options below; for
        ``flower-deploy`` a running ``superlink`` to submit to). Its ``timeout`` limits the
        whole Flower run (every strategy).
    superlink : LocalSuperLink, optional
        Submit to this running SuperLink (:func:`imaging_session`) instead of starting one.
    min_replies, round_timeout, timeout, expected_nodes
        As for :func:`run_flower`.

    Returns
    -------
    list of RunResult
        One per run, in order.

    Raises
    ------
    ConfigError
        For a non-Flower engine, a SuperLink of the other mode, or a pooled strategy.
    FlowerRunError
        When the run fails (the ServerApp's error is quoted) or the deadline passes.
    """
    import numpy as np

    from rvfedprs.federation.rounds import prune_checkpoints

    simulation = _flower_engine(engine, superlink)
    names = [run.name for run in runs]
    if not runs or len(set(names)) != len(names):
        raise ConfigError(f"imaging runs need distinct strategy names, got {names}")
    for run in runs:
        if run.strategy.pooled:
            raise ConfigError(
                f"strategy {run.name!r} pools every client's data and cannot run on Flower"
            )
    settings = dict(flower or {})
    min_replies, round_timeout, timeout, remote = _run_limits(
        settings, simulation, superlink, min_replies, round_timeout, timeout
    )
    ids = sorted(clients)
    template = clients[ids[0]]
    out, work = _work_folder(out)
    data_file = str(Path(data_file).resolve())

    def distance_of(run: ImagingRun):
        if not run.distance:
            return None
        return {
            "matrix": np.asarray(run.distance["distance"], dtype=np.float64).tolist(),
            "clients": list(run.distance["distance_clients"]),
        }

    task = {
        "data": data_file,
        "client_ids": ids,
        "fold": fold,
        "class_counts": None if class_counts is None else np.asarray(class_counts).tolist(),
        "model": {
            "in_channels": template.in_channels,
            "n_classes": template.n_classes,
            "image_size": template.image_size,
        },
        "runs": [
            {"strategy": run.name, "out": str(out / run.name), "distance": distance_of(run)}
            for run in runs
        ],
    }
    job = write_job(
        work / "job.json",
        config={"imaging": dict(section), "flower": settings},
        strategy=",".join(names),
        rounds=rounds,
        seed=random_seed,
        out=out,
        n_rare=0,
        expected_clients=len(ids) if expected_nodes is None else expected_nodes,
        min_replies=len(ids) if min_replies is None else min_replies,
        round_timeout=round_timeout,
        node_wait=float(settings.get("node_wait") or 60.0),
        task="imaging",
        task_settings=task,
    )
    status = _launch(
        simulation,
        work,
        {"job-file": str(job), "data-dir": "", "bloom-key-file": ""},
        n_clients=len(ids),
        nodes=None if simulation else imaging_nodes(data_file, ids),
        superlink=superlink,
        remote=remote,
        settings=settings,
        timeout=timeout,
    )
    for who, why in status.get("setup_failures", {}).items():
        log.warning("%s was left out of the run: %s", who, why)
    results = []
    for run in runs:
        folder = out / run.name
        result = _collect(
            folder, run.strategy, rounds, random_seed, run.evaluate_round, with_round=True
        )
        prune_checkpoints(folder / "checkpoints", 1)  # every round was evaluated above
        result.checkpoints = [p for p in result.checkpoints if p.exists()]
        results.append(result)
    return results
