"""Tuning on validation data, the same budget for every method, resumably (SPEC §12).

:func:`three_way_split` carves a validation split out of every client's training split
(stratified, seeded) and takes the test split *out* of the federation that training and tuning
see, so nothing that chooses can read it. :func:`run_trial` trains one configuration of one
method with early stopping on a pooled validation criterion (every client scored by its own
model) and keeps the best round's models; :func:`tune` runs a method's configurations (the
same number B for every method, :mod:`rvfedprs.protocol.grids`) and chooses the one with the
best validation score on the same criterion.

The criterion (:data:`~rvfedprs.evaluation.selection.CRITERIA`) is ``"auc"``, the pooled
validation AUC (the default), or ``"log_loss"``, the pooled validation log-loss (lower is
better); a carrier-restricted score is not offered, since every sample carries rare alleles
(median 10 in the map's cohorts) and which carriers matter is the simulator's truth. Every
trial records both criteria per round.

AUC stays the default, on a measured comparison (``simulations/stopping_rule/``: choices made
on one half of 15 map cohorts' validation splits, measured on the other half). Neither
criterion is clearly better on the endpoints: held-out AUC level for the networks and
+0.013 [+0.000, +0.026] for FedCE-GLM with the log-loss; carrier AUC lower with it for FedAvg
(−0.010 [−0.021, −0.003]) and FedCE-GLM (−0.012 [−0.036, +0.016]). The log-loss never chose a
FedCE-GLM model below the floor (the AUC: 7 of 30 choices) and is far more reproducible for
the GLMs, but by keeping the floor fit, which gives up the carrier signal.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.config import deep_merge, validate_config
from rvfedprs.evaluation.selection import (
    BestRound,
    check_criterion,
    split_validation,
    validation_scores,
)
from rvfedprs.exceptions import ConfigError
from rvfedprs.genomic.data import Federation
from rvfedprs.genomic.engine import plan as genomic_plan
from rvfedprs.plan import run
from rvfedprs.protocol.grids import LOGISTIC, configuration_overrides, configurations
from rvfedprs.protocol.references import fit_logistic, logistic_scores
from rvfedprs.provenance import jsonable
from rvfedprs.run import dp_epsilon
from rvfedprs.strategies import DISTANCE_STRATEGIES, strategy_from_config
from rvfedprs.training import ClientData, dp_settings

__all__ = [
    "ProtocolData",
    "three_way_split",
    "StopTraining",
    "EarlyStopping",
    "Trial",
    "Fitted",
    "Tuned",
    "trial_key",
    "privacy_settings",
    "run_trial",
    "tune",
]

log = logging.getLogger(__name__)

Predict = Callable[[Mapping[str, ClientData]], dict[str, np.ndarray]]

#: What a run without secure aggregation, DP-SGD or keyed Bloom hashing records.
PLAIN: dict[str, Any] = {"secagg": None, "dp": None, "bloom_key_file": None}


def privacy_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The privacy settings a run of the validated ``config`` trains with.

    Returns
    -------
    dict
        ``secagg``: the ``secagg`` section when enabled, else None; ``dp``: σ, C and δ
        (:func:`~rvfedprs.training.dp.dp_settings`) and the DP batch size when enabled, else
        None; ``bloom_key_file``: the keyed-hashing secret's file, else None (never the key).
    """
    secagg = dict(config.get("secagg") or {})
    dp = dp_settings(config.get("dp"))
    if dp is not None:
        dp["batch_size"] = config["dp"].get("batch_size")
    return {
        "secagg": secagg if secagg.get("enabled", False) else None,
        "dp": dp,
        "bloom_key_file": (config.get("fedce") or {}).get("bloom_key_file") or None,
    }


def _trial_config(
    base_config: Mapping[str, Any], configuration: Mapping[str, Any], random_seed: int
) -> dict[str, Any]:
    """The validated configuration a (non-logistic) trial trains with."""
    config = validate_config(deep_merge(base_config, configuration_overrides(configuration)))
    config["train"]["seed"] = int(random_seed)
    # the protocol holds its validation split out itself (ProtocolData): the sites of a trial
    # train on all of data.fit and hold out nothing more
    config["train"]["validation_fraction"] = 0.0
    return config


