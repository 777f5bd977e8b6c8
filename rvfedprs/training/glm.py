"""The client half of the federated GLM: a site's GLM sums at given coefficients.

The GLM is the outcome's (:meth:`~rvfedprs.outcomes.Outcome.glm_sums`): a logistic regression
for a binary phenotype, a linear one (ridge) for a quantitative trait. An L2-penalised GLM
on [1, PRS, covariates (, rare dosages)] is fitted exactly by federated Newton iterations
(:mod:`rvfedprs.strategies.fedglm`): at the coefficients β the server sends, each site returns
the sums over its training samples

- the loss Σ_i ℓ_i(β) (the negative log-likelihood),
- the gradient Σ_i x_i (μ_i − y_i),
- the Hessian Σ_i w_i x_i x_iᵀ (w_i = μ_i (1 − μ_i), or 1 for the linear model, whose
  Newton step is then exact in one round),

and the server adds the penalty and takes the Newton step. The sums over sites are the pooled
sums, so the fit equals the pooled fit (to the Newton tolerance). Everything here is float64.

The rare features may be every dosage column, region burdens, the dosages of the top-k variants
the server chose, or burdens and top-k dosages together (:data:`GLM_FEATURES`). The top k are
chosen by a score test under the floor model: in the floor's rounds a site also returns its
score sums (:func:`score_sums`), which add up across sites as the other statistics do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from rvfedprs.architecture import RARE_INPUTS, rare_projection
from rvfedprs.association.sums import (
    ASSOCIATION_TENSORS,
    UnitLayout,
    association_sums,
    floor_scores,
)
from rvfedprs.exceptions import ConfigError
from rvfedprs.outcomes import BINARY, Outcome
from rvfedprs.training.data import ClientData

__all__ = [
    "GLM_FEATURES",
    "BURDEN_FEATURES",
    "TOP_K_FEATURES",
    "DEFAULT_TOP_K",
    "resolved_top_k",
    "SCORE_TENSORS",
    "glm_design",
    "glm_width",
    "score_sums",
    "glm_reply",
    "GLM_TENSORS",
]

#: What a GLM takes beside the intercept: ``floor`` = [PRS, covariates]; ``dosages`` adds every
#: rare-variant dosage column; ``burden`` adds the region burdens A·B (:mod:`rvfedprs.burden`);
#: ``top_k`` adds the dosages of the k variants chosen by score test
#: (:mod:`rvfedprs.strategies.top_variants`); ``burden+top_k`` adds the burdens, then those
#: (beside ``floor``, the network's :data:`~rvfedprs.model.RARE_INPUTS`: the same features).
GLM_FEATURES: tuple[str, ...] = ("floor", *RARE_INPUTS)

#: The features that need a burden map, and those that need the top-k variants.
BURDEN_FEATURES: tuple[str, ...] = ("burden", "burden+top_k")
TOP_K_FEATURES: tuple[str, ...] = ("top_k", "burden+top_k")

#: k of the top-k features when ``fedglm.top_k`` is null (its default).
DEFAULT_TOP_K = 30


def resolved_top_k(features: str, top_k: int | None) -> int:
    """``top_k``, or for None :data:`DEFAULT_TOP_K` with top-k features and 0 otherwise."""
    if top_k is None:
        return DEFAULT_TOP_K if features in TOP_K_FEATURES else 0
    return top_k


#: The tensors of a GLM round's message: the coefficients sent, the statistics returned.
GLM_TENSORS: tuple[str, ...] = ("glm.coef", "glm.gradient", "glm.hessian")

#: The score sums a floor round also returns when the top k are to be chosen (:func:`score_sums`).
SCORE_TENSORS: tuple[str, ...] = ("glm.score", "glm.score_information", "glm.score_cross")


def glm_width(
    features: str, n_covariates: int, n_rare: int, n_burden: int = 0, n_top: int = 0
) -> int:
    """The number of coefficients (intercept included) of a GLM on ``features``."""
    if features not in GLM_FEATURES:
        raise ConfigError(f"GLM features {features!r} unknown; choose from {list(GLM_FEATURES)}")
    rare = {
        "floor": 0,
        "dosages": int(n_rare),
        "burden": int(n_burden),
        "top_k": int(n_top),
        "burden+top_k": int(n_burden) + int(n_top),
    }[features]
    return 2 + int(n_covariates) + rare


def glm_design(
    data: ClientData,
    features: str,
    burden: sp.spmatrix | None = None,
    top: np.ndarray | list[int] | None = None,
) -> sp.csr_matrix:
    """[1, PRS, covariates (, rare dosages | burdens | top-k dosages)] of a client, float64 CSR.

    Parameters
    ----------
    data : ClientData
        PRS and covariates standardised with the federated moments.
    features : str
        One of :data:`GLM_FEATURES`.
    burden : sparse matrix, shape (n_rare, n_regions), optional
        B of :class:`~rvfedprs.burden.BurdenMap`; required for ``burden`` and ``burden+top_k``.
    top : sequence of int, optional
        The chosen variants' columns, in the design's order; required for ``top_k`` and
        ``burden+top_k`` (the top-k columns come after the burdens).
    """
    glm_width(features, data.n_covariates, data.rare.shape[1])  # checks the name
    dense = np.column_stack(
        [np.ones(data.n_samples), data.prs.astype(np.float64), data.covariates.astype(np.float64)]
    )
    blocks = [sp.csr_matrix(dense)]
    if features != "floor":  # the rare features: the network's rare inputs of the same name
        try:
            projection = rare_projection(features, data.rare.shape[1], burden=burden, top=top)
        except ValueError as exc:
            raise ConfigError(f"client {data.client_id}: {exc}") from None
        rare = sp.csr_matrix(data.rare, dtype=np.float64)
        blocks.append(rare if projection is None else sp.csr_matrix(rare @ projection))
    return sp.hstack(blocks, format="csr")


def score_sums(
    floor_design: sp.csr_matrix | np.ndarray,
    rare: sp.spmatrix,
    y: np.ndarray,
    coef: np.ndarray,
    kind: Outcome = BINARY,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A site's sums for the score test of each rare variant added to the floor model.

    U = Aᵀ (y − p), S = (A ∘ A)ᵀ w and C = Zᵀ W A: :func:`rvfedprs.association.sums.
    floor_scores`, the sums the association tests also start from.
    """
    return floor_scores(floor_design, rare, y, coef, kind)


