"""Client×client distances of a genomic federation, for any distance-aware strategy.

What each method sees: ``emd`` the clients' standardised-PRS distributions and/or the
distributions of their per-variant rare allele frequencies; ``euclidean`` / ``ot`` the
penultimate activations of the model after one FedAvg round (the probe, Elhussein & Gürsoy Alg. 1
phase 1); ``jaccard`` 1 − Jaccard of the Bloom filters of each client's influential rare variants
after one local round from w^0 (FedCE's matrix).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rvfedprs import similarity
from rvfedprs.bloom import BloomSpec, read_bloom_key
from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.genomic.client import ClientContext, build_model, fit_client
from rvfedprs.genomic.data import Federation, load_federation
from rvfedprs.genomic.task import (
    GenomicTask,
    initial_parameters,
    network_model_config,
    training_config,
)
from rvfedprs.model import set_parameters, top_k_pending
from rvfedprs.plan import RunPlan, run
from rvfedprs.similarity.ot import section_options
from rvfedprs.strategies import DISTANCE_METHODS, DISTANCE_STRATEGIES
from rvfedprs.strategies.base import FitInstruction
from rvfedprs.strategies.fedavg import FedAvg
from rvfedprs.training import to_torch_sparse

__all__ = ["genomic_distance", "strategy_distance", "distance_from_config"]


class _RunNetwork:
    """The probe's ``evaluate_round``: keeps the network the engine hands it, scores nothing.

    The run settings after the warm start (:func:`~rvfedprs.federation.rounds.serve`) hold the
    network the round trained: for a top-k ``model.rare_input``, the variants the floor chose.
    """

    model_config: dict[str, Any] | None = None

    def prepare(self, settings: Mapping[str, Any]) -> None:
        """Keep the run's ``model`` config."""
        self.model_config = dict(settings["model"])

    def __call__(self, strategy: Any, server_round: int) -> dict[str, Any]:
        return {}


def _genomic_probe(config, federation, seed):
    """The model after one FedAvg round from w^0 (the probe), and the model configuration.

    The configuration is the run's (:class:`_RunNetwork`), a top-k input's chosen variants
    included.
    """
    model_config = network_model_config(federation.model_config(config["model"]), config)
    network = _RunNetwork()
    probe = RunPlan(
        task=GenomicTask.name,
        data=federation,
        strategy=FedAvg(),
        rounds=1,
        seed=seed,
        model=model_config,
        training=training_config(config, federation),
        evaluate_round=network,
    )  # without the run's privacy settings, as the probe has always trained
    result = run(probe)
    return result.strategy.parameters_for(federation.client_ids[0]), network.model_config


def _genomic_embeddings(federation, params, model_config):
    model = build_model(federation.n_rare, model_config)
    set_parameters(model, params)
    model.eval()
    embs, labels = [], []
    with torch.no_grad():
        for cid in federation.client_ids:
            d = federation.train[cid]
            h = model.embed(torch.from_numpy(d.prs), to_torch_sparse(d.rare),
                            covariates=torch.as_tensor(d.covariates))  # fmt: skip
            embs.append(h.numpy().astype(np.float64))
            labels.append(d.y.astype(np.int64))
    return embs, labels


