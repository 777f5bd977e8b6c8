"""Tuning on validation data, the same budget for every method, resumably (SPEC §12).

:func:`three_way_split` carves a validation split out of every client's training split
(stratified, seeded) and takes the test split *out* of the federation that training and tuning
see, so nothing that chooses can read it. :func:`run_trial` trains one configuration of one
method with early stopping on the pooled validation AUC (every client scored by its own
model) and keeps the best round's models; :func:`tune` runs a method's configurations (the
same number B for every method, :mod:`rvfedprs.protocol.grids`) and chooses the one with the
best validation AUC.

Every trial is recorded in ``OUT/<method>/<key>/trial.json`` where ``key`` hashes everything
that defines it (method, configuration, base configuration, round budget, patience, seed, the
data's identity): a finished trial is read back instead of re-run, and a changed configuration
invalidates only its own trials. ``OUT/<method>/tuning.tsv`` lists every configuration's
validation score and marks the chosen one. The chosen trial's models are kept in memory when it
ran in this process; otherwise it is re-run (training is deterministic given the seed) and its
validation AUC checked against the record.
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
from rvfedprs.evaluation import federation_metrics, predict_clients
from rvfedprs.evaluation.selection import BestRound, split_validation
from rvfedprs.exceptions import ConfigError
from rvfedprs.genomic.data import Federation
from rvfedprs.genomic.engine import run_inprocess
from rvfedprs.genomic.task import training_config
from rvfedprs.model import model_from_config
from rvfedprs.protocol.grids import LOGISTIC, configuration_overrides, configurations
from rvfedprs.protocol.references import fit_logistic, logistic_scores
from rvfedprs.provenance import jsonable
from rvfedprs.strategies import DISTANCE_STRATEGIES, strategy_from_config
from rvfedprs.training import ClientData

__all__ = [
    "ProtocolData",
    "three_way_split",
    "StopTraining",
    "EarlyStopping",
    "Trial",
    "Fitted",
    "Tuned",
    "trial_key",
    "run_trial",
    "tune",
]

log = logging.getLogger(__name__)

Predict = Callable[[Mapping[str, ClientData]], dict[str, np.ndarray]]


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
    """BestRound that stops a run after ``patience`` rounds without a better validation AUC.

    :class:`~rvfedprs.evaluation.selection.BestRound` keeps the best round's models; this
    raises :class:`StopTraining` once that round is ``patience`` rounds old.
    """

    def __init__(
        self,
        validation: Mapping[str, ClientData],
        n_rare: int,
        model_config: Mapping[str, Any],
        *,
        patience: int | None,
    ) -> None:
        super().__init__(validation, n_rare, model_config)
        if patience is not None and patience < 1:
            raise ValueError(f"patience must be >= 1 or None, got {patience}")
        self.patience = patience

    def __call__(self, strategy, server_round):
        """Score the round; stop when the best round is ``patience`` rounds old."""
        out = super().__call__(strategy, server_round)
        if self.patience is not None and len(self.aucs) - self.best_round >= self.patience:
            raise StopTraining(f"no better validation AUC for {self.patience} rounds")
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
        Pooled validation AUC of the best round (the selection criterion).
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
        return cls(**data)


def _number(value: Any) -> float:
    return float("nan") if value is None else float(value)


@dataclass
class Fitted:
    """What a trial leaves to predict with: ``predict(datasets)`` → client → probabilities."""

    predict: Predict
    clusters: dict[str, Any] = field(default_factory=dict)


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


def _pooled_auc(predictions: Mapping[str, np.ndarray], data: Mapping[str, ClientData]) -> float:
    return float(federation_metrics(predictions, data)["auc"])


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
) -> tuple[Trial, Fitted]:
    """Train ``method`` with ``configuration`` on ``data.fit``; score it on validation.

    Parameters
    ----------
    data : ProtocolData
    method : str
        A strategy name or :data:`~rvfedprs.protocol.grids.LOGISTIC`.
    configuration : mapping
        Dotted keys merged over ``base_config``.
    base_config : mapping
        A configuration (sections); validated after the merge.
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

    Returns
    -------
    Trial, Fitted
    """
    t0, c0 = time.perf_counter(), time.process_time()
    if method == LOGISTIC:
        model = fit_logistic(data.fit.train, float(configuration["logistic.C"]))
        auc = _pooled_auc(logistic_scores(model, data.validation), data.validation)
        trial = Trial(method, dict(configuration), key, auc, None, 0, [auc], {},
                      time.perf_counter() - t0, int(random_seed),
                      time.process_time() - c0)  # fmt: skip
        return trial, Fitted(lambda datasets: logistic_scores(model, datasets))
    if method in DISTANCE_STRATEGIES:
        raise ConfigError(f"the protocol does not run {method!r} (it needs a distance matrix)")
    config = validate_config(deep_merge(base_config, configuration_overrides(configuration)))
    config["train"]["seed"] = int(random_seed)
    strategy = strategy_from_config(method, config, clusters=groups)
    model_config = data.fit.model_config(config["model"])
    stopper = EarlyStopping(data.validation, data.n_rare, model_config, patience=patience)
    try:
        run_inprocess(
            data.fit,
            strategy,
            rounds=int(max_rounds),
            model_config=model_config,
            training=training_config(config, data.fit),
            random_seed=int(random_seed),
            evaluate_round=stopper,
        )
    except StopTraining:
        pass
    clusters = {c: strategy.clusters().get(c, 0) for c in data.client_ids}
    trial = Trial(
        method,
        dict(configuration),
        key,
        float(stopper.best_auc),
        int(stopper.best_round),
        len(stopper.aucs),
        [float(a) for a in stopper.aucs],
        clusters,
        time.perf_counter() - t0,
        int(random_seed),
        time.process_time() - c0,
    )
    model = model_from_config(data.n_rare, model_config, initialise=False)

    def predict(datasets: Mapping[str, ClientData]) -> dict[str, np.ndarray]:
        return predict_clients(stopper.parameters_for, datasets, model)

    return trial, Fitted(predict, clusters)


def _score(trial: Trial) -> float:
    return trial.validation_auc if math.isfinite(trial.validation_auc) else -math.inf


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
) -> Tuned:
    """Run ``method``'s configurations and choose the best on validation AUC.

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

    Returns
    -------
    Tuned
        The chosen trial has the highest validation AUC (the earliest on a tie); its folder
        ``out/<method>/<chosen.key>/`` is the place for whatever depends on it.
    """
    if (budget is None) == (candidates is None):
        raise ConfigError("give tune() either a budget (the grid) or explicit candidates")
    configs = (
        [dict(c) for c in candidates]
        if candidates is not None
        else configurations(method, int(budget), random_seed=grid_seed)
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
            }  # fmt: skip
        )
        path = folder / key / "trial.json"
        if path.is_file():
            trials.append(Trial.from_json(json.loads(path.read_text())))
            continue
        trial, fit = run_trial(
            data, method, configuration, base_config=base_config, max_rounds=max_rounds,
            patience=patience, random_seed=random_seed, groups=groups, key=key,
        )  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trial.to_json(), indent=2) + "\n")
        log.info(
            "%s %s: validation AUC %.4f, round %s of %d (%.0f s)",
            *(method, configuration, trial.validation_auc, trial.best_round),
            *(trial.rounds_run, trial.wall_s),
        )
        trials.append(trial)
        fitted[key] = fit
    chosen = max(trials, key=_score)  # max keeps the first of equal scores
    if chosen.key not in fitted and not refit:
        _write_table(folder / "tuning.tsv", trials, chosen)
        return Tuned(method, trials, chosen, None)
    if chosen.key not in fitted:
        trial, fit = run_trial(
            data, method, chosen.configuration, base_config=base_config, max_rounds=max_rounds,
            patience=patience, random_seed=random_seed, groups=groups, key=chosen.key,
        )  # fmt: skip
        if not math.isclose(trial.validation_auc, chosen.validation_auc, abs_tol=1e-9):
            log.warning("%s: re-run of %s gives validation AUC %.6f, recorded %.6f", method,
                        chosen.key, trial.validation_auc, chosen.validation_auc)  # fmt: skip
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
            "best_round": t.best_round,
            "rounds_run": t.rounds_run,
            "wall_s": round(t.wall_s, 2),
            "cpu_s": round(t.cpu_s, 2),
            **{k: json.dumps(jsonable(v)) for k, v in sorted(t.configuration.items())},
        }
        for t in trials
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path, sep="\t", index=False)
