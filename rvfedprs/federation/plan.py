"""A typed run plan: everything one federated training run needs, fixed before it starts.

A task builds a :class:`RunPlan` from a validated configuration (its ``plan``: for the genomic
task :func:`rvfedprs.genomic.engine.plan`); :func:`rvfedprs.plan.run` runs any plan on its
engine. Entry points adjust a built plan with :func:`dataclasses.replace` (a tuning trial's
early stopping, a shadow federation's training sets), so every run of one configuration
carries the same privacy settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation import ENGINES
from rvfedprs.strategies.base import Strategy

__all__ = ["Privacy", "RunPlan", "enabled_secagg"]


def enabled_secagg(config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The ``secagg`` section of ``config`` when it turns secure aggregation on, else None."""
    section = dict((config or {}).get("secagg") or {})
    return section if section.get("enabled", False) else None


@dataclass(frozen=True)
class Privacy:
    """The privacy settings a run trains with.

    Attributes
    ----------
    secagg : mapping, optional
        The enabled ``secagg`` section (None: updates go to the server in the clear).
    dp : mapping, optional
        DP-SGD settings (:func:`~rvfedprs.training.dp.dp_settings`; None: no DP).
    bloom_key : bytes, optional
        The clients' shared HMAC secret for keyed Bloom hashing (never sent to the server).
    bloom_key_file : str, optional
        The file it was read from (what a Flower node reads itself).
    """

    secagg: Mapping[str, Any] | None = None
    dp: Mapping[str, float] | None = None
    bloom_key: bytes | None = field(default=None, repr=False)
    bloom_key_file: str | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Privacy:
        """The privacy settings of a validated configuration (reads the Bloom key file)."""
        from rvfedprs.bloom import read_bloom_key
        from rvfedprs.training import dp_settings

        key_file = (config.get("fedce") or {}).get("bloom_key_file") or None
        return cls(
            secagg=enabled_secagg(config),
            dp=dp_settings(config.get("dp")),
            bloom_key=read_bloom_key(key_file),
            bloom_key_file=None if key_file is None else str(key_file),
        )


@dataclass(frozen=True)
class RunPlan:
    """One federated training run: task, data, strategy, rounds, seed, privacy, engine, outputs.

    Attributes
    ----------
    task : str
        The registered task (:func:`rvfedprs.tasks.get_task`) whose sites train.
    data : object
        What the task's sites are made of: a loaded federation (genomic), an
        :class:`~rvfedprs.imaging.federation.ImagingFederation` (imaging); a Flower engine
        reads its folder or file only; None where a coordinator's sites hold it (the study:
        :func:`rvfedprs.plan.run` with its open transport).
    strategy : Strategy
        A fresh strategy; trained in place by :func:`rvfedprs.plan.run`.
    rounds, seed : int
        Total rounds (a resumed run stops at the same total) and the master seed.
    strategy_spec : mapping
        What a Flower ServerApp rebuilds the strategy from: ``strategy`` (its registry name)
        and, for a distance-aware one, ``distance`` (``matrix``, ``clients``).
    privacy : Privacy
    engine : str
        One of :data:`rvfedprs.federation.ENGINES`.
    flower : mapping, optional
        The ``flower`` section (limits, a remote SuperLink) of a Flower engine.
    superlink : LocalSuperLink, optional
        A running SuperLink to submit to (Flower engines).
    model : mapping, optional
        The model configuration (task-specific; the genomic task's ``model`` section).
    training : object, optional
        The clients' local optimiser settings (genomic: a
        :class:`~rvfedprs.training.LocalTrainingConfig`; None: the task derives them from
        ``config`` and ``data``).
    config : mapping, optional
        The validated configuration, saved in every checkpoint (``rvfedprs evaluate`` reads
        it); None runs without one (a distance probe, a shadow federation).
    out : Path, optional
        Where ``checkpoints/`` (and ``flower/``) go; None writes nothing.
    resume : bool
        Continue from the latest checkpoint in ``out``.
    keep_checkpoints : int, optional
        Keep only the latest this many checkpoints (None or 0: all).
    evaluate_round : callable, optional
        ``f(strategy, round)`` after every round; merged into the history.
    progress : bool
        A progress bar over rounds (in-process).
    min_replies : int, optional
        Fewest clients a round may aggregate (default: every client).
    round_timeout, timeout : float, optional
        A Flower round's and the whole job's limits (seconds).
    expected_nodes : int, optional
        Flower nodes to wait for (default: one per client).
    """

    task: str
    data: Any
    strategy: Strategy
    rounds: int
    seed: int
    strategy_spec: Mapping[str, Any] = field(default_factory=dict)
    privacy: Privacy = field(default_factory=Privacy)
    engine: str = "inprocess"
    flower: Mapping[str, Any] | None = None
    superlink: Any = None
    model: Mapping[str, Any] | None = None
    training: Any = None
    config: Mapping[str, Any] | None = None
    out: Path | None = None
    resume: bool = False
    keep_checkpoints: int | None = None
    evaluate_round: Any = None
    progress: bool = False
    min_replies: int | None = None
    round_timeout: float | None = None
    timeout: float | None = None
    expected_nodes: int | None = None

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ConfigError(f"engine {self.engine!r} unknown; choose from {list(ENGINES)}")
        if int(self.rounds) < 1:
            raise ConfigError(f"a run needs at least one round; got rounds = {self.rounds}")
        if self.out is not None and not isinstance(self.out, Path):
            object.__setattr__(self, "out", Path(self.out))
        if self.config is not None:
            planned = None if self.privacy.secagg is None else dict(self.privacy.secagg)
            if enabled_secagg(self.config) != planned:
                raise ConfigError(
                    f"the plan's secure aggregation ({planned}) differs from its "
                    f"configuration's secagg section ({self.config.get('secagg')}); build the "
                    "privacy settings with Privacy.from_config"
                )

    def job_config(self) -> Mapping[str, Any] | None:
        """The configuration the engine's job carries (its ``secagg`` turns SecAgg on)."""
        if self.config is not None:
            return self.config
        if self.privacy.secagg is not None:
            return {"secagg": dict(self.privacy.secagg)}
        return None
