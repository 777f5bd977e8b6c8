"""The client half of the strategies, written once for every task.

What a round's ``FitInstruction.config`` asks of a site's local training, whatever the model:

- ``proximal_mu`` — FedProx's term μ/2‖w − w^t‖², w^t the parameters received;
- SCAFFOLD's correction c − c_k (:func:`~rvfedprs.strategies.scaffold.client_correction`),
  added to every gradient of the global update;
- Ditto's personal model (:func:`~rvfedprs.strategies.ditto.personal_request`): after the
  global update, the personal model v_k trains from its own start with the proximal term
  λ/2‖v − w^t‖² (no correction) and travels back under ``personal/*``.

A task supplies how to train its model (:class:`LocalTrainer`); :func:`client_update` runs the
global update and, when asked, the personal one, and assembles the reply's parameters and
metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from rvfedprs.strategies.aggregation import Parameters
from rvfedprs.strategies.ditto import personal_request, with_personal
from rvfedprs.strategies.scaffold import client_correction

__all__ = ["LocalRun", "LocalTrainer", "client_update"]


@dataclass(frozen=True)
class LocalRun:
    """One local training pass: the parameters it ended at, its mean loss and step count.

    ``extra`` is whatever else the task's trainer returns (e.g. the influence of each rare
    variant for a Bloom filter), passed through untouched.
    """

    parameters: Parameters
    loss: float
    steps: int
    extra: Any = None


class LocalTrainer(Protocol):
    """A task's local training: from ``start``, proximal to ``reference`` with weight ``mu``."""

    def __call__(
        self,
        start: Parameters,
        *,
        mu: float,
        correction: Parameters | None,
        seed: int,
        personal: bool,
    ) -> LocalRun:
        """Train a model from ``start``; ``personal`` says it is Ditto's personal pass."""
        ...


def client_update(
    config: Mapping[str, Any],
    received: Parameters,
    train: LocalTrainer,
    *,
    momentum: float,
    lr: float,
    seed: int,
) -> tuple[Parameters, dict[str, float], LocalRun]:
    """The site's reply to one round: the global update, and Ditto's personal one if asked.

    Parameters
    ----------
    config : mapping
        ``FitInstruction.config``.
    received : Parameters
        The parameters the server sent (the global update's start and proximal reference).
    train : LocalTrainer
        The task's training pass; ``personal`` says which of the two passes it is.
    momentum : float
        The site's SGD momentum (SCAFFOLD refuses a correction with momentum).
    lr : float
        The site's learning rate, reported in the metrics.
    seed : int
        The round's seed for this site; the personal pass uses ``seed + 1``.

    Returns
    -------
    parameters : Parameters
        The global update's parameters, plus ``personal/*`` for Ditto.
    metrics : dict
        ``loss``, ``local_steps``, ``lr`` (and ``personal_loss`` for Ditto).
    run : LocalRun
        The global update's pass (its ``extra`` for the task).
    """
    correction = client_correction(config, momentum=momentum)
    ditto = personal_request(config)
    run = train(
        received,
        mu=float(config.get("proximal_mu", 0.0)),
        correction=correction,
        seed=seed,
        personal=False,
    )
    parameters = run.parameters
    metrics = {"loss": float(run.loss), "local_steps": float(run.steps), "lr": float(lr)}
    if ditto is not None:
        personal_start, lam = ditto
        own = train(personal_start, mu=lam, correction=None, seed=seed + 1, personal=True)
        metrics["personal_loss"] = float(own.loss)
        parameters = with_personal(parameters, own.parameters)
    return parameters, metrics, run
