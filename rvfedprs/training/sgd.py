"""Local training on one client: SGD, optional FedProx and SCAFFOLD terms, influence (design §5).

Sparse-aware training
---------------------
:func:`local_update` trains a *compact* copy of the model whose first specialist layer keeps only
the columns the client carries (:mod:`rvfedprs.training.compact`), and within it updates, at
each step, only the columns the batch carries (:class:`LazyColumnSGD`): between two batches that
carry a variant, its column and momentum buffer follow the data-free recursion, applied in
closed form when the column is next needed and once for every column at the end. A step costs
O(nnz · h + columns in the batch · h), not O(P · h), and the result equals plain dense SGD on
the whole model (up to float rounding; tests compare against autograd on the dense model).
DP-SGD (:mod:`rvfedprs.training.dp`) clips per-sample gradients without materialising them and
noises every column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
import torch

from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, get_parameters, set_parameters
from rvfedprs.provenance import draw_seed
from rvfedprs.training.compact import (
    RARE_INPUT,
    compact_model,
    data_free_coefficients,
    data_free_columns,
    take_columns,
)
from rvfedprs.training.config import LocalResult, LocalTrainingConfig
from rvfedprs.training.data import ClientData, batch_indices, to_torch_sparse
from rvfedprs.training.dp import DPState, dp_local_update
from rvfedprs.training.influence import column_norms

__all__ = ["local_update", "add_gradient_terms", "LazyColumnSGD"]


def _seed_from(random_seed: int | None, generator: np.random.Generator | None) -> int:
    if random_seed is None and generator is not None:
        return int(generator.integers(0, 2**31 - 1))
    return draw_seed(random_seed)


def add_gradient_terms(
    params: Mapping[str, torch.Tensor],
    *,
    reference: Mapping[str, torch.Tensor] | None = None,
    mu: float = 0.0,
    correction: Mapping[str, torch.Tensor] | None = None,
) -> None:
    """Add the FedProx and SCAFFOLD terms to every parameter's ``.grad`` (in place).

    ``grad += μ (p − reference)`` (gradient of μ/2‖w − w^t‖²) when ``mu > 0``, then
    ``grad += correction`` (SCAFFOLD's c − c_k) when given.  Shared by the genomic and the
    imaging clients.

    Parameters
    ----------
    params : mapping of str to Parameter
        The model's named parameters, gradients already computed.
    reference : mapping of str to Tensor, optional
        w^t, same names and shapes; required when ``mu > 0``.
    mu : float
    correction : mapping of str to Tensor, optional
        Same names and shapes as ``params``.
    """
    with torch.no_grad():
        for name, p in params.items():
            if mu > 0:
                p.grad.add_(p - reference[name], alpha=mu)
            if correction is not None:
                p.grad.add_(correction[name])


def _check_correction(
    correction: Mapping[str, np.ndarray], start: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """The correction as float32 arrays, names and shapes checked against the model's."""
    if set(correction) != set(start):
        raise ValueError(
            "SCAFFOLD correction tensor names differ from the model's: "
            f"{sorted(set(correction) ^ set(start))[:5]}"
        )
    out = {}
    for name, value in correction.items():
        arr = np.asarray(value, dtype=np.float32)
        if arr.shape != start[name].shape:
            raise ValueError(
                f"SCAFFOLD correction {name!r} has shape {arr.shape}, "
                f"the parameter has {start[name].shape}"
            )
        out[name] = arr
    return out


def local_update(
    model: TwoPathwayModel,
    data: ClientData,
    config: LocalTrainingConfig,
    *,
    reference: Mapping[str, np.ndarray] | None = None,
    influence: bool = False,
    random_seed: int | None = None,
    generator: np.random.Generator | None = None,
    dp: DPState | None = None,
    correction: Mapping[str, np.ndarray] | None = None,
) -> LocalResult:
    """Train ``model`` on ``data`` for ``config.epochs`` epochs of mini-batch SGD (in place).

    Parameters
    ----------
    model : TwoPathwayModel
        Starts from its current parameters; holds the trained ones on return.
    data : ClientData
    config : LocalTrainingConfig
    reference : dict of str to ndarray, optional
        The round's global parameters ``w^t`` for the FedProx term μ/2‖w − w^t‖²; defaults to
        the model's parameters at the start of the call.
    influence : bool
        Accumulate the per-variant influence (see :class:`LocalResult`); per rare feature for a
        model on collapsed inputs (which trains its
        :meth:`~rvfedprs.model.TwoPathwayModel.feature_model` on ``a R``).
    random_seed : int, optional
        Seeds batch order and dropout (the global torch RNG is left untouched).
    generator : numpy Generator, optional
        Source of the seed when ``random_seed`` is None.
    dp : DPState, optional
        Run DP-SGD (per-sample clipping, Gaussian noise, opacus' RDP accountant) and extend the
        client's accountant; see :mod:`rvfedprs.training.dp`.
    correction : dict of str to ndarray, optional
        SCAFFOLD's c − c_k, one array per parameter, added to the gradient before every step
        (``y ← y − η_l (g_k(y) + c − c_k)``); not supported with ``dp``.

    Returns
    -------
    LocalResult
    """
    if data.n_rare != model.n_rare:
        raise InputDataError(
            f"client {data.client_id}: {data.n_rare} rare variants, model expects {model.n_rare}"
        )
    if data.n_samples == 0:
        raise InputDataError(f"client {data.client_id}: no training samples")
    if model.projection is not None:  # collapsed rare inputs: train the twin on the features
        result = local_update(
            model.feature_model(),
            replace(data, rare=model.rare_features(data.rare)),
            config,
            reference=reference,
            influence=influence,
            random_seed=random_seed,
            generator=generator,
            dp=dp,
            correction=correction,
        )
        set_parameters(model, result.parameters)
        return result
    seed = _seed_from(random_seed, generator)
    if dp is not None:
        if correction is not None:
            raise ValueError("a SCAFFOLD correction is not supported with DP-SGD (dp)")
        return dp_local_update(
            model, data, config, dp, reference=reference, influence=influence, random_seed=seed
        )
    start = get_parameters(model)
    ref = {k: np.asarray(v, dtype=np.float32) for k, v in (reference or start).items()}
    if set(ref) != set(start):
        raise ValueError(
            f"reference parameter names differ from the model's: {sorted(set(ref) ^ set(start))}"
        )
    corr = _check_correction(correction, start) if correction is not None else None

    active, compact = compact_model(model, data, start)
    compact_ref = {
        name: torch.from_numpy(value) for name, value in take_columns(ref, active).items()
    }
    compact_corr = None
    if corr is not None:
        compact_corr = {k: torch.from_numpy(v) for k, v in take_columns(corr, active).items()}
    rare_compact = data.rare[:, active].tocsr()

    mu = float(config.proximal_mu)
    named = dict(compact.named_parameters())
    w_in = named.pop(RARE_INPUT)  # updated column-lazily below, not by torch's optimiser
    optimizer = torch.optim.SGD(
        named.values(),
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
    )
    first_layer = LazyColumnSGD(
        w_in.data,
        compact_ref.pop(RARE_INPUT),
        None if compact_corr is None else compact_corr.pop(RARE_INPUT),
        config,
    )
    infl = torch.zeros(len(active), dtype=torch.float64) if influence else None
    epoch_loss = 0.0
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        compact.train()
        for epoch_batches in batch_indices(data.n_samples, config.batch_size, config.epochs, seed):
            loss_sum = 0.0
            for rows in epoch_batches:
                batch = rare_compact[rows]
                touched = np.unique(batch.indices)
                local = sp.csr_matrix(
                    (batch.data, np.searchsorted(touched, batch.indices), batch.indptr),
                    shape=(len(rows), len(touched)),
                )
                w_rows = first_layer.current(touched).requires_grad_(True)  # (T, h)
                prs = torch.from_numpy(np.ascontiguousarray(data.prs[rows]))
                y = torch.from_numpy(data.y[rows].copy())
                optimizer.zero_grad(set_to_none=False)
                logits = compact(
                    prs,
                    to_torch_sparse(local),
                    input_weight=w_rows.t(),
                    covariates=data.covariates_tensor(rows),
                )
                loss = data.outcome.loss(logits, y, pos_weight=config.pos_weight)
                loss.backward()
                if infl is not None:
                    infl[touched] += column_norms(w_rows.grad.t())
                add_gradient_terms(named, reference=compact_ref, mu=mu, correction=compact_corr)
                optimizer.step()
                first_layer.step(touched, w_rows.grad)
                loss_sum += float(loss.detach()) * len(rows)
            epoch_loss = loss_sum / data.n_samples
    first_layer.finish()
    steps = first_layer.steps

    trained = get_parameters(compact)
    full_w = data_free_columns(
        start[RARE_INPUT],
        ref[RARE_INPUT],
        config,
        steps,
        correction=None if corr is None else corr[RARE_INPUT],
    )
    full_w[:, active] = trained[RARE_INPUT]
    trained[RARE_INPUT] = full_w
    set_parameters(model, trained)

    influence_out = None
    if infl is not None:
        influence_out = np.zeros(data.n_rare, dtype=np.float64)
        influence_out[active] = infl.numpy()
    return LocalResult(
        get_parameters(model), data.n_samples, float(epoch_loss), influence_out, steps
    )


class LazyColumnSGD:
    """SGD with momentum on the first specialist layer, one column per rare variant, lazily.

    Column ``j`` of the loss gradient is ``Σ_i a_ij δ_i``: zero in every step whose batch
    carries no ``j``.  Between the steps that do, the column (and its momentum buffer) follows
    the data-free recursion of :func:`~rvfedprs.training.compact.data_free_coefficients`, so it
    is brought up to date in closed form only when a batch next carries it (and every column
    once, at the end).  A step then costs O(h × columns in the batch) instead of O(h × P); the
    result equals torch's SGD on the whole layer up to float rounding.  The state is kept
    transposed, one contiguous row per variant, so that gathering a batch's columns is a row
    gather.

    Parameters
    ----------
    weight : Tensor, shape (h, P)
        Receives the trained weights at :meth:`finish`.
    reference : Tensor, shape (h, P)
        The proximal anchor ``r`` (used when ``config.proximal_mu > 0``).
    correction : Tensor, shape (h, P), optional
        SCAFFOLD's c − c_k for this layer.
    config : LocalTrainingConfig
    """

    def __init__(self, weight, reference, correction, config: LocalTrainingConfig) -> None:
        self.weight = weight
        self.rows = weight.t().contiguous()  # (P, h)
        self.buffer = torch.zeros_like(self.rows)
        self.reference = reference.t().contiguous() if config.proximal_mu else None
        self.correction = None if correction is None else correction.t().contiguous()
        self.config = config
        self.done = np.zeros(weight.shape[1], dtype=np.int64)  # steps applied, per column
        self.steps = 0
        self._table = data_free_coefficients(config, 64)

    def _coefficients(self, lag: np.ndarray) -> torch.Tensor:
        if lag.max(initial=0) >= len(self._table):
            self._table = data_free_coefficients(self.config, 2 * int(lag.max()) + 1)
        return torch.from_numpy(self._table[lag].astype(np.float32))  # (n, 2, 4)

    def _catch_up(self, columns: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows (weights, buffer) of ``columns`` after ``self.steps`` steps, written back."""
        index = torch.from_numpy(columns)
        w, v = self.rows.index_select(0, index), self.buffer.index_select(0, index)
        lag = self.steps - self.done[columns]
        if lag.any():
            c = self._coefficients(lag)[..., None]  # (n, 2, 4, 1) broadcast over h
            new_w, new_v = c[:, 0, 0] * w + c[:, 0, 1] * v, c[:, 1, 0] * w + c[:, 1, 1] * v
            if self.reference is not None:
                r = self.reference.index_select(0, index)
                new_w, new_v = new_w + c[:, 0, 2] * r, new_v + c[:, 1, 2] * r
            if self.correction is not None:
                k = self.correction.index_select(0, index)
                new_w, new_v = new_w + c[:, 0, 3] * k, new_v + c[:, 1, 3] * k
            w, v = new_w, new_v
            self.rows[index], self.buffer[index] = w, v
            self.done[columns] = self.steps
        return w, v

    def current(self, columns: np.ndarray) -> torch.Tensor:
        """The up-to-date weights of ``columns`` as rows (a copy), shape (len(columns), h)."""
        return self._catch_up(columns)[0].detach().clone()

    def step(self, columns: np.ndarray, grad: torch.Tensor) -> None:
        """One SGD step; ``grad`` (len(columns), h) is the loss gradient of ``columns``' rows."""
        cfg = self.config
        index = torch.from_numpy(columns)
        w, v = self._catch_up(columns)
        g = grad.detach().clone()
        if cfg.weight_decay:
            g += cfg.weight_decay * w
        if self.reference is not None:
            g += cfg.proximal_mu * (w - self.reference.index_select(0, index))
        if self.correction is not None:
            g += self.correction.index_select(0, index)
        v = cfg.momentum * v + g
        self.rows[index], self.buffer[index] = w - cfg.lr * v, v
        self.steps += 1
        self.done[columns] = self.steps

    def finish(self) -> None:
        """Bring every column up to the last step and write the layer back."""
        self._catch_up(np.arange(self.rows.shape[0]))
        self.weight.copy_(self.rows.t())
