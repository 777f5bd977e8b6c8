"""Attentive aggregation: FedAtt (layer-wise, Ji et al. 2019) and Riyadi et al.'s cosine variant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.strategies.aggregation import Parameters
from rvfedprs.strategies.base import FitResult, StrategyContext, _sorted_results, config_section
from rvfedprs.strategies.fedavg import FedAvg

__all__ = ["FedAtt", "FedAttCosine", "fedatt_update", "cosine_attention_weights"]


def _softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - np.max(x))
    return z / z.sum()


def fedatt_update(server: Parameters, clients: Sequence[Parameters], step: float) -> Parameters:
    """One layer-wise attentive step (Ji et al. 2019, Algorithm 1, without the noise term).

    For every tensor (layer) l: α_k^l = softmax_k(‖w_s^l − w_k^l‖),
    w_s^l ← w_s^l − ε Σ_k α_k^l (w_s^l − w_k^l).

    Parameters
    ----------
    server : dict
        w_s, the current server model.
    clients : sequence of dict
        The clients' models w_k.
    step : float
        ε, the server step size.
    """
    out: Parameters = {}
    for name in sorted(server):
        ws = np.asarray(server[name], dtype=np.float64)
        diffs = np.stack([ws - np.asarray(c[name], dtype=np.float64) for c in clients])
        norms = np.sqrt((diffs.reshape(len(clients), -1) ** 2).sum(axis=1))
        alpha = _softmax(norms)
        out[name] = (ws - step * np.tensordot(alpha, diffs, axes=1)).astype(server[name].dtype)
    return out


def cosine_attention_weights(server: Parameters, clients: Sequence[Parameters]) -> np.ndarray:
    """Riyadi et al. eq. 5–6: s_k = Σ_l cos(w_l^t, w_{k,l}^{t+1}); α = softmax(s).

    Returns
    -------
    array, shape (n_clients,)
    """
    scores = np.zeros(len(clients))
    for name in sorted(server):
        a = np.asarray(server[name], dtype=np.float64).ravel()
        for k, c in enumerate(clients):
            b = np.asarray(c[name], dtype=np.float64).ravel()
            denom = np.linalg.norm(a) * np.linalg.norm(b)
            scores[k] += float(a @ b / denom) if denom > 0 else 0.0
    return _softmax(scores)


class FedAtt(FedAvg):
    """FedAtt (Ji, Pan, Long et al. 2019, IJCNN), layer-wise attentive aggregation.

    "Learning private neural language modeling with attentive aggregation", eq. 3–5:
    layer-wise attention over clients by the distance of each
    client's layer to the server's, then a step of size ε toward the attended clients.

    The optional Gaussian noise of the paper's differentially private variant is not applied.

    Parameters
    ----------
    step : float
        ε (1.0 moves w_s to the attention-weighted mean of the clients' layers).
    """

    name = "fedatt"
    tuning_axes = None  # not tuned
    secagg_refusal = (
        "its layer-wise attention weights come from the distance between each client's own "
        "model and the server's: it needs every client's model"
    )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> FedAtt:
        """ε from ``strategies.fedatt_step``."""
        return cls(step=config_section(config, "strategies")["fedatt_step"])

    def __init__(self, *, step: float = 1.0) -> None:
        super().__init__()
        if step <= 0:
            raise ValueError(f"step must be > 0, got {step}")
        self.step = float(step)

    def aggregate_fit(self, server_round, results: Sequence[FitResult]) -> None:
        """w_s ← fedatt_update(w_s, {w_k}, ε)."""
        ordered = _sorted_results(results)
        self.parameters = fedatt_update(self.parameters, [r.parameters for r in ordered], self.step)


class FedAttCosine(FedAvg):
    """The simplified global attention of Riyadi et al. eq. 5–7 (labelled separately from FedAtt).

    s_k = Σ_l cos(w_l^t, w_{k,l}^{t+1});  α = softmax(s);  w^{t+1} = Σ_k α_k w_k^{t+1}.
    """

    name = "fedatt_cosine"
    tuning_axes = None  # not tuned
    secagg_refusal = (
        "its attention weights come from the cosine similarity of each client's own model with "
        "the server's: it needs every client's model"
    )

    def aggregate_fit(self, server_round, results: Sequence[FitResult]) -> None:
        """Set w ← Σ α_k w_k with cosine-softmax α."""
        ordered = _sorted_results(results)
        models = [r.parameters for r in ordered]
        alpha = cosine_attention_weights(self.parameters, models)
        out: Parameters = {}
        for name in sorted(self.parameters):
            stack = np.stack([np.asarray(m[name], dtype=np.float64) for m in models])
            out[name] = np.tensordot(alpha, stack, axes=1).astype(self.parameters[name].dtype)
        self.parameters = out
