"""Local training on one client: SGD, optional FedProx term, rare-variant influence (SPEC §5).

Sparse-aware training
---------------------
A variant no local sample carries has an exactly zero loss gradient in ``rare.input.weight``
(column ``j`` of the gradient is ``Σ_i a_ij δ_i``).  :func:`local_update` therefore trains a
*compact* copy of the model whose first specialist layer keeps only the columns the client
carries, and within it updates, at each step, only the columns the batch carries
(:class:`_LazyColumnSGD`): between two batches that carry a variant, its column and momentum
buffer follow a data-free recursion (momentum, weight decay, the proximal pull, a SCAFFOLD
correction ``c − c_k``), linear in the state, applied in closed form when the column is next
needed and once for every column at the end.  A step costs O(nnz · h + columns in the batch ·
h), not O(P · h), and the result equals plain dense SGD on the whole model (up to float
rounding; tests compare against autograd on the dense model).  DP-SGD (:mod:`rvfedprs.privacy`)
clips per-sample gradients without materialising them and noises every column.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
import torch
from torch import nn

from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, get_parameters, set_parameters
from rvfedprs.provenance import draw_seed

if TYPE_CHECKING:
    from rvfedprs.privacy import DPState

__all__ = [
    "ClientData",
    "LocalTrainingConfig",
    "LocalResult",
    "local_update",
    "select_influential",
    "evaluate",
    "batch_indices",
    "to_torch_sparse",
    "add_gradient_terms",
]

RARE_INPUT = "rare.input.weight"


@dataclass(frozen=True)
class ClientData:
    """One client's training (or test) samples.

    Attributes
    ----------
    client_id : str
    sample_ids : array of str, shape (n_samples,)
    prs : array of float32, shape (n_samples,)
        PRS standardised with the federated mean and sd.
    rare : scipy.sparse.csr_matrix of float32, shape (n_samples, n_rare)
        Minor-allele dosages of the rare variants (column order = ``rare_variants.tsv``).
    y : array of float32, shape (n_samples,)
        Phenotype, 0/1.
    """

    client_id: str
    sample_ids: np.ndarray
    prs: np.ndarray
    rare: sp.csr_matrix
    y: np.ndarray

    def __post_init__(self) -> None:
        sample_ids = np.asarray(self.sample_ids).astype(str)
        prs = np.asarray(self.prs, dtype=np.float32).reshape(-1)
        y = np.asarray(self.y, dtype=np.float32).reshape(-1)
        if not sp.issparse(self.rare):
            raise InputDataError(
                f"client {self.client_id}: rare dosages must be a scipy sparse matrix, "
                f"got {type(self.rare).__name__}"
            )
        rare = sp.csr_matrix(self.rare, dtype=np.float32)
        rare.sum_duplicates()
        n = len(sample_ids)
        for name, length in (("prs", len(prs)), ("y", len(y)), ("rare rows", rare.shape[0])):
            if length != n:
                raise InputDataError(
                    f"client {self.client_id}: {name} has {length} entries for {n} samples"
                )
        if not np.all(np.isfinite(prs)):
            raise InputDataError(f"client {self.client_id}: prs contains NaN or infinite values")
        bad = ~np.isin(y, (0.0, 1.0))
        if bad.any():
            raise InputDataError(
                f"client {self.client_id}: phenotype must be 0/1, found {np.unique(y[bad])[:5]}"
            )
        if rare.nnz and not np.all(np.isfinite(rare.data)):
            raise InputDataError(f"client {self.client_id}: rare dosages contain NaN values")
        object.__setattr__(self, "sample_ids", sample_ids)
        object.__setattr__(self, "prs", prs)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "rare", rare)

    @property
    def n_samples(self) -> int:
        """Number of samples."""
        return len(self.sample_ids)

    @property
    def n_rare(self) -> int:
        """Number of rare-variant columns ``P``."""
        return int(self.rare.shape[1])

    def carried_variants(self) -> np.ndarray:
        """Sorted indices of the columns with at least one non-zero dosage, shape (n_carried,)."""
        return np.unique(self.rare.indices[self.rare.data != 0]).astype(np.int64)

    def subset(self, rows: np.ndarray) -> ClientData:
        """The samples at ``rows`` (integer indices or a boolean mask)."""
        rows = np.asarray(rows)
        return ClientData(
            self.client_id, self.sample_ids[rows], self.prs[rows], self.rare[rows], self.y[rows]
        )

    def batch(
        self, rows: np.ndarray | None = None, *, sparse: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Torch tensors ``(prs (n,), rare (n, P), y (n,))`` for ``rows`` (all when None).

        ``rare`` is a sparse COO tensor when ``sparse`` (the model's sparse path), else dense.
        """
        rare = self.rare if rows is None else self.rare[rows]
        prs = self.prs if rows is None else self.prs[rows]
        y = self.y if rows is None else self.y[rows]
        rare_t = to_torch_sparse(rare) if sparse else torch.from_numpy(rare.toarray())
        return torch.from_numpy(np.ascontiguousarray(prs)), rare_t, torch.from_numpy(y.copy())


