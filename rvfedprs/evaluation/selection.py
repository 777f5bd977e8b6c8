"""Model selection on a validation split held out of every client's training data.

Under "same model and budget" a strategy that takes many more steps per round (the pooled
centralised client, a local-only client) can overfit long before the last round. A fair
reference then picks, per run, the round whose models do best on validation data that took no
part in training, and reports the test metrics of that round's models (early stopping with the
budget as the upper bound). The validation split is carved out of each client's *training*
samples, stratified by phenotype and seeded, so test samples stay untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rvfedprs.evaluation import federation_metrics, predict_clients
from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.model import model_from_config
from rvfedprs.strategies.base import Strategy
from rvfedprs.training import ClientData

if TYPE_CHECKING:
    from rvfedprs.genomic.data import Federation

__all__ = ["split_validation", "BestRound"]


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
    """``evaluate_round`` callback: validation AUC after every round; keeps the best models.

    Pass an instance as ``evaluate_round`` to a run; it records the pooled validation AUC (each
    client's validation samples scored by that client's own model, ``parameters_for``) and keeps
    a copy of every client's parameters from the round with the highest one (the earliest on a
    tie). Afterwards :meth:`parameters_for` serves those models for evaluation.

    Parameters
    ----------
    validation : dict of str to ClientData
        From :func:`split_validation`.
    n_rare : int
    model_config : mapping
        ``common_hidden``, ``rare_hidden``, ``dropout``.

    Attributes
    ----------
    best_round : int
        1-based round of the kept models; 0 for the starting models (the floor) when no round
        beat them on validation (:meth:`start`), or before the first round.
    start_auc : float or None
        Validation AUC of the starting models, when the engine showed them (:meth:`start`).
    best_auc : float
    aucs : list of float
        Validation AUC per round.
    """

    def __init__(
        self, validation: Mapping[str, ClientData], n_rare: int, model_config: Mapping[str, Any]
    ) -> None:
        self.validation = dict(validation)
        self._model = model_from_config(n_rare, dict(model_config), initialise=False)
        self.best_round = 0
        self.best_auc = -np.inf
        self.start_auc: float | None = None
        self.aucs: list[float] = []
        self._best: dict[str, dict[str, np.ndarray]] = {}

    def start(self, strategy: Strategy) -> None:
        """Score the starting models (round 0: the floor) as the first candidate.

        The engine calls this before round 1 of a fresh run
        (:func:`~rvfedprs.federation.rounds.serve`); a round must then beat the start on
        validation to be chosen, and ``best_round`` 0 says that nothing did.
        """
        self.start_auc = self._score(strategy)
        self._keep(strategy, self.start_auc, 0)

    def __call__(self, strategy: Strategy, server_round: int) -> dict[str, float]:
        """Score this round's models on validation; keep them if they are the best so far."""
        auc = self._score(strategy)
        self.aucs.append(auc)
        self._keep(strategy, auc, len(self.aucs))
        return {"validation_auc": auc}

    def _score(self, strategy: Strategy) -> float:
        predictions = predict_clients(strategy.parameters_for, self.validation, self._model)
        return float(federation_metrics(predictions, self.validation)["auc"])

    def _keep(self, strategy: Strategy, auc: float, server_round: int) -> None:
        if auc > self.best_auc:
            self.best_auc, self.best_round = auc, server_round
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
