"""The imaging client: one round of local training of :class:`SmallCNN` → a FitResult.

Client-side behaviour comes from ``instruction.config`` (same keys as the genomic client, plus
the array-valued hooks of SCAFFOLD and Ditto):

- ``proximal_mu`` — FedProx term μ/2‖w − w^t‖² (gradient μ(w − w^t));
- ``scaffold_correction`` — dict of arrays c − c_k added to every gradient (SCAFFOLD Option II);
  the result then carries ``metrics["local_steps"]`` and ``metrics["lr"]``, always reported;
- ``ditto_lambda`` + ``ditto_personal`` — also train the personal model v_k on
  f_k(v) + λ/2‖v − w^t‖² for the same number of epochs and return it as ``personal/<name>``.

Optimiser: plain mini-batch SGD (momentum configurable, 0 by default so that SCAFFOLD's Option
II holds); loss BCE-with-logits (binary) or cross-entropy (multi-class), as in Riyadi et al..
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from rvfedprs.imaging.cnn import SmallCNN
from rvfedprs.imaging.loader import ImageDataset
from rvfedprs.strategies.base import FitInstruction, FitResult
from rvfedprs.strategies.client import LocalRun, client_update
from rvfedprs.training import add_gradient_terms

__all__ = [
    "ImagingTrainingConfig",
    "ImagingClient",
    "fit_imaging_client",
    "build_cnn",
    "predict_proba",
    "embed",
    "get_cnn_parameters",
    "set_cnn_parameters",
]


@dataclass(frozen=True)
class ImagingTrainingConfig:
    """Local optimiser settings.

    Attributes
    ----------
    epochs : int
    lr : float
    momentum : float
    batch_size : int
    weight_decay : float
    """

    epochs: int = 1
    lr: float = 0.05
    momentum: float = 0.0
    batch_size: int = 64
    weight_decay: float = 0.0


@dataclass
class ImagingClient:
    """A client's local data and settings.

    Attributes
    ----------
    client_id : str
    train : ImageDataset
    test : ImageDataset
    n_classes : int
    training : ImagingTrainingConfig
    state : dict
        Persistent per-client state (kept by the engine across rounds).
    """

    client_id: str
    train: ImageDataset
    test: ImageDataset
    n_classes: int
    training: ImagingTrainingConfig = field(default_factory=ImagingTrainingConfig)
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def in_channels(self) -> int:
        """Image channels C."""
        return int(self.train.images.shape[1])

    @property
    def image_size(self) -> int:
        """H (= W)."""
        return int(self.train.images.shape[2])


def build_cnn(in_channels: int, n_classes: int, image_size: int, random_seed: int = 0):
    """A :class:`SmallCNN` (weights to be set by the caller unless freshly seeded)."""
    return SmallCNN(in_channels, n_classes, image_size=image_size, random_seed=random_seed)


def get_cnn_parameters(model: nn.Module) -> dict[str, np.ndarray]:
    """Map each name to a float32 copy of every parameter."""
    return {k: v.detach().cpu().numpy().copy() for k, v in model.named_parameters()}


def set_cnn_parameters(model: nn.Module, params: Mapping[str, np.ndarray]) -> None:
    """Load ``params`` (exactly the model's parameter names)."""
    own = dict(model.named_parameters())
    if set(params) != set(own):
        raise ValueError(
            f"parameter names differ from the CNN's: {sorted(set(params) ^ set(own))[:5]}"
        )
    with torch.no_grad():
        for name, p in own.items():
            p.copy_(torch.as_tensor(np.asarray(params[name]), dtype=p.dtype).reshape(p.shape))


def _loss(n_classes: int):
    if n_classes == 2:
        return lambda logits, y: nn.functional.binary_cross_entropy_with_logits(logits, y.float())
    return lambda logits, y: nn.functional.cross_entropy(logits, y)


def _train(
    model: SmallCNN,
    data: ImageDataset,
    config: ImagingTrainingConfig,
    *,
    reference: Mapping[str, np.ndarray],
    mu: float,
    correction: Mapping[str, np.ndarray] | None,
    seed: int,
) -> tuple[float, int]:
    """Mini-batch SGD in place; returns (mean loss, number of steps)."""
    gen = torch.Generator().manual_seed(seed)
    images = torch.from_numpy(data.images)
    labels = torch.from_numpy(data.labels)
    params = dict(model.named_parameters())
    ref = {k: torch.as_tensor(np.asarray(v), dtype=torch.float32) for k, v in reference.items()}
    corr = (
        {k: torch.as_tensor(np.asarray(v), dtype=torch.float32) for k, v in correction.items()}
        if correction is not None
        else None
    )
    opt = torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
    )
    loss_fn = _loss(model.n_classes)
    model.train()
    total, count, steps = 0.0, 0, 0
    fork = torch.random.fork_rng()
    with fork:
        torch.manual_seed(seed)
        for _ in range(config.epochs):
            order = torch.randperm(len(labels), generator=gen)
            for start in range(0, len(order), config.batch_size):
                batch = order[start : start + config.batch_size]
                opt.zero_grad()
                loss = loss_fn(model(images[batch]), labels[batch])
                loss.backward()
                add_gradient_terms(params, reference=ref, mu=mu, correction=corr)
                opt.step()
                total += loss.item() * len(batch)
                count += len(batch)
                steps += 1
    return total / max(count, 1), steps


