"""SCAFFOLD (Riyadi et al.'s "FedSVRG"): control variates against client drift."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError
from rvfedprs.strategies.aggregation import Parameters, copy_parameters
from rvfedprs.strategies.base import (
    FitInstruction,
    StrategyContext,
    _sorted_results,
    config_section,
)
from rvfedprs.strategies.fedavg import FedAvg

__all__ = ["Scaffold", "CORRECTION_KEY", "control_variate_update", "client_correction"]

#: ``FitInstruction.config`` key of the client's gradient correction c − c_k (dict of arrays).
CORRECTION_KEY = "scaffold_correction"


def client_correction(config: Mapping[str, Any], *, momentum: float) -> Parameters | None:
    """The correction c − c_k a client must add to its gradients, or None (client side).

    Parameters
    ----------
    config : mapping
        ``FitInstruction.config``.
    momentum : float
        The client's SGD momentum; Option II's c_k⁺ = c_k − c + (x − y_k)/(K η_l) holds for
        plain SGD only.

    Raises
    ------
    ConfigError
        When a correction is sent to a client whose SGD has momentum.
    """
    correction = config.get(CORRECTION_KEY)
    if correction is None:
        return None
    if momentum != 0:
        raise ConfigError(
            f"SCAFFOLD (Option II) needs plain local SGD, but the client momentum is {momentum}; "
            "set train.momentum: 0"
        )
    return correction


def control_variate_update(
    c_client: Parameters,
    c_global: Parameters,
    x: Parameters,
    y: Parameters,
    steps_times_lr: float,
) -> Parameters:
    """Option II: c_k⁺ = c_k − c + (x − y_k) / (K η_l).

    Parameters
    ----------
    c_client, c_global : dict
        c_k and c.
    x : dict
        The server model the client started from.
    y : dict
        The client's model after K local steps.
    steps_times_lr : float
        K η_l > 0.
    """
    if steps_times_lr <= 0:
        raise ValueError(f"local_steps × lr must be > 0, got {steps_times_lr}")
    return {
        name: (
            c_client[name].astype(np.float64)
            - c_global[name]
            + (x[name].astype(np.float64) - y[name]) / steps_times_lr
        )
        for name in x
    }


class Scaffold(FedAvg):
    """SCAFFOLD (Karimireddy et al. 2020, ICML, Algorithm 1 with Option II).

    Client k runs K SGD steps y ← y − η_l (g_k(y) − c_k + c), receiving the correction
    c − c_k as ``config["scaffold_correction"]`` (a dict of arrays, one per tensor) and
    reporting ``metrics["local_steps"]`` (K) and ``metrics["lr"]`` (η_l). The server keeps every
    c_k (the simulation holds them for the clients) and updates
    c_k⁺ = c_k − c + (x − y_k)/(K η_l),  x ← x + η_g · mean_k(y_k − x),
    c ← c + (|S|/N) · mean_k(c_k⁺ − c_k).
    Riyadi et al. calls this FedSVRG (its eq. 4, with the simplified update c_k ← c that is *not*
    used here). Option II assumes plain SGD locally (no momentum).

    Parameters
    ----------
    server_lr : float
        η_g (1 in Riyadi et al.).
    """

    name = "scaffold"
    tuning_axes = None  # not tuned
    secagg_refusal = (
        "it keeps a control variate c_k per client on the server and updates it from that "
        "client's own Δc_k: per-client server-side state that needs each client's update"
    )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> Scaffold:
        """η_g from ``strategies.scaffold_server_lr``.

        Raises
        ------
        ConfigError
            When ``train.momentum`` is not 0: Option II needs plain local SGD.
        """
        momentum = config_section(config, "train")["momentum"]
        if momentum != 0:
            raise ConfigError(
                f"strategy {cls.name!r} (SCAFFOLD Option II) needs plain local SGD, but "
                f"train.momentum = {momentum}; set train.momentum: 0"
            )
        return cls(server_lr=config_section(config, "strategies")["scaffold_server_lr"])

    def __init__(self, *, server_lr: float = 1.0) -> None:
        super().__init__()
        if server_lr <= 0:
            raise ValueError(f"server_lr must be > 0, got {server_lr}")
        self.server_lr = float(server_lr)
        self.c: Parameters = {}
        self.c_clients: dict[str, Parameters] = {}

    def _zeros(self) -> Parameters:
        return {k: np.zeros_like(v, dtype=np.float64) for k, v in self.parameters.items()}

    def initialize(self, global_parameters, client_ids):
        """x^0, c = 0, c_k = 0."""
        super().initialize(global_parameters, client_ids)
        self.c = self._zeros()
        self.c_clients = {k: self._zeros() for k in self.client_ids}

    def configure_fit(self, server_round, client_ids):
        """Send x and the correction c − c_k."""
        out = {}
        for client in client_ids:
            ck = self.c_clients.setdefault(client, self._zeros())
            correction = {n: (self.c[n] - ck[n]).astype(np.float32) for n in self.c}
            out[client] = FitInstruction(
                copy_parameters(self.parameters), {CORRECTION_KEY: correction}
            )
        return out

    def aggregate_fit(self, server_round, results):
        """Update x, c and the c_k of the participating clients."""
        ordered = _sorted_results(results)
        x = self.parameters
        deltas_c = []
        for r in ordered:
            if "local_steps" not in r.metrics or "lr" not in r.metrics:
                raise ValueError(
                    f"SCAFFOLD needs metrics 'local_steps' and 'lr' from client {r.client_id!r}, "
                    f"got {sorted(r.metrics)}"
                )
            ck = self.c_clients.setdefault(r.client_id, self._zeros())
            k_eta = float(r.metrics["local_steps"]) * float(r.metrics["lr"])
            new_ck = control_variate_update(ck, self.c, x, r.parameters, k_eta)
            deltas_c.append({n: new_ck[n] - ck[n] for n in x})
            self.c_clients[r.client_id] = new_ck
        share = len(ordered) / max(len(self.client_ids), len(ordered))
        new_x = {}
        for n, w in x.items():
            mean_dy = np.mean([r.parameters[n].astype(np.float64) - w for r in ordered], axis=0)
            new_x[n] = (w.astype(np.float64) + self.server_lr * mean_dy).astype(w.dtype)
            self.c[n] = self.c[n] + share * np.mean([d[n] for d in deltas_c], axis=0)
        self.parameters = new_x

    def state_dict(self) -> dict[str, Any]:
        """x, c and every c_k."""
        state = super().state_dict()
        state.update(
            c=copy_parameters(self.c),
            c_clients={k: copy_parameters(v) for k, v in self.c_clients.items()},
        )
        return state

    def load_state_dict(self, state) -> None:
        """Restore from :meth:`state_dict`."""
        super().load_state_dict(state)
        self.c = copy_parameters(state["c"])
        self.c_clients = {k: copy_parameters(v) for k, v in state["c_clients"].items()}
