"""Processes a Flower launcher starts: logged, in their own sessions, stopped by group.

Every process is started in its own session (``start_new_session``) with its output in
``logs/<label>.log`` and its pid listed in ``logs/processes.json``; :meth:`FlowerProcesses.stop`
ends each by its process group, however the run ended, and also the descendants that left the
group (the simulation backend's daemons), found by this run's private ``FLWR_HOME`` in their
environment. The processes a run cannot outlive (the SuperLink, the Ray head) are marked
``vital``: a launcher waiting for the run stops as soon as one exits
(:meth:`FlowerProcesses.check_vital`). Everything binds to 127.0.0.1. :func:`start_ray_head`
starts the local Ray head the Flower simulation joins; :func:`start_supernode` a SuperNode and,
by default, the warm executor of its ClientApps
(:mod:`~rvfedprs.federation.flower.warm_clientapp`).
"""

from __future__ import annotations

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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rvfedprs.exceptions import ConfigError, RvfedprsError

__all__ = [
    "FlowerRunError",
    "FlowerProcesses",
    "PROCESSES_FILE",
    "free_port",
    "free_ports",
    "flower_env",
    "console_script",
    "wait_port",
    "start_ray_head",
    "backoff",
    "CLIENTAPP_MODES",
    "start_supernode",
    "pids_with_env",
    "pid_running",
    "executor_argv",
    "run_forwarding_signals",
]

log = logging.getLogger(__name__)

#: How a SuperNode runs its ClientApps: ``warm`` — each message in a process forked from a warm
#: executor that imported Flower and the tasks once; ``cold`` — Flower's default, a fresh
#: ``flwr-clientapp`` process per message.
CLIENTAPP_MODES = ("warm", "cold")

#: Written beside the logs: label → pid of every process a launcher started (for operators
#: and tests; each is stopped by its process group when the run ends).
PROCESSES_FILE = "processes.json"


