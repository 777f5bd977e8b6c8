"""DP-SGD for local training through opacus, with one accountant per client (SPEC §5).

Each client keeps one :class:`DPState` for the whole federation (the engine stores it in the
client's persistent state).  Its ``RDPAccountant`` is extended every round, so
:meth:`DPState.epsilon` is the *cumulative* ε over all rounds; a fresh ``PrivacyEngine`` per round
would under-report it.

How a round runs (:func:`dp_local_update`):

- batches are Poisson samples with rate ``q = min(1, batch_size / n)``, ``max(1, round(1/q))``
  steps per epoch, as the RDP analysis of the subsampled Gaussian mechanism assumes;
- per-sample gradients come from opacus' ``GradSampleModule`` on a copy of the model; the rare
  dosages are fed **dense** under DP, because opacus computes per-sample gradients of
  ``nn.Linear`` from hooked dense activations and cannot see the sparse ``torch.sparse.mm`` path
  (the noise touches every column anyway, so the compact trick of :mod:`rvfedprs.training` does
  not apply);
- ``DPOptimizer`` clips each sample's gradient to ``max_grad_norm``, adds
  N(0, σ²·C²) and divides by the expected batch size; the FedProx gradient μ(w − w^t) and weight
  decay depend only on public parameters and are added after the noise;
- the accountant takes one step (σ, q) per optimiser step;
- influence is computed from the clipped per-sample gradient sum *before* noise: the Bloom
  metadata is a separate channel and is **not** covered by the DP guarantee.

Parameter names are those of the unwrapped model (opacus' ``_module.`` prefix never leaks).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from opacus import GradSampleModule
from opacus.accountants import RDPAccountant
from opacus.optimizers import DPOptimizer

from rvfedprs.model import TwoPathwayModel, get_parameters, set_parameters
from rvfedprs.training import (
    RARE_INPUT,
    ClientData,
    LocalResult,
    LocalTrainingConfig,
    _loss_fn,
)

__all__ = ["DPState", "dp_local_update", "dp_schedule"]


@dataclass
class DPState:
    """A client's differential-privacy settings and its cumulative RDP accountant.

    Attributes
    ----------
    noise_multiplier : float
        σ, noise std relative to ``max_grad_norm``.
    max_grad_norm : float
        Per-sample clipping norm C.
    delta : float
        δ at which :meth:`epsilon` reports ε by default.
    accountant : opacus.accountants.RDPAccountant
        History of (σ, q, steps) over all rounds so far.
    rounds : int
        Rounds trained under this state.
    """

    noise_multiplier: float
    max_grad_norm: float
    delta: float = 1e-5
    accountant: RDPAccountant = field(default_factory=RDPAccountant)
    rounds: int = 0

    def __post_init__(self) -> None:
        if not self.noise_multiplier > 0:
            raise ValueError(f"noise_multiplier must be > 0, got {self.noise_multiplier}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"max_grad_norm must be > 0, got {self.max_grad_norm}")
        if not 0 < self.delta < 1:
            raise ValueError(f"delta must be in (0, 1), got {self.delta}")

    def epsilon(self, delta: float | None = None) -> float:
        """Cumulative ε spent so far at ``delta`` (default: the state's δ); 0 before training."""
        if not self.accountant.history:
            return 0.0
        return float(self.accountant.get_epsilon(delta=self.delta if delta is None else delta))

    @property
    def steps(self) -> int:
        """Total DP-SGD steps taken over all rounds."""
        return int(sum(h[2] for h in self.accountant.history))

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state, for checkpoints."""
        return {
            "noise_multiplier": self.noise_multiplier,
            "max_grad_norm": self.max_grad_norm,
            "delta": self.delta,
            "rounds": self.rounds,
            "history": [list(h) for h in self.accountant.history],
        }

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> DPState:
        """Rebuild a state saved by :meth:`state_dict`."""
        out = cls(
            float(state["noise_multiplier"]),
            float(state["max_grad_norm"]),
            float(state["delta"]),
            rounds=int(state["rounds"]),
        )
        out.accountant.history = [(float(s), float(q), int(n)) for s, q, n in state["history"]]
        return out


def dp_schedule(n_samples: int, batch_size: int, epochs: int) -> tuple[float, int]:
    """Poisson sampling rate ``q`` and number of steps of one DP round."""
    q = min(1.0, batch_size / n_samples)
    return q, epochs * max(1, int(round(1.0 / q)))


def dp_local_update(
    model: TwoPathwayModel,
    data: ClientData,
    config: LocalTrainingConfig,
    dp: DPState,
    *,
    reference: Mapping[str, np.ndarray] | None = None,
    influence: bool = False,
    random_seed: int = 0,
) -> LocalResult:
    """DP-SGD counterpart of :func:`rvfedprs.training.local_update` (same result type).

    Trains ``model`` in place, extends ``dp.accountant`` by this round's steps and increments
    ``dp.rounds``.  See the module notes for the mechanism.
    """
    start = get_parameters(model)
    ref = {
        k: torch.as_tensor(np.asarray(v, dtype=np.float32)) for k, v in (reference or start).items()
    }
    n = data.n_samples
    q, steps = dp_schedule(n, config.batch_size, config.epochs)
    expected_batch = q * n

    work = copy.deepcopy(model)
    gsm = GradSampleModule(work, batch_first=True, loss_reduction="mean")
    named = {k: p for k, p in work.named_parameters()}
    sgd = torch.optim.SGD(
        work.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
    )
    noise_gen = torch.Generator().manual_seed(int(random_seed))
    optimizer = DPOptimizer(
        sgd,
        noise_multiplier=dp.noise_multiplier,
        max_grad_norm=dp.max_grad_norm,
        expected_batch_size=max(1, int(round(expected_batch))),
        loss_reduction="mean",
        generator=noise_gen,
    )
    optimizer.attach_step_hook(dp.accountant.get_optimizer_hook_fn(sample_rate=q))
    loss_fn = _loss_fn(config)
    mu = float(config.proximal_mu)
    rng = np.random.default_rng(random_seed)
    infl = torch.zeros(data.n_rare, dtype=torch.float64) if influence else None
    loss_sum, loss_n = 0.0, 0
    last_epoch_from = steps - max(1, int(round(1.0 / q)))
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # opacus' hooks fire on module outputs when the inputs need no gradient: expected
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            torch.manual_seed(int(random_seed))
            gsm.train()
            for step in range(steps):
                rows = np.flatnonzero(rng.random(n) < q)
                prs, rare, y = data.batch(rows, sparse=False)
                optimizer.zero_grad(set_to_none=True)
                logits = gsm(prs, rare)
                loss = loss_fn(logits, y) if len(rows) else logits.sum() * 0.0
                loss.backward()
                if not optimizer.pre_step():  # clip, noise, scale; steps the accountant
                    continue
                if infl is not None and named[RARE_INPUT].summed_grad is not None:
                    g = named[RARE_INPUT].summed_grad.detach().double() / expected_batch
                    infl += torch.linalg.vector_norm(g, dim=0)
                if mu > 0:
                    with torch.no_grad():
                        for name, p in named.items():
                            p.grad.add_(p - ref[name], alpha=mu)
                optimizer.original_optimizer.step()
                if step >= last_epoch_from and len(rows):
                    loss_sum += float(loss.detach()) * len(rows)
                    loss_n += len(rows)
    finally:
        gsm._close()
    dp.rounds += 1
    set_parameters(model, get_parameters(work))
    epoch_loss = loss_sum / loss_n if loss_n else math.nan
    return LocalResult(
        get_parameters(model),
        n,
        float(epoch_loss),
        None if infl is None else infl.numpy(),
        steps,
    )
