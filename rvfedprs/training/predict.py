"""Predictions of a trained two-pathway model on a client's samples."""

from __future__ import annotations

import numpy as np
import torch

from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel
from rvfedprs.training.data import ClientData

__all__ = ["evaluate"]


@torch.no_grad()
def evaluate(model: TwoPathwayModel, data: ClientData, *, batch_size: int = 4096) -> np.ndarray:
    """Predicted means, shape (n_samples,), float64 (the model is put in eval mode).

    The outcome's inverse link of the model's output: case probabilities for a binary
    phenotype, the (standardised) trait for a quantitative one.
    """
    if data.n_rare != model.n_rare:
        raise InputDataError(
            f"client {data.client_id}: {data.n_rare} rare variants, model expects {model.n_rare}"
        )
    model.eval()
    out = np.empty(data.n_samples, dtype=np.float64)
    for start in range(0, data.n_samples, batch_size):
        rows = np.arange(start, min(start + batch_size, data.n_samples))
        prs, rare, _ = data.batch(rows)
        logits = model(prs, rare, covariates=data.covariates_tensor(rows))
        out[rows] = data.outcome.torch_mean(logits).double().numpy()
    return out
