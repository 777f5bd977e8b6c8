"""FedCE on carried-set Jaccard: clients encode every carried variant, not the influential."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.bloom import BloomSpec
from rvfedprs.strategies.fedce import FedCE

__all__ = ["FedCECarried"]

RARE_INPUT = "rare.input.weight"


class FedCECarried(FedCE):
    """FedCE with Jaccard similarities of the clients' carried variant sets.

    FedCE's clients encode V_k^t, their top-k most influential rare variants (SPEC §5 step 3),
    in the Bloom filter behind eq. 3. Here they encode every variant with non-zero influence —
    every column a local sample carries (its gradient Σ_i a_ij δ_i is non-zero exactly then) —
    so the clustering sees who carries what, not what the model found useful. The filters'
    capacity is raised to the number of rare columns P (known to the server from the model's
    width) so that a full carried set fits. Aggregation is FedCE's (eq. 4–6).

    Parameters
    ----------
    **options
        :class:`FedCE`'s options (``top_k`` and ``relative_threshold`` are not sent).
    """

    name = "fedce_carried"
    tuned_as = "fedce"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._capacity = self.spec.capacity

    def _fit_filters(self, parameters: Mapping[str, np.ndarray]) -> None:
        n_rare = int(np.shape(parameters[RARE_INPUT])[1])
        self.spec = BloomSpec(max(self._capacity, n_rare), self.spec.error_rate, self.spec.key)

    def initialize(self, global_parameters, client_ids):
        """As FedCE, with filters sized for every rare column."""
        self._fit_filters(global_parameters)
        super().initialize(global_parameters, client_ids)

    def client_config(self, server_round: int) -> dict[str, Any]:
        """FedCE's request with no top-k or threshold: every carried variant is encoded."""
        config = super().client_config(server_round)
        config.update(top_k=None, relative_threshold=None)
        return config

    def load_state_dict(self, state) -> None:
        """As FedCE; the filter size follows the restored specialists' width."""
        super().load_state_dict(state)
        self._fit_filters(next(iter(self.specialists.values())))
