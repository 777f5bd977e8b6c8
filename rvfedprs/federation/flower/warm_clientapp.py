"""A warm ClientApp executor: one SuperNode's messages, each in a process forked from a warm one.

Flower 1.41 runs every message a SuperNode receives in a fresh ``flwr-clientapp`` process, in
both isolation modes (``flwr/supernode/runtime/run_clientapp.py``: one message per process); a
cold process pays the interpreter, Flower's imports and the task's (torch, pandas) before it
does any work — most of an exchange's cost. Started beside a SuperNode that runs with
``--isolation process``, this executor does what Flower's ``flower-superexec`` does (acquire the
node's pending ClientApp tasks from its Runtime API) but imports Flower, the app and the task
modules once, then forks one child per task that runs Flower's own
:func:`~flwr.supernode.runtime.run_clientapp.run_clientapp`. Each message still has its own
process (what one message does to its process cannot reach the next, and a crash loses one
reply, as before); it starts with the imports done.

The parent never runs a torch operation (no thread pool exists when it forks); a child that
trains starts torch's threads itself.

Usage (:func:`~rvfedprs.federation.flower.processes.executor_argv`; ``--root-certificates CA``
instead of ``--insecure`` for a Runtime API served with TLS), beside a running SuperNode::

    python -m rvfedprs.federation.flower.warm_clientapp --insecure --parent-pid <supernode pid>
        --runtime-api-address 127.0.0.1:9094

or starting the SuperNode itself, as its parent, and ending with it (``rvfedprs site``)::

    python -m rvfedprs.federation.flower.warm_clientapp --insecure
        --runtime-api-address 127.0.0.1:9094 -- flower-supernode ... --isolation process
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from rvfedprs.federation.flower.processes import backoff

__all__ = ["PRELOAD", "POLL_SECONDS", "PROFILE_ENV", "serve", "main"]

log = logging.getLogger(__name__)

#: Imported once in the warm process: Flower's ClientApp runtime, the app, the tasks, and the
#: modules a training step imports on first use (``torch.optim`` pulls ``torch._dynamo``).
PRELOAD = (
    "flwr.supernode.runtime.run_clientapp",
    "rvfedprs.federation.flower.client_app",
    "rvfedprs.genomic.task",
    "rvfedprs.genomic.client",
    "pandas",
    "pyarrow.parquet",
    "torch",
    "torch.optim",
    "torch._dynamo",
)

#: Environment variable naming a folder: each forked ClientApp then runs under cProfile and
#: writes ``clientapp-<pid>.prof`` there (wall-clock time, waits included).
PROFILE_ENV = "RVFEDPRS_CLIENTAPP_PROFILE"

#: Seconds between two asks for pending tasks: the first wait after a task, and the longest
#: (the waits grow between them while the node is idle; Flower's SuperExec waits 1 s).
POLL_SECONDS = (0.05, 0.5)


def _preload(modules: Sequence[str]) -> None:
    """Import ``modules``; one that is not installed is skipped (said in the log)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            log.warning("warm ClientApp: %s not preloaded (%s)", name, exc)


