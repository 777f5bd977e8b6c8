"""Ditto: a FedAvg global model plus one regularised personal model per client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rvfedprs.strategies.aggregation import Parameters, copy_parameters
from rvfedprs.strategies.base import (
    FitInstruction,
    StrategyContext,
    _sorted_results,
    config_section,
)
from rvfedprs.strategies.fedavg import FedAvg

__all__ = [
    "Ditto",
    "PERSONAL_PREFIX",
    "LAMBDA_KEY",
    "PERSONAL_KEY",
    "personal_request",
    "with_personal",
]

#: Prefix of the personal model's tensors in ``FitResult.parameters``.
PERSONAL_PREFIX = "personal/"
#: ``FitInstruction.config`` keys: λ and the client's current personal model (dict of arrays).
LAMBDA_KEY = "ditto_lambda"
PERSONAL_KEY = "ditto_personal"


def personal_request(config: Mapping[str, Any]) -> tuple[Parameters, float] | None:
    """``(v_k, λ)`` when the server asks for a Ditto personal step, else None (client side).

    Raises
    ------
    ValueError
        When ``ditto_personal`` comes without a valid ``ditto_lambda``.
    """
    personal = config.get(PERSONAL_KEY)
    if personal is None:
        return None
    lam = config.get(LAMBDA_KEY)
    if lam is None or float(lam) < 0:
        raise ValueError(f"Ditto: '{PERSONAL_KEY}' needs '{LAMBDA_KEY}' >= 0, got {lam!r}")
    return personal, float(lam)


def with_personal(parameters: Parameters, personal: Parameters) -> Parameters:
    """``parameters`` plus ``personal``'s tensors under ``personal/<name>`` (a new dict)."""
    out = dict(parameters)
    out.update({PERSONAL_PREFIX + k: v for k, v in personal.items()})
    return out


class Ditto(FedAvg):
    """Ditto (Li, Hu, Beirami & Smith 2021, ICML, Algorithm 1).

    The global model w follows FedAvg. Each client k also keeps a personal model v_k, trained
    locally on f_k(v) + (λ/2)‖v − w^t‖² with w^t the global model it received. The client gets
    λ and v_k in ``config`` (``ditto_lambda``, ``ditto_personal``) and returns v_k's tensors in
    ``FitResult.parameters`` prefixed ``personal/`` beside w_k's. The server holds the v_k for
    the simulation; :meth:`parameters_for` returns v_k.

    Parameters
    ----------
    lam : float
        λ ≥ 0 (0 = local training of v_k; large λ pulls v_k to w).
    """

    name = "ditto"
    tuning_axes = {"strategies.ditto_lambda": [0.01, 0.1, 1.0]}  # λ (Li et al.)
    secagg_refusal = (
        "it keeps every client's personal model v_k on the server, and each client returns v_k "
        "beside its update: per-client server-side state"
    )

    @classmethod
    def from_config(cls, config: Mapping[str, Any], context: StrategyContext) -> Ditto:
        """λ from ``strategies.ditto_lambda``."""
        return cls(lam=config_section(config, "strategies")["ditto_lambda"])

    def __init__(self, *, lam: float = 0.1) -> None:
        super().__init__()
        if lam < 0:
            raise ValueError(f"lam must be >= 0, got {lam}")
        self.lam = float(lam)
        self.personal: dict[str, Parameters] = {}

    def initialize(self, global_parameters, client_ids):
        """w^0; every v_k = w^0."""
        super().initialize(global_parameters, client_ids)
        self.personal = {c: copy_parameters(global_parameters) for c in self.client_ids}

    def configure_fit(self, server_round, client_ids):
        """w^t, λ and v_k."""
        return {
            c: FitInstruction(
                copy_parameters(self.parameters),
                {LAMBDA_KEY: self.lam, PERSONAL_KEY: self.parameters_for(c)},
            )
            for c in client_ids
        }

    def aggregate_fit(self, server_round, results):
        """FedAvg on w; keep every returned v_k."""
        ordered = _sorted_results(results)
        for r in ordered:
            personal = {
                k[len(PERSONAL_PREFIX) :]: v
                for k, v in r.parameters.items()
                if k.startswith(PERSONAL_PREFIX)
            }
            missing = sorted(set(self.parameters) - set(personal))
            if missing:
                raise ValueError(
                    f"Ditto: client {r.client_id!r} returned no personal model tensors "
                    f"(expected '{PERSONAL_PREFIX}<name>', missing e.g. {missing[:3]})"
                )
            self.personal[r.client_id] = copy_parameters(personal)
        super().aggregate_fit(server_round, ordered)

    def parameters_for(self, client_id):
        """v_k (w for a client that never trained)."""
        return copy_parameters(self.personal.get(client_id, self.parameters))

    def global_parameters(self) -> Parameters:
        """The global model w."""
        return copy_parameters(self.parameters)

    def state_dict(self) -> dict[str, Any]:
        """w, clients and every v_k."""
        state = super().state_dict()
        state["personal"] = {c: copy_parameters(p) for c, p in self.personal.items()}
        return state

    def load_state_dict(self, state) -> None:
        """Restore from :meth:`state_dict`."""
        super().load_state_dict(state)
        self.personal = {c: copy_parameters(p) for c, p in state["personal"].items()}