def genomic_distance(
    config: Mapping[str, Any], federation: Federation, method: str, seed: int
) -> tuple[np.ndarray, list[str]]:
    """The ``(K, K)`` distance matrix of ``method`` on a genomic federation, and its client ids.

    What each method sees: ``emd`` the clients' standardised-PRS distributions and/or the
    distributions of their per-variant rare allele frequencies (``distance.emd_metadata``);
    ``euclidean`` / ``ot`` the penultimate activations of the model after one FedAvg round;
    ``jaccard`` 1 − Jaccard of the Bloom filters of each client's influential rare variants after
    one local round from w^0 (FedCE's matrix, ``fedce`` section options).
    """
    ids = federation.client_ids
    opts = config["distance"]
    if method == "emd":
        names = [n for n in opts["emd_metadata"] if n in ("prs", "allele_frequency")]
        if not names:
            raise ConfigError(
                "distance.emd_metadata has no genomic metadata; "
                "choose from ['prs', 'allele_frequency']"
            )
        meta: dict[str, list[np.ndarray]] = {}
        for name in names:
            if name == "prs":
                meta[name] = [federation.train[c].prs for c in ids]
            else:  # allele-frequency spectrum of the rare variants in each client
                meta[name] = [
                    np.asarray(federation.train[c].rare.mean(axis=0)).ravel() / 2.0 for c in ids
                ]
        return similarity.compute("emd", meta), ids
    if method == "jaccard":
        return _genomic_jaccard(config, federation, seed), ids
    params, model_config = _genomic_probe(config, federation, seed)
    embs, labels = _genomic_embeddings(federation, params, model_config)
    if method == "euclidean":
        if opts["encoder"]:
            raise ConfigError("distance.encoder (TorchScript) is only supported for imaging")
        return similarity.compute(
            "euclidean", embs, n_components=opts["n_components"], random_seed=seed
        ), ids
    options = section_options(opts)
    return similarity.compute("ot", embs, labels, **options, random_seed=seed), ids


def _genomic_jaccard(config, federation, seed) -> np.ndarray:
    """1 − Jaccard of the clients' Bloom filters after one local round from w^0.

    Raises
    ------
    ConfigError
        For a top-k ``model.rare_input``: its variants are chosen by a run's federated floor,
        which this local round from w^0 does not fit.
    """
    model_config = network_model_config(federation.model_config(config["model"]), config)
    if top_k_pending(model_config):
        raise ConfigError(
            f"distance method 'jaccard' cannot probe a network with model.rare_input "
            f"{model_config['rare_input']!r}: its filters hold the influential features after "
            "one local round from w^0, and a top-k network's variants are chosen by the run's "
            "federated floor fit, which this probe does not run; use euclidean, ot or emd, or "
            "model.rare_input 'dosages' or 'burden'"
        )
    fedce = config["fedce"]
    key = read_bloom_key(fedce["bloom_key_file"])
    w0 = initial_parameters(federation.n_rare, model_config, seed)
    bloom_config = {
        "influence": True,
        "bloom": {"capacity": fedce["bloom_capacity"], "error_rate": fedce["bloom_error_rate"]},
        "top_k": fedce["top_k"],
        "relative_threshold": fedce["relative_threshold"],
    }
    training = training_config(config, federation)
    bits = []
    for cid in federation.client_ids:
        context = ClientContext(
            data=federation.train[cid],
            variant_keys=federation.variant_keys,
            model_config=model_config,
            training=training,
            bloom_key=key,
        )
        result = fit_client(
            FitInstruction(w0, bloom_config), context, random_seed=derive_seed(seed, 1, cid)
        )
        bits.append(result.bloom_bits)
    spec = BloomSpec(fedce["bloom_capacity"], fedce["bloom_error_rate"], key)
    return similarity.to_distance(similarity.compute("jaccard", bits, spec), "similarity")


def strategy_distance(
    name: str, config: Mapping[str, Any], federation, seed: int
) -> dict[str, Any]:
    """``distance``/``distance_clients`` for :func:`~rvfedprs.strategies.strategy_from_config`.

    Empty unless strategy ``name`` uses a distance matrix and ``strategies.distance`` names a
    method, which is then computed on ``federation`` (a TSV path is read by the strategy).
    """
    source = config["strategies"]["distance"]
    if name not in DISTANCE_STRATEGIES or source not in DISTANCE_METHODS:
        return {}
    matrix, ids = genomic_distance(config, federation, source, seed)
    return {"distance": matrix, "distance_clients": list(ids)}


def distance_from_config(
    config: Mapping[str, Any], method: str, seed: int, *, data: str | Path | None = None
) -> tuple[np.ndarray, list[str]]:
    """``method``'s matrix on the per-client inputs ``data`` (default ``train.data``)."""
    federation = load_federation(data or config["train"]["data"])
    return genomic_distance(config, federation, method, seed)