def _trial_privacy(method: str, base_config: Mapping[str, Any],
                   configuration: Mapping[str, Any]) -> dict[str, Any]:  # fmt: skip
    """What a trial of ``method`` records as its privacy settings (see :class:`Trial`)."""
    if method != LOGISTIC:
        return privacy_settings(_trial_config(base_config, configuration, 0))
    asked = privacy_settings(validate_config(deep_merge(base_config, {})))
    left_out = sorted(k for k, v in asked.items() if v is not None)
    return dict(PLAIN, not_applied=left_out) if left_out else dict(PLAIN)


@dataclass(frozen=True)
class ProtocolData:
    """A federation split three ways (SPEC §12).

    Attributes
    ----------
    fit : Federation
        Training samples less the validation split; its ``test`` is empty.
    validation : dict of str to ClientData
        Held out of training, for every choice.
    test : dict of str to ClientData
        Used once, by whoever evaluates the chosen models; never passed to tuning.
    """

    fit: Federation
    validation: dict[str, ClientData]
    test: dict[str, ClientData]

    @property
    def n_rare(self) -> int:
        """Number of rare-variant columns."""
        return self.fit.n_rare

    @property
    def client_ids(self) -> list[str]:
        """Client ids, sorted."""
        return self.fit.client_ids


def three_way_split(
    federation: Federation, validation_fraction: float, *, random_seed: int
) -> ProtocolData:
    """Train / validation / test per client; validation stratified by phenotype and seeded.

    The PRS and covariates stay standardised with the training split's federated moments
    (validation samples included: they are training-side data).
    """
    fit, validation = split_validation(federation, validation_fraction, random_seed=random_seed)
    test = dict(federation.test)
    return ProtocolData(fit=replace(fit, test={}), validation=validation, test=test)


class StopTraining(Exception):
    """Raised by :class:`EarlyStopping` to end a run early."""


class EarlyStopping(BestRound):
    """BestRound that stops a run after ``patience`` rounds without a better validation score.

    :class:`~rvfedprs.evaluation.selection.BestRound` keeps the best round's models on its
    ``criterion``; this raises :class:`StopTraining` once that round is ``patience`` rounds old.
    """

    def __init__(
        self,
        validation: Mapping[str, ClientData],
        n_rare: int,
        model_config: Mapping[str, Any],
        *,
        patience: int | None,
        criterion: str = "auc",
        keep_predictions: bool = False,
    ) -> None:
        super().__init__(validation, n_rare, model_config, criterion=criterion,
                         keep_predictions=keep_predictions)  # fmt: skip
        if patience is not None and patience < 1:
            raise ValueError(f"patience must be >= 1 or None, got {patience}")
        self.patience = patience

    def __call__(self, strategy, server_round):
        """Score the round; stop when the best round is ``patience`` rounds old."""
        out = super().__call__(strategy, server_round)
        if self.patience is not None and len(self.values) - self.best_round >= self.patience:
            raise StopTraining(f"no better validation {self.criterion} for {self.patience} rounds")
        return out


