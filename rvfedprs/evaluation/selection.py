"""Model selection on a validation split held out of every client's training data.

Under "same model and budget" a strategy that takes many more steps per round (the pooled
centralised client, a local-only client) can overfit long before the last round. A fair
reference then picks, per run, the round whose models do best on validation data that took no
part in training, and reports the test metrics of that round's models (early stopping with the
budget as the upper bound). The validation split is carved out of each client's *training*
samples, stratified by phenotype and seeded, so test samples stay untouched.

The round is chosen on the outcome's metric or loss (:data:`CRITERIA`), every client's
validation samples scored by its own model and pooled: ``"auc"`` (higher is better, the default
for a binary phenotype) or ``"log_loss"`` (lower is better; it weighs every sample's
probability, not only the ranking), ``"r2"`` or ``"mse"`` for a quantitative one.
:class:`BestRound` records both per round whichever it chooses on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rvfedprs.evaluation import predict_clients
from rvfedprs.evaluation.summaries import log_loss_sum
from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.model import TwoPathwayModel, model_from_config
from rvfedprs.outcomes import BINARY, Outcome
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
    "validation_split",
    "held_out_count",
    "held_out_rows",
    "split_validation",
    "RoundSelection",
    "BestRound",
    "selected_parameters",
    "selection_record",
]

#: Validation criteria a round or a configuration can be chosen on: every outcome's primary
#: metric (higher is better) and loss (lower is better).
CRITERIA = ("auc", "log_loss", "r2", "mse")
_LOSSES = ("log_loss", "mse")


def check_criterion(criterion: str, kind: Outcome = BINARY) -> str:
    """``criterion`` when it is ``kind``'s primary metric or loss.

    Raises
    ------
    ValueError
        Naming the value and the criteria there are.
    """
    allowed = (kind.metric, kind.loss_name)
    if criterion not in allowed:
        raise ValueError(
            f"unknown selection criterion {criterion!r} for a {kind.kind} phenotype; "
            f"choose from {allowed}"
        )
    return criterion


def pooled_log_loss(predictions: Mapping[str, np.ndarray], data: Mapping[str, ClientData]) -> float:
    """Mean binary cross-entropy of every client's probabilities on its samples, pooled."""
    clients = sorted(predictions)
    y = np.concatenate([data[c].y for c in clients])
    return log_loss_sum(y, np.concatenate([predictions[c] for c in clients])) / y.size


def validation_scores(
    predictions: Mapping[str, np.ndarray], data: Mapping[str, ClientData]
) -> dict[str, float]:
    """The outcome's primary metric and loss for ``predictions`` of ``data``, pooled, exact."""
    clients = sorted(predictions)
    y = np.concatenate([data[c].y for c in clients])
    p = np.concatenate([predictions[c] for c in clients])
    return data[clients[0]].outcome.validation_scores(y, p)


def is_better(criterion: str, score: float, than: float) -> bool:
    """Whether ``score`` beats ``than`` on ``criterion`` (NaN never beats; anything beats NaN)."""
    if not np.isfinite(score):
        return False
    if not np.isfinite(than):
        return True
    return score < than if criterion in _LOSSES else score > than


def validation_split(fraction: float, seed: int) -> dict[str, Any] | None:
    """The split every site draws of a run with master seed ``seed``, or None for fraction 0.

    ``{"fraction", "seed"}``: what the run settings carry to every site (each draws its own
    rows, :func:`held_out_rows`), the same on every engine and in a study.
    """
    fraction = float(fraction or 0.0)
    if fraction == 0.0:
        return None
    return {"fraction": fraction, "seed": int(derive_seed(int(seed), "validation"))}