def serve(
    runtime_api_address: str,
    *,
    insecure: bool,
    root_certificates: str | None = None,
    parent_pid: int | None = None,
    preload: Sequence[str] = PRELOAD,
    poll_seconds: tuple[float, float] = POLL_SECONDS,
    node_pid: int | None = None,
) -> int:
    """Acquire the node's ClientApp tasks and run each in a forked child, until stopped.

    Parameters
    ----------
    runtime_api_address : str
        The SuperNode's Runtime API (its ``--host``:``--port``).
    insecure : bool
        Plain HTTP to the Runtime API; else TLS with ``root_certificates``.
    root_certificates : str, optional
        The CA of the Runtime API's certificate.
    parent_pid : int, optional
        The SuperNode's pid: this process exits when it does.
    preload : sequence of str
        Modules imported before the first fork.
    poll_seconds : (float, float)
        The shortest and the longest wait between two asks for a pending task
        (:func:`~rvfedprs.federation.flower.processes.backoff`).
    node_pid : int, optional
        The SuperNode when it is this process's child: serving ends when it exits.

    Returns
    -------
    int
        The SuperNode's exit status (with ``node_pid``; otherwise this runs until stopped).
    """
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.app_utils import start_parent_process_monitor
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.retry import make_simple_http_retry_invoker
    from flwr.supercore.runtime import RuntimeHttpClient
    from flwr.supercore.tls import validate_and_resolve_root_certificates

    first, most = poll_seconds
    waits = backoff(first, most=most)
    next(waits)  # a bad range raises here, before anything starts
    _preload(preload)
    if parent_pid is not None:
        start_parent_process_monitor(parent_pid)
    certificates = validate_and_resolve_root_certificates(root_certificates, insecure)
    client = RuntimeHttpClient.from_server_address(
        server_address=runtime_api_address,
        insecure=insecure,
        root_certificates=certificates,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
        retry_invoker=make_simple_http_retry_invoker(),
    )
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    log.info("warm ClientApp executor serving %s", runtime_api_address)
    failing = False
    while True:
        ended = _reap()
        if node_pid in ended:
            log.info("the SuperNode (pid %d) exited with status %d", node_pid, ended[node_pid])
            return ended[node_pid]
        try:
            acquired = client.AcquireTask(request)
        except Exception as exc:  # noqa: BLE001 (the node may be starting or restarting)
            if not failing:
                log.warning("cannot reach the SuperNode's Runtime API yet: %s", exc)
            failing = True
            time.sleep(next(waits))
            continue
        failing = False
        if acquired.HasField("task") and acquired.token:
            pid = _fork_task(runtime_api_address, acquired.token, insecure, certificates)
            log.info("task %d: ClientApp forked, pid %d", acquired.task.task_id, pid)
            waits = backoff(first, most=most)
            continue  # another message may be waiting
        time.sleep(next(waits))


def _fork_task(address: str, token: str, insecure: bool, certificates: bytes | None) -> int:
    """Fork a child that runs one ClientApp task; returns its pid."""
    warm = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's (run_clientapp sets its own)
    code = 1
    try:
        from flwr.supernode.runtime.run_clientapp import run_clientapp

        profile_dir = os.environ.get(PROFILE_ENV)
        if profile_dir:  # where a message's time goes: one cProfile file per message
            import cProfile

            profiler = cProfile.Profile()
            try:
                profiler.runcall(run_clientapp, address, token, insecure, certificates, warm)
            finally:
                profiler.dump_stats(os.path.join(profile_dir, f"clientapp-{os.getpid()}.prof"))
        else:
            run_clientapp(address, token, insecure, certificates, parent_pid=warm)
        code = 0
    except SystemExit as stop:  # run_clientapp ends with flwr_exit (sys.exit)
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never the warm process's own cleanup


def _reap() -> dict[int, int]:
    """Collect every finished child (no zombies): pid → exit status."""
    ended = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended[pid] = os.waitstatus_to_exitcode(status)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``--runtime-api-address``, ``--insecure`` | ``--root-certificates``.

    With a SuperNode command after ``--``, it is started first (its own output) and serving
    ends with it; SIGTERM stops it, then this process.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime-api-address", required=True)
    security = parser.add_mutually_exclusive_group(required=True)
    security.add_argument("--insecure", action="store_true")
    security.add_argument("--root-certificates")
    parser.add_argument("--parent-pid", type=int)
    parser.add_argument("supernode", nargs=argparse.REMAINDER, help="-- flower-supernode ...")
    args = parser.parse_args(argv)
    command = args.supernode[1:] if args.supernode[:1] == ["--"] else args.supernode
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not every poll
    node = None
    if command:
        node = subprocess.Popen(command)  # noqa: S603 (the operator's own command line)

        def stop(signum: int, _frame) -> None:  # even while the modules are still loading
            node.terminate()
            try:
                node.wait(timeout=10)
            except subprocess.TimeoutExpired:
                node.kill()
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, stop)
    return serve(
        args.runtime_api_address,
        insecure=args.insecure,
        root_certificates=args.root_certificates,
        parent_pid=args.parent_pid,
        node_pid=None if node is None else node.pid,
    )


if __name__ == "__main__":
    sys.exit(main())
