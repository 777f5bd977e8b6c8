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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from torch import Tensor, nn

from rvfedprs.config import section_defaults

__all__ = [
    "model_from_config",
    "TwoPathwayModel",
    "get_parameters",
    "set_parameters",
    "parameter_groups",
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

PARAMETER_GROUPS: tuple[str, ...] = ("common", "rare", "head")

#: The ``model`` section's schema defaults (the architecture's one source of defaults).
_DEFAULTS = section_defaults("model")

#: What the rare specialist reads: ``dosages`` (every variant's dosage); ``burden`` (the region
#: burdens A·B); ``top_k`` (the dosages of chosen variants); ``burden+top_k`` (burdens, then
#: those dosages).
RARE_INPUTS: tuple[str, ...] = ("dosages", "burden", "top_k", "burden+top_k")
#: The inputs with region burdens, and those with chosen variants' dosages.
BURDEN_INPUTS: tuple[str, ...] = ("burden", "burden+top_k")
TOP_K_INPUTS: tuple[str, ...] = ("top_k", "burden+top_k")


def top_k_pending(model_config: Mapping[str, Any]) -> bool:
    """True for a top-k input whose variants the run's warm start has not chosen yet."""
    if str(model_config.get("rare_input", "dosages")) not in TOP_K_INPUTS:
        return False
    return (model_config.get("rare_projection") or {}).get("top_k") is None


def rare_projection(
    rare_input: str,
    n_rare: int,
    *,
    burden: sp.spmatrix | None = None,
    top: Sequence[int] | np.ndarray | None = None,
) -> sp.csr_matrix | None:
    """R, the P × F map from the dosages to the rare features of ``rare_input`` (None: dosages).

    Parameters
    ----------
    rare_input : str
        One of :data:`RARE_INPUTS`.
    n_rare : int
        P, the rare-variant columns.
    burden : sparse matrix, shape (P, G), optional
        B of :class:`~rvfedprs.burden.BurdenMap`; needed for the burden inputs.
    top : sequence of int, optional
        The chosen variants' columns, in feature order; needed for the top-k inputs.

    Raises
    ------
    ValueError
        For an unknown input, a missing or mis-shaped burden map, or chosen columns outside
        [0, P) (each named with the value).
    """
    if rare_input not in RARE_INPUTS:
        raise ValueError(f"rare input {rare_input!r} unknown; choose from {list(RARE_INPUTS)}")
    if rare_input == "dosages":
        return None
    blocks = []
    if rare_input in BURDEN_INPUTS:
        if burden is None or burden.shape[0] != n_rare:
            raise ValueError(
                f"rare input {rare_input!r} needs a burden map of {n_rare} rows, got "
                f"{None if burden is None else burden.shape}"
            )
        blocks.append(sp.csr_matrix(burden, dtype=np.float64))
    if rare_input in TOP_K_INPUTS:
        columns = np.asarray([] if top is None else top, dtype=np.int64).reshape(-1)
        if top is None or (columns.size and not 0 <= columns.min() <= columns.max() < n_rare):
            raise ValueError(
                f"rare input {rare_input!r} needs the chosen variants' columns among "
                f"{n_rare}, got {None if top is None else list(top)}"
            )
        selection = (np.ones(columns.size), (columns, np.arange(columns.size)))
        blocks.append(sp.csr_matrix(selection, shape=(n_rare, columns.size)))
    return sp.hstack(blocks, format="csr")


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


def projection_from_config(n_rare: int, model_config: Mapping[str, Any]) -> sp.csr_matrix | None:
    """R of ``model_config["rare_input"]`` from ``model_config["rare_projection"]``.

    ``rare_projection`` holds what the run chose: ``burden`` (a burden map's
    :meth:`~rvfedprs.burden.BurdenMap.to_config`), ``top_k`` (the variants' columns, chosen by
    the run's warm start) and, optionally, ``features`` (the burden features' names: the
    regions; :func:`rare_feature_names`).

    Raises
    ------
    ValueError
        For collapsed inputs without their ``rare_projection``.
    """
    rare_input = str(model_config.get("rare_input", "dosages"))
    if rare_input == "dosages":
        return None
    chosen = model_config.get("rare_projection")
    if chosen is None:
        raise ValueError(
            f"model.rare_input {rare_input!r} needs the run's rare_projection (burden map, "
            "top-k variants) in the model config"
        )
    burden = chosen.get("burden")
    if burden is not None:
        shape = tuple(int(v) for v in burden["shape"])
        burden = sp.csr_matrix(
            (np.asarray(burden["weights"], float), (burden["rows"], burden["cols"])), shape=shape
        )
    return rare_projection(rare_input, n_rare, burden=burden, top=chosen.get("top_k"))


def rare_feature_names(model_config: Mapping[str, Any], variant_keys: Sequence[str]) -> list[str]:
    """The names of the F features the specialist reads (FedCE's Bloom filters hold them).

    The variant keys (dosages), the regions (``rare_projection["features"]``, burdens), the
    chosen variants' keys (top k), or the regions then those keys (``burden+top_k``).
    """
    rare_input = str(model_config.get("rare_input", "dosages"))
    if rare_input == "dosages":
        return list(variant_keys)
    chosen = model_config.get("rare_projection") or {}
    names = list(chosen.get("features") or []) if rare_input in BURDEN_INPUTS else []
    if rare_input in TOP_K_INPUTS:
        names += [variant_keys[int(j)] for j in chosen.get("top_k") or []]
    return names


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


def parameter_groups(names: Iterable[str]) -> dict[str, list[str]]:
    """Split parameter names by prefix: ``{"common": [...], "rare": [...], "head": [...]}``.

    Raises
    ------
    ValueError
        When a name belongs to none of the groups.
    """
    groups: dict[str, list[str]] = {g: [] for g in PARAMETER_GROUPS}
    for name in names:
        group = name.split(".", 1)[0]
        if group not in groups:
            raise ValueError(
                f"parameter {name!r} belongs to no group; names start with {list(PARAMETER_GROUPS)}"
            )
        groups[group].append(name)
    return groups


def _layer_names(parameters: Mapping[str, np.ndarray], pathway: str) -> list[str]:
    """The linear layers of one pathway, input first (``rare.input``/``common.fc0``, ``fc1``…)."""
    names = [
        n.removesuffix(".weight")
        for n in parameters
        if n.startswith(f"{pathway}.") and n.endswith(".weight")
    ]
    return sorted(
        names, key=lambda n: 0 if n.endswith(("input", "fc0")) else int(n.split("fc")[-1])
    )


def _carry_linear(out: dict[str, np.ndarray], layers: Sequence[str], coef: np.ndarray) -> None:
    """Units 0 and 1 of a ReLU pathway carry (z, −z), z = coef · input, through every layer.

    ReLU(z) − ReLU(−z) = z, so a head weighting the last layer's units 0 and 1 by (1, −1) reads
    the linear function back exactly; every later layer passes units 0 and 1 through unchanged.
    """
    first = out[f"{layers[0]}.weight"]
    if first.shape[0] < 2:
        raise ValueError(
            f"layer {layers[0]!r} has {first.shape[0]} unit; a linear start needs at least 2"
        )
    first[0], first[1] = coef, -coef
    out[f"{layers[0]}.bias"][:2] = 0.0
    for name in layers[1:]:
        weight, bias = out[f"{name}.weight"], out[f"{name}.bias"]
        if weight.shape[0] < 2:
            raise ValueError(f"layer {name!r} has {weight.shape[0]} unit; a linear start needs 2")
        weight[:2] = 0.0
        weight[0, 0] = weight[1, 1] = 1.0
        bias[:2] = 0.0


def _mirror(out: dict[str, np.ndarray], layer: str, head_offset: int, start: int) -> None:
    """Units ``start..`` of ``layer`` (a pathway's last) in twin pairs the head reads as ±w.

    Unit a and its twin b get the same incoming weights and bias, so they output the same
    value; the head weighs them w_a (the template's) and −w_a, so together they add exactly 0.
    Their gradients are not 0: the head weights both move by the same step, the twins' inputs
    in opposite directions, and the pair separates from the first step (an odd unit out gets
    head weight 0).
    """
    weight, bias, head = out[f"{layer}.weight"], out[f"{layer}.bias"], out["head.weight"]
    units = weight.shape[0]
    half = (units - start) // 2
    a = np.arange(start, start + half)
    b = a + half
    weight[b], bias[b] = weight[a], bias[a]
    head[0, head_offset + b] = -head[0, head_offset + a]
    if (units - start) % 2:
        head[0, head_offset + units - 1] = 0.0


def linear_parameters(
    template: Mapping[str, np.ndarray],
    *,
    intercept: float,
    common_coef: Sequence[float],
    rare_coef: Sequence[float] | None = None,
    trainable: bool = False,
) -> dict[str, np.ndarray]:
    """Parameters of a two-pathway model whose logit is a linear model (the floor, a GLM).

    logit = intercept + common_coef · [PRS, covariates] (+ rare_coef · a R), exactly: units 0
    and 1 of the common backbone carry (z, −z) of the linear predictor on its input, the head
    reads them with weights (1, −1) and its bias is the intercept (likewise the specialist for
    ``rare_coef``). Every other head weight is 0, so the rest of the network, left as in
    ``template``, adds nothing until training moves those weights: a model started here ranks
    exactly as the linear model does, and its gradients still reach every layer after the
    first step.

    Parameters
    ----------
    template : mapping
        A model's parameters (:func:`get_parameters`): the shapes and the untouched weights.
    intercept : float
    common_coef : sequence of float, length 1 + n_covariates
        Coefficients of the standardised PRS and covariates.
    rare_coef : sequence of float, length F, optional
        Coefficients of the specialist's inputs (the dosages, or the collapsed features a R of
        a projection); None leaves the specialist as in ``template`` (its head weights 0).
    trainable : bool
        The starting point of training: every unit the linear model does not use (the
        specialist when ``rare_coef`` is None, the backbone's units from 2 on) is kept in twin
        pairs read by the head as (w, −w) (:func:`_mirror`), which cancel exactly but learn
        from the first step — zero head weights would leave them without a gradient at first.

    Returns
    -------
    dict of str to float32 array

    Raises
    ------
    ValueError
        When a coefficient vector does not fit the model's input, or a pathway layer has fewer
        than 2 units.
    """
    out = {name: np.array(value, dtype=np.float32, copy=True) for name, value in template.items()}
    common = _layer_names(out, "common")
    rare = _layer_names(out, "rare")
    common_coef = np.asarray(common_coef, dtype=np.float64)
    if common_coef.shape != (out[f"{common[0]}.weight"].shape[1],):
        raise ValueError(
            f"{common_coef.size} PRS/covariate coefficients for a backbone input of "
            f"{out[f'{common[0]}.weight'].shape[1]}"
        )
    _carry_linear(out, common, common_coef)
    head = out["head.weight"]
    template_head = np.array(head, copy=True)
    head[:] = 0.0
    width = out[f"{common[-1]}.weight"].shape[0]
    if trainable:  # the template's random head weights, read back by the twin pairs
        head[0, :width] = template_head[0, :width]
        _mirror(out, common[-1], 0, 2)
        if rare_coef is None:
            head[0, width:] = template_head[0, width:]
            _mirror(out, rare[-1], width, 0)
    head[0, 0], head[0, 1] = 1.0, -1.0
    if rare_coef is not None:
        rare_coef = np.asarray(rare_coef, dtype=np.float64)
        if rare_coef.shape != (out[f"{rare[0]}.weight"].shape[1],):
            raise ValueError(
                f"{rare_coef.size} rare coefficients for {out[f'{rare[0]}.weight'].shape[1]} "
                "rare-variant columns"
            )
        _carry_linear(out, rare, rare_coef)
        head[0, width], head[0, width + 1] = 1.0, -1.0
    out["head.bias"][:] = float(intercept)
    return out


def linear_floor(parameters: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """[intercept, PRS and covariate coefficients] of a model in the floor's linear form.

    The inverse of :func:`linear_parameters` without ``rare_coef``: when units 0 and 1 of the
    backbone carry (z, −z) of a linear predictor to a head reading them as (1, −1), and the
    specialist adds nothing (its head weights 0 or in cancelling twin pairs), the floor's
    coefficients (float32, as the parameters hold them); None for any other model (a random
    initialisation, a trained network).
    """
    common = _layer_names(parameters, "common")
    first = np.asarray(parameters[f"{common[0]}.weight"], dtype=np.float64)
    head = np.asarray(parameters["head.weight"], dtype=np.float64)[0]
    width = np.shape(parameters[f"{common[-1]}.weight"])[0]
    linear = (
        first.shape[0] >= 2
        and np.array_equal(first[1], -first[0])
        and not np.any(np.asarray(parameters[f"{common[0]}.bias"])[:2])
        and head[0] == 1.0
        and head[1] == -1.0
        and all(_passes_units(parameters, name) for name in common[1:])
        and _cancels(head[2:width])
        and _cancels(head[width:])
    )
    if not linear:
        return None
    return np.concatenate([[float(parameters["head.bias"][0])], first[0]])


def _passes_units(parameters: Mapping[str, np.ndarray], layer: str) -> bool:
    """Whether ``layer`` passes units 0 and 1 through unchanged (:func:`_carry_linear`)."""
    weight = np.asarray(parameters[f"{layer}.weight"])
    rows = np.zeros((2, weight.shape[1]))
    rows[0, 0] = rows[1, 1] = 1.0
    return np.array_equal(weight[:2], rows) and not np.any(parameters[f"{layer}.bias"][:2])


def _cancels(weights: np.ndarray) -> bool:
    """Whether head weights read twin units as (w, −w) (:func:`_mirror`), an odd last one 0."""
    half = weights.size // 2
    odd = weights[2 * half :]
    return bool(np.array_equal(weights[half : 2 * half], -weights[:half]) and not np.any(odd))


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
