"""One more round of a trained genomic federation, as the server would receive it (audits).

:func:`next_round_view` plays the round after the last one from a trained strategy — every
client fits from the model the strategy would send it — and returns what leaves each site for
the channel audit (:class:`~rvfedprs.evaluation.attacks.RoundView`): the first specialist
layer as sent and as returned, n_k, and the Bloom filters. ``rvfedprs mia`` and the paper's
driver both audit a run this way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rvfedprs.bloom import BloomSpec
from rvfedprs.evaluation.attacks import RoundView
from rvfedprs.federation.seeds import client_seed
from rvfedprs.genomic.client import ClientContext, fit_client
from rvfedprs.genomic.data import Federation
from rvfedprs.strategies.base import Strategy
from rvfedprs.training import RARE_INPUT, DPState, LocalTrainingConfig

__all__ = ["next_round_view"]


def next_round_view(
    strategy: Strategy,
    federation: Federation,
    *,
    model_config: Mapping[str, Any],
    training: LocalTrainingConfig,
    server_round: int,
    random_seed: int,
    bloom_key: bytes | None = None,
    dp: Mapping[str, Any] | None = None,
) -> RoundView | None:
    """What every client of ``federation`` sends the server in ``server_round``.

    Parameters
    ----------
    strategy : Strategy
        The trained strategy (its :meth:`~Strategy.configure_fit` gives each client's model).
    federation : Federation
        The clients' training data and variant keys.
    model_config : mapping
        The federation's model configuration (:meth:`Federation.model_config`).
    training : LocalTrainingConfig
        The clients' optimiser settings.
    server_round : int
        The round played (the run's last round + 1).
    random_seed : int
        The run's master seed (each client's seed derives from it, the round and its id).
    bloom_key : bytes, optional
        The clients' shared secret for keyed Bloom hashing (the server never uses it).
    dp : mapping, optional
        DP-SGD settings (:func:`~rvfedprs.training.dp_settings`): each client fits with a fresh
        accountant and the run's noise, as its update would leave the site.

    Returns
    -------
    RoundView or None
        None for a pooled strategy (one virtual client: no server sees per-site updates).
    """
    if strategy.pooled:
        return None
    clients = federation.client_ids
    instructions = strategy.configure_fit(server_round, clients)
    results = {
        c: fit_client(
            instructions[c],
            ClientContext(
                federation.train[c],
                federation.variant_keys,
                model_config,
                training,
                bloom_key=bloom_key,
                state={} if dp is None else {"dp": DPState.from_settings(dp)},
            ),
            random_seed=client_seed(random_seed, server_round, c),
        )  # fmt: skip
        for c in clients
    }
    bloom = instructions[clients[0]].config.get("bloom")
    filters = {c: r.bloom_bits for c, r in results.items() if r.bloom_bits is not None}
    spec = None if bloom is None else BloomSpec(bloom["capacity"], bloom["error_rate"], bloom_key)
    return RoundView(
        sent={c: instructions[c].parameters[RARE_INPUT] for c in clients},
        received={c: results[c].parameters[RARE_INPUT] for c in clients},
        n_samples={c: results[c].n_samples for c in clients},
        filters=filters or None,
        spec=spec,
    )
