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
instead of ``--insecure`` for a Runtime API served with TLS)::

    python -m rvfedprs.federation.flower.warm_clientapp --insecure --parent-pid <supernode pid>
        --runtime-api-address 127.0.0.1:9094
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
from collections.abc import Sequence

from rvfedprs.federation.flower.processes import backoff

__all__ = ["PRELOAD", "POLL_SECONDS", "serve", "main"]

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
) -> None:
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
    while True:
        _reap()
        acquired = client.AcquireTask(request)
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
    code = 1
    try:
        from flwr.supernode.runtime.run_clientapp import run_clientapp

        run_clientapp(address, token, insecure, certificates, parent_pid=warm)
        code = 0
    except SystemExit as stop:  # run_clientapp ends with flwr_exit (sys.exit)
        code = stop.code if isinstance(stop.code, int) else 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # never the warm process's own cleanup


def _reap() -> None:
    """Collect the exit status of every finished child (no zombies)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``--runtime-api-address``, ``--insecure`` | ``--root-certificates``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime-api-address", required=True)
    security = parser.add_mutually_exclusive_group(required=True)
    security.add_argument("--insecure", action="store_true")
    security.add_argument("--root-certificates")
    parser.add_argument("--parent-pid", type=int)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not every poll
    serve(
        args.runtime_api_address,
        insecure=args.insecure,
        root_certificates=args.root_certificates,
        parent_pid=args.parent_pid,
    )


if __name__ == "__main__":
    main()