def to_torch_sparse(matrix: sp.spmatrix) -> torch.Tensor:
    """A scipy sparse matrix as a coalesced torch sparse COO float32 tensor of the same shape."""
    coo = sp.coo_matrix(matrix, dtype=np.float32)
    indices = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    values = torch.from_numpy(coo.data.astype(np.float32, copy=False))
    return torch.sparse_coo_tensor(indices, values, coo.shape, check_invariants=False).coalesce()


@dataclass(frozen=True)
class LocalTrainingConfig:
    """Client optimiser settings (SPEC §5).

    Attributes
    ----------
    epochs : int
        Local epochs E.
    lr, momentum : float
        SGD learning rate and momentum (PyTorch convention, no dampening).
    batch_size : int
    pos_weight : float or None
        Weight of cases in BCE-with-logits (None = 1).
    proximal_mu : float
        FedProx μ of the term μ/2‖w − w^t‖² (0 disables it).
    weight_decay : float
        L2 weight decay, added to the gradient as in ``torch.optim.SGD``.
    """

    epochs: int = 1
    lr: float = 0.05
    momentum: float = 0.9
    batch_size: int = 256
    pos_weight: float | None = None
    proximal_mu: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        checks = {
            "epochs": self.epochs >= 1,
            "lr": self.lr > 0,
            "momentum": 0 <= self.momentum <= 1,
            "batch_size": self.batch_size >= 1,
            "pos_weight": self.pos_weight is None or self.pos_weight > 0,
            "proximal_mu": self.proximal_mu >= 0,
            "weight_decay": self.weight_decay >= 0,
        }
        for key, ok in checks.items():
            if not ok:
                raise ValueError(f"LocalTrainingConfig.{key} = {getattr(self, key)!r} is invalid")


@dataclass
class LocalResult:
    """What a client returns after :func:`local_update`.

    Attributes
    ----------
    parameters : dict of str to ndarray
        Trained parameters, same names/shapes as :func:`rvfedprs.model.get_parameters`.
    n_samples : int
    loss : float
        Mean BCE (without the proximal term) over the last local epoch.
    influence : ndarray of float64, shape (P,), or None
        Σ over local steps of ‖∂L/∂W[:, j]‖₂ for ``W = rare.input.weight``; 0 where no local
        sample carries variant j.
    steps : int
        Number of optimiser steps taken.
    """

    parameters: dict[str, np.ndarray]
    n_samples: int
    loss: float
    influence: np.ndarray | None
    steps: int = 0


def batch_indices(
    n_samples: int, batch_size: int, epochs: int, random_seed: int
) -> list[list[np.ndarray]]:
    """Shuffled mini-batches: ``epochs`` lists of row-index arrays covering ``0..n_samples-1``."""
    rng = np.random.default_rng(random_seed)
    out = []
    for _ in range(epochs):
        perm = rng.permutation(n_samples)
        out.append([perm[i : i + batch_size] for i in range(0, n_samples, batch_size)])
    return out


def column_norms(grad: torch.Tensor) -> torch.Tensor:
    """Euclidean norm of every column of a 2-D gradient (one per rare variant).

    ``sqrt(sum of squares)`` over dim 0 is ~10x faster on CPU than
    ``torch.linalg.vector_norm(..., dim=0)``, which reduces along the strided axis.
    """
    return grad.square().sum(0).sqrt()


