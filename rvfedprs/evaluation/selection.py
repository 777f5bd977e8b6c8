"""Model selection on a validation split held out of every client's training data.

Under "same model and budget" a strategy that takes many more steps per round (the pooled
centralised client, a local-only client) can overfit long before the last round. A fair
reference then picks, per run, the round whose models do best on validation data that took no
part in training, and reports the test metrics of that round's models (early stopping with the
budget as the upper bound). The validation split is carved out of each client's *training*
samples, stratified by phenotype and seeded, so test samples stay untouched.

The round is chosen on one of :data:`CRITERIA`, every client's validation samples scored by its
own model and pooled: ``"auc"`` (higher is better, the default) or ``"log_loss"`` (lower is
better; it weighs every sample's probability, not only the ranking). :class:`BestRound` records
both per round whichever it chooses on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rvfedprs.evaluation import federation_metrics, predict_clients
from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.model import TwoPathwayModel, model_from_config
from rvfedprs.strategies.base import Strategy
from rvfedprs.training import ClientData

if TYPE_CHECKING:
    from rvfedprs.genomic.data import Federation

__all__ = [
    "CRITERIA",
    "check_criterion",
    "pooled_log_loss",
    "validation_scores",
    "is_better",
    "split_validation",
    "BestRound",
]

#: Validation criteria a round or a configuration can be chosen on.
CRITERIA = ("auc", "log_loss")

#: Probabilities are clipped to [ε, 1 − ε] before the log-loss.
_EPS = 1e-12


def check_criterion(criterion: str) -> str:
    """``criterion`` when it is one of :data:`CRITERIA`.

    Raises
    ------
    ValueError
        Naming the value and the criteria there are.
    """
    if criterion not in CRITERIA:
        raise ValueError(f"unknown selection criterion {criterion!r}; choose from {CRITERIA}")
    return criterion


def pooled_log_loss(predictions: Mapping[str, np.ndarray], data: Mapping[str, ClientData]) -> float:
    """Mean binary cross-entropy of every client's probabilities on its samples, pooled."""
    clients = sorted(predictions)
    y = np.concatenate([data[c].y for c in clients]).astype(np.float64)
    p = np.concatenate([predictions[c] for c in clients]).astype(np.float64)
    p = np.clip(p, _EPS, 1 - _EPS)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log1p(-p)))


def validation_scores(
    predictions: Mapping[str, np.ndarray], data: Mapping[str, ClientData]
) -> dict[str, float]:
    """Every criterion of :data:`CRITERIA` for ``predictions`` of ``data``, pooled."""
    return {
        "auc": float(federation_metrics(predictions, data)["auc"]),
        "log_loss": pooled_log_loss(predictions, data),
    }


def is_better(criterion: str, score: float, than: float) -> bool:
    """Whether ``score`` beats ``than`` on ``criterion`` (NaN never beats; anything beats NaN)."""
    if not np.isfinite(score):
        return False
    if not np.isfinite(than):
        return True
    return score < than if criterion == "log_loss" else score > than


def split_validation(
    federation: Federation, fraction: float, *, random_seed: int
) -> tuple[Federation, dict[str, ClientData]]:
    """Hold out ``fraction`` of every client's training samples, stratified by phenotype.

    Parameters
    ----------
    federation : Federation
    fraction : float
        In (0, 0.5]; at least one case and one control per client go to validation.
    random_seed : int
        The split is drawn per client from ``SeedSequence([random_seed, crc32(client)])``.

    Returns
    -------
    fit : Federation
        The same federation with the held-out samples removed from ``train`` (test and the
        PRS standardisation unchanged).
    validation : dict of str to ClientData
        The held-out samples per client.

    Raises
    ------
    InputDataError
        When ``fraction`` is out of range or a client has too few cases or controls to give one
        of each to validation and keep one of each for training.
    """
    if not 0 < fraction <= 0.5:
        raise InputDataError(f"validation fraction must be in (0, 0.5], got {fraction}")
    fit, validation = {}, {}
    for client, data in federation.train.items():
        rng = np.random.default_rng(derive_seed(random_seed, "validation", client))
        held = []
        for label in (0, 1):
            members = np.flatnonzero(data.y == label)
            n_held = int(round(fraction * members.size))
            if members.size < 2 or n_held < 1:
                kind = "cases" if label else "controls"
                raise InputDataError(
                    f"client {client}: {members.size} training {kind} cannot give a "
                    f"validation fraction of {fraction} (needs ≥1 held out and ≥1 kept)"
                )
            held.append(rng.choice(members, size=min(n_held, members.size - 1), replace=False))
        mask = np.zeros(data.n_samples, dtype=bool)
        mask[np.concatenate(held)] = True
        validation[client] = data.subset(np.flatnonzero(mask))
        fit[client] = data.subset(np.flatnonzero(~mask))
    return replace(federation, train=fit), validation


