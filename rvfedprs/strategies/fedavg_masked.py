"""Count-normalised ("masked") FedAvg: each rare column averaged over the clients that carry it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies.aggregation import weighted_average
from rvfedprs.strategies.base import StrategyContext, _sorted_results, config_section
from rvfedprs.strategies.fedavg import FedAvg

__all__ = ["MaskedFedAvg", "carried_columns", "masked_column_average"]

#: The first layer of the rare specialist: one column per rare variant.
RARE_INPUT = "rare.input.weight"


def carried_columns(delta: np.ndarray) -> np.ndarray:
    """Which columns of a client's first-layer update Δ_k (shape (h, P)) moved, shape (P,).

    With plain local SGD (momentum and FedProx included, no weight decay, no DP noise) the
    gradient of column j is Σ_i a_ij δ_i, zero unless a local sample carries variant j, so the
    columns that moved are exactly the client's carried variants (less any whose gradient
    vanished exactly, which then carry no information either).
    """
    return np.any(np.asarray(delta) != 0, axis=0)


def masked_column_average(
    base: np.ndarray, deltas: Sequence[np.ndarray], weights: Sequence[float]
) -> np.ndarray:
    """w_j + Σ_k n_k m_kj Δ_kj / Σ_k n_k m_kj per column j, with m_kj = 1[column j moved].

    Parameters
    ----------
    base : array, shape (h, P)
        The current first-layer weights w.
    deltas : sequence of arrays, shape (h, P)
        Each client's update Δ_k = w_k − w.
    weights : sequence of float, shape (n_clients,)
        n_k.

    Returns
    -------
    array, shape (h, P), dtype of ``base``
        Columns no client moved keep w_j.
    """
    n = np.asarray(weights, dtype=np.float64)
    if len(deltas) != n.size or n.size == 0:
        raise ValueError(f"{len(deltas)} updates but {n.size} weights")
    step = np.zeros(np.shape(base), dtype=np.float64)
    counts = np.zeros(np.shape(base)[1], dtype=np.float64)
    for n_k, delta in zip(n, deltas, strict=True):
        mask = carried_columns(delta)
        counts += n_k * mask
        step += n_k * np.asarray(delta, dtype=np.float64) * mask
    safe = np.where(counts > 0, counts, 1.0)
    return (np.asarray(base, dtype=np.float64) + step / safe).astype(np.asarray(base).dtype)


class MaskedFedAvg(FedAvg):
    """Count-normalised FedAvg, an ablation isolating FedCE's step size on private columns.

    On a rare variant carried by only some clients FedAvg's update of its first-layer column is
    Σ_k (n_k/N) Δw_kj = (N_j/N) × (the carriers' weighted mean update), N_j the training
    samples of the carrying clients: the non-carriers' zero updates shrink the step by N_j/N.
    FedCE's specialist aggregation (eq. 5) over a cluster of carriers undoes much of that
    shrinkage. This strategy undoes it without clusters:

        w_j ← w_j + Σ_k n_k m_kj Δw_kj / Σ_k n_k m_kj,   m_kj = 1[client k's column j moved],

    for every column j of ``rare.input.weight``; every other tensor is FedAvg's
    Σ_k (n_k/N) w_k. If FedCE's gain over FedAvg disappears against this strategy it was a
    step-size effect, not the clustering.

    What it reveals: m_kj is read off the update itself, which in the clear already shows each
    client's carried variants (SPEC §6); nothing else is sent. Under secure aggregation the
    server needs the sums Σ_k n_k m_kj Δw_kj and Σ_k n_k m_kj, so each client would also send
    its column mask n_k·m_k into the aggregate: the server learns, per variant, the number of
    training samples held by the clients that carry it (not who they are).

    The mask needs local training that leaves a column nobody carries untouched: no weight
    decay and no DP noise (:func:`rvfedprs.strategies.strategy_from_config` refuses both).
    """

    name = "fedavg_masked"
    secagg_refusal = (
        "the count-normalised average divides each rare column by Σ_k n_k m_kj, read off every "
        "client's own update (which columns moved); a secure sum hides the individual updates "
        "and carries no column masks, so the strategy would silently fall back to FedAvg"
    )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> MaskedFedAvg:
        """The strategy, after checking that local training leaves uncarried columns alone.

        Raises
        ------
        ConfigError
            With ``train.weight_decay`` or ``dp.enabled``: both move every column.
        """
        weight_decay = config_section(config, "train")["weight_decay"]
        dp_on = bool(config_section(config, "dp")["enabled"])
        if weight_decay or dp_on:
            raise ConfigError(
                f"strategy {cls.name!r} reads each client's carried columns off its update, "
                "which needs local training that leaves uncarried columns untouched; got "
                f"train.weight_decay = {weight_decay}, dp.enabled = {dp_on}"
            )
        return cls()

    def aggregate_fit(self, server_round, results):
        """FedAvg on every tensor, then the count-normalised average on the rare columns."""
        ordered = _sorted_results(results)
        weights = [r.n_samples for r in ordered]
        average = weighted_average(
            [r.parameters for r in ordered], weights, names=self.parameters.keys()
        )
        if RARE_INPUT in self.parameters:
            base = self.parameters[RARE_INPUT]
            deltas = [np.asarray(r.parameters[RARE_INPUT]) - base for r in ordered]
            average[RARE_INPUT] = masked_column_average(base, deltas, weights)
        self.parameters = self.server_update(server_round, average)
