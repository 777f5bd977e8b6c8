"""What a black-box attacker observes: a model's logits on labelled examples."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from rvfedprs.evaluation.attacks.mia import logit_confidence
from rvfedprs.model import model_from_config, set_parameters
from rvfedprs.training import ClientData

__all__ = ["example_logits", "example_confidence", "stack_clients"]


def example_logits(
    parameters: Mapping[str, np.ndarray],
    data: ClientData,
    model_config: Mapping[str, Any],
    *,
    batch_size: int = 4096,
) -> np.ndarray:
    """Logits of the model ``parameters`` on every example of ``data`` (eval mode).

    Returns
    -------
    ndarray of float64, shape (n_samples,)
    """
    model = model_from_config(data.n_rare, model_config, initialise=False)
    set_parameters(model, parameters)
    model.eval()
    out = np.empty(data.n_samples, dtype=np.float64)
    with torch.no_grad():
        for start in range(0, data.n_samples, batch_size):
            rows = np.arange(start, min(start + batch_size, data.n_samples))
            prs, rare, _ = data.batch(rows)
            out[rows] = model(prs, rare).double().numpy()
    return out


def example_confidence(
    parameters: Mapping[str, np.ndarray], data: ClientData, model_config: Mapping[str, Any]
) -> np.ndarray:
    """φ = logit-scaled confidence in the true label of every example, shape (n_samples,)."""
    return logit_confidence(example_logits(parameters, data, model_config), data.y)


def stack_clients(parts: Sequence[ClientData], client_id: str) -> ClientData:
    """The samples of ``parts`` one after the other, as one :class:`ClientData`."""
    return ClientData(
        client_id,
        np.concatenate([d.sample_ids for d in parts]),
        np.concatenate([d.prs for d in parts]),
        sp.vstack([d.rare for d in parts], format="csr"),
        np.concatenate([d.y for d in parts]),
        outcome=parts[0].outcome,
    )