class BestRound:
    """``evaluate_round`` callback: validation scores after every round; keeps the best models.

    Pass an instance as ``evaluate_round`` to a run; it records the pooled validation AUC and
    log-loss (each client's validation samples scored by that client's own model,
    ``parameters_for``) and keeps a copy of every client's parameters from the round with the
    best ``criterion`` (the earliest on a tie). Afterwards :meth:`parameters_for` serves those
    models for evaluation.

    Parameters
    ----------
    validation : dict of str to ClientData
        From :func:`split_validation`.
    n_rare : int
    model_config : mapping
        ``common_hidden``, ``rare_hidden``, ``dropout``, ``rare_input``: the network scored
        until the engine hands over the run's own (:meth:`prepare`).
    criterion : str
        One of :data:`CRITERIA`: ``"auc"`` (highest wins) or ``"log_loss"`` (lowest wins).
    keep_predictions : bool
        Keep every scored round's validation probabilities in :attr:`predictions`.

    Attributes
    ----------
    n_rare : int
    model_config : dict
        The network the clients' parameters are scored with (:attr:`model`).
    best_round : int
        1-based round of the kept models; 0 for the starting models (the floor) when no round
        beat them on validation (:meth:`start`), or before the first round.
    start_auc, start_log_loss : float or None
        Validation scores of the starting models, when the engine showed them (:meth:`start`).
    best_auc, best_log_loss : float
        Validation scores of the kept round.
    aucs, log_losses : list of float
        Validation scores per round.
    predictions : dict of int to dict of str to ndarray
        With ``keep_predictions``: round (0: the start) → client → validation probabilities.

    Raises
    ------
    ValueError
        For a criterion not in :data:`CRITERIA`.
    """

    def __init__(
        self,
        validation: Mapping[str, ClientData],
        n_rare: int,
        model_config: Mapping[str, Any],
        *,
        criterion: str = "auc",
        keep_predictions: bool = False,
    ) -> None:
        self.criterion = check_criterion(criterion)
        self.validation = dict(validation)
        self.n_rare, self.model_config = int(n_rare), dict(model_config)
        self._model: TwoPathwayModel | None = None
        self.best_round = 0
        self.best_auc = -np.inf
        self.best_log_loss = np.inf
        self.start_auc: float | None = None
        self.start_log_loss: float | None = None
        self.aucs: list[float] = []
        self.log_losses: list[float] = []
        self.keep_predictions = keep_predictions
        self.predictions: dict[int, dict[str, np.ndarray]] = {}
        self._best: dict[str, dict[str, np.ndarray]] = {}

    @property
    def best_score(self) -> float:
        """The kept round's validation score on :attr:`criterion`."""
        return self.best_log_loss if self.criterion == "log_loss" else self.best_auc

    def prepare(self, settings: Mapping[str, Any]) -> None:
        """Score with the network of the run settings after the warm start.

        Its ``model`` and ``n_rare``. The engine calls this before anything is scored
        (:func:`~rvfedprs.federation.rounds.serve`): the warm start can change the network
        (a top-k ``model.rare_input`` reads the variants it chooses), so the configuration's
        network is not necessarily the one the rounds train.
        """
        self.n_rare, self.model_config = int(settings["n_rare"]), dict(settings["model"])
        self._model = None

    @property
    def model(self) -> TwoPathwayModel:
        """The network of :attr:`model_config`, built when first needed.

        Raises
        ------
        ValueError
            For a collapsed ``rare_input`` whose projection the run has not chosen yet (a
            top-k input before the engine's :meth:`prepare`).
        """
        if self._model is None:
            self._model = model_from_config(self.n_rare, self.model_config, initialise=False)
        return self._model

    def predict(self, datasets: Mapping[str, ClientData]) -> dict[str, np.ndarray]:
        """Every client's probabilities on ``datasets`` under the kept round's models."""
        return predict_clients(self.parameters_for, datasets, self.model)

    def start(self, strategy: Strategy) -> None:
        """Score the starting models (round 0: the floor) as the first candidate.

        The engine calls this before round 1 of a fresh run
        (:func:`~rvfedprs.federation.rounds.serve`); a round must then beat the start on
        validation to be chosen, and ``best_round`` 0 says that nothing did.
        """
        scores = self._score(strategy, 0)
        self.start_auc, self.start_log_loss = scores["auc"], scores["log_loss"]
        self._keep(strategy, scores, 0)

    def __call__(self, strategy: Strategy, server_round: int) -> dict[str, float]:
        """Score this round's models on validation; keep them if they are the best so far.

        Returns the round's ``validation_auc`` (and ``validation_log_loss`` when that is the
        criterion) for the run's history.
        """
        scores = self._score(strategy, len(self.aucs) + 1)
        self.aucs.append(scores["auc"])
        self.log_losses.append(scores["log_loss"])
        self._keep(strategy, scores, len(self.aucs))
        row = {"validation_auc": scores["auc"]}
        if self.criterion == "log_loss":
            row["validation_log_loss"] = scores["log_loss"]
        return row

    def _score(self, strategy: Strategy, server_round: int) -> dict[str, float]:
        predictions = predict_clients(strategy.parameters_for, self.validation, self.model)
        if self.keep_predictions:
            self.predictions[server_round] = predictions
        return validation_scores(predictions, self.validation)

    def _keep(self, strategy: Strategy, scores: Mapping[str, float], server_round: int) -> None:
        if is_better(self.criterion, scores[self.criterion], self.best_score):
            self.best_auc, self.best_log_loss = scores["auc"], scores["log_loss"]
            self.best_round = server_round
            self._best = {
                c: {k: np.array(v, copy=True) for k, v in strategy.parameters_for(c).items()}
                for c in self.validation
            }

    def parameters_for(self, client: str) -> dict[str, np.ndarray]:
        """Client ``client``'s parameters from the best validation round.

        Raises
        ------
        KeyError
            For a client without validation data, or before the first round.
        """
        if not self._best:
            raise KeyError("no round has been evaluated yet")
        return self._best[client]
