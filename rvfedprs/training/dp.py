"""DP-SGD for local training with sparse per-sample clipping, one accountant per client (design §5).

Each client keeps one :class:`DPState` for the whole federation (the engine stores it in the
client's persistent state).  Its opacus ``RDPAccountant`` is extended every round, so
:meth:`DPState.epsilon` is the *cumulative* ε over all rounds; a fresh accountant per round would
under-report it.

How a round runs (:func:`dp_local_update`):

- batches are Poisson samples with rate ``q = min(1, batch_size / n)`` (rows drawn by
  ``np.random.default_rng(random_seed)``, one ``rng.random(n) < q`` per step),
  ``max(1, round(1/q))`` steps per epoch, as the RDP analysis of the subsampled Gaussian
  mechanism assumes; an empty batch still takes a (pure-noise) step;
- per-sample gradients are never materialised.  Every parameter of the model belongs to an
  ``nn.Linear`` applied once per sample, whose per-sample gradient is ``δ_i a_iᵀ`` (weight) and
  ``δ_i`` (bias), ``a_i`` the layer input and ``δ_i`` the gradient of sample i's loss with respect
  to the layer output.  So ``‖g_i‖² = Σ_layers ‖δ_i‖²(‖a_i‖² + 1)`` ("ghost clipping"), the
  clip factor is ``c_i = min(1, C / (‖g_i‖ + 1e-6))`` (opacus' formula) and the sum of clipped
  gradients is ``(c ⊙ Δ)ᵀ A`` — for the first specialist layer a sparse product costing
  O(nnz · h), not O(P · h);
- N(0, σ²C²) is added to every coordinate of the clipped sum, which is then divided by the
  expected batch size ``max(1, round(q·n))``; the FedProx gradient μ(w − w^t) and weight decay
  depend only on public parameters and are added after the noise; SGD (momentum) steps;
- as in :func:`rvfedprs.training.sgd.local_update` the steps run on a *compact* model that keeps
  only the rare-variant columns the client carries.  A column nobody carries has a zero data
  gradient, so its weights follow a linear recursion in ``(w0, w^t, ξ_1..ξ_T)`` with ``ξ_t`` the
  step's i.i.d. N(0, (σC/B)²) noise.  It is applied once after training in closed form:
  ``w_T = a·w0 + b·w^t + N(0, (σC/B)² Σ_t e_t²)`` per coordinate, which has **exactly the same
  distribution** as adding fresh noise to that column at every step (a linear combination of
  independent Gaussians), and those columns never affect the loss or any other parameter.  Per
  step the cost is O(nnz_batch · h + n_carried · h); the O(P · h) work happens once per round;
- the accountant takes one step (σ, q) per optimiser step;
- influence is computed from the clipped per-sample gradient sum of ``rare.input.weight``
  *before* noise, divided by ``q·n``: the Bloom metadata is a separate channel and is **not**
  covered by the DP guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, get_parameters, set_parameters
from rvfedprs.training.compact import (
    RARE_INPUT,
    compact_model,
    data_free_columns,
    take_columns,
)
from rvfedprs.training.config import LocalResult, LocalTrainingConfig, dp_settings
from rvfedprs.training.data import ClientData, to_torch_sparse
from rvfedprs.training.influence import column_norms

if TYPE_CHECKING:
    from opacus.accountants import RDPAccountant

__all__ = ["DPState", "dp_local_update", "dp_schedule", "dp_settings"]

RARE_BIAS = "rare.input.bias"


def _new_accountant() -> RDPAccountant:
    """A fresh RDP accountant; opacus is imported here, only where DP-SGD runs.

    Importing opacus (and the scipy.stats and torch.distributed it pulls in) costs seconds, and
    a Flower deployment starts a fresh ClientApp process for every message
    (``benchmarks/bench_exchange.py``).
    """
    from opacus.accountants import RDPAccountant

    return RDPAccountant()


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
    accountant: RDPAccountant = field(default_factory=lambda: _new_accountant())
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
    def from_settings(
        cls, settings: Mapping[str, Any], saved: Mapping[str, Any] | None = None
    ) -> DPState:
        """A client's state from the run's DP settings (:func:`dp_settings`), fresh or ``saved``.

        ``saved`` is this client's :meth:`state_dict` from a checkpoint (a resumed run), so the
        accountant stays cumulative across the interruption.
        """
        if saved is not None:
            return cls.from_state_dict(saved)
        return cls(
            float(settings["noise_multiplier"]),
            float(settings["max_grad_norm"]),
            float(settings["delta"]),
        )

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


class _LinearTape:
    """Records the input and output of every ``nn.Linear`` of a model during its forward pass.

    The first specialist layer is applied through :meth:`TwoPathwayModel.rare_input` (a sparse
    product, not a module call), so that method is wrapped on the instance to record its output;
    its input is the sparse batch itself.  Raises ``ValueError`` when a parameter belongs to no
    recorded layer (per-sample clipping would miss it).
    """

    def __init__(self, model: TwoPathwayModel) -> None:
        first = model.rare.input
        self.layers = [
            (name, module)
            for name, module in model.named_modules()
            if isinstance(module, nn.Linear) and module is not first
        ]
        covered = {
            f"{name}.{p}" for name, module in self.layers for p, _ in module.named_parameters()
        }
        covered |= {RARE_INPUT, RARE_BIAS}
        names = {name for name, _ in model.named_parameters()}
        if covered != names:
            raise ValueError(
                "DP-SGD clips per-sample gradients of nn.Linear layers only; parameters "
                f"{sorted(names - covered)} belong to other layers"
            )
        self.inputs: dict[str, torch.Tensor] = {}
        self.outputs: dict[str, torch.Tensor] = {}
        self._model = model
        self._handles = [
            module.register_forward_hook(self._recorder(name)) for name, module in self.layers
        ]
        original = model.rare_input

        def rare_input(*args: Any, **kwargs: Any) -> torch.Tensor:
            out = original(*args, **kwargs)
            self.outputs[RARE_INPUT] = out
            return out

        model.rare_input = rare_input  # instance attribute: embed() calls self.rare_input

    def _recorder(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
            if name in self.outputs:
                raise ValueError(f"layer {name!r} ran twice in one forward pass")
            self.inputs[name] = args[0].detach()
            self.outputs[name] = out

        return hook

    def clear(self) -> None:
        self.inputs.clear()
        self.outputs.clear()

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        del self._model.rare_input


def _clipped_sums(
    model: TwoPathwayModel,
    tape: _LinearTape,
    prs: torch.Tensor,
    rare: torch.Tensor,
    y: torch.Tensor,
    rare_sq: torch.Tensor,
    max_grad_norm: float,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    covariates: torch.Tensor | None = None,
) -> tuple[dict[str, torch.Tensor], float]:
    """Sum over the batch of per-sample gradients clipped to ``max_grad_norm`` (ghost clipping).

    Parameters
    ----------
    model : TwoPathwayModel
        The (compact) model, with ``tape`` attached.
    tape : _LinearTape
    prs : Tensor, shape (b,)
    rare : sparse COO Tensor, shape (b, P_c)
    y : Tensor, shape (b,)
    rare_sq : Tensor, shape (b,)
        ``‖a_i‖²`` of every row of ``rare``.
    max_grad_norm : float
    loss : callable
        ``(logits, y)`` → every sample's loss (the outcome's, unreduced).
    covariates : Tensor, shape (b, n_covariates), optional

    Returns
    -------
    sums : dict of str to Tensor
        One tensor per parameter name, the parameter's shape.
    loss : float
        Mean loss over the batch.
    """
    tape.clear()
    logits = model(prs, rare, covariates=covariates)
    losses = loss(logits, y)
    names = [name for name, _ in tape.layers]
    deltas = torch.autograd.grad(
        losses.sum(), [tape.outputs[name] for name in names] + [tape.outputs[RARE_INPUT]]
    )
    norm_sq = deltas[-1].square().sum(1) * (rare_sq + 1.0)
    for (name, module), delta in zip(tape.layers, deltas[:-1], strict=True):
        bias = 1.0 if module.bias is not None else 0.0
        norm_sq = norm_sq + delta.square().sum(1) * (tape.inputs[name].square().sum(1) + bias)
    clip = (max_grad_norm / (norm_sq.sqrt() + 1e-6)).clamp(max=1.0)[:, None]
    sums = {}
    for (name, module), delta in zip(tape.layers, deltas[:-1], strict=True):
        scaled = delta * clip
        sums[f"{name}.weight"] = scaled.t() @ tape.inputs[name]
        if module.bias is not None:
            sums[f"{name}.bias"] = scaled.sum(0)
    scaled = deltas[-1] * clip
    sums[RARE_INPUT] = torch.sparse.mm(rare.t(), scaled).t().contiguous()
    sums[RARE_BIAS] = scaled.sum(0)
    return sums, float(losses.detach().mean())


def _noise_gain(config: LocalTrainingConfig, steps: int) -> float:
    """``sqrt(Σ_t e_t²)``: std of the step noise's total effect on a column nobody carries.

    Such a weight follows ``g = λw + μ(w − r) + ξ_t``, ``v ← m·v + g``, ``w ← w − lr·v`` (see
    :func:`rvfedprs.training.compact.data_free_columns` for the noise-free part), so after ``steps``
    steps ``w = a·w0 + b·r + Σ_t e_t ξ_t``; ``e`` and ``v``'s coefficients ``f`` are iterated
    here.  With i.i.d. ξ_t ~ N(0, s²) the noise term is N(0, s² Σ e_t²).
    """
    lam_mu, m, lr = (
        float(config.weight_decay + config.proximal_mu),
        float(config.momentum),
        config.lr,
    )
    e = np.zeros(steps)
    f = np.zeros(steps)
    for t in range(steps):
        g = lam_mu * e
        g[t] += 1.0
        f = m * f + g
        e = e - lr * f
    return float(np.sqrt(np.sum(e**2)))


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
    """DP-SGD counterpart of :func:`rvfedprs.training.sgd.local_update` (same result type).

    Trains ``model`` in place, extends ``dp.accountant`` by this round's steps and increments
    ``dp.rounds``.  See the module notes for the mechanism.

    Parameters
    ----------
    model : TwoPathwayModel
    data : ClientData
    config : LocalTrainingConfig
        ``batch_size`` is the *expected* Poisson batch size.
    dp : DPState
    reference : dict of str to ndarray, optional
        ``w^t`` of the FedProx term; defaults to the model's parameters at the start.
    influence : bool
        Accumulate Σ_steps ‖(clipped gradient sum / (q·n))[:, j]‖ per variant j (pre-noise).
    random_seed : int
        Seeds the Poisson batches, the noise and dropout (global RNGs are left untouched).

    Returns
    -------
    LocalResult
    """
    if data.n_rare != model.n_rare:
        raise InputDataError(
            f"client {data.client_id}: {data.n_rare} rare variants, model expects {model.n_rare}"
        )
    start = get_parameters(model)
    ref = {
        k: np.asarray(v, dtype=np.float32)
        for k, v in (start if reference is None else reference).items()
    }
    if set(ref) != set(start):
        raise ValueError(
            f"reference parameter names differ from the model's: {sorted(set(ref) ^ set(start))}"
        )
    n = data.n_samples
    q, steps = dp_schedule(n, config.batch_size, config.epochs)
    expected_batch = q * n
    denominator = float(max(1, int(round(expected_batch))))
    noise_std = float(dp.noise_multiplier * dp.max_grad_norm)

    active, compact = compact_model(model, data, start)
    compact_ref = {k: torch.from_numpy(v) for k, v in take_columns(ref, active).items()}
    rare = data.rare[:, active].tocsr()
    rare_sq = torch.from_numpy(np.asarray(rare.multiply(rare).sum(axis=1), np.float32).ravel())
    named = dict(compact.named_parameters())
    sgd = torch.optim.SGD(
        compact.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
    )

    def sample_losses(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return data.outcome.loss(logits, y, pos_weight=config.pos_weight, reduction="none")

    mu = float(config.proximal_mu)
    rng = np.random.default_rng(random_seed)
    noise_gen = torch.Generator().manual_seed(int(random_seed))
    infl = torch.zeros(len(active), dtype=torch.float64) if influence else None
    loss_sum, loss_n = 0.0, 0
    last_epoch_from = steps - max(1, int(round(1.0 / q)))
    tape = _LinearTape(compact)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(random_seed))  # dropout
            compact.train()
            for step in range(steps):
                rows = np.flatnonzero(rng.random(n) < q)
                if len(rows):
                    batch = _batch(data, rare, rows)
                    sums, loss = _clipped_sums(
                        compact,
                        tape,
                        *batch,
                        rare_sq[rows],
                        dp.max_grad_norm,
                        sample_losses,
                        covariates=data.covariates_tensor(rows),
                    )
                else:  # Poisson sampling may draw nobody: the step is pure noise
                    sums = {name: torch.zeros_like(p) for name, p in named.items()}
                if infl is not None:
                    infl += column_norms(sums[RARE_INPUT]).double() / expected_batch
                with torch.no_grad():
                    for name, p in named.items():
                        noise = torch.normal(0.0, noise_std, p.shape, generator=noise_gen)
                        grad = sums[name].add_(noise).div_(denominator)
                        if mu > 0:
                            grad.add_(p, alpha=mu).add_(compact_ref[name], alpha=-mu)
                        p.grad = grad
                sgd.step()
                dp.accountant.step(noise_multiplier=dp.noise_multiplier, sample_rate=q)
                if step >= last_epoch_from and len(rows):
                    loss_sum += loss * len(rows)
                    loss_n += len(rows)
    finally:
        tape.close()
    dp.rounds += 1

    trained = get_parameters(compact)
    # columns nobody carries: data-free recursion plus the closed-form noise of all steps (the
    # draws for the carried columns are overwritten, which leaves the others' law unchanged)
    full_w = data_free_columns(start[RARE_INPUT], ref[RARE_INPUT], config, steps)
    gain = _noise_gain(config, steps) * noise_std / denominator
    full_w += torch.normal(0.0, gain, full_w.shape, generator=noise_gen).numpy()
    full_w[:, active] = trained[RARE_INPUT]
    trained[RARE_INPUT] = full_w
    set_parameters(model, trained)

    influence_out = None
    if infl is not None:
        influence_out = np.zeros(data.n_rare, dtype=np.float64)
        influence_out[active] = infl.numpy()
    epoch_loss = loss_sum / loss_n if loss_n else math.nan
    return LocalResult(get_parameters(model), n, float(epoch_loss), influence_out, steps)


def _batch(
    data: ClientData, rare: sp.csr_matrix, rows: np.ndarray
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(prs, compact sparse rare, y)`` tensors of the samples at ``rows``."""
    return (
        torch.from_numpy(np.ascontiguousarray(data.prs[rows])),
        to_torch_sparse(rare[rows]),
        torch.from_numpy(data.y[rows].copy()),
    )