@dataclass
class Trial:
    """One configuration of one method, trained and scored on validation data.

    Attributes
    ----------
    method : str
    configuration : dict
        Dotted keys (:mod:`rvfedprs.protocol.grids`).
    key : str
        :func:`trial_key`.
    validation_auc : float
        Pooled validation AUC of the best round.
    best_round : int or None
        The early-stopped round (None for the logistic regression).
    rounds_run : int
    validation_aucs : list of float
        Per round.
    clusters : dict
        Client → cluster of the strategy at the end of training.
    wall_s : float
    random_seed : int
    cpu_s : float
        CPU seconds of this process (the cost without other jobs' load; NaN in old records).
    privacy : dict
        The privacy settings the trial trained with (:func:`privacy_settings`: ``secagg``,
        ``dp``, ``bloom_key_file``); the logistic regression adds ``not_applied``, the
        settings the base configuration asks for that it cannot apply. Records written
        before trials carried privacy settings read back as :data:`PLAIN` (they trained
        without any).
    epsilon : float
        The largest cumulative DP ε spent by a client (NaN without DP-SGD).
    criterion : str
        What chose the round and what :func:`tune` compares: ``"auc"`` or ``"log_loss"``
        (records written before the option read back as ``"auc"``).
    validation_log_loss : float
        Pooled validation log-loss of the best round (NaN in old records).
    validation_log_losses : list of float
        Per round.
    """

    method: str
    configuration: dict[str, Any]
    key: str
    validation_auc: float
    best_round: int | None
    rounds_run: int
    validation_aucs: list[float] = field(default_factory=list)
    clusters: dict[str, Any] = field(default_factory=dict)
    wall_s: float = 0.0
    random_seed: int = 0
    cpu_s: float = float("nan")
    privacy: dict[str, Any] = field(default_factory=lambda: dict(PLAIN))
    epsilon: float = float("nan")
    criterion: str = "auc"
    validation_log_loss: float = float("nan")
    validation_log_losses: list[float] = field(default_factory=list)

    @property
    def score(self) -> float:
        """The best round's score on :attr:`criterion`, higher is better (−∞ when undefined)."""
        value = -self.validation_log_loss if self.criterion == "log_loss" else self.validation_auc
        return value if math.isfinite(value) else -math.inf

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable record."""
        return jsonable(asdict(self))

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Trial:
        """Inverse of :meth:`to_json` (null AUCs read back as NaN)."""
        data = dict(record)
        data["validation_auc"] = _number(data["validation_auc"])
        data["validation_aucs"] = [_number(v) for v in data.get("validation_aucs", [])]
        data["cpu_s"] = _number(data.get("cpu_s"))
        data["epsilon"] = _number(data.get("epsilon"))
        data["validation_log_loss"] = _number(data.get("validation_log_loss"))
        data["validation_log_losses"] = [_number(v) for v in data.get("validation_log_losses", [])]
        return cls(**data)


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


@dataclass
class Fitted:
    """What a trial leaves to predict with: ``predict(datasets)`` → client → probabilities.

    ``validation_predictions`` (with ``run_trial(keep_predictions=True)``): round (0: the
    starting models) → client → validation probabilities.
    """

    predict: Predict
    clusters: dict[str, Any] = field(default_factory=dict)
    validation_predictions: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)


@dataclass
class Tuned:
    """A method's tuning: every trial, the chosen one and its models."""

    method: str
    trials: list[Trial]
    chosen: Trial
    fitted: Fitted | None


