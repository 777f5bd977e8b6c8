"""The engine-independent client: one round of local training for one client.

:func:`fit_client` turns a :class:`~rvfedprs.strategies.base.FitInstruction` into a
:class:`~rvfedprs.strategies.base.FitResult`. It knows nothing of how it is called: the in-process
engine calls it in a loop, the Flower client app calls it from ``fit``. Client-side behaviour comes
from ``instruction.config`` (design §5):

- ``proximal_mu`` — FedProx term μ/2‖w − w^t‖², with w^t the parameters received;
- ``influence`` — accumulate the per-variant influence of the rare specialist's first layer;
- ``bloom`` — ``{"capacity": int, "error_rate": float}``: encode the influential variants'
  keys (``top_k`` / ``relative_threshold``) in a Bloom filter and return its bit array. The
  hashing key (HMAC secret) is the client's own (:attr:`ClientContext.bloom_key`), never sent by
  the server;
- ``scaffold_correction`` — SCAFFOLD's c − c_k (dict of arrays) added to every gradient (Option
  II; plain SGD only, momentum must be 0);
- ``ditto_personal`` + ``ditto_lambda`` — after the global update, train the personal model v_k
  on f_k(v) + λ/2‖v − w^t‖² and return it as ``personal/<name>`` tensors.

A federated GLM round (``glm``, :mod:`rvfedprs.strategies.fedglm`) trains nothing: :func:`glm_fit`
returns the site's log-loss, gradient and Hessian sums at the coefficients sent.

Every result reports ``metrics["local_steps"]`` (K) and ``metrics["lr"]`` (η_l).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rvfedprs.architecture import rare_feature_names
from rvfedprs.strategies.base import FitInstruction, FitResult
from rvfedprs.strategies.burden_delivery import site_burden
from rvfedprs.strategies.client import LocalRun, client_update
from rvfedprs.training import ClientData, LocalTrainingConfig
from rvfedprs.training.glm import glm_reply

if TYPE_CHECKING:  # the network (torch) is imported where a round trains, not for a GLM's sums
    from rvfedprs.model import TwoPathwayModel

__all__ = ["ClientContext", "fit_client", "glm_fit", "build_model", "influential_bloom_bits"]


@dataclass
class ClientContext:
    """Everything a client holds locally.

    Attributes
    ----------
    data : ClientData
        The client's training split.
    variant_keys : sequence of str, shape (n_rare,)
        ``chrom:pos:ref:alt`` of each dosage column (``rare_variants.tsv``).
    model_config : mapping
        ``common_hidden``, ``rare_hidden``, ``dropout`` of :class:`TwoPathwayModel`.
    training : LocalTrainingConfig
        The client's optimiser settings (``proximal_mu`` is overridden by the round config).
    bloom_key : bytes or None
        Secret shared by the clients (not the server) for keyed hashing of variant keys.
    state : dict
        Persistent per-client state kept by the engine across rounds (e.g. ``"dp"``: the DP
        accountant state passed to :func:`~rvfedprs.training.local_update`).
    """

    data: ClientData
    variant_keys: Sequence[str]
    model_config: Mapping[str, Any]
    training: LocalTrainingConfig
    bloom_key: bytes | None = None
    state: dict[str, Any] = field(default_factory=dict)


def build_model(n_rare: int, model_config: Mapping[str, Any]) -> TwoPathwayModel:
    """A :class:`TwoPathwayModel` for ``n_rare`` variants (weights to be set by the caller)."""
    from rvfedprs.model import model_from_config

    return model_from_config(n_rare, model_config, initialise=False)


def influential_bloom_bits(
    influence: np.ndarray,
    variant_keys: Sequence[str],
    config: Mapping[str, Any],
    *,
    key: bytes | None = None,
) -> np.ndarray:
    """The Bloom-filter bit array of the client's influential variants (design §5 steps 3–4).

    Parameters
    ----------
    influence : array, shape (n_rare,)
    variant_keys : sequence of str, shape (n_rare,)
    config : mapping
        ``bloom`` (``capacity``, ``error_rate``), ``top_k``, ``relative_threshold``.
    key : bytes, optional
        HMAC secret for keyed hashing.

    Returns
    -------
    array of uint8
        Packed bits, no header.
    """
    from rvfedprs.bloom import BloomSpec, encode
    from rvfedprs.training import select_influential

    selected = select_influential(
        influence,
        top_k=config.get("top_k"),
        relative_threshold=config.get("relative_threshold"),
    )
    spec = BloomSpec(
        capacity=int(config["bloom"]["capacity"]),
        error_rate=float(config["bloom"]["error_rate"]),
        key=key,
    )
    return encode((variant_keys[i] for i in selected), spec)


def fit_client(
    instruction: FitInstruction, context: ClientContext, *, random_seed: int
) -> FitResult:
    """Train locally from ``instruction.parameters`` and report the result.

    Parameters
    ----------
    instruction : FitInstruction
    context : ClientContext
    random_seed : int
        Seeds batch order and dropout for this client and round.

    Returns
    -------
    FitResult
        Full updated parameters (plus ``personal/*`` for Ditto), n_k, metrics ``loss``,
        ``local_steps``, ``lr`` (and ``personal_loss`` for Ditto) and, when asked, the Bloom
        bits.
    """
    from rvfedprs.model import set_parameters
    from rvfedprs.training import local_update

    config = instruction.config
    want_bloom = config.get("bloom") is not None

    def train(start, *, mu, correction, seed, personal) -> LocalRun:
        model = build_model(len(context.variant_keys), context.model_config)
        set_parameters(model, start)
        result = local_update(
            model,
            context.data,
            replace(context.training, proximal_mu=mu),
            reference=instruction.parameters,
            influence=not personal and (bool(config.get("influence", False)) or want_bloom),
            random_seed=seed,
            dp=context.state.get("dp"),
            correction=correction,
        )
        return LocalRun(result.parameters, result.loss, result.steps, extra=result)

    parameters, metrics, run = client_update(
        config,
        instruction.parameters,
        train,
        momentum=context.training.momentum,
        lr=context.training.lr,
        seed=random_seed,
    )
    result = run.extra
    bits = None
    if want_bloom:  # the influential features: variants, regions or chosen variants
        keys = rare_feature_names(context.model_config, context.variant_keys)
        bits = influential_bloom_bits(result.influence, keys, config, key=context.bloom_key)
    return FitResult(
        client_id=context.data.client_id,
        n_samples=result.n_samples,
        parameters=parameters,
        metrics=metrics,
        bloom_bits=bits,
    )


def glm_fit(
    instruction: FitInstruction,
    data: ClientData,
    variant_keys: Sequence[str] = (),
    *,
    bloom_key: bytes | None = None,
    state: dict[str, Any] | None = None,
) -> FitResult:
    """A federated GLM round (``instruction.config["glm"]``): the site's sums, no training.

    See :func:`~rvfedprs.training.glm.glm_reply`; ``metrics["loss"]`` is the mean log-loss at
    the coefficients sent. With ``bloom`` in the config (FedCE-GLM), the reply carries the Bloom
    filter of the site's influential variants (their influence from the same pass). A burden
    map sent is kept in ``state`` (the site's per-run client state) for the rounds that name it
    only by fingerprint (:func:`~rvfedprs.strategies.burden_delivery.site_burden`).
    """
    config = instruction.config
    want_bloom = config.get("bloom") is not None
    burden = site_burden(config["glm"], {} if state is None else state, data.client_id)
    parameters, loss, influence = glm_reply(
        instruction.parameters, data, config["glm"], burden=burden, influence=want_bloom
    )
    bits = None
    if want_bloom:
        bits = influential_bloom_bits(influence, variant_keys, config, key=bloom_key)
    return FitResult(
        client_id=data.client_id,
        n_samples=data.n_samples,
        parameters=parameters,
        metrics={
            "loss": loss,
            "local_steps": 0.0,
            "lr": 0.0,
            "estimates_dispersion": float(data.outcome.estimates_dispersion),
        },
        bloom_bits=bits,
    )