def _loss_fn(config: LocalTrainingConfig) -> nn.BCEWithLogitsLoss:
    if config.pos_weight is None:
        return nn.BCEWithLogitsLoss()
    return nn.BCEWithLogitsLoss(pos_weight=torch.tensor(float(config.pos_weight)))


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
        Accumulate the per-variant influence (see :class:`LocalResult`).
    random_seed : int, optional
        Seeds batch order and dropout (the global torch RNG is left untouched).
    generator : numpy Generator, optional
        Source of the seed when ``random_seed`` is None.
    dp : DPState, optional
        Run DP-SGD (per-sample clipping, Gaussian noise, opacus' RDP accountant) and extend the
        client's accountant; see :mod:`rvfedprs.privacy`.
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
    seed = _seed_from(random_seed, generator)
    if dp is not None:
        if correction is not None:
            raise ValueError("a SCAFFOLD correction is not supported with DP-SGD (dp)")
        from rvfedprs.privacy import dp_local_update

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

    active, compact = _compact_model(model, data, start)
    compact_ref = {
        name: torch.from_numpy(value) for name, value in _take_columns(ref, active).items()
    }
    compact_corr = None
    if corr is not None:
        compact_corr = {k: torch.from_numpy(v) for k, v in _take_columns(corr, active).items()}
    rare_compact = data.rare[:, active].tocsr()

    mu = float(config.proximal_mu)
    loss_fn = _loss_fn(config)
    named = dict(compact.named_parameters())
    w_in = named.pop(RARE_INPUT)  # updated column-lazily below, not by torch's optimiser
    optimizer = torch.optim.SGD(
        named.values(),
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
    )
    first_layer = _LazyColumnSGD(
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
                logits = compact(prs, to_torch_sparse(local), input_weight=w_rows.t())
                loss = loss_fn(logits, y)
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
    full_w = _data_free_columns(
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


def _compact_model(
    model: TwoPathwayModel, data: ClientData, start: Mapping[str, np.ndarray]
) -> tuple[np.ndarray, TwoPathwayModel]:
    """The columns ``data`` carries and a copy of ``model`` restricted to them, set to ``start``.

    A client carrying no rare variant keeps column 0 (data-free) so the layer is non-empty.
    """
    active = data.carried_variants()
    if active.size == 0:
        active = np.array([0], dtype=np.int64)
    compact = TwoPathwayModel(
        len(active),
        common_hidden=model.common_hidden,
        rare_hidden=model.rare_hidden,
        dropout=model.dropout,
        initialise=False,
    )
    set_parameters(compact, _take_columns(start, active))
    return active, compact


def _take_columns(params: Mapping[str, np.ndarray], columns: np.ndarray) -> dict[str, np.ndarray]:
    out = {k: np.asarray(v, dtype=np.float32) for k, v in params.items()}
    out[RARE_INPUT] = np.ascontiguousarray(out[RARE_INPUT][:, columns])
    return out


def _data_free_coefficients(config: LocalTrainingConfig, steps: int) -> np.ndarray:
    """Closed form of SGD steps whose loss gradient is zero, for 0..``steps`` steps.

    Each entry follows ``g = λw + μ(w − r) + k`` (``k`` the SCAFFOLD correction), ``v ← m·v + g``,
    ``w ← w − lr·v`` (torch's SGD: the first step's buffer is ``g``, i.e. ``v`` starts at 0).
    The state stays linear in ``(w, v, r, k)``: row ``t`` holds the coefficients after ``t``
    steps, ``[0]`` those of ``w`` and ``[1]`` those of ``v``.

    Returns
    -------
    ndarray of float64, shape (steps + 1, 2, 4)
    """
    lam, mu = float(config.weight_decay), float(config.proximal_mu)
    m, lr = float(config.momentum), float(config.lr)
    out = np.zeros((steps + 1, 2, 4))
    w = np.array([1.0, 0.0, 0.0, 0.0])  # w = 1·w0
    v = np.array([0.0, 1.0, 0.0, 0.0])  # v = 1·v0
    out[0] = w, v
    for t in range(1, steps + 1):
        g = (lam + mu) * w + np.array([0.0, 0.0, -mu, 1.0])
        v = m * v + g
        w = w - lr * v
        out[t] = w, v
    return out


def _data_free_columns(
    w0: np.ndarray,
    ref: np.ndarray,
    config: LocalTrainingConfig,
    steps: int,
    *,
    correction: np.ndarray | None = None,
) -> np.ndarray:
    """Weights of columns no sample carries after ``steps`` SGD steps (from a zero buffer).

    With m = 0, λ = μ = 0 this is ``w0 − lr·steps·k``; without λ, μ and k the columns stay put.
    """
    if config.weight_decay == 0.0 and config.proximal_mu == 0.0 and correction is None:
        return w0.copy()
    a, _, e, f = _data_free_coefficients(config, steps)[steps, 0]
    out = a * w0.astype(np.float64) + e * ref.astype(np.float64)
    if correction is not None:
        out += f * correction.astype(np.float64)
    return out.astype(np.float32)


class _LazyColumnSGD:
    """SGD with momentum on the first specialist layer, one column per rare variant, lazily.

    Column ``j`` of the loss gradient is ``Σ_i a_ij δ_i``: zero in every step whose batch
    carries no ``j``.  Between the steps that do, the column (and its momentum buffer) follows
    the data-free recursion of :func:`_data_free_coefficients`, so it is brought up to date in
    closed form only when a batch next carries it (and every column once, at the end).  A step
    then costs O(h × columns in the batch) instead of O(h × P); the result equals torch's SGD
    on the whole layer up to float rounding.  The state is kept transposed, one contiguous row
    per variant, so that gathering a batch's columns is a row gather.

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
        self._table = _data_free_coefficients(config, 64)

    def _coefficients(self, lag: np.ndarray) -> torch.Tensor:
        if lag.max(initial=0) >= len(self._table):
            self._table = _data_free_coefficients(self.config, 2 * int(lag.max()) + 1)
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


def select_influential(
    influence: np.ndarray,
    *,
    top_k: int | None = None,
    relative_threshold: float | None = None,
) -> np.ndarray:
    """Indices of the most influential variants, most influential first.

    Only variants with non-zero influence are ever selected.  ``relative_threshold`` keeps those
    with influence ≥ threshold × max; ``top_k`` then keeps at most ``k`` (ties broken by the lower
    index).  With neither, all non-zero variants are returned.

    Parameters
    ----------
    influence : array of float, shape (P,)
    top_k : int, optional
    relative_threshold : float in (0, 1], optional

    Returns
    -------
    ndarray of int64, shape (n_selected,)
    """
    influence = np.asarray(influence, dtype=np.float64)
    if influence.ndim != 1:
        raise ValueError(f"influence must be 1-D, got shape {influence.shape}")
    if not np.all(np.isfinite(influence)) or np.any(influence < 0):
        raise ValueError("influence must be finite and non-negative")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if relative_threshold is not None and not 0 < relative_threshold <= 1:
        raise ValueError(f"relative_threshold must be in (0, 1], got {relative_threshold}")
    keep = influence > 0
    if relative_threshold is not None and keep.any():
        keep &= influence >= relative_threshold * influence.max()
    idx = np.flatnonzero(keep)
    order = np.lexsort((idx, -influence[idx]))  # by influence descending, then index
    idx = idx[order]
    if top_k is not None:
        idx = idx[:top_k]
    return idx.astype(np.int64)


@torch.no_grad()
def evaluate(model: TwoPathwayModel, data: ClientData, *, batch_size: int = 4096) -> np.ndarray:
    """Predicted case probabilities, shape (n_samples,), float64 (the model is put in eval mode)."""
    if data.n_rare != model.n_rare:
        raise InputDataError(
            f"client {data.client_id}: {data.n_rare} rare variants, model expects {model.n_rare}"
        )
    model.eval()
    out = np.empty(data.n_samples, dtype=np.float64)
    for start in range(0, data.n_samples, batch_size):
        rows = np.arange(start, min(start + batch_size, data.n_samples))
        prs, rare, _ = data.batch(rows)
        out[rows] = torch.sigmoid(model(prs, rare)).double().numpy()
    return out
