"""FedCE with a global integration head."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rvfedprs.strategies.base import StrategyContext
from rvfedprs.strategies.fedce import FedCE, fedce_options

__all__ = ["FedCEGlobalHead"]


class FedCEGlobalHead(FedCE):
    """FedCE with the head aggregated over every client (``head_aggregation="global"``).

    Eq. 4 (w_c ← w_c + Σ_k (n_k/N) Δw_c,k) then covers the backbone *and* the head w_out;
    eq. 5 only the rare specialists w_r,m. The SPEC §4 decision aggregates the head per cluster
    because it weights h_r, whose meaning differs between clusters; this ablation measures
    what that decision is worth.

    Parameters
    ----------
    **options
        :class:`FedCE`'s options except ``head_aggregation``.
    """

    name = "fedce_global_head"
    tuned_as = "fedce"

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedCEGlobalHead:
        """FedCE's options from the ``fedce`` section but its head aggregation (fixed here)."""
        options = fedce_options(config)
        del options["head_aggregation"]
        return cls(**options)

    def __init__(self, **options: Any) -> None:
        if "head_aggregation" in options:
            raise TypeError("fedce_global_head fixes head_aggregation='global'")
        super().__init__(head_aggregation="global", **options)
