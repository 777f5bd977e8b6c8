"""FedCE with random clusters: FedCE's cluster sizes, random members (a negative control)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.strategies.base import StrategyContext, config_section
from rvfedprs.strategies.fedce import FedCE, fedce_options

__all__ = ["FedCERandom"]


class FedCERandom(FedCE):
    """FedCE whose clusters have the sizes FedCE finds but random members.

    Each re-clustering runs FedCE's own clustering (eq. 3) for the number and sizes of the
    clusters, then hands the labels out by a seeded permutation π of the sorted client ids:
    client i gets the label FedCE gave client π(i). π depends only on ``random_seed`` and the
    number of clients, so the random partition stays fixed while FedCE's does. Aggregation is
    FedCE's (eq. 4–6). If FedCE beats this, the gain comes from *which* clients share a
    specialist, not from having several specialists.

    Parameters
    ----------
    random_seed : int
        Seed of π.
    **options
        :class:`FedCE`'s options.
    """

    name = "fedce_random"
    tuned_as = "fedce"

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedCERandom:
        """FedCE's options; π's seed is ``strategies.random_clusters_seed``, else ``train.seed``."""
        seed = config_section(config, "strategies")["random_clusters_seed"]
        if seed is None:
            seed = config_section(config, "train")["seed"] or 0
        return cls(random_seed=seed, **fedce_options(config))

    def __init__(self, *, random_seed: int = 0, **options: Any) -> None:
        super().__init__(**options)
        self.random_seed = int(random_seed)

    def assign(self, client_ids):
        """FedCE's partition with its labels handed out by the seeded permutation π."""
        found = super().assign(client_ids)
        ids = sorted(client_ids)
        order = np.random.default_rng(self.random_seed).permutation(len(ids))
        return {ids[i]: found[ids[int(j)]] for i, j in enumerate(order)}
