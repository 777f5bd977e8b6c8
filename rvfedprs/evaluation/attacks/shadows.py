"""The attacker's models: offline reference models and online shadow federations.

- **Offline references** (:func:`train_reference_models`): models trained centrally on random
  halves of a population disjoint from the audited client (the other clients' samples). Every
  reference model is OUT for every audited example. Cheap, but not trained the way the target
  was; kept as the labelled ``lira_offline`` attack.
- **Shadow federations** (:func:`train_shadow_federations`): the target's own training procedure
  (strategy, rounds, clients) run again on a random half of every client's candidates (its
  training and test samples together), via a caller-supplied ``train_shadow`` — this library
  knows no engine. Shadow federations come in complementary pairs, so every candidate is IN in
  exactly half of them and OUT in the other half (Carlini et al.'s online LiRA; RMIA's
  reference models). A shadow federation whose run chooses its own network (a top-k
  ``model.rare_input``: its warm start chooses its variants) returns it with its models
  (:class:`ShadowModels`), and its models are scored through it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rvfedprs.evaluation.attacks.outputs import example_confidence, stack_clients
from rvfedprs.exceptions import InputDataError
from rvfedprs.model import get_parameters, model_from_config, set_parameters
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update

__all__ = [
    "Parameters",
    "TrainShadow",
    "ShadowModels",
    "reference_population",
    "train_reference_models",
    "shadow_splits",
    "ShadowSet",
    "ShadowView",
    "train_shadow_federations",
]

#: A model's parameters by name.
Parameters = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class ShadowModels:
    """One shadow federation's models and the network they fill.

    Attributes
    ----------
    parameters_for : callable
        Client id → the parameters that client ends with.
    model_config : mapping
        The network of the shadow's own run (:func:`~rvfedprs.model.model_from_config`): a
        top-k ``model.rare_input`` reads the variants its own warm start chose.
    """

    parameters_for: Callable[[str], Parameters]
    model_config: Mapping[str, Any]


#: Trains one shadow federation: (each client's training set, seed) → client id → its model
#: (the target's network), or :class:`ShadowModels` (the shadow run's own network).
TrainShadow = Callable[[Mapping[str, ClientData], int], Callable[[str], Parameters] | ShadowModels]


def reference_population(
    datasets: Mapping[str, ClientData], exclude: Sequence[str], *, client_id: str = "reference"
) -> ClientData:
    """Every sample of the clients not in ``exclude`` (train and test alike), pooled.

    Used as the attacker's population for offline LiRA's OUT models: disjoint from the target
    client's members and non-members.
    """
    parts = [datasets[c] for c in sorted(datasets) if c not in set(exclude)]
    if not parts:
        raise InputDataError(
            f"no reference population: every client is excluded ({sorted(exclude)})"
        )
    return stack_clients(parts, client_id)


def train_reference_models(
    population: ClientData,
    *,
    n_models: int,
    model_config: Mapping[str, Any],
    training: LocalTrainingConfig,
    initial: Mapping[str, np.ndarray] | None = None,
    random_seed: int,
) -> list[dict[str, np.ndarray]]:
    """Train ``n_models`` OUT models centrally, each on a random half of ``population``.

    Parameters
    ----------
    population : ClientData
        Disjoint from the audited examples.
    n_models : int
        At least 2.
    model_config : mapping
    training : LocalTrainingConfig
        ``epochs`` sets the budget (match the target's rounds × local epochs).
    initial : mapping, optional
        Starting parameters (default: a fresh model seeded per reference model).
    random_seed : int

    Returns
    -------
    list of dict of str to ndarray
    """
    if n_models < 2:
        raise ValueError(f"n_models must be >= 2, got {n_models}")
    seeds = np.random.SeedSequence([int(random_seed), 7]).generate_state(2 * n_models)
    out = []
    for i in range(n_models):
        rng = np.random.default_rng(int(seeds[2 * i]))
        half = np.sort(rng.permutation(population.n_samples)[: population.n_samples // 2])
        model = model_from_config(
            population.n_rare, model_config, random_seed=int(seeds[2 * i + 1] >> 1)
        )
        if initial is not None:
            set_parameters(model, initial)
        local_update(model, population.subset(half), training, random_seed=int(seeds[2 * i]))
        out.append(get_parameters(model))
    return out


def shadow_splits(y: np.ndarray, n_shadow: int, *, random_seed: int) -> np.ndarray:
    """Which candidates each shadow model trains on: complementary, label-stratified halves.

    Shadow models ``2i`` and ``2i + 1`` split the candidates between them, each half holding
    half the cases and half the controls (an odd one out alternates), so every candidate is IN
    for exactly ``n_shadow / 2`` shadow models.

    Parameters
    ----------
    y : array of {0, 1}, shape (n,)
    n_shadow : int
        Even, at least 2.
    random_seed : int

    Returns
    -------
    ndarray of bool, shape (n_shadow, n)
    """
    if n_shadow < 2 or n_shadow % 2:
        raise ValueError(f"n_shadow must be even and >= 2, got {n_shadow}")
    y = np.asarray(y)
    rng = np.random.default_rng(random_seed)
    out = np.zeros((n_shadow, y.size), dtype=bool)
    for pair in range(n_shadow // 2):
        first = np.zeros(y.size, dtype=bool)
        for i, label in enumerate(np.unique(y)):
            idx = rng.permutation(np.flatnonzero(y == label))
            half = (idx.size + (pair + i) % 2) // 2
            first[idx[:half]] = True
        out[2 * pair], out[2 * pair + 1] = first, ~first
    return out


@dataclass(frozen=True)
class ShadowView:
    """One target client's share of a :class:`ShadowSet`, aligned with its audit set.

    Attributes
    ----------
    confidence : ndarray, shape (n_shadow, n)
        φ of each audited example under the client's shadow models.
    is_in : ndarray of bool, shape (n_shadow, n)
    population : ClientData
        Non-members of the target (the other clients' test splits): RMIA's ``z``.
    population_confidence : ndarray, shape (n_shadow, m)
        φ of each population sample under the client's shadow models.
    """

    confidence: np.ndarray
    is_in: np.ndarray
    population: ClientData
    population_confidence: np.ndarray


@dataclass(frozen=True)
class ShadowSet:
    """Shadow federations' outputs on every candidate of the federation.

    Attributes
    ----------
    candidates : dict of str to ClientData
        Per client, its training then its test samples (``n_train`` of them first).
    n_train : dict of str to int
    is_in : dict of str to ndarray of bool, shape (n_shadow, n_candidates of the client)
        Whether the client's shadow models trained on each of its candidates.
    confidence : dict of str to ndarray, shape (n_shadow, N)
        φ of every candidate of the federation (clients in sorted order, each one's
        candidates in order) under the client's shadow models.
    """

    candidates: dict[str, ClientData]
    n_train: dict[str, int]
    is_in: dict[str, np.ndarray]
    confidence: dict[str, np.ndarray]

    @property
    def n_shadow(self) -> int:
        """Number of shadow federations."""
        return int(next(iter(self.is_in.values())).shape[0])

    def _offsets(self) -> dict[str, int]:
        starts, at = {}, 0
        for c in sorted(self.candidates):
            starts[c] = at
            at += self.candidates[c].n_samples
        return starts

    def view(self, client: str, rows: np.ndarray) -> ShadowView:
        """``client``'s shadow outputs on its candidates ``rows`` (train rows, then test rows).

        Raises
        ------
        InputDataError
            When ``client`` has no shadow models or no other client holds test samples.
        """
        if client not in self.candidates:
            raise InputDataError(
                f"client {client!r} has no shadow models; have {sorted(self.candidates)}"
            )
        starts = self._offsets()
        own = self.confidence[client][:, starts[client] + np.asarray(rows)]
        population_rows = np.concatenate(
            [
                np.arange(starts[c] + self.n_train[c], starts[c] + self.candidates[c].n_samples)
                for c in sorted(self.candidates)
                if c != client
            ]
            or [np.zeros(0, dtype=np.int64)]
        )
        if population_rows.size == 0:
            raise InputDataError(
                f"no population for RMIA: no client other than {client!r} has test samples"
            )
        others = [
            self.candidates[c].subset(np.arange(self.n_train[c], self.candidates[c].n_samples))
            for c in sorted(self.candidates)
            if c != client
        ]
        return ShadowView(
            confidence=own,
            is_in=self.is_in[client][:, np.asarray(rows)],
            population=stack_clients(others, "population"),
            population_confidence=self.confidence[client][:, population_rows],
        )


def train_shadow_federations(
    train: Mapping[str, ClientData],
    test: Mapping[str, ClientData],
    train_shadow: TrainShadow,
    model_config: Mapping[str, Any],
    *,
    n_shadow: int,
    random_seed: int,
    on_trained: Callable[[int], None] | None = None,
) -> ShadowSet:
    """Train ``n_shadow`` shadow federations the way the target was trained (online setting).

    Each shadow federation gives every client a label-stratified half of its candidates (its
    training and test samples), complementary within pairs (:func:`shadow_splits`), and is
    trained by ``train_shadow``; each client's shadow model is then evaluated on every candidate
    of the federation.

    Parameters
    ----------
    train, test : mapping of client id to ClientData
        The target's splits: members and non-members of each client.
    train_shadow : callable
        ``(training sets by client, seed) → (client id → parameters)``: the target's training
        procedure (same strategy, rounds and settings) on other data; or ``→``
        :class:`ShadowModels` when each shadow run builds its own network.
    model_config : mapping
        The network of the shadow models that come without their own.
    n_shadow : int
        Even, at least 4 (online LiRA needs two models on each side of every example).
    random_seed : int
    on_trained : callable, optional
        Called with the index of each shadow federation once trained (progress).

    Returns
    -------
    ShadowSet
    """
    if n_shadow < 4 or n_shadow % 2:
        raise ValueError(f"n_shadow must be even and >= 4, got {n_shadow}")
    missing = sorted(set(train) ^ set(test))
    if missing:
        raise InputDataError(f"clients {missing} lack a train or a test split")
    clients = sorted(train)
    candidates = {c: stack_clients([train[c], test[c]], c) for c in clients}
    child = np.random.SeedSequence(int(random_seed)).spawn(len(clients) + n_shadow)
    splits = {
        c: shadow_splits(candidates[c].y, n_shadow, random_seed=int(child[i].generate_state(1)[0]))
        for i, c in enumerate(clients)
    }
    everyone = stack_clients([candidates[c] for c in clients], "candidates")
    confidence = {c: np.empty((n_shadow, everyone.n_samples)) for c in clients}
    for s in range(n_shadow):
        sets = {c: candidates[c].subset(splits[c][s]) for c in clients}
        seed = int(child[len(clients) + s].generate_state(1)[0] >> 1)
        trained = train_shadow(sets, seed)
        if not isinstance(trained, ShadowModels):
            trained = ShadowModels(trained, model_config)
        for c in clients:
            confidence[c][s] = example_confidence(
                trained.parameters_for(c), everyone, trained.model_config
            )
        if on_trained is not None:
            on_trained(s)
    return ShadowSet(
        candidates=candidates,
        n_train={c: train[c].n_samples for c in clients},
        is_in=splits,
        confidence=confidence,
    )
