"""Submitting a job to a SuperLink and waiting for its outcome; collecting what it left.

``flwr run`` returns as soon as the run is submitted (exit 0 even if the run later fails), so
:func:`wait_status` reads ``<job out>/flower/status.json``, which the ServerApp writes; it also
watches the processes the launcher started that the run cannot outlive (the SuperLink, the Ray
head of a simulation: the wait ends as soon as one exits, naming it), asks the SuperLink
(``flwr ls``) whether the run finished without a status, and keeps a deadline. It does not poll
hot: the status file is read at growing intervals (0.25 s up to 5 s,
:func:`~rvfedprs.federation.flower.processes.backoff`) and the SuperLink asked every 30 s. The
run id of each submission is kept in ``flower/run.json``: :func:`attach` waits for a run whose
launcher died (the run goes on on the SuperLink) instead of submitting a new one.
:func:`collect` rebuilds a run's result from its checkpoints.

Flower never restarts a ServerApp that died: the SuperLink marks its run ``finished:failed``
once its heartbeats stop (within 60 s), and the launcher then says so and how to go on
(``--resume``). A resumed job first waits for the run recorded in ``run.json`` while the
SuperLink still has it going (its ServerApp may be alive, or dead and not yet noticed), so that
two ServerApps never write one study; it submits a new run, which continues from the study's
state and the latest checkpoints, only once that run has ended without completing.
"""

from __future__ import annotations

import copy
import json
import logging
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint
from rvfedprs.federation.flower.identity import registered_nodes
from rvfedprs.federation.flower.job import (
    SERVER_LOG_FILE,
    STATUS_FILE,
    bind_site_nodes,
    write_app,
)
from rvfedprs.federation.flower.processes import (
    FlowerProcesses,
    FlowerRunError,
    backoff,
    console_script,
    flower_env,
)
from rvfedprs.federation.flower.superlink import (
    LocalSuperLink,
    local_options,
    start_local,
    write_connection,
)
from rvfedprs.federation.result import RunResult
from rvfedprs.federation.rounds import restore_client_state

log = logging.getLogger(__name__)

__all__ = ["RUN_FILE", "ServerLogEcho", "submit", "wait_status", "launch", "attach", "collect"]

#: Beside the job (``<job out>/flower/``): the run id of the latest submission.
RUN_FILE = "run.json"
#: Seconds between a resume's questions to the SuperLink about the run it waits for.
RESUME_POLL = 10.0


def submit(
    app: Path, env: Mapping[str, str], logs: Path, run_config: Mapping[str, str], extra: list[str]
) -> str | None:
    """``flwr run APP rvfedprs --run-config ...``; returns the run id the SuperLink gave it.

    Raises
    ------
    FlowerRunError
        When ``flwr run`` fails or does not start the run (its output quoted).
    """
    overrides = " ".join(f"{k}={json.dumps(str(v))}" for k, v in run_config.items())
    argv = [console_script("flwr"), "run", str(app), "rvfedprs", "--run-config", overrides, *extra]
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
    argv = [console_script("flwr"), "ls", "rvfedprs", "--run-id", str(run_id), "--format", "json"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=60)
        runs = json.loads(done.stdout[done.stdout.index("{") :]).get("runs", [])
    except (ValueError, OSError, subprocess.TimeoutExpired):
        return "", ""
    if not runs:
        return "", ""
    return str(runs[0].get("status", "")), str(runs[0].get("status-details", ""))


def _final_status(status_path: Path, run_id: str | None) -> dict | None:
    """The final status (``completed``/``failed``) in ``status_path`` written by ``run_id``.

    None while there is none; a status another run of the job wrote (one whose ServerApp died,
    its stale ``running``; or, with no ``run_id`` recorded, any run) is not ``run_id``'s.
    """
    if not status_path.is_file():
        return None
    try:
        status = json.loads(status_path.read_text())
    except ValueError:  # written atomically; a foreign, torn file is no status
        return None
    written_by = status.get("run_id")
    if run_id and written_by is not None and str(written_by) != str(run_id):
        return None
    return status if status.get("status") in ("completed", "failed") else None