def _association_reply(parameters, floor_design, data, coef, config, units) -> dict:
    """The association sums (:mod:`rvfedprs.association.sums`) per training sample, as an update."""
    if config["features"] != "floor":
        raise ConfigError(f"association sums are taken under the floor, not {config['features']!r}")
    settings = config["association"]
    layout = UnitLayout.from_matrix(units) if units is not None else UnitLayout.from_members([], [])
    group, n_groups = int(settings["group"]), int(settings["n_groups"])
    sums = association_sums(
        floor_design,
        data.rare,
        data.y,
        coef,
        layout,
        group=group,
        n_groups=n_groups,
        kind=data.outcome,
    )
    n = float(data.n_samples)
    return {name: np.asarray(parameters[name], np.float64) + sums[name] / n
            for name in ASSOCIATION_TENSORS}  # fmt: skip


def glm_reply(
    parameters: Mapping[str, np.ndarray],
    data: ClientData,
    config: Mapping[str, Any],
    *,
    burden: sp.spmatrix | None = None,
    influence: bool = False,
) -> tuple[dict[str, np.ndarray], float, np.ndarray | None]:
    """A site's answer to a GLM round: its sums per training sample, as an update.

    The reply holds ``glm.coef`` unchanged and ``glm.gradient`` / ``glm.hessian`` equal to what
    was sent plus the site's sums divided by its n_k. The n_k-weighted average of the replies
    (plain or secure) is then what was sent plus Σ_k sums_k / Σ_k n_k: the pooled per-sample
    statistics, without the server ever needing a site's own.

    Parameters
    ----------
    parameters : mapping
        The instruction's tensors (:data:`GLM_TENSORS`).
    data : ClientData
        The site's training split (standardised).
    config : mapping
        ``features`` (:data:`GLM_FEATURES`), ``hessian`` (bool), for the top-k features
        ``top_k`` (the chosen columns) and, in the floor's rounds before the top k are chosen,
        ``score: true`` (the reply then also carries :data:`SCORE_TENSORS`, :func:`score_sums`),
        and in an association round ``association`` (``group``, ``n_groups``: the reply then
        also carries the association sums, over the units of ``burden``,
        :mod:`rvfedprs.strategies.fedassoc`).
    burden : scipy.sparse matrix, optional
        B of the burden features (:func:`~rvfedprs.strategies.burden_delivery.site_burden`:
        the map the instruction refers to).

    influence : bool
        Also return each rare variant's influence at the coefficients sent,
        Σ_i |a_ij| · |p_i − y_i| (design §5 step 3, the GLM's counterpart of the network's
        first-layer influence: 0 for a variant nobody at the site carries).

    Returns
    -------
    parameters : dict of str to float64 array
    loss : float
        The site's mean log-loss at the coefficients sent.
    influence : array of float64, shape (n_rare,), or None

    Raises
    ------
    ConfigError
        When the coefficients sent do not fit the site's design matrix.
    """
    x = glm_design(data, str(config["features"]), burden, config.get("top_k"))
    coef = np.asarray(parameters["glm.coef"], dtype=np.float64)
    if coef.shape != (x.shape[1],):
        raise ConfigError(
            f"client {data.client_id}: the GLM's {coef.size} coefficients do not fit its "
            f"{x.shape[1]} features ({config['features']})"
        )
    want_hessian = bool(config.get("hessian", True))
    loss, gradient, hessian = data.outcome.glm_sums(x, data.y, coef, hessian=want_hessian)
    n = float(data.n_samples)
    out = {
        "glm.coef": coef.copy(),
        "glm.gradient": np.asarray(parameters["glm.gradient"], np.float64) + gradient / n,
    }
    if want_hessian:
        out["glm.hessian"] = np.asarray(parameters["glm.hessian"], np.float64) + hessian / n
    if config.get("association") is not None:
        out.update(_association_reply(parameters, x, data, coef, config, burden))
    if config.get("score"):
        if config["features"] != "floor":
            raise ConfigError(f"score sums are taken under the floor, not {config['features']!r}")
        sums = score_sums(x, data.rare, data.y, coef, data.outcome)
        for name, value in zip(SCORE_TENSORS, sums, strict=True):
            out[name] = np.asarray(parameters[name], np.float64) + value / n
    weights = None
    if influence:
        eta = np.asarray(x @ coef, dtype=np.float64).reshape(-1)
        residual = np.abs(data.outcome.mean(eta) - data.y)
        weights = np.asarray(abs(data.rare).T @ residual, dtype=np.float64).reshape(-1)
    return out, loss / n, weights
