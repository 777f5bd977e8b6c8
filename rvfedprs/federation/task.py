"""The task seam: what a federated task implements so that any engine can run it.

An engine (in-process, Flower simulation, Flower deployment) moves messages between the server
and the sites; it names no task. A task says what a site holds and computes, and what the server
starts from. Two kinds of exchange cross the seam:

- **steps** (analytics): the server sends each site a :class:`Request` (a step name and a
  payload of JSON-like values and numpy arrays), the site answers with a payload
  (:meth:`Task.handle`). Every task answers ``setup`` (the summary the server needs to fix the
  run's settings, e.g. the PRS moments and case counts of the genomic task); an analytics task
  adds its own steps (allele counts, feature building, evaluation summaries); the steps of a
  secure sum (``secagg.*``, :mod:`rvfedprs.federation.secagg`) are answered for every task;
- **fit** (training rounds): the strategy's :class:`~rvfedprs.strategies.base.FitInstruction`
  goes to each site, which trains and returns a :class:`~rvfedprs.strategies.base.FitResult`
  (:meth:`Task.fit`), driven by the one server loop of :mod:`rvfedprs.federation.rounds`.

A :class:`Transport` is the engine's side: it delivers a round of requests or fit instructions
and collects the replies, recording per site why one is missing. Tasks are registered by name in
:mod:`rvfedprs.tasks`.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.plan import RunPlan
from rvfedprs.federation.secagg.protocol import STEPS as SECAGG_STEPS
from rvfedprs.strategies.base import FitInstruction, FitResult, Strategy

__all__ = ["Request", "Task", "Transport", "Replies", "WARM_START_RUN"]

#: ``run_index`` of the warm-start fit's messages (the training runs count from 0). Here, not in
#: :mod:`~rvfedprs.federation.rounds`, so that a site's ClientApp can read it without torch.
WARM_START_RUN = 1 << 20  # above any real run index; a non-negative seed word


@dataclass
class Request:
    """A step the server asks of one site.

    Attributes
    ----------
    step : str
        The step's name (``setup``, or one of the task's :attr:`Task.steps`).
    payload : dict
        JSON-like values (``None``, numbers, strings, lists, mappings) and numpy arrays at any
        depth.
    """

    step: str
    payload: dict[str, Any] = field(default_factory=dict)


#: What a transport returns for one exchange: site → reply, and site → why it has none.
Replies = tuple[dict[str, Any], dict[str, str]]


class Task(ABC):
    """A federated task (genomic PRS, MedMNIST imaging, an analytics study).

    Site side — runs where the data is, with nothing but the site's own files:
    :meth:`locate` (which site a Flower node is), :meth:`open_site`, :meth:`handle` (steps),
    :meth:`fit` (a training round). Server side: :meth:`run_settings` (from the sites' setup
    replies), :meth:`initial_parameters`, :meth:`build_strategy`.

    ``settings`` is the run-wide mapping the server derives once (JSON-serialisable); it reaches
    every site with every message, so a site needs no other channel.
    """

    #: The registry name (``rvfedprs.tasks``).
    name: ClassVar[str] = ""
    #: Step name → name of the method that answers it, ``method(site, payload, state)``.
    steps: ClassVar[Mapping[str, str]] = {"setup": "setup_report"}
    #: ``"module:function"`` building this task's :class:`RunPlan` from a configuration
    #: (:meth:`plan`); named, not imported, as the tasks are in :mod:`rvfedprs.tasks`.
    planner: ClassVar[str] = ""

    # --- site side -------------------------------------------------------------------------
    @abstractmethod
    def locate(
        self, node_config: Mapping[str, Any], run_config: Mapping[str, Any], settings: Mapping
    ) -> dict[str, str]:
        """Which site a Flower node serves, from its node and run configuration.

        Returns the locator that :meth:`open_site` takes; it holds at least ``client-id``.

        Raises
        ------
        ConfigError
            When the configurations do not say which site this is.
        """

    @abstractmethod
    def open_site(self, locator: Mapping[str, str], settings: Mapping[str, Any]) -> Any:
        """The site's data, read from the files the locator names (and nothing else)."""

    @abstractmethod
    def setup_report(self, site: Any, payload: Mapping[str, Any], state: dict) -> dict:
        """The site's answer to ``setup``: what the server needs for :meth:`run_settings`."""

    def declared_samples(self, report: Mapping[str, Any]) -> int | None:
        """The training-sample count a setup report declares (``n``), or None.

        Every later reply of the site must report this count (its aggregation weight).
        """
        value = report.get("n")
        return None if value is None else int(value)

    def handle(self, request: Request, site: Any, state: dict) -> dict[str, Any]:
        """Answer ``request`` on ``site``; dispatches by :attr:`steps`.

        The secure-aggregation steps (``secagg.*``,
        :mod:`rvfedprs.federation.secagg.site`) are answered for every task, from the vectors
        the site holds in ``state``.

        Raises
        ------
        ConfigError
            For a step this task does not know, naming the ones it does.
        """
        if request.step in SECAGG_STEPS:  # the site's keys and masks (Flower's primitives)
            from rvfedprs.federation.secagg.site import answer as answer_secagg

            return answer_secagg(request.step, request.payload, state)
        method = self.steps.get(request.step)
        if method is None:
            raise ConfigError(
                f"task {self.name!r} has no step {request.step!r}; steps: {sorted(self.steps)}"
            )
        return getattr(self, method)(site, request.payload, state)

    @abstractmethod
    def fit(
        self,
        instruction: FitInstruction,
        site: Any,
        settings: Mapping[str, Any],
        state: dict[str, Any],
        *,
        random_seed: int,
    ) -> FitResult:
        """One round of local training on ``site``; ``state`` persists across rounds."""

    def export_state(self, state: Mapping[str, Any]) -> dict[str, Any] | None:
        """The part of a site's persistent state the server keeps in its checkpoints (JSON).

        None (the default) when the server keeps nothing; a site that comes back empty (a
        resumed run on a fresh node) is handed its saved state (:meth:`restore_state`).
        """
        return None

    def restore_state(self, saved: Mapping[str, Any]) -> dict[str, Any]:
        """Inverse of :meth:`export_state`."""
        return {}

    def check_state(self, saved: Mapping[str, Any] | None, settings: Mapping) -> str | None:
        """Why a reply's exported state is unusable, or None (the default: always usable)."""
        return None

    def pool_sites(self, sites: Mapping[str, Any]) -> Any:
        """One virtual site holding every site's data (the centralised baseline, in-process).

        Raises
        ------
        ConfigError
            The default: this task cannot pool its sites.
        """
        raise ConfigError(f"task {self.name!r} cannot pool its sites' data")

    # --- run plans (rvfedprs.plan.run) -------------------------------------------------------
    def plan(self, config: Mapping[str, Any], out: Any = None, **options: Any) -> RunPlan:
        """The :class:`RunPlan` of a validated configuration (:attr:`planner` builds it).

        Raises
        ------
        ConfigError
            When this task builds no plan from a configuration.
        """
        if not self.planner:
            raise ConfigError(f"task {self.name!r} builds no run plan from a configuration")
        module_name, function = self.planner.split(":")
        build = getattr(importlib.import_module(module_name), function)
        return build(config, out, **options)

    def load_data(self, locator: Any) -> Any:
        """The task's data at ``locator`` as a plan holds it (``RunPlan.data``).

        Raises
        ------
        ConfigError
            The default: this task loads no data here.
        """
        raise ConfigError(f"task {self.name!r} loads no data for a run plan")

    def plan_sites(self, plan: RunPlan) -> Mapping[str, Any]:
        """The in-process sites of ``plan.data``, keyed by client id.

        Raises
        ------
        ConfigError
            The default: this task runs no plan in-process.
        """
        raise ConfigError(f"task {self.name!r} cannot run a plan in this process")

    def plan_settings(self, plan: RunPlan) -> dict[str, Any]:
        """The run settings of an in-process ``plan`` (what :meth:`run_settings` derives)."""
        raise ConfigError(f"task {self.name!r} cannot run a plan in this process")

    def plan_nodes(self, plan: RunPlan) -> dict[str, Any]:
        """What a Flower job of ``plan`` needs (``submit_job``'s options).

        ``nodes``, ``n_sites`` and ``run_config`` or ``task_settings``
        (:func:`rvfedprs.federation.flower.engine.submit_job`).

        Raises
        ------
        ConfigError
            The default: this task runs no plan on Flower.
        """
        raise ConfigError(f"task {self.name!r} cannot run a plan on Flower")

    # --- server side -----------------------------------------------------------------------
    @abstractmethod
    def run_settings(
        self, job: Mapping[str, Any], reports: Mapping[str, Mapping[str, Any]]
    ) -> dict[str, Any]:
        """The run-wide settings every site receives, from the job and the setup replies."""

    @abstractmethod
    def initial_parameters(self, settings: Mapping[str, Any], random_seed: int) -> dict[str, Any]:
        """w^0, seeded from ``random_seed`` (the engine passes ``initial_seed(seed)``)."""

    def parameter_template(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """Parameters of w^0's names and shapes whose values no one reads.

        What a strategy without a :attr:`~rvfedprs.strategies.base.Strategy.random_start`
        starts from; by default :meth:`initial_parameters` (seed 0). A task whose model is
        costly to build overrides it (the genomic task: zeros, without torch).
        """
        return self.initial_parameters(settings, 0)

    @abstractmethod
    def build_strategy(self, spec: Mapping[str, Any], job: Mapping[str, Any]) -> Strategy:
        """A fresh strategy for one run of the job (``spec``: ``strategy`` and its options)."""

    def warm_start(
        self, settings: Mapping[str, Any], job: Mapping[str, Any]
    ) -> tuple[Strategy, int] | None:
        """A federated fit to run before training and its round budget, or None (the default).

        :func:`~rvfedprs.federation.rounds.warm_start` runs it over the sites and hands the
        fitted strategy to :meth:`with_warm_start`.
        """
        return None

    def with_warm_start(
        self, settings: Mapping[str, Any], strategy: Strategy, history: Sequence[Mapping]
    ) -> dict[str, Any]:
        """The run settings with what the warm-start fit found (default: unchanged)."""
        return dict(settings)

    def checkpoint_extra(self, settings: Mapping[str, Any], job: Mapping[str, Any]) -> dict:
        """What every checkpoint records besides the strategy (model shape, configuration)."""
        return {}

    def setup_payload(self, job: Mapping[str, Any]) -> dict[str, Any]:
        """What the ``setup`` request carries for this job besides the task's name (default: {}).

        The genomic task sends its validation split here, so that the counts a site declares
        are of the samples it trains on.
        """
        return {}

    def selection(
        self,
        transport: Transport,
        settings: Mapping[str, Any],
        job: Mapping[str, Any],
        *,
        min_replies: int,
    ) -> Any:
        """The run's choice of round on validation held at the sites, or None (the default).

        An object with the ``evaluate_round`` protocol (``prepare(settings)``,
        ``start(strategy)``, ``__call__(strategy, round)``), ``parameters_for(client)`` (the
        chosen models) and ``state_dict()`` / ``load_state_dict()`` (kept in every checkpoint
        as ``selected``): :func:`~rvfedprs.federation.rounds.serve` runs it over ``transport``
        after the warm start and after every round, on every engine.
        """
        return None

    def summary(self, results: Sequence[Any]) -> dict[str, Any]:
        """What the job's final status adds for this task (e.g. every client's ε)."""
        return {}

    def site_key(self, settings: Mapping[str, Any]) -> str:
        """The part of the settings an opened site depends on (a node caches sites by it)."""
        return ""

    def coordinator(self, job: Mapping[str, Any]) -> Callable[..., dict[str, Any]] | None:
        """The server's own program for ``job``, or None (the default) to train its runs.

        An analytics task returns ``program(transport, job, *, on_round) -> summary`` running its
        own sequence of steps; :func:`~rvfedprs.federation.rounds.run_job` calls it on every
        engine.
        """
        return None


class Transport(ABC):
    """An engine's side of the seam: delivers requests and fit instructions, collects replies.

    A reply that is missing (timeout, a dead node), an error raised on the site, or a reply
    that fails its checks ends up in the failures mapping, site → reason; the caller decides
    whether enough replies arrived.
    """

    @property
    @abstractmethod
    def client_ids(self) -> list[str]:
        """The sites this transport reaches, sorted."""

    @abstractmethod
    def open(self, payload: Mapping[str, Any]) -> Replies:
        """Reach every site and ask it the ``setup`` step; (site → report, who → failure).

        ``payload`` holds the task's name and its job-level settings. A Flower engine learns
        here which node serves which site; a node that cannot say is a failure keyed
        ``node <id>``.
        """

    @abstractmethod
    def subset(self, client_ids: Sequence[str]) -> Transport:
        """The same engine restricted to ``client_ids`` (the sites that answered the setup)."""

    @abstractmethod
    def query(self, requests: Mapping[str, Request], settings: Mapping[str, Any]) -> Replies:
        """Send each site its request; returns (site → reply payload, site → failure)."""

    @abstractmethod
    def fit(
        self,
        server_round: int,
        instructions: Mapping[str, FitInstruction],
        seeds: Mapping[str, int],
        settings: Mapping[str, Any],
        client_state: dict[str, dict[str, Any]],
    ) -> Replies:
        """One training round: returns (site → FitResult, site → failure).

        ``client_state`` is the server's copy of every site's persistent state: sites that
        lack theirs are handed it, and it is updated from the replies.
        """

    def pooled(self, task: Task) -> Transport:
        """A transport to one virtual site holding every site's data (centralised baseline).

        Raises
        ------
        ConfigError
            The default: this engine cannot pool sites (only the in-process engine can).
        """
        raise ConfigError(
            "this engine cannot pool the sites' data (the centralised baseline); "
            "use the in-process engine"
        )