def trial_key(payload: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of ``payload`` as canonical JSON."""
    text = json.dumps(jsonable(payload), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_trial(
    data: ProtocolData,
    method: str,
    configuration: Mapping[str, Any],
    *,
    base_config: Mapping[str, Any],
    max_rounds: int,
    patience: int | None,
    random_seed: int,
    groups: Mapping[str, Any] | None = None,
    key: str = "",
    criterion: str = "auc",
    keep_predictions: bool = False,
) -> tuple[Trial, Fitted]:
    """Train ``method`` with ``configuration`` on ``data.fit``; score it on validation.

    The trial trains with the base configuration's privacy settings (secure aggregation,
    DP-SGD, keyed Bloom hashing), as the run it chooses for does, and records them.

    Parameters
    ----------
    data : ProtocolData
    method : str
        A strategy name or :data:`~rvfedprs.protocol.grids.LOGISTIC`.
    configuration : mapping
        Dotted keys merged over ``base_config``.
    base_config : mapping
        A configuration (sections); validated after the merge. Its ``secagg``, ``dp`` and
        ``fedce.bloom_key_file`` apply to the trial.
    max_rounds : int
        The round budget (an upper bound: early stopping usually ends sooner).
    patience : int or None
        Rounds without a better validation AUC before stopping (None: run every round).
    random_seed : int
        Training seed (the same for every method of a cohort: paired runs).
    groups : mapping, optional
        ``fedce_oracle``'s true groups.
    key : str
        Recorded in the trial.
    criterion : str
        Early stopping and the best round on the pooled validation ``"auc"`` (default) or
        ``"log_loss"`` (:data:`~rvfedprs.evaluation.selection.CRITERIA`).
    keep_predictions : bool
        Keep every round's validation probabilities in ``Fitted.validation_predictions``.

    Returns
    -------
    Trial, Fitted

    Raises
    ------
    ValueError
        For an unknown criterion (named).
    ConfigError
        For a distance strategy, or a strategy that cannot run with secure aggregation when
        the base configuration enables it (named, with why).
    """
    check_criterion(criterion)
    t0, c0 = time.perf_counter(), time.process_time()
    if method == LOGISTIC:
        privacy = _trial_privacy(method, base_config, configuration)
        if "not_applied" in privacy:
            log.warning("%s: a pooled reference; trained without %s", method,
                        ", ".join(privacy["not_applied"]))  # fmt: skip
        model = fit_logistic(data.fit.train, float(configuration["logistic.C"]))
        held = logistic_scores(model, data.validation)
        scores = validation_scores(held, data.validation)
        trial = Trial(method, dict(configuration), key, scores["auc"], None, 0, [scores["auc"]],
                      {}, time.perf_counter() - t0, int(random_seed), time.process_time() - c0,
                      privacy, criterion=criterion, validation_log_loss=scores["log_loss"],
                      validation_log_losses=[scores["log_loss"]])  # fmt: skip
        kept = {0: held} if keep_predictions else {}
        return trial, Fitted(lambda datasets: logistic_scores(model, datasets),
                             validation_predictions=kept)  # fmt: skip
    if method in DISTANCE_STRATEGIES:
        raise ConfigError(f"the protocol does not run {method!r} (it needs a distance matrix)")
    config = _trial_config(base_config, configuration, random_seed)
    strategy = strategy_from_config(method, config, clusters=groups)
    # the plan of `rvfedprs train` on this configuration (its privacy settings included),
    # stopped early on validation, scored with the run's network (the engine hands the stopper
    # the settings after the warm start: a burden or top-k model.rare_input's projection)
    plan = genomic_plan(config, data=data.fit, strategy=strategy)
    stopper = EarlyStopping(data.validation, data.n_rare, plan.model, patience=patience,
                            criterion=criterion, keep_predictions=keep_predictions)  # fmt: skip
    plan = replace(plan, engine="inprocess", rounds=int(max_rounds), evaluate_round=stopper)
    client_state: dict[str, dict[str, Any]] = {}
    try:
        run(plan, client_state=client_state)
    except StopTraining:
        pass
    clusters = {c: strategy.clusters().get(c, 0) for c in data.client_ids}
    epsilon = dp_epsilon(client_state).get("epsilon", float("nan"))
    trial = Trial(
        method,
        dict(configuration),
        key,
        float(stopper.best_value),
        int(stopper.best_round),
        len(stopper.values),
        [float(a) for a in stopper.values],
        clusters,
        time.perf_counter() - t0,
        int(random_seed),
        time.process_time() - c0,
        privacy_settings(config),
        float(epsilon),
        criterion,
        float(stopper.best_loss),
        [float(v) for v in stopper.losses],
    )
    return trial, Fitted(stopper.predict, clusters, stopper.predictions)


def tune(
    data: ProtocolData,
    method: str,
    *,
    out: str | Path,
    base_config: Mapping[str, Any],
    data_key: str,
    max_rounds: int,
    patience: int | None,
    random_seed: int,
    budget: int | None = None,
    grid_seed: int = 0,
    candidates: Sequence[Mapping[str, Any]] | None = None,
    groups: Mapping[str, Any] | None = None,
    refit: bool = True,
    criterion: str = "auc",
) -> Tuned:
    """Run ``method``'s configurations and choose the best on the validation ``criterion``.

    Parameters
    ----------
    data : ProtocolData
    method : str
    out : str or Path
        Trials go to ``out/<method>/<key>/trial.json``; the table to ``out/<method>/tuning.tsv``.
    base_config : mapping
    data_key : str
        Identifies the data (e.g. a hash of the cohort's definition): part of every key.
    max_rounds, patience, random_seed
        As :func:`run_trial`.
    budget : int, optional
        B: the number of configurations from :func:`~rvfedprs.protocol.grids.configurations`.
    grid_seed : int
        Seed of the configurations' draw.
    candidates : sequence of mapping, optional
        Explicit configurations instead of the grid (e.g. one chosen elsewhere).
    groups : mapping, optional
        ``fedce_oracle``'s true groups.
    refit : bool
        Re-run the chosen trial for its models when it was read from its record (False:
        ``fitted`` is then None, e.g. when its test predictions are on disk already).
    criterion : str
        ``"auc"`` (default: the highest pooled validation AUC) or ``"log_loss"`` (the lowest
        pooled validation log-loss), for early stopping, the best round and the choice among
        configurations; part of the trial keys when not ``"auc"``.

    Returns
    -------
    Tuned
        The chosen trial has the best validation score on ``criterion`` (the earliest on a
        tie); its folder ``out/<method>/<chosen.key>/`` is the place for whatever depends on it.

    Raises
    ------
    ValueError
        For an unknown criterion (named).
    """
    check_criterion(criterion)
    if (budget is None) == (candidates is None):
        raise ConfigError("give tune() either a budget (the grid) or explicit candidates")
    configs = (
        [dict(c) for c in candidates]
        if candidates is not None
        else configurations(
            method,
            int(budget),
            random_seed=grid_seed,
            glm_features=base_config.get("fedglm", {}).get("features"),
        )  # fmt: skip
    )
    folder = Path(out) / method
    trials: list[Trial] = []
    fitted: dict[str, Fitted] = {}
    for configuration in configs:
        key = trial_key(
            {
                "method": method,
                "configuration": configuration,
                "base": base_config,
                "data": data_key,
                "max_rounds": int(max_rounds),
                "patience": patience,
                "seed": int(random_seed),
                # AUC trials keep the keys they had before the criterion was an option
                **({"criterion": criterion} if criterion != "auc" else {}),
            }  # fmt: skip
        )
        path = folder / key / "trial.json"
        if path.is_file():
            record = Trial.from_json(json.loads(path.read_text()))
            expected = jsonable(_trial_privacy(method, base_config, configuration))
            if jsonable(record.privacy) == expected and record.criterion == criterion:
                trials.append(record)
                continue
            log.warning("%s %s: recorded with privacy %s and criterion %s, not %s and %s; "
                        "re-running", method, configuration, record.privacy, record.criterion,
                        expected, criterion)  # fmt: skip
        trial, fit = run_trial(
            data, method, configuration, base_config=base_config, max_rounds=max_rounds,
            patience=patience, random_seed=random_seed, groups=groups, key=key,
            criterion=criterion,
        )  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trial.to_json(), indent=2) + "\n")
        log.info(
            "%s %s: validation AUC %.4f, log-loss %.4f, round %s of %d (%.0f s)",
            *(method, configuration, trial.validation_auc, trial.validation_log_loss),
            trial.best_round,
            *(trial.rounds_run, trial.wall_s),
        )
        trials.append(trial)
        fitted[key] = fit
    chosen = max(trials, key=lambda t: t.score)  # max keeps the first of equal scores
    if chosen.key not in fitted and not refit:
        _write_table(folder / "tuning.tsv", trials, chosen)
        return Tuned(method, trials, chosen, None)
    if chosen.key not in fitted:
        trial, fit = run_trial(
            data, method, chosen.configuration, base_config=base_config, max_rounds=max_rounds,
            patience=patience, random_seed=random_seed, groups=groups, key=chosen.key,
            criterion=criterion,
        )  # fmt: skip
        if not math.isclose(trial.score, chosen.score, abs_tol=1e-9):
            log.warning("%s: re-run of %s gives validation %s %.6f, recorded %.6f", method,
                        chosen.key, criterion, trial.score, chosen.score)  # fmt: skip
        fitted[chosen.key] = fit
    _write_table(folder / "tuning.tsv", trials, chosen)
    return Tuned(method, trials, chosen, fitted[chosen.key])


def _write_table(path: Path, trials: Sequence[Trial], chosen: Trial) -> None:
    rows = [
        {
            "method": t.method,
            "key": t.key,
            "chosen": t.key == chosen.key,
            "validation_auc": t.validation_auc,
            "validation_log_loss": t.validation_log_loss,
            "criterion": t.criterion,
            "best_round": t.best_round,
            "rounds_run": t.rounds_run,
            "wall_s": round(t.wall_s, 2),
            "cpu_s": round(t.cpu_s, 2),
            "privacy": json.dumps(jsonable(t.privacy), sort_keys=True),
            "epsilon": t.epsilon,
            **{k: json.dumps(jsonable(v)) for k, v in sorted(t.configuration.items())},
        }
        for t in trials
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, sep="\t", index=False)
