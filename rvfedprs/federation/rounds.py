"""The server side of a federated job, the same on every engine.

An engine (in-process, Flower simulation, Flower deployment) differs only in its
:class:`~rvfedprs.federation.task.Transport`: how a round's requests reach the sites and their
replies come back. Everything else lives here, so that all engines give the same model for the
same seed:

- :func:`negotiate` — the ``setup`` step: every site reports (its PRS moments and case count,
  say), the task turns the reports into the run-wide settings, and each site's training-sample
  count is fixed (:func:`declare_samples`, the only aggregation weight accepted later);
- :func:`begin_run` — initialise a strategy with w^0 (``initial_seed(seed)``) or restore it,
  with the sites' persistent state, from the latest checkpoint;
- :func:`run_rounds` — configure, send, collect, check ``min_replies``, aggregate
  (:func:`finish_round`: the history entry, the checkpoint, then the round's evaluation); with
  ``secagg.enabled`` in the job's configuration a round goes through
  :meth:`~rvfedprs.federation.secagg.training.SecureAggregation.fit_round` and the strategy
  aggregates secure sums, never individual updates;
- :func:`warm_start` — the task's fit before training (the genomic floor), through the same rounds;
- :func:`serve` — one or more runs of a job (one strategy each) over one set of sites.

Every exchange is measured (:mod:`rvfedprs.federation.metering`): bytes per message type and
seconds, per step for the job and each run, per round in the history.

Every exchange — the setup, a task's steps, a training round, a federated evaluation — follows
one rule for lost sites: it goes on while at least ``min_replies`` sites answered
(:func:`required_replies`), naming the others; below that it stops with a
:class:`FederationError` naming them (:func:`require_replies`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.exceptions import InputDataError, RvfedprsError
from rvfedprs.federation.checkpoints import (
    checkpoint_path,
    decode_client_state,
    encode_client_state,
    latest_checkpoint,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from rvfedprs.federation.metering import metered, traffic_of
from rvfedprs.federation.result import RunResult
from rvfedprs.federation.screening import UpdateScreen
from rvfedprs.federation.secagg.training import SecureAggregation
from rvfedprs.federation.seeds import SEED_SCHEME, client_seed, initial_seed
from rvfedprs.federation.task import WARM_START_RUN, Task, Transport
from rvfedprs.strategies.base import FitResult, Strategy
from rvfedprs.strategies.secure import GroupSum

__all__ = [
    "FITTED_WARM_START",
    "FederationError",
    "required_replies",
    "require_replies",
    "RunSpec",
    "RunSetup",
    "RoundEvaluations",
    "negotiate",
    "open_sites",
    "declare_samples",
    "begin_run",
    "finish_round",
    "evaluate_pending",
    "run_rounds",
    "serve",
    "run_job",
    "warm_start",
]

log = logging.getLogger(__name__)

#: A run setting :func:`serve` takes instead of fitting the warm start (see :func:`warm_start`).
FITTED_WARM_START = "warm_start"

#: ``evaluate_round(strategy, server_round) -> mapping`` merged into the round's history entry.
RoundCallback = Callable[[Strategy, int], Mapping[str, Any]]
#: Marks a round's entry in the checkpoint written before the round's evaluation.
EVALUATION_PENDING = "evaluation_pending"


class FederationError(RvfedprsError, RuntimeError):
    """Too few sites answered a step or a round (the message names them and why)."""


@dataclass
class RunSpec:
    """One run of a job: a fresh strategy, where its checkpoints go, a per-round callback.

    Attributes
    ----------
    strategy : Strategy
    out : Path, optional
        Where ``checkpoints/round_XXX.pt`` go (none written when None).
    evaluate_round : callable, optional
        ``f(strategy, server_round)`` after every round's aggregation; merged into the history.
        One with a ``prepare(settings)`` method is handed the run settings after the warm
        start (the genomic floor and a top-k input's chosen variants: the network the rounds
        train), on a fresh run and a resumed one, before anything is scored. One with a
        ``start(strategy)`` method (:class:`~rvfedprs.evaluation.selection.BestRound`) is also
        shown the starting model of a fresh run, before round 1.
    keep_checkpoints : int, optional
        Keep only the latest this many checkpoints (None or 0: all).
    """

    strategy: Strategy
    out: Path | None = None
    evaluate_round: RoundCallback | None = None
    keep_checkpoints: int | None = None


class RoundEvaluations:
    """A run's validation choice and its own ``evaluate_round``, called as one.

    Each is optional; ``prepare`` and ``start`` reach those that have them, a round's entry
    merges both (the choice's first). False when neither is there.
    """

    def __init__(self, *callbacks: RoundCallback | None) -> None:
        self.callbacks = [c for c in callbacks if c is not None]

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def prepare(self, settings: Mapping[str, Any]) -> None:
        """Hand the run settings after the warm start to those that take them."""
        for callback in self.callbacks:
            if hasattr(callback, "prepare"):
                callback.prepare(settings)

    def start(self, strategy: Strategy) -> None:
        """Show the starting model (the floor) to those that take it."""
        for callback in self.callbacks:
            if hasattr(callback, "start"):
                callback.start(strategy)

    def __call__(self, strategy: Strategy, server_round: int) -> dict[str, Any]:
        """The round's entry: every callback's, merged in order."""
        entry: dict[str, Any] = {}
        for callback in self.callbacks:
            entry.update(callback(strategy, server_round))
        return entry


class RunSetup:
    """What a run needs to checkpoint a round: fixed for the whole run.

    Parameters
    ----------
    client_ids : sequence of str
        The federation's clients, sorted.
    random_seed : int
    out : str or Path, optional
        Where ``checkpoints/round_XXX.pt`` go (none written when None).
    checkpoint_extra : mapping, optional
        Saved in every checkpoint (the task's model shape, the configuration, the strategy name).
    keep_checkpoints : int, optional
        Keep only the latest this many checkpoints (older ones are deleted after each round is
        saved; a checkpoint holds the whole model, tens of MB with many rare variants). None or
        0 keeps them all. A resume needs only the latest.
    selection : object, optional
        The run's choice on validation (:meth:`~rvfedprs.federation.task.Task.selection`):
        every checkpoint keeps its ``state_dict()`` as ``selected``.
    """

    def __init__(
        self,
        client_ids: Sequence[str],
        *,
        random_seed: int,
        out: str | Path | None = None,
        checkpoint_extra: Mapping[str, Any] | None = None,
        keep_checkpoints: int | None = None,
        selection: Any = None,
    ) -> None:
        if keep_checkpoints is not None and keep_checkpoints < 0:
            raise ValueError(f"keep_checkpoints must be >= 0, got {keep_checkpoints}")
        self.client_ids = sorted(client_ids)
        self.random_seed = int(random_seed)
        self.out = None if out is None else Path(out)
        self.checkpoint_extra = dict(checkpoint_extra or {})
        self.keep_checkpoints = keep_checkpoints or None
        self.selection = selection


def required_replies(job: Mapping[str, Any], n_sites: int) -> int:
    """The fewest sites an exchange needs: the job's ``min_replies`` (default: every site).

    At most ``n_sites`` (the sites there are at that exchange).
    """
    return min(int(job.get("min_replies") or 0) or n_sites, n_sites)


def require_replies(
    step: str, count: str, answered: int, min_replies: int, failures: Mapping[str, str]
) -> None:
    """Log who is left out of ``step``; raise when fewer than ``min_replies`` answered.

    ``count`` says how many answered, e.g. "round 3: 2 of 3 clients replied".

    Raises
    ------
    FederationError
        Naming every site that failed and why.
    """
    for who, why in sorted(failures.items()):
        log.warning("%s: %s left out: %s", step, who, why)
    if answered < min_replies:
        raise FederationError(
            f"{count} (min_replies={min_replies}); "
            f"failures: {dict(sorted(failures.items())) or 'nodes missing'}"
        )


def negotiate(
    task: Task, transport: Transport, job: Mapping[str, Any]
) -> tuple[dict[str, Any], Transport, dict[str, str]]:
    """The ``setup`` step: every site reports, the task derives the run-wide settings.

    Parameters
    ----------
    task, transport
    job : mapping
        ``min_replies`` (default: every site), ``expected_clients`` (default: the sites the
        transport knows), ``task_settings`` (sent with the setup request) and what the task's
        :meth:`~rvfedprs.federation.task.Task.run_settings` reads.

    Returns
    -------
    settings : dict
        The task's run settings, with ``task`` (its name).
    transport : Transport
        Restricted to the sites that answered.
    failures : dict
        Who did not answer, and why.

    Raises
    ------
    FederationError
        When fewer than ``min_replies`` sites answered.
    """
    reports, transport, failures = open_sites(task, transport, job)
    settings = {**task.run_settings(job, reports), "task": task.name}
    return declare_samples(task, settings, reports), transport, failures


def open_sites(
    task: Task, transport: Transport, job: Mapping[str, Any]
) -> tuple[dict[str, Any], Transport, dict[str, str]]:
    """Send every site the ``setup`` request; its reports, the transport of those that answered.

    ``job`` as :func:`negotiate`'s. Returns the reports (site → report), the transport
    restricted to the sites that answered and who did not answer, and why.

    Raises
    ------
    FederationError
        When fewer than ``min_replies`` sites answered.
    """
    payload = {"task": task.name, **dict(job.get("task_settings") or {}),
               **task.setup_payload(job)}  # fmt: skip
    reports, failures = transport.open(payload)
    total = int(job.get("expected_clients") or len(reports) + len(failures))
    count = f"only {len(reports)} of {total} clients answered the setup"
    require_replies("setup", count, len(reports), required_replies(job, total), failures)
    return dict(reports), transport.subset(sorted(reports)), dict(failures)


def declare_samples(
    task: Task, settings: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """``settings`` with ``declared_samples``: each site's training-sample count, fixed once.

    Every entry point fixes the counts here, before training, from the reports the sites gave
    once (:meth:`~rvfedprs.federation.task.Task.declared_samples`): the ``setup`` reports of
    :func:`negotiate` and of an in-process run, a study's features stage. They are the only
    aggregation weights accepted afterwards: :func:`update_screen` refuses, naming the site,
    a reply whose ``n`` differs. Left out (nothing checked) when a report declares no count.
    """
    declared = {c: task.declared_samples(r) for c, r in reports.items()}
    out = dict(settings)
    if declared and all(v is not None for v in declared.values()):
        out["declared_samples"] = declared
    return out


def _initial(task: Task, strategy: Strategy, settings: Mapping[str, Any], seed: int):
    """What ``strategy`` starts from, when called: w^0 of the seed, or the task's template."""
    if strategy.random_start:
        return lambda: task.initial_parameters(settings, initial_seed(seed))
    return lambda: task.parameter_template(settings)


def begin_run(
    strategy: Strategy,
    setup: RunSetup,
    initial: Callable[[], Mapping[str, np.ndarray]],
    *,
    resume: bool = False,
    client_state: dict[str, dict[str, Any]] | None = None,
) -> tuple[int, list[dict[str, Any]]]:
    """Initialise ``strategy`` with ``initial()`` (or restore it from the latest checkpoint).

    When resuming and ``client_state`` is given, each client's dict in it is refilled in place
    from the checkpoint (so sites holding those dicts see the restored state); the run's
    validation choice (``setup.selection``) continues from the checkpoint's ``selected``.

    Returns
    -------
    start : int
        The last completed round (0 for a fresh run).
    history : list of dict
        The history of the completed rounds.

    Raises
    ------
    InputDataError
        When the checkpoint to resume from was written with another seed.
    """
    latest = latest_checkpoint(setup.out) if (resume and setup.out is not None) else None
    if latest is None:
        strategy.initialize(dict(initial()), setup.client_ids)
        return 0, []
    record = load_checkpoint(latest)
    if int(record["seed"]) != setup.random_seed:
        raise InputDataError(
            f"cannot resume from {latest}: it was run with seed {record['seed']}, "
            f"not {setup.random_seed}"
        )
    strategy.load_state_dict(record["strategy_state"])
    if client_state is not None:
        restore_client_state(client_state, record)
    if setup.selection is not None:
        if record.get("selected"):
            setup.selection.load_state_dict(record["selected"])
        else:
            log.warning("%s holds no validation choice: the floor is no candidate", latest)
    log.info("resuming from %s (round %d)", latest, int(record["round"]))
    return int(record["round"]), list(record.get("history", []))


def restore_client_state(
    client_state: dict[str, dict[str, Any]], record: Mapping[str, Any]
) -> None:
    """Refill each client's dict of ``client_state`` in place from a checkpoint record."""
    for client, state in decode_client_state(record.get("client_state", {})).items():
        target = client_state.setdefault(client, {})
        target.clear()
        target.update(state)


def finish_round(
    strategy: Strategy,
    setup: RunSetup,
    server_round: int,
    results: Sequence[FitResult],
    history: list[dict[str, Any]],
    *,
    failures: Mapping[str, str] | None = None,
    evaluate_round: RoundCallback | None = None,
    client_state: Mapping[str, Mapping[str, Any]] | None = None,
    sums: Mapping[str, GroupSum] | None = None,
    notes: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """Aggregate ``results``, append the round's entry to ``history``, checkpoint, evaluate.

    The checkpoint is written before the evaluation (its entry marked ``evaluation_pending``),
    so a round whose evaluation fails (too few sites answer it) leaves its trained model on
    disk and a resume evaluates it first (:func:`evaluate_pending`); after the evaluation it is
    written again with the evaluation in its history.

    Parameters
    ----------
    strategy : Strategy
    setup : RunSetup
    server_round : int
    results : sequence of FitResult
        The replies that arrived and passed validation.
    history : list of dict
        Appended to in place.
    failures : mapping, optional
        Client id → reason, for clients whose reply was lost or rejected this round; recorded
        in the entry under ``failed`` (absent when every client replied).
    evaluate_round : callable, optional
        Called with the strategy and the round after the checkpoint; its mapping is merged
        into the entry.
    client_state : mapping, optional
        Client id → persistent state after this round, saved in the checkpoint
        (:func:`~rvfedprs.federation.checkpoints.encode_client_state`).
    sums : mapping of str to GroupSum, optional
        A securely aggregated round's sums: the strategy aggregates them
        (:meth:`~rvfedprs.strategies.base.Strategy.aggregate_sums`); ``results`` then carry
        no parameters.
    notes : mapping, optional
        Merged into the entry (a secure round's groups and faults).

    Returns
    -------
    entry : dict
        ``round``, ``loss`` (n_k-weighted mean local training loss), ``failed`` if any, and the
        evaluation's keys.
    checkpoint : Path or None
    """
    if sums is None:
        strategy.aggregate_fit(server_round, results)
    else:
        strategy.aggregate_sums(server_round, results, sums)
    n = np.array([r.n_samples for r in results], dtype=np.float64)
    loss = float(np.average([r.metrics["loss"] for r in results], weights=n))
    entry: dict[str, Any] = {"round": server_round, "loss": loss}
    if failures:
        entry["failed"] = dict(sorted(failures.items()))
    entry.update(notes or {})
    history.append(entry)
    if evaluate_round is not None:
        entry[EVALUATION_PENDING] = True  # saved so: a resume evaluates the round first
    path = _save_round(strategy, setup, server_round, history, client_state)
    if evaluate_round is not None:
        del entry[EVALUATION_PENDING]
        entry.update(evaluate_round(strategy, server_round))
        path = _save_round(strategy, setup, server_round, history, client_state)
    return entry, path


def evaluate_pending(
    strategy: Strategy,
    setup: RunSetup,
    history: list[dict[str, Any]],
    evaluate_round: RoundCallback | None,
    client_state: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """A resumed run whose last round was saved before its evaluation: evaluate it now.

    The round's entry and checkpoint then hold what an uninterrupted run's would.
    """
    if not history or not history[-1].pop(EVALUATION_PENDING, False) or evaluate_round is None:
        return
    server_round = int(history[-1]["round"])
    log.info("round %d was saved before its evaluation: evaluating it", server_round)
    history[-1].update(evaluate_round(strategy, server_round))
    _save_round(strategy, setup, server_round, history, client_state)


def _save_round(
    strategy: Strategy,
    setup: RunSetup,
    server_round: int,
    history: list[dict[str, Any]],
    client_state: Mapping[str, Mapping[str, Any]] | None,
) -> Path | None:
    """Write (or overwrite) the round's checkpoint; prune old ones. None without ``setup.out``."""
    if setup.out is None:
        return None
    record = {
        "round": server_round,
        "seed": setup.random_seed,
        "rng": {"scheme": SEED_SCHEME},
        "strategy_name": strategy.name,
        "strategy_state": strategy.state_dict(),
        "clusters": strategy.clusters(),
        "history": history,
        "client_ids": list(setup.client_ids),
        **setup.checkpoint_extra,
    }
    if client_state is not None:
        record["client_state"] = encode_client_state(client_state)
    if setup.selection is not None:
        record["selected"] = setup.selection.state_dict()
    path = save_checkpoint(checkpoint_path(setup.out, server_round), record)
    if setup.keep_checkpoints is not None:
        prune_checkpoints(path.parent, setup.keep_checkpoints)
    return path


def run_rounds(
    strategy: Strategy,
    transport: Transport,
    setup: RunSetup,
    settings: Mapping[str, Any],
    *,
    rounds: int,
    start: int,
    history: list[dict[str, Any]],
    client_state: dict[str, dict[str, Any]],
    min_replies: int,
    evaluate_round: RoundCallback | None = None,
    on_round: Callable[[dict[str, Any]], None] | None = None,
    secure: SecureAggregation | None = None,
    screen: UpdateScreen | None = None,
) -> list[Path]:
    """Rounds ``start + 1 .. rounds``: configure, send, collect, check, aggregate, checkpoint.

    ``secure`` (secure aggregation) replaces the plain fit and aggregation of every round by
    :meth:`~rvfedprs.federation.secagg.training.SecureAggregation.fit_round` and the strategy's
    :meth:`~rvfedprs.strategies.base.Strategy.aggregate_sums`. ``screen`` refuses, in the
    clear, replies whose sample count differs from the one declared at setup or whose update
    norm is an outlier (:mod:`rvfedprs.federation.screening`); a refused site counts as lost.

    Returns
    -------
    list of Path
        The checkpoints written (pruned ones included).

    Raises
    ------
    FederationError
        When fewer than ``min_replies`` sites replied in a round.
    SecureAggregationError
        When a secure sum cannot be completed (too few members left, tampered shares).
    """
    with _releasing(secure, transport, settings):
        client_ids = transport.client_ids
        written: list[Path] = []
        traffic = traffic_of(transport)
        for server_round in range(start + 1, rounds + 1):
            if strategy.finished:  # a converged fit (FedGLM) needs no more rounds
                log.info("%s finished after round %d", strategy.name, server_round - 1)
                break
            mark = None if traffic is None else traffic.mark()
            instructions = strategy.configure_fit(server_round, client_ids)
            seeds = {c: client_seed(setup.random_seed, server_round, c) for c in client_ids}
            sums = notes = None
            if secure is None:
                results, failures = transport.fit(
                    server_round, instructions, seeds, settings, client_state
                )
                if screen is not None:
                    results, refused = screen.screen(server_round, results, instructions)
                    failures = {**failures, **refused}
            else:
                results, failures, sums, notes = secure.fit_round(
                    strategy, transport, server_round, instructions, seeds, settings, client_state
                )
            if traffic is not None:  # the round's training exchanges (its evaluation comes after)
                notes = {**(notes or {}), "traffic": traffic.table(mark)}
            step = f"round {server_round}"
            count = f"{step}: {len(results)} of {len(client_ids)} clients replied"
            require_replies(step, count, len(results), min_replies, failures)
            entry, path = finish_round(
                strategy,
                setup,
                server_round,
                [results[c] for c in sorted(results)],
                history,
                failures=failures,
                evaluate_round=evaluate_round,
                client_state=client_state,
                sums=sums,
                notes=notes,
            )
            if path is not None:
                written.append(path)
            if on_round is not None:
                on_round(entry)
    return written


@contextlib.contextmanager
def _releasing(secure: SecureAggregation | None, transport: Transport, settings: Mapping[str, Any]):
    """Around a run's rounds: the sites drop the last round's held update when they end.

    On an error, best effort: the error that stopped the run is the one raised.
    """
    if secure is None:
        yield
        return
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            secure.release(transport, settings)
        raise
    secure.release(transport, settings)


def warm_start(
    task: Task,
    transport: Transport,
    job: Mapping[str, Any],
    settings: Mapping[str, Any],
    *,
    secure: SecureAggregation | None = None,
    screen: UpdateScreen | None = None,
    fitted: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the task's warm-start fit (:meth:`~Task.warm_start`) and return the settings with it.

    The fit (the genomic task's floor: a federated GLM on PRS + covariates) goes through the
    same rounds as training — the same transport, ``min_replies`` and, when on, secure
    aggregation — until the strategy is :attr:`~Strategy.finished` or its round budget is
    spent; no checkpoint is written. Tasks without one get ``settings`` back unchanged.

    ``fitted`` (``sites``, ``settings``: a checkpoint's ``warm_start``, what an earlier run's
    warm start added to its settings) is taken as it is, not fitted again, when its sites are
    this transport's: a tuned study's trials share one floor.
    """
    if fitted is not None and sorted(fitted["sites"]) == sorted(transport.client_ids):
        log.info("warm start: as fitted before on the same %d sites", len(transport.client_ids))
        return {**settings, **fitted["settings"]}
    strategy, budget = task.warm_start(settings, job) or (None, 0)
    if strategy is None:
        return dict(settings)
    if secure is not None:
        secure.check(strategy)
    seed = int(job["seed"])
    setup = RunSetup(transport.client_ids, random_seed=seed)
    strategy.initialize(task.initial_parameters(settings, initial_seed(seed)), setup.client_ids)
    history: list[dict[str, Any]] = []
    state: dict[str, dict[str, Any]] = {c: {} for c in transport.client_ids}
    run_rounds(
        strategy,
        transport,
        setup,
        {**settings, "run_index": WARM_START_RUN},
        rounds=budget,
        start=0,
        history=history,
        client_state=state,
        min_replies=required_replies(job, len(transport.client_ids)),
        secure=secure,
        screen=screen,
    )
    return task.with_warm_start(settings, strategy, history)


def update_screen(job: Mapping[str, Any], settings: Mapping[str, Any]) -> UpdateScreen:
    """The job's refusal rules: declared sample counts, ``train.update_norm_factor``."""
    train = (job.get("config") or {}).get("train") or {}
    factor = train.get("update_norm_factor", 100.0)
    return UpdateScreen(
        declared=dict(settings.get("declared_samples") or {}),
        factor=None if factor is None else float(factor),
    )


def _progress(total: int, start: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc="rounds", unit="round", leave=False)


def serve(
    task: Task,
    transport: Transport,
    runs: Sequence[RunSpec],
    job: Mapping[str, Any],
    settings: Mapping[str, Any],
    *,
    client_state: dict[str, dict[str, Any]] | None = None,
    on_round: Callable[[int, dict[str, Any]], None] | None = None,
    progress: bool = False,
) -> list[RunResult]:
    """Run each of ``runs`` for ``job["rounds"]`` rounds over the sites of ``transport``.

    Parameters
    ----------
    task : Task
    transport : Transport
        The engine's; a pooled strategy (centralised) gets ``transport.pooled(task)``.
    runs : sequence of RunSpec
        One strategy each, run one after another.
    job : mapping
        ``seed``, ``rounds``, ``resume``, ``min_replies`` (default: every site), ``config``
        (its ``secagg`` section turns secure aggregation on) and what the task's
        :meth:`~Task.checkpoint_extra` reads.
    settings : mapping
        From :func:`negotiate` (or given directly). With :data:`FITTED_WARM_START` (a
        checkpoint's ``warm_start``) the warm start is taken from it on the same sites, not
        fitted (:func:`warm_start`); it is not sent to the sites.
    client_state : dict, optional
        Filled with the sites' persistent state of the first run (created when None); every
        run's own is in its result.
    on_round : callable, optional
        ``f(run_index, entry)`` after every round (status files, logging).
    progress : bool
        A progress bar over rounds.

    Returns
    -------
    list of RunResult
        One per run, in order; its ``metrics["traffic"]`` is the run's traffic table
        (:meth:`~rvfedprs.federation.metering.Traffic.table`; the first run's holds the warm
        start too), each history entry's ``traffic`` that of the round's training exchange.

    Raises
    ------
    ConfigError
        With secure aggregation on, for a strategy that cannot run with it (named, with why).
    """
    seed, rounds = int(job["seed"]), int(job["rounds"])
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    transport = metered(transport, task)
    mark = transport.traffic.mark()  # the first run's table holds the warm start too
    secure = SecureAggregation.from_job(job)
    if secure is not None:
        for run in runs:
            secure.check(run.strategy)
    screen = update_screen(job, settings)
    cold = dict(settings)
    before = cold.pop(FITTED_WARM_START, None)
    settings = warm_start(task, transport, job, cold, secure=secure, screen=screen, fitted=before)
    # what the warm start added, in every checkpoint (job["warm_start"] of a later run)
    warmed = {k: v for k, v in settings.items() if k not in cold or cold[k] is not v}
    fitted = {"sites": list(transport.client_ids), "settings": warmed} if warmed else None
    results = []
    for index, run in enumerate(runs):
        link = transport.pooled(task) if run.strategy.pooled else transport
        state: dict[str, dict[str, Any]] = (
            client_state if (index == 0 and client_state is not None) else {}
        )
        for c in link.client_ids:
            state.setdefault(c, {})
        min_replies = required_replies(job, len(link.client_ids))
        selection = task.selection(link, settings, job, min_replies=min_replies)
        setup = RunSetup(
            link.client_ids,
            random_seed=seed,
            out=run.out,
            checkpoint_extra={
                **task.checkpoint_extra(settings, job),
                "strategy_name": run.strategy.name,
                **({"warm_start": fitted} if fitted else {}),
            },
            keep_checkpoints=run.keep_checkpoints,
            selection=selection,
        )
        start, history = begin_run(
            run.strategy,
            setup,
            _initial(task, run.strategy, settings, seed),
            resume=bool(job.get("resume", False)),
            client_state=state,
        )
        evaluate = RoundEvaluations(selection, run.evaluate_round)
        evaluate.prepare(settings)  # the network after the warm start
        evaluate_pending(run.strategy, setup, history, evaluate or None, state)
        if start == 0:
            evaluate.start(run.strategy)  # the starting model (the floor) is a candidate
        bar = _progress(rounds, start, progress)

        def after(entry: dict[str, Any], _index: int = index, _bar=bar) -> None:
            if _bar is not None:
                _bar.update(1)
                _bar.set_postfix(loss=f"{entry['loss']:.4f}")
            if on_round is not None:
                on_round(_index, entry)

        written = run_rounds(
            run.strategy,
            link,
            setup,
            {**settings, "run_index": index},
            rounds=rounds,
            start=start,
            history=history,
            client_state=state,
            min_replies=min_replies,
            evaluate_round=evaluate or None,
            on_round=after,
            secure=secure,
            screen=screen,
        )  # fmt: skip
        if bar is not None:
            bar.close()
        results.append(
            RunResult(
                strategy=run.strategy,
                history=history,
                seed=seed,
                checkpoints=[p for p in written if p.exists()],
                client_state=state,
                metrics={"traffic": transport.traffic.table(mark)},
                selected=None if selection is None else selection.state_dict(),
            )
        )
        mark = transport.traffic.mark()
    return results


def run_job(
    task: Task,
    transport: Transport,
    job: Mapping[str, Any],
    *,
    on_round: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """The server's whole program for a job, on any engine; returns the job's summary.

    The task's own program when it has one (:meth:`Task.coordinator`, an analytics study);
    otherwise training: the ``setup`` step, then each run of ``job["runs"]`` (one strategy
    each) through :func:`serve`, every checkpoint kept (the launcher evaluates them). The
    summary holds ``round``, ``client_ids``, ``setup_failures``, ``failures`` (round → client →
    reason, of the first run), ``runs`` (per strategy, when several), ``traffic`` (the whole
    job's traffic table, per step; with several runs each run's in ``run_traffic``) and what the
    task's :meth:`~Task.summary` adds.

    Raises
    ------
    FederationError
        When too few sites answer.
    ConfigError
        When a run's strategy pools the sites' data (not on this engine).
    """
    transport = metered(transport, task)
    program = task.coordinator(job)
    if program is not None:
        summary = program(transport, job, on_round=on_round)
        return {**summary, "traffic": transport.traffic.table()}
    settings, transport, setup_failures = negotiate(task, transport, job)
    runs = [RunSpec(task.build_strategy(spec, job), out=Path(spec["out"])) for spec in job["runs"]]
    results = serve(task, transport, runs, job, settings, on_round=on_round)
    failures = [{e["round"]: e["failed"] for e in r.history if "failed" in e} for r in results]
    summary: dict[str, Any] = {
        "round": int(job["rounds"]),
        "client_ids": transport.client_ids,
        "setup_failures": dict(setup_failures),
        "failures": failures[0],
    }
    if len(runs) > 1:
        summary["runs"] = {
            spec["strategy"]: f for spec, f in zip(job["runs"], failures, strict=True)
        }
    summary.update(task.summary(results))
    summary["traffic"] = transport.traffic.table()  # the whole job's, the setup included
    if len(runs) > 1:
        summary["run_traffic"] = [r.metrics["traffic"] for r in results]
    return summary