class FlowerRunError(RvfedprsError):
    """A Flower run failed: the message says why and where the logs are."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that are free now.

    Every socket stays bound until all ``n`` are chosen: ports taken one at a time can repeat
    (a closed socket's port is handed out again), and two Ray components given one port abort
    its start ("trying to use a port number ... used by other components").
    """
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def flower_env(flwr_home: Path) -> dict[str, str]:
    """The environment of a Flower process: private FLWR_HOME, no runtime installs.

    Nor Flower's telemetry: every Flower process (each ClientApp, twice per message) would
    otherwise post an event to Flower's server — nothing a site should send, and a wait where
    the network is closed.
    """
    env = dict(os.environ)
    env.update(
        {
            "FLWR_HOME": str(flwr_home),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_TELEMETRY_ENABLED": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


def console_script(name: str) -> str:
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
    #: Label → what it is ("the SuperLink", "the Ray head"): the processes a run cannot outlive
    #: (:meth:`check_vital`).
    vital: dict[str, str] = field(default_factory=dict)

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

    def check_vital(self) -> None:
        """Raise when a process of :attr:`vital` has exited: the run cannot go on without it.

        Raises
        ------
        FlowerRunError
            Naming the process (what it is, its label and pid), its exit status and its log.
        """
        for label, what in self.vital.items():
            proc = self.procs[label]
            if proc.poll() is not None:
                raise FlowerRunError(
                    f"{what} ({label}, pid {proc.pid}) exited with status {proc.returncode} "
                    f"during the run; see {self.logs / (label + '.log')}"
                )

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
            stray = pids_with_env(f"FLWR_HOME={home}")
            for pid in stray:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            # a killed process takes a moment to exit (longer on a loaded host): return only
            # once every one has (at most ``grace`` seconds), so none outlives stop()
            deadline = time.monotonic() + grace
            while any(pid_running(pid) for pid in stray) and time.monotonic() < deadline:
                time.sleep(0.05)
        for folder in self.cleanup:
            shutil.rmtree(folder, ignore_errors=True)


def executor_argv(
    runtime_api_address: str,
    *,
    parent_pid: int | None = None,
    root_certificates: str | Path | None = None,
) -> list[str]:
    """The warm ClientApp executor (:mod:`~rvfedprs.federation.flower.warm_clientapp`) command.

    It serves the SuperNode whose Runtime API is ``runtime_api_address`` (plain HTTP, or TLS
    checked against ``root_certificates``) and exits with process ``parent_pid``.
    """
    argv = [sys.executable, "-m", "rvfedprs.federation.flower.warm_clientapp"]
    argv += ["--runtime-api-address", runtime_api_address]
    if root_certificates is None:
        argv.append("--insecure")
    else:
        argv += ["--root-certificates", str(root_certificates)]
    if parent_pid is not None:
        argv += ["--parent-pid", str(int(parent_pid))]
    return argv


def start_supernode(
    procs: FlowerProcesses,
    label: str,
    argv: Sequence[str],
    *,
    port: int,
    clientapp: str,
    host: str = "127.0.0.1",
) -> subprocess.Popen:
    """Start the SuperNode ``argv`` (which serves its Runtime API on ``host:port``).

    With ``clientapp="warm"`` the node runs with ``--isolation process`` and its ClientApps are
    forked by a warm executor (label ``<label>-clientapp``) that exits with the node; with
    ``"cold"`` Flower starts a fresh ``flwr-clientapp`` per message.

    Raises
    ------
    ConfigError
        When ``clientapp`` is not one of :data:`CLIENTAPP_MODES`.
    """
    if clientapp not in CLIENTAPP_MODES:
        raise ConfigError(f"clientapp must be one of {CLIENTAPP_MODES}, got {clientapp!r}")
    if clientapp == "cold":
        return procs.start(label, argv)
    node = procs.start(label, [*argv, "--isolation", "process"])
    procs.start(f"{label}-clientapp", executor_argv(f"{host}:{port}", parent_pid=node.pid))
    return node


def pids_with_env(entry: str) -> list[int]:
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


def pid_running(pid: int) -> bool:
    """True while ``pid`` exists and has not exited (a zombie, not yet reaped, counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def run_forwarding_signals(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, grace: float = 15.0
) -> int:
    """Run ``argv`` in its own process group until it exits, passing on SIGTERM/SIGINT/SIGHUP.

    ``rvfedprs site`` runs its SuperNode (and warm ClientApp executor) so: a ``kill <pid>`` of
    the command, or Ctrl-C, reaches every process of the node, which then stops as Flower
    stops on SIGTERM; after ``grace`` seconds the group is killed. Nothing is left behind
    re-parented to PID 1.

    Returns
    -------
    int
        The child's exit status (128 + the signal for a child a signal ended).
    """
    child = subprocess.Popen(list(argv), env=None if env is None else dict(env),
                             start_new_session=True)  # fmt: skip
    received: list[tuple[int, float]] = []  # (signal, when)

    def forward(sig, _frame):
        received.append((sig, time.monotonic()))
        _signal_group(child.pid, sig)

    caught = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in caught}
    try:
        while True:  # short waits: a blocking wait() would outlast the grace period
            try:
                code = child.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if received and time.monotonic() - received[0][1] > grace:
                    log.warning("the node did not stop %g s after signal %d; killing it",
                                grace, received[0][0])  # fmt: skip
                    _signal_group(child.pid, signal.SIGKILL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _signal_group(child.pid, signal.SIGKILL)  # what the node left of its group
    return 128 - code if code < 0 else code


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def backoff(first: float = 0.25, factor: float = 1.5, most: float = 5.0) -> Iterator[float]:
    """Seconds to wait between polls: ``first``, then ``factor`` times longer, at most ``most``.

    A waiting launcher checks often while a run starts and seldom once it is long under way.
    """
    if not 0 < first <= most or factor < 1:
        raise ValueError(f"backoff needs 0 < first <= most and factor >= 1, got "
                         f"first={first}, factor={factor}, most={most}")  # fmt: skip
    wait = first
    while True:
        yield wait
        wait = min(wait * factor, most)


def wait_port(port: int, proc: subprocess.Popen, label: str, logs: Path, timeout: float) -> None:
    """Wait until ``proc`` listens on 127.0.0.1:``port``; raise if it exits or time runs out."""
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


def start_ray_head(
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
        ports = free_ports(5)
        temp = Path(tempfile.mkdtemp(prefix="rvfray-", dir="/tmp"))  # short: socket paths <108
        procs.cleanup.append(temp)
        argv = [
            console_script("ray"),
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
                procs.vital[label] = "the Ray head"  # the simulation dies with it
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