def fit_imaging_client(
    instruction: FitInstruction, client: ImagingClient, *, random_seed: int
) -> FitResult:
    """Train locally from ``instruction.parameters`` and report the result.

    Parameters
    ----------
    instruction : FitInstruction
    client : ImagingClient
    random_seed : int
        Seeds batch order and dropout for this client and round.

    Returns
    -------
    FitResult
        Full updated parameters (plus ``personal/*`` for Ditto), n_k, metrics ``loss``,
        ``local_steps``, ``lr`` (and ``personal_loss`` for Ditto).
    """
    if len(client.train) == 0:
        raise ValueError(f"client {client.client_id}: no training samples")

    def train(start, *, mu, correction, seed, personal) -> LocalRun:
        model = build_cnn(client.in_channels, client.n_classes, client.image_size)
        set_cnn_parameters(model, start)
        loss, steps = _train(
            model,
            client.train,
            client.training,
            reference=instruction.parameters,
            mu=mu,
            correction=correction,
            seed=seed,
        )
        return LocalRun(get_cnn_parameters(model), loss, steps)

    parameters, metrics, _ = client_update(
        instruction.config,
        instruction.parameters,
        train,
        momentum=client.training.momentum,
        lr=client.training.lr,
        seed=random_seed,
    )
    return FitResult(
        client_id=client.client_id,
        n_samples=len(client.train),
        parameters=parameters,
        metrics=metrics,
    )


def _batched(model: SmallCNN, images: np.ndarray, fn, batch_size: int = 1024) -> np.ndarray:
    model.eval()
    out = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            out.append(fn(torch.from_numpy(images[start : start + batch_size])).numpy())
    return np.concatenate(out) if out else np.zeros((0,))


def predict_proba(
    parameters: Mapping[str, np.ndarray], images: np.ndarray, n_classes: int
) -> np.ndarray:
    """Class probabilities: shape (n,) P(y = 1) for binary tasks, (n, n_classes) otherwise."""
    model = build_cnn(images.shape[1], n_classes, images.shape[2])
    set_cnn_parameters(model, parameters)
    logits = _batched(model, images, model)
    if n_classes == 2:
        return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    z = logits.astype(np.float64) - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def embed(parameters: Mapping[str, np.ndarray], images: np.ndarray, n_classes: int) -> np.ndarray:
    """Penultimate activations of the CNN, shape (n, 64)."""
    model = build_cnn(images.shape[1], n_classes, images.shape[2])
    set_cnn_parameters(model, parameters)
    return _batched(model, images, model.embed)