class ServerLogEcho:
    """Log the lines the ServerApp appends to its ``serverapp.log`` since the last look.

    The launcher waits on the status file; this makes the ServerApp's progress (each round,
    each study stage) reach the terminal of ``rvfedprs train`` / ``rvfedprs study`` while it
    runs. Lines already there when the wait starts (an earlier run's) are skipped.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.position = self.path.stat().st_size if self.path.is_file() else 0

    def step(self) -> int:
        """Log every complete new line; return how many."""
        if not self.path.is_file():
            return 0
        with open(self.path, "rb") as handle:
            handle.seek(self.position)
            chunk = handle.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self.position += len(complete)
        lines = complete.decode("utf-8", "replace").splitlines()
        for line in lines:
            log.info("ServerApp: %s", line)
        return len(lines)


def wait_status(
    status_path: Path,
    processes: FlowerProcesses | None,
    logs: Path,
    timeout: float,
    *,
    run_id: str | None = None,
    env: Mapping[str, str] | None = None,
    poll_run: float = 30.0,
    waits: Iterator[float] | None = None,
) -> dict:
    """The job's final status (``completed``/``failed``) from ``status_path``.

    Only a status written by ``run_id`` counts (when given). Also fails as soon as a vital process
    of ``processes`` exits (the SuperLink or the Ray head the launcher started, named:
    :meth:`~rvfedprs.federation.flower.processes.FlowerProcesses.check_vital`), when the
    SuperLink reports the run finished with no status written (asked every ``poll_run`` seconds;
    the status then holds ``died``: the ServerApp ended without a word, e.g. killed, and Flower
    does not restart it), or after ``timeout`` seconds. The status file is read after each of
    ``waits`` seconds (default :func:`~rvfedprs.federation.flower.processes.backoff`: 0.25 s
    growing to 5 s).
    """
    waits = backoff() if waits is None else waits
    deadline = time.monotonic() + timeout
    next_poll = time.monotonic() + poll_run
    echo = ServerLogEcho(status_path.parent / SERVER_LOG_FILE)
    while time.monotonic() < deadline:
        echo.step()
        status = _final_status(status_path, run_id)
        if status is not None:
            echo.step()
            return status
        if run_id and env is not None and time.monotonic() >= next_poll:
            # The ServerApp cannot write a status when the runtime around it dies (the
            # simulation backend failing, a killed process): ask the SuperLink.
            next_poll = time.monotonic() + poll_run
            state, details = _run_state(run_id, env)
            if state.startswith("finished"):  # yet no final status from the ServerApp
                time.sleep(1.0)  # a status written just now still wins
                status = _final_status(status_path, run_id)
                if status is not None:
                    return status
                return {
                    "status": "failed",
                    "died": state,
                    "error": f"the ServerApp of Flower run {run_id} ended without a final "
                    f"status (Flower reports the run {state}: {details}); Flower does not "
                    "restart it: --resume continues from the last completed stage and round",
                }
        if processes is not None:
            processes.check_vital()
        time.sleep(max(0.0, min(next(waits), deadline - time.monotonic())))
    raise FlowerRunError(
        f"the run did not finish within {timeout:.0f} s (no final status in {status_path}); "
        f"see the logs in {logs}"
    )


def launch(
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
    ray_address: str | None = None,
    resume: bool = False,
) -> dict:
    """Submit the job of ``run_config`` and wait for its final status (raises unless completed).

    To ``superlink`` when given, else to the ``remote`` SuperLink, else to a SuperLink (with
    ``nodes`` for a deployment; joining the Ray cluster at ``ray_address`` for a simulation,
    when given) started here and stopped when the run ends. With ``flower.node_keys`` (site →
    its node's public key; ``flower-deploy`` on a SuperLink that authenticates its nodes) the
    job gets the node id of each site's registered key, and the ServerApp refuses a node that
    claims a site whose key is not its own. With ``resume``, a run of this job that the same
    SuperLink still has going (``work/run.json``) is waited for first (:func:`_await_recorded`).

    Raises
    ------
    ConfigError
        When ``flower.node_keys`` is given for a simulation or for a SuperLink started here
        without node authentication, or a site's key is not registered.
    """
    app = write_app(work / "app")
    status_path = work / STATUS_FILE
    extra = ["--federation-config", f"num-supernodes={n_clients}"] if simulation else []
    node_keys = settings.get("node_keys")
    if node_keys and (simulation or (superlink is None and not remote)):
        raise ConfigError(
            "flower.node_keys binds sites to the SuperNodes' registered keys: it needs "
            "flower-deploy on a SuperLink that authenticates its nodes (flower.superlink, or "
            "one started with node keys)"
        )

    def submit_and_wait(
        address: str, processes: FlowerProcesses | None, logs: Path, certificates=None
    ) -> dict:
        home = work / "home"
        write_connection(home, address, root_certificates=certificates)
        env = flower_env(home)
        if resume:
            status = _await_recorded(work, address, env, processes, logs, timeout)
            if status is not None:
                return status
        if node_keys:
            bind_site_nodes(run_config["job-file"], registered_nodes(node_keys, env))
        run_id = submit(app, env, work / "logs", run_config, extra)
        (work / RUN_FILE).write_text(json.dumps({"run_id": run_id, "superlink": address}) + "\n")
        log.info(
            "submitted Flower run %s; should this command die, the run goes on: "
            "rvfedprs study --attach %s collects it",
            run_id,
            run_id,
        )
        return wait_status(status_path, processes, logs, timeout, run_id=run_id, env=env)

    if superlink is not None:
        status = submit_and_wait(
            superlink.address,
            superlink.processes,
            superlink.processes.logs,
            superlink.root_certificates,
        )
    elif remote:
        certificates = settings.get("root_certificates")
        if certificates and not Path(certificates).is_file():
            raise ConfigError(f"flower.root_certificates: {certificates} not found")
        status = submit_and_wait(remote, None, work / "logs", certificates)
    else:
        with start_local(
            work,
            simulation=simulation,
            nodes=nodes,
            **{**local_options(settings), "ray_address": ray_address},
        ) as link:
            status = submit_and_wait(link.address, link.processes, link.processes.logs)
    if status["status"] != "completed":
        raise FlowerRunError(
            f"the Flower run failed: {status.get('error', 'no reason recorded')} "
            f"(logs in {work / 'logs'})"
        )
    return status


def _await_recorded(
    work: Path,
    address: str,
    env: Mapping[str, str],
    processes: FlowerProcesses | None,
    logs: Path,
    timeout: float,
) -> dict | None:
    """The completed status of the run recorded in ``work/run.json``, if it is still going.

    A resumed job must not run beside the run it resumes: both would write one study. While the
    SuperLink at ``address`` reports that run pending, starting or running (its ServerApp alive,
    or dead and not yet noticed: Flower marks it failed once 60 s pass without its heartbeat),
    this waits for it, as :func:`wait_status`, asking the SuperLink every
    :data:`RESUME_POLL` seconds (a run resumed is most often dead: its end is then seen within
    10 s of Flower marking it, not 30 s). None when there is no such run, or when it ended
    without completing (then a new run resumes the job).
    """
    recorded = work / RUN_FILE
    if not recorded.is_file():
        return None
    previous = json.loads(recorded.read_text())
    run_id = previous.get("run_id")
    if not run_id or previous.get("superlink") != address:
        return None
    state, _ = _run_state(run_id, env)
    if not state or state.startswith("finished"):
        return None
    log.warning(
        "Flower run %s of this job is still %s on the SuperLink: waiting for it to end before "
        "resuming (a ServerApp that died is noticed within about 60 s)",
        run_id,
        state,
    )
    status = wait_status(
        work / STATUS_FILE, processes, logs, timeout, run_id=run_id, env=env, poll_run=RESUME_POLL
    )
    if status["status"] == "completed":
        log.info("Flower run %s completed: nothing to resume", run_id)
        return status
    log.warning("Flower run %s ended without completing (%s): submitting a run that resumes it",
                run_id, status.get("error", "no reason recorded"))  # fmt: skip
    return None


def attach(work: Path, run_id: str | None, *, timeout: float) -> dict:
    """Wait for a run submitted from ``work`` by a launcher that died; its final status.

    The run goes on on the SuperLink whatever happened to the command that submitted it (a
    SuperLink started by that command runs in its own session and outlives it). This asks the
    SuperLink for the run with the connection the submission wrote (``work/home``) and waits
    for the status the ServerApp writes, as :func:`wait_status` (not polling hot).

    Parameters
    ----------
    work : Path
        The job's Flower folder (``<job out>/flower``).
    run_id : str or None
        The run; None: the latest submitted from ``work`` (``work/run.json``).
    timeout : float
        Seconds to wait for its final status.

    Raises
    ------
    ConfigError
        When nothing was submitted from ``work`` (no connection, no recorded run).
    FlowerRunError
        When the SuperLink does not know the run (or cannot be reached: then only
        ``--resume`` can continue the study), or the run failed.
    """
    home = work / "home"
    if not home.is_dir():
        raise ConfigError(f"no Flower submission in {work} (no {home}): nothing to attach to")
    if not run_id:
        recorded = work / RUN_FILE
        if not recorded.is_file():
            raise ConfigError(f"no run recorded in {recorded}: give the run id (--attach RUN_ID)")
        run_id = str(json.loads(recorded.read_text())["run_id"])
    env = flower_env(home)
    state, details = _run_state(run_id, env)
    if not state:
        raise FlowerRunError(
            f"the SuperLink does not know run {run_id} or cannot be reached (see {work / 'home'}); "
            "if the SuperLink is gone, continue the study with --resume"
        )
    log.info("attached to Flower run %s (%s %s)", run_id, state, details)
    status = wait_status(work / STATUS_FILE, None, work / "logs", timeout, run_id=run_id, env=env)
    if status["status"] != "completed":
        raise FlowerRunError(
            f"Flower run {run_id} failed: {status.get('error', 'no reason recorded')} "
            f"(logs in {work / 'logs'})"
        )
    return status


def _finished(strategy, record) -> bool:
    """Whether the strategy of ``record`` had finished (needed no more rounds) when saved."""
    restored = copy.deepcopy(strategy)
    restored.load_state_dict(record["strategy_state"])
    return bool(restored.finished)


def collect(
    out: Path,
    strategy,
    rounds: int,
    random_seed: int,
    evaluate_round,
    client_state: dict[str, dict[str, Any]] | None = None,
) -> RunResult:
    """The RunResult of a finished run, from its checkpoints.

    ``evaluate_round`` is called as ``f(strategy, round)`` on the strategy restored from each
    round's checkpoint, as the in-process engine calls it after each round; ``client_state`` is
    refilled in place with the sites' state as the server last saw it.
    """
    # Every round's checkpoint, except those pruned by a previous run this one resumed
    # (train.keep_checkpoints): their history entries keep what was recorded then.
    # A strategy that finished early (a converged FedGLM) stops before ``rounds``: its final
    # checkpoint is the latest one written, and its record says so.
    checkpoints = [checkpoint_path(out, r) for r in range(1, rounds + 1)]
    written = [p for p in checkpoints if p.is_file()]
    if not written:
        raise FlowerRunError(
            f"the Flower run completed but wrote no checkpoint: {checkpoints[-1]} is missing"
        )
    checkpoints = written
    final = load_checkpoint(checkpoints[-1])
    if checkpoints[-1] != checkpoint_path(out, rounds) and not _finished(strategy, final):
        raise FlowerRunError(
            f"the Flower run completed but its final checkpoint is missing: "
            f"{checkpoint_path(out, rounds)} (the latest is {checkpoints[-1].name})"
        )
    history = list(final.get("history", []))
    if evaluate_round is not None:
        by_round = {int(p.stem.split("_")[1]): p for p in checkpoints}
        for entry in history:
            path = by_round.get(int(entry["round"]))
            if path is None:
                continue
            at_round = copy.deepcopy(strategy)
            at_round.load_state_dict(load_checkpoint(path)["strategy_state"])
            entry.update(evaluate_round(at_round, int(entry["round"])))
    strategy.load_state_dict(final["strategy_state"])
    state: dict[str, dict[str, Any]] = client_state if client_state is not None else {}
    restore_client_state(state, final)
    return RunResult(
        strategy=strategy,
        history=history,
        seed=int(random_seed),
        checkpoints=checkpoints,
        client_state=state,
        selected=final.get("selected"),
    )
