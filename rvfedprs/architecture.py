"""The two-pathway network's architecture without torch: its inputs and its parameters.

What a server, a federated GLM or the association needs to know of :mod:`rvfedprs.model`'s
network without building one (importing torch costs more than a GLM or association run): the
rare inputs and their projection R (:data:`RARE_INPUTS`, :func:`rare_projection`), the names
and shapes of the parameters (:func:`parameter_shapes`) and the linear models its parameters
hold exactly (:func:`linear_parameters`, :func:`linear_floor`).
:mod:`rvfedprs.model` re-exports every name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from rvfedprs.config import section_defaults

__all__ = [
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


def parameter_shapes(n_rare: int, model_config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the parameters of :func:`~rvfedprs.model.model_from_config`'s network.

    In the network's order (:func:`~rvfedprs.model.get_parameters`): the backbone
    (``common.fc0``, ``common.fc1``…, input 1 + ``n_covariates``), the specialist
    (``rare.input``, ``rare.fc1``…, input F: P or the projection's features), the head.
    """
    config = {**_DEFAULTS, **model_config}
    projection = projection_from_config(int(n_rare), config)
    n_features = int(n_rare) if projection is None else int(projection.shape[1])
    shapes: dict[str, tuple[int, ...]] = {}
    pathways = (("common", "fc0", 1 + int(config.get("n_covariates", 0)), config["common_hidden"]),
                ("rare", "input", n_features, config["rare_hidden"]))  # fmt: skip
    for pathway, first, width, hidden in pathways:
        for i, units in enumerate(int(h) for h in hidden):
            name = f"{pathway}.{first if i == 0 else f'fc{i}'}"
            shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (units, width), (units,)
            width = units
    head = int(config["common_hidden"][-1]) + int(config["rare_hidden"][-1])
    shapes["head.weight"], shapes["head.bias"] = (1, head), (1,)
    return shapes


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
