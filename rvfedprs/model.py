"""The two-pathway RV-FedPRS network (RV-FedPRS paper §II-A).

A small *common backbone* maps the standardised PRS (and the standardised covariates — age,
sex, genetic PCs — when the data carry any) to ``h_c``; a wider *rare specialist* maps the
rare-variant dosage vector ``a`` (length ``P``) to ``h_r``; the *integration head* computes
``logit = w_out · [h_c ⊕ h_r] + b``.  The specialist's first layer (``rare.input``) accepts a
torch sparse (COO or CSR) batch, so its forward and backward cost scales with the number of
non-zero dosages, not with ``P``.

Parameter names start with ``common.``, ``rare.`` or ``head.`` so strategies can address the
groups; the first rare layer is ``rare.input.weight`` with shape ``(rare_hidden[0], F)``.

**Rare inputs** (``model.rare_input``, :data:`RARE_INPUTS`): the specialist reads the dosages
themselves (F = P, the default) or features collapsed from them by a fixed P × F projection R
(:func:`rare_projection`): region burdens ``A B`` (:mod:`rvfedprs.burden`), the dosages of
chosen variants (a column selection), or both side by side. The model still takes the dosage
matrix A; it applies R before its first layer, so R is part of the architecture (not a
parameter: it is not trained nor exchanged). The GLMs' rare features
(:func:`rvfedprs.training.glm.glm_design`) are the same R, so a GLM's rare coefficients are
the first layer of a network on the same input (:func:`linear_parameters`).

What needs no torch (the rare inputs, the parameters' names and shapes, the linear models they
hold) lives in :mod:`rvfedprs.architecture` and is re-exported here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn

from rvfedprs.architecture import (
    BURDEN_INPUTS,
    PARAMETER_GROUPS,
    RARE_INPUTS,
    TOP_K_INPUTS,
    linear_floor,
    linear_parameters,
    parameter_shapes,
    projection_from_config,
    rare_feature_names,
    rare_projection,
    top_k_pending,
)
from rvfedprs.config import section_defaults

__all__ = [
    "model_from_config",
    "TwoPathwayModel",
    "get_parameters",
    "set_parameters",
    "parameter_shapes",
    "PARAMETER_GROUPS",
    "linear_parameters",
    "linear_floor",
    "RARE_INPUTS",
    "BURDEN_INPUTS",
    "TOP_K_INPUTS",
    "top_k_pending",
    "rare_projection",
    "projection_from_config",
    "rare_feature_names",
]

#: The ``model`` section's schema defaults (the architecture's one source of defaults).
_DEFAULTS = section_defaults("model")


def _mlp(n_in: int, hidden: Sequence[int], dropout: float, first_name: str) -> nn.Sequential:
    """Linear → ReLU (→ Dropout) blocks; the first linear layer is named ``first_name``."""
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    width = n_in
    for i, h in enumerate(hidden):
        layers[first_name if i == 0 else f"fc{i}"] = nn.Linear(width, int(h))
        layers[f"act{i}"] = nn.ReLU()
        if dropout > 0:
            layers[f"drop{i}"] = nn.Dropout(dropout)
        width = int(h)
    return nn.Sequential(layers)


class TwoPathwayModel(nn.Module):
    """Common backbone f_c(PRS) ⊕ rare specialist f_r(a) → logistic head.

    Parameters
    ----------
    n_rare : int
        Number of rare variants ``P`` (columns of the dosage matrix).
    n_covariates : int
        Covariates entering the common backbone beside the PRS (its input width is
        ``1 + n_covariates``).
    common_hidden : sequence of int
        Widths of the common backbone's hidden layers (ReLU after each).
    rare_hidden : sequence of int
        Widths of the rare specialist's hidden layers; ``rare_hidden[0]`` is the width of the
        sparse input layer ``rare.input``.
    dropout : float
        Dropout after every hidden activation (0 disables it).
    random_seed : int, optional
        Seed of the weight initialisation (PyTorch's default initialisers, drawn from a private
        generator so the global RNG is untouched).  ``None`` uses the global RNG.
    initialise : bool
        False leaves the weights uninitialised (allocated, not drawn) for callers that set every
        parameter right away: drawing a (h, P) layer's uniform init costs more than a training
        step.
    projection : sparse matrix, shape (n_rare, F), optional
        R of :func:`rare_projection`: the specialist reads ``a R`` (F features) instead of the
        dosages ``a``; None (the default) reads the dosages.
    """

    def __init__(
        self,
        n_rare: int,
        *,
        n_covariates: int = 0,
        common_hidden: Sequence[int] = tuple(_DEFAULTS["common_hidden"]),
        rare_hidden: Sequence[int] = tuple(_DEFAULTS["rare_hidden"]),
        dropout: float = _DEFAULTS["dropout"],
        random_seed: int | None = None,
        initialise: bool = True,
        projection: sp.spmatrix | None = None,
    ) -> None:
        super().__init__()
        if int(n_rare) < 1:
            raise ValueError(f"n_rare must be >= 1, got {n_rare}")
        if not common_hidden or not rare_hidden:
            raise ValueError(
                f"common_hidden and rare_hidden need at least one layer, got "
                f"{tuple(common_hidden)} and {tuple(rare_hidden)}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if int(n_covariates) < 0:
            raise ValueError(f"n_covariates must be >= 0, got {n_covariates}")
        self.n_rare = int(n_rare)
        self.projection: sp.csr_matrix | None = None
        self._projection_torch: tuple[Tensor, Tensor] | None = None  # R, Rᵀ as torch sparse
        self.n_features = self.n_rare
        if projection is not None:
            if projection.shape[0] != self.n_rare or projection.shape[1] < 1:
                raise ValueError(
                    f"the rare projection has shape {projection.shape}; the model needs "
                    f"({self.n_rare}, F >= 1)"
                )
            self.projection = sp.csr_matrix(projection, dtype=np.float64)
            self.n_features = int(projection.shape[1])
            self._projection_torch = (
                _torch_sparse(self.projection),
                _torch_sparse(self.projection.T),
            )
        self.n_covariates = int(n_covariates)
        self.common_hidden = tuple(int(h) for h in common_hidden)
        self.rare_hidden = tuple(int(h) for h in rare_hidden)
        self.dropout = float(dropout)
        if not initialise:
            with torch.device("meta"):
                self._build()
            self.to_empty(device="cpu")
        elif random_seed is None:
            self._build()
        else:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(int(random_seed))
                self._build()

    def _build(self) -> None:
        self.common = _mlp(1 + self.n_covariates, self.common_hidden, self.dropout, "fc0")
        self.rare = _mlp(self.n_features, self.rare_hidden, self.dropout, "input")
        self.head = nn.Linear(self.common_hidden[-1] + self.rare_hidden[-1], 1)

    def config(self) -> dict:
        """Constructor keyword arguments that rebuild this architecture."""
        out = {
            "n_rare": self.n_rare,
            "n_covariates": self.n_covariates,
            "common_hidden": list(self.common_hidden),
            "rare_hidden": list(self.rare_hidden),
            "dropout": self.dropout,
        }
        if self.projection is not None:
            out["projection"] = self.projection.copy()
        return out

    def feature_model(self) -> TwoPathwayModel:
        """The same network reading the features ``a R`` directly: no projection, same parameters.

        Local training runs on it (with the features as its "dosages"), so every column-wise
        mechanism of :mod:`rvfedprs.training` — lazy first-layer columns, per-column influence,
        DP-SGD — works on the F features unchanged; its parameters are this model's.
        """
        twin = TwoPathwayModel(
            self.n_features,
            n_covariates=self.n_covariates,
            common_hidden=self.common_hidden,
            rare_hidden=self.rare_hidden,
            dropout=self.dropout,
            initialise=False,
        )
        set_parameters(twin, get_parameters(self))
        return twin

    def rare_features(self, rare: sp.spmatrix) -> sp.csr_matrix:
        """The features the specialist reads from a scipy dosage matrix: ``A R`` (or A)."""
        if self.projection is None:
            return sp.csr_matrix(rare)
        return sp.csr_matrix(sp.csr_matrix(rare, dtype=np.float64) @ self.projection)

    def _project(self, rare: Tensor) -> Tensor:
        """A torch batch of dosages (n, P), dense or sparse, as features ``a R`` (n, F)."""
        r, r_t = self._projection_torch
        if rare.layout == torch.strided:
            return torch.sparse.mm(r_t, rare.t().to(torch.float32)).t()
        coo = rare.to_sparse_coo() if rare.layout != torch.sparse_coo else rare
        return torch.sparse.mm(coo.to(torch.float32).coalesce(), r).to_dense()

    def rare_input(self, rare: Tensor, weight: Tensor | None = None) -> Tensor:
        """First specialist layer on a dense or sparse batch, shape (n, P) → (n, h).

        ``weight`` (h, rare.shape[1]) replaces ``rare.input.weight`` for a batch restricted to
        some columns (the lazy column update of :mod:`rvfedprs.training`). A model with a
        projection applies it first (a batch of dosages, without ``weight``).
        """
        layer = self.rare.input
        if self.projection is not None and weight is None:
            return layer(self._project(rare))
        if weight is not None:
            return torch.sparse.mm(rare, weight.t()) + layer.bias
        if rare.layout in (torch.sparse_coo, torch.sparse_csr):
            return torch.sparse.mm(rare, layer.weight.t()) + layer.bias
        # Calling the module (not F.linear) keeps opacus' per-sample-gradient hooks working.
        return layer(rare)

    def embed(
        self,
        prs: Tensor,
        rare: Tensor,
        input_weight: Tensor | None = None,
        covariates: Tensor | None = None,
    ) -> Tensor:
        """Concatenated representation ``[h_c ⊕ h_r]``, shape (n, h_c width + h_r width).

        ``covariates`` (n, n_covariates) joins the PRS at the backbone's input.
        """
        h_c = self.common(self._common_input(prs, covariates))
        rare_layers = list(self.rare.children())
        h_r = self.rare_input(rare, input_weight)
        for layer in rare_layers[1:]:
            h_r = layer(h_r)
        return torch.cat([h_c, h_r], dim=1)

    def _common_input(self, prs: Tensor, covariates: Tensor | None) -> Tensor:
        column = prs.reshape(-1, 1)
        given = 0 if covariates is None else int(covariates.shape[-1])
        if given != self.n_covariates:
            raise ValueError(
                f"the model expects {self.n_covariates} covariates, the batch holds {given}"
            )
        return column if covariates is None else torch.cat([column, covariates], dim=1)

    def forward(
        self,
        prs: Tensor,
        rare: Tensor,
        *,
        input_weight: Tensor | None = None,
        covariates: Tensor | None = None,
    ) -> Tensor:
        """Logits, shape (n,), from ``prs`` (n,) and ``rare`` (n, P), dense or sparse.

        With ``input_weight`` (h, p), ``rare`` is a sparse (n, p) batch over the p columns that
        weight holds (a subset of the P variants) and replaces the first layer's weight.
        ``covariates`` (n, n_covariates): standardised covariates, when the model has any.
        """
        n_columns = self.n_rare if input_weight is None else input_weight.shape[1]
        if rare.shape[-1] != n_columns:
            raise ValueError(
                f"rare input has {rare.shape[-1]} columns, the model expects {n_columns}"
            )
        return self.head(self.embed(prs, rare, input_weight, covariates)).reshape(-1)


def model_from_config(
    n_rare: int,
    model_config: Mapping[str, Any],
    *,
    random_seed: int | None = 0,
    initialise: bool = True,
) -> TwoPathwayModel:
    """A :class:`TwoPathwayModel` for ``n_rare`` variants from the ``model`` config section.

    Parameters
    ----------
    n_rare : int
        Number of rare-variant columns P.
    model_config : mapping
        ``common_hidden``, ``rare_hidden``, ``dropout`` (missing keys take the schema defaults)
        and, derived from the data, ``n_covariates`` (default 0).
    random_seed : int or None
        Seed of the initial weights (callers that overwrite the weights keep the default 0).
    initialise : bool
        False: weights left uninitialised, for callers that set them all at once.
    """
    config = {**_DEFAULTS, **model_config}
    return TwoPathwayModel(
        n_rare,
        n_covariates=int(config.get("n_covariates", 0)),
        common_hidden=tuple(config["common_hidden"]),
        rare_hidden=tuple(config["rare_hidden"]),
        dropout=float(config["dropout"]),
        random_seed=random_seed,
        initialise=initialise,
        projection=projection_from_config(n_rare, config),
    )


def get_parameters(model: nn.Module) -> dict[str, np.ndarray]:
    """Copy of the model's parameters as ordered ``{name: float32 array}``.

    Names are the module's own (``common.``, ``rare.``, ``head.``); a ``_module.`` prefix left by
    an opacus wrapper is stripped.
    """
    out: dict[str, np.ndarray] = {}
    for name, p in model.named_parameters():
        out[_strip_prefix(name)] = p.detach().cpu().numpy().copy()
    return out


def set_parameters(model: nn.Module, params: Mapping[str, np.ndarray]) -> None:
    """Load ``params`` (names and shapes exactly those of :func:`get_parameters`) into ``model``.

    Raises
    ------
    ValueError
        When names are missing or unexpected, or a shape differs.
    """
    named = {_strip_prefix(n): p for n, p in model.named_parameters()}
    missing = [n for n in named if n not in params]
    extra = [n for n in params if n not in named]
    if missing or extra:
        raise ValueError(f"parameter names differ: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, p in named.items():
            value = np.asarray(params[name])
            if tuple(value.shape) != tuple(p.shape):
                raise ValueError(
                    f"parameter {name!r} has shape {tuple(value.shape)}, "
                    f"the model expects {tuple(p.shape)}"
                )
            p.copy_(torch.as_tensor(value, dtype=p.dtype))


def _torch_sparse(matrix: sp.spmatrix) -> Tensor:
    """A scipy matrix as a coalesced float32 torch COO tensor (the projection R, Rᵀ).

    :func:`rvfedprs.training.to_torch_sparse` does the same for batches; the model cannot
    import the training package (which imports it).
    """
    coo = sp.coo_matrix(matrix)
    indices = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    values = torch.from_numpy(coo.data.astype(np.float32))
    return torch.sparse_coo_tensor(indices, values, coo.shape, check_invariants=False).coalesce()


def _strip_prefix(name: str) -> str:
    while name.startswith("_module."):
        name = name[len("_module.") :]
    return name
