"""FedCE with oracle clusters: the true groups, given at construction (an analysis tool)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.strategies.base import StrategyContext, config_section
from rvfedprs.strategies.fedce import FedCE, fedce_options

__all__ = ["FedCEOracle", "client_groups"]


def client_groups(samples: str | Path, column: str = "cluster") -> dict[str, str]:
    """Each client's true group from a samples sheet (``client`` and ``column`` columns).

    Raises
    ------
    InputDataError
        When the file or a column is missing, or a client's samples name several groups.
    """
    path = Path(samples)
    if not path.is_file():
        raise InputDataError(f"samples sheet not found: {path}")
    table = pd.read_csv(path, sep="\t", dtype=str)
    missing = [c for c in ("client", column) if c not in table.columns]
    if missing:
        raise InputDataError(f"{path} lacks columns {missing} (oracle groups)")
    values = table.groupby("client")[column].unique()
    mixed = {c: sorted(v) for c, v in values.items() if len(v) != 1}
    if mixed:
        raise InputDataError(f"{path}: clients with several {column!r} values: {mixed}")
    return {str(c): str(v[0]) for c, v in values.items()}


class FedCEOracle(FedCE):
    """FedCE whose clusters are the true groups (RV-FedPRS eq. 4–6 with C_m known).

    The partition {C_m} of :class:`FedCE` (eq. 3: clustering of the Bloom-filter Jaccard
    similarities) is replaced by the groups given at construction — in simulations the
    ancestry clusters or architecture groups from the simulator's truth. Everything else (eq. 4
    backbone over all clients, eq. 5 specialists and heads within C_m) is FedCE's. It shows how
    much FedCE would gain with perfect clustering; it reads the truth, so it is an analysis
    tool, never a method to tune or to choose.

    Parameters
    ----------
    groups : mapping of client id to group label
        Every client's true group (:func:`client_groups` reads them from a samples sheet).
    **options
        :class:`FedCE`'s options (its clustering options are unused).
    """

    name = "fedce_oracle"
    tuned_as = "fedce"

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedCEOracle:
        """FedCE's options; the groups from the context, else from the configured samples sheet.

        The sheet is ``strategies.oracle_groups``, else ``evaluate.samples`` (column
        ``strategies.oracle_column``); with neither the groups stay unset.
        """
        groups = context.clusters
        if groups is None:
            section = config_section(config, "strategies")
            path = section["oracle_groups"] or config.get("evaluate", {}).get("samples")
            groups = None if path is None else client_groups(path, section["oracle_column"])
        return cls(groups=groups, **fedce_options(config))

    def __init__(self, *, groups: Mapping[str, Any] | None = None, **options: Any) -> None:
        super().__init__(**options)
        self.groups = None if groups is None else {str(c): str(g) for c, g in groups.items()}

    def initialize(self, global_parameters, client_ids):
        """As FedCE, after checking that every client has a true group."""
        self._check(client_ids)
        super().initialize(global_parameters, client_ids)

    def _check(self, client_ids: Sequence[str]) -> dict[str, str]:
        if self.groups is None:
            raise ValueError(
                "fedce_oracle needs the true groups: groups={client: group}, or from a config "
                "strategies.oracle_groups / evaluate.samples (a samples sheet)"
            )
        missing = sorted(set(client_ids) - set(self.groups))
        if missing:
            raise ValueError(f"fedce_oracle: no true group for clients {missing}")
        return self.groups

    def assign(self, client_ids):
        """The true groups of ``client_ids``, numbered in sorted order of their labels."""
        groups = self._check(client_ids)
        labels = sorted({groups[c] for c in client_ids})
        return {c: labels.index(groups[c]) for c in sorted(client_ids)}