def held_out_count(n: int, fraction: float, what: str) -> int:
    """How many of a stratum's ``n`` training samples a site holds out (:func:`held_out_rows`).

    Raises
    ------
    InputDataError
        When ``fraction`` is out of (0, 0.5], or the stratum is too small to hold one out and
        keep one for training (``what`` and its count named).
    """
    if not 0 < fraction <= 0.5:
        raise InputDataError(f"validation fraction must be in (0, 0.5], got {fraction}")
    n_held = int(round(fraction * n))
    if n < 2 or n_held < 1:
        raise InputDataError(
            f"{n} training {what} cannot give a validation fraction of {fraction} (needs "
            "≥1 held out and ≥1 kept)"
        )
    return min(n_held, n - 1)


def held_out_rows(
    y: np.ndarray, fraction: float, *, random_seed: int, client: str, kind: Outcome = BINARY
) -> np.ndarray:
    """The rows of one site's training samples held out for validation, sorted.

    Stratified by phenotype (:meth:`~rvfedprs.outcomes.Outcome.strata` of ``kind``: the
    classes, or a quantitative trait's quintiles; :func:`held_out_count` of each), drawn from
    ``SeedSequence([random_seed, "validation", client])``: a site draws its own rows from the
    run's split seed (:func:`validation_split`) and its id, whichever engine runs it.

    Raises
    ------
    InputDataError
        As :func:`held_out_count`, naming the client.
    """
    strata = kind.strata(np.asarray(y))
    labels = np.unique(strata)
    try:
        sizes = [held_out_count(int((strata == label).sum()), fraction,
                                kind.stratum_name(label)) for label in labels]  # fmt: skip
    except InputDataError as exc:
        raise InputDataError(f"client {client}: {exc}") from None
    rng = np.random.default_rng(derive_seed(random_seed, "validation", client))
    held = [
        rng.choice(np.flatnonzero(strata == label), size=size, replace=False)
        for label, size in zip(labels, sizes, strict=True)
    ]
    return np.sort(np.concatenate(held))


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
        Each client's rows are :func:`held_out_rows` of this seed.

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
        As :func:`held_out_rows`.
    """
    fit, validation = {}, {}
    for client, data in federation.train.items():
        mask = np.zeros(data.n_samples, dtype=bool)
        rows = held_out_rows(data.y, fraction, random_seed=random_seed, client=client,
                             kind=data.outcome)  # fmt: skip
        mask[rows] = True
        validation[client] = data.subset(np.flatnonzero(mask))
        fit[client] = data.subset(np.flatnonzero(~mask))
    return replace(federation, train=fit), validation


class RoundSelection:
    """``evaluate_round`` callback: validation scores after every round; keeps the best models.

    It records the validation metric and loss of the outcome (AUC and log-loss for a binary
    phenotype, R² and MSE for a quantitative one) of every client's model (``parameters_for``)
    after every round, and keeps a copy of every client's parameters from the round with the
    best ``criterion`` (the earliest on a tie); the starting models (round 0: the floor) are
    the first candidate (:meth:`start`). Afterwards :meth:`parameters_for` serves those models.
    How the scores are computed is the subclass's :meth:`score`: pooled predictions in this
    process (:class:`BestRound`), or the sites' validation summaries
    (:class:`~rvfedprs.genomic.validation.SiteValidation`).

    Parameters
    ----------
    criterion : str, optional
        The outcome's metric (highest wins, the default) or its loss (lowest wins).
    kind : Outcome
        The phenotype's outcome, which names the metric and the loss.

    Attributes
    ----------
    metric, loss : str
        The outcome's metric and loss names (``auc``/``log_loss``, ``r2``/``mse``).
    best_round : int
        1-based round of the kept models; 0 for the starting models (the floor) when no round
        beat them on validation (:meth:`start`), or before the first round.
    start_value, start_loss : float or None
        Validation metric and loss of the starting models, when the engine showed them.
    best_value, best_loss : float
        Validation metric and loss of the kept round.
    values, losses : list of float
        Validation metric and loss per round.

    Raises
    ------
    ValueError
        For a criterion that is neither the outcome's metric nor its loss.
    """

    def __init__(self, *, criterion: str | None = None, kind: Outcome = BINARY) -> None:
        self.metric, self.loss = kind.metric, kind.loss_name
        self.criterion = check_criterion(criterion or kind.metric, kind)
        self.best_round = 0
        self.best_value = -np.inf
        self.best_loss = np.inf
        self.start_value: float | None = None
        self.start_loss: float | None = None
        self.values: list[float] = []
        self.losses: list[float] = []
        self._best: dict[str, dict[str, np.ndarray]] = {}

    @property
    def clients(self) -> list[str]:
        """The clients whose models are kept."""
        raise NotImplementedError

    def score(self, strategy: Strategy, server_round: int) -> dict[str, float]:
        """Validation :attr:`metric` and :attr:`loss` of the strategy's models (round 0: start)."""
        raise NotImplementedError

    @property
    def best_score(self) -> float:
        """The kept round's validation score on :attr:`criterion`."""
        return self.best_loss if self.criterion == self.loss else self.best_value

    def start(self, strategy: Strategy) -> None:
        """Score the starting models (round 0: the floor) as the first candidate.

        The engine calls this before round 1 of a fresh run
        (:func:`~rvfedprs.federation.rounds.serve`); a round must then beat the start on
        validation to be chosen, and ``best_round`` 0 says that nothing did.
        """
        scores = self.score(strategy, 0)
        self.start_value, self.start_loss = scores[self.metric], scores[self.loss]
        self._keep(strategy, scores, 0)

    def __call__(self, strategy: Strategy, server_round: int) -> dict[str, Any]:
        """Score this round's models on validation; keep them if they are the best so far.

        Returns the round's ``validation_<metric>`` (and ``validation_<loss>`` when that is
        the criterion, and what :meth:`score` adds besides the two) for the run's history.
        """
        scores = dict(self.score(strategy, len(self.values) + 1))
        self.values.append(scores.pop(self.metric))
        self.losses.append(scores.pop(self.loss))
        self._keep(strategy, {self.metric: self.values[-1], self.loss: self.losses[-1]},
                   len(self.values))  # fmt: skip
        row = {f"validation_{self.metric}": self.values[-1], **scores}
        if self.criterion == self.loss:
            row[f"validation_{self.loss}"] = self.losses[-1]
        return row

    def _keep(self, strategy: Strategy, scores: Mapping[str, float], server_round: int) -> None:
        if is_better(self.criterion, scores[self.criterion], self.best_score):
            self.best_value, self.best_loss = scores[self.metric], scores[self.loss]
            self.best_round = server_round
            self._best = {
                c: {k: np.array(v, copy=True) for k, v in strategy.parameters_for(c).items()}
                for c in self.clients
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

    def state_dict(self) -> dict[str, Any]:
        """The choice so far, as a checkpoint keeps it (identical models stored once).

        ``round``, ``models``, ``index`` (client → model), ``criterion``, ``metric`` and
        ``loss`` (their names), the scores (``start_value``, ``best_value``, ``values``, their
        loss twins): what a resumed run restores (:meth:`load_state_dict`) and ``rvfedprs
        evaluate`` scores (:func:`selected_parameters`).
        """
        models: list[dict[str, np.ndarray]] = []
        index: dict[str, int] = {}
        for client in sorted(self._best):
            params = self._best[client]
            found = next((i for i, m in enumerate(models) if _same_model(m, params)), None)
            if found is None:
                models.append(params)
                found = len(models) - 1
            index[client] = found
        return {
            "round": int(self.best_round),
            "models": models,
            "index": index,
            "criterion": self.criterion,
            "metric": self.metric,
            "loss": self.loss,
            "start_value": self.start_value,
            "start_loss": self.start_loss,
            "best_value": float(self.best_value),
            "best_loss": float(self.best_loss),
            "values": [float(a) for a in self.values],
            "losses": [float(v) for v in self.losses],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Inverse of :meth:`state_dict` (a resumed run continues the same choice)."""
        self.metric, self.loss = state["metric"], state["loss"]
        self.criterion = state["criterion"]
        self.best_round = int(state["round"])
        self.start_value, self.start_loss = state["start_value"], state["start_loss"]
        self.best_value, self.best_loss = float(state["best_value"]), float(state["best_loss"])
        self.values, self.losses = list(state["values"]), list(state["losses"])
        models = state["models"]
        self._best = {c: dict(models[i]) for c, i in state["index"].items()}


def _same_model(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def selected_parameters(selected: Mapping[str, Any] | None):
    """``parameters_for`` of the models a ``selected`` record holds, or None.

    ``selected``: :meth:`RoundSelection.state_dict`, as a checkpoint and a
    :class:`~rvfedprs.federation.result.RunResult` hold it.
    """
    if not selected:
        return None
    models, index = selected["models"], selected["index"]
    if len(index) == 1:  # chosen over one pooled site (the centralised baseline): everyone's
        return lambda client: models[next(iter(index.values()))]
    return lambda client: models[index[client]]


def selection_record(selected: Mapping[str, Any], fraction: float) -> dict[str, Any]:
    """What ``metrics.json`` says of the validation choice (``chose_floor`` when round 0 won).

    ``validation_<metric>``, ``floor_validation_<metric>`` and ``validation_<metric>s`` (per
    round) in the outcome's metric (``auc``, ``r2``); for the AUC its tie bound.
    """
    metric = selected["metric"]
    record = {
        "validation_fraction": float(fraction),
        "criterion": selected["criterion"],
        "metric": metric,
        "selected_round": int(selected["round"]),
        "chose_floor": int(selected["round"]) == 0,
        f"validation_{metric}": float(selected["best_value"]),
        f"floor_validation_{metric}": selected["start_value"],
        f"validation_{metric}s": [float(a) for a in selected["values"]],
    }
    if metric == "auc":
        # |the AUCs above − the exact pooled ones| at most this (0: pooled in this process)
        record["validation_auc_tie_bound"] = max(selected.get("auc_tie_bounds") or [0.0])
    return record


class BestRound(RoundSelection):
    """:class:`RoundSelection` on validation samples held in this process, pooled.

    Every client's validation samples are scored by its own model and pooled: the exact
    pooled AUC and log-loss.

    Parameters
    ----------
    validation : dict of str to ClientData
        From :func:`split_validation`.
    n_rare : int
    model_config : mapping
        ``common_hidden``, ``rare_hidden``, ``dropout``, ``rare_input``: the network scored
        until the engine hands over the run's own (:meth:`prepare`).
    criterion : str, optional
        As :class:`RoundSelection` (the outcome is the validation data's).
    keep_predictions : bool
        Keep every scored round's validation probabilities in :attr:`predictions`.

    Attributes
    ----------
    n_rare : int
    model_config : dict
        The network the clients' parameters are scored with (:attr:`model`).
    predictions : dict of int to dict of str to ndarray
        With ``keep_predictions``: round (0: the start) → client → validation probabilities.
    """

    def __init__(
        self,
        validation: Mapping[str, ClientData],
        n_rare: int,
        model_config: Mapping[str, Any],
        *,
        criterion: str | None = None,
        keep_predictions: bool = False,
    ) -> None:
        kind = next(iter(validation.values())).outcome if validation else BINARY
        super().__init__(criterion=criterion, kind=kind)
        self.validation = dict(validation)
        self.n_rare, self.model_config = int(n_rare), dict(model_config)
        self._model: TwoPathwayModel | None = None
        self.keep_predictions = keep_predictions
        self.predictions: dict[int, dict[str, np.ndarray]] = {}

    @property
    def clients(self) -> list[str]:
        """The clients with validation samples."""
        return sorted(self.validation)

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

    def score(self, strategy: Strategy, server_round: int) -> dict[str, float]:
        """The pooled validation scores of the strategy's models."""
        predictions = predict_clients(strategy.parameters_for, self.validation, self.model)
        if self.keep_predictions:
            self.predictions[server_round] = predictions
        return validation_scores(predictions, self.validation)
