"""FedAvg-w: FedAvg with the most distant client down-weighted (Alekseenko et al. §2.3, eq. 2–3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.similarity import METHODS as DISTANCE_METHODS
from rvfedprs.strategies.aggregation import weighted_average
from rvfedprs.strategies.base import StrategyContext, _sorted_results, config_section
from rvfedprs.strategies.fedavg import FedAvg

__all__ = [
    "FedAvgW",
    "most_distant_client",
    "read_distance_tsv",
    "aligned_distance",
    "configured_distance",
]


def most_distant_client(distance: np.ndarray) -> int:
    """i_max = argmax_i Σ_j D_ij, the client with the largest column sum (Alekseenko et al. eq. 3).

    Parameters
    ----------
    distance : array, shape (K, K)
        Symmetric distance matrix.

    Returns
    -------
    int
        Index of the most distant client (the first one on ties).
    """
    d = np.asarray(distance, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"distance matrix must be square, got shape {d.shape}")
    return int(np.argmax(d.sum(axis=0)))


def read_distance_tsv(path: str | Path) -> tuple[np.ndarray, list[str]]:
    """Read a matrix written by ``rvfedprs distance`` (client ids as header and first column).

    Returns
    -------
    matrix : array, shape (K, K)
    client_ids : list of str
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"distance matrix file not found: {path}")
    frame = pd.read_csv(path, sep="\t", index_col=0)
    frame.index = frame.index.astype(str)
    if list(frame.index) != [str(c) for c in frame.columns]:
        raise InputDataError(
            f"{path}: row ids {list(frame.index)} differ from column ids {list(frame.columns)}"
        )
    return frame.to_numpy(dtype=np.float64), list(frame.index)


def aligned_distance(
    distance: np.ndarray | str | Path | None,
    distance_clients: Sequence[str] | None,
    client_ids: Sequence[str],
) -> np.ndarray:
    """The distance matrix reordered to ``client_ids``.

    ``distance`` is an array (rows in the order of ``distance_clients``, or of ``client_ids``
    when that is None) or a TSV path (:func:`read_distance_tsv`).

    Raises
    ------
    ConfigError
        When no matrix was given, or its clients differ from the federation's.
    """
    if distance is None:
        raise ConfigError("this strategy needs a client distance matrix (option 'distance')")
    if isinstance(distance, (str, Path)):
        matrix, ids = read_distance_tsv(distance)
    else:
        matrix = np.asarray(distance, dtype=np.float64)
        ids = list(distance_clients) if distance_clients is not None else list(client_ids)
    if matrix.shape != (len(ids), len(ids)):
        raise ConfigError(f"distance matrix shape {matrix.shape} does not match {len(ids)} ids")
    if sorted(ids) != sorted(client_ids):
        raise ConfigError(
            f"distance matrix clients {sorted(ids)} differ from federation {sorted(client_ids)}"
        )
    order = [ids.index(c) for c in client_ids]
    return matrix[np.ix_(order, order)]


def configured_distance(
    name: str, config: Mapping[str, Any], context: StrategyContext
) -> dict[str, Any]:
    """``distance`` and ``distance_clients`` of distance strategy ``name``.

    The context's matrix when the caller computed one on the federation, else the TSV that
    ``strategies.distance`` names.

    Raises
    ------
    ConfigError
        When ``strategies.distance`` names a method and the context holds no matrix.
    """
    if context.distance is not None:
        return {"distance": context.distance, "distance_clients": context.distance_clients}
    source = config_section(config, "strategies")["distance"]
    if source in DISTANCE_METHODS:
        raise ConfigError(
            f"strategy {name!r}: strategies.distance = {source!r} is a method; its matrix "
            "must be computed on the federation and passed as distance= (rvfedprs train "
            "does this), or set strategies.distance to a TSV written by rvfedprs distance"
        )
    return {"distance": source, "distance_clients": None}


class FedAvgW(FedAvg):
    """FedAvg-w (Alekseenko et al. eq. 2–3): the most distant client is down-weighted.

    The client with the largest column sum of a distance matrix (EMD,
    Euclidean, OT, 1 − Jaccard) gets weight ω, every other client 1.

    w^{t+1} = Σ_k (ω_k n_k / Σ_j ω_j n_j) w_k^{t+1}.  Alekseenko et al. writes eq. 2 as a gradient
    step with weights ω_i and balanced clients; with ``sample_weighted=False`` the weights are ω_k
    alone (Σ_k ω_k w_k / Σ ω).

    Parameters
    ----------
    distance : array (K, K), TSV path, or None
        Client distance matrix; may also be set later with :meth:`set_distance`.
    distance_clients : sequence of str, optional
        Row order of an array ``distance`` (default: the sorted client ids).
    omega : float
        ω in (0, 1] for the most distant client (the paper uses 0.1, 0.3, 0.5).
    sample_weighted : bool
        Multiply ω_k by n_k.
    """

    name = "fedavg_w"
    tuning_axes = None  # not tuned

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedAvgW:
        """ω and the weighting from the ``strategies`` section; the distance as configured."""
        section = config_section(config, "strategies")
        return cls(
            omega=section["omega"],
            sample_weighted=section["sample_weighted"],
            **configured_distance(cls.name, config, context),
        )

    def __init__(
        self,
        *,
        distance: np.ndarray | str | Path | None = None,
        distance_clients: Sequence[str] | None = None,
        omega: float = 0.3,
        sample_weighted: bool = True,
    ) -> None:
        super().__init__()
        if not 0 < omega <= 1:
            raise ValueError(f"omega must be in (0, 1], got {omega}")
        self.omega = float(omega)
        self.sample_weighted = bool(sample_weighted)
        self._distance_source = (distance, distance_clients)
        self.distance: np.ndarray | None = None
        self.downweighted: str | None = None

    def set_distance(self, distance, distance_clients: Sequence[str] | None = None) -> None:
        """Set (or replace) the distance matrix; applied at the next :meth:`initialize`."""
        self._distance_source = (distance, distance_clients)
        if self.client_ids:
            self._apply_distance()

    def _apply_distance(self) -> None:
        self.distance = aligned_distance(*self._distance_source, self.client_ids)
        self.downweighted = self.client_ids[most_distant_client(self.distance)]

    def initialize(self, global_parameters, client_ids):
        """w^0, and i_max from the distance matrix."""
        super().initialize(global_parameters, client_ids)
        self._apply_distance()

    def client_weights(self, results) -> dict[str, float]:
        """ω_k (× n_k) per client of ``results``."""
        return {
            r.client_id: (self.omega if r.client_id == self.downweighted else 1.0)
            * (r.n_samples if self.sample_weighted else 1.0)
            for r in results
        }

    def aggregate_fit(self, server_round, results):
        """Set w ← Σ ω_k n_k w_k / Σ ω_k n_k."""
        ordered = _sorted_results(results)
        weights = self.client_weights(ordered)
        self.parameters = weighted_average(
            [r.parameters for r in ordered],
            [weights[r.client_id] for r in ordered],
            names=self.parameters.keys(),
        )

    def state_dict(self) -> dict[str, Any]:
        """Parameters, clients, matrix and the down-weighted client."""
        state = super().state_dict()
        state.update(distance=np.array(self.distance), downweighted=self.downweighted)
        return state

    def load_state_dict(self, state) -> None:
        """Restore from :meth:`state_dict`."""
        super().load_state_dict(state)
        self.distance = np.asarray(state["distance"], dtype=np.float64)
        self._distance_source = (self.distance, list(self.client_ids))
        self.downweighted = state["downweighted"]
