"""Distance matrices of an imaging federation (design §8 on images).

EMD metadata (Alekseenko et al. §2.1): per-image maximum (and mean) intensity, and the label values
(the label histogram on the class axis); App. C combination with groups ``intensity`` and
``label``.  Euclidean and OT use embeddings of the one-round FedAvg probe (or a TorchScript
encoder for Euclidean).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rvfedprs.imaging.client import ImagingClient

__all__ = ["image_metadata", "imaging_distance", "distance_from_config", "METADATA_GROUPS"]

METADATA_GROUPS = {"max_intensity": "intensity", "mean_intensity": "intensity", "label": "label"}


def image_metadata(
    clients: Mapping[str, ImagingClient], names: Sequence[str], ids: Sequence[str]
) -> dict[str, list[np.ndarray]]:
    """Metadata name → one value array per client (training split)."""
    out: dict[str, list[np.ndarray]] = {}
    for name in names:
        if name not in METADATA_GROUPS:
            raise ValueError(
                f"imaging metadata {name!r} unknown; choose from {sorted(METADATA_GROUPS)}"
            )
        values = []
        for cid in ids:
            data = clients[cid].train
            if name == "max_intensity":
                values.append(data.images.reshape(len(data), -1).max(axis=1))
            elif name == "mean_intensity":
                values.append(data.images.reshape(len(data), -1).mean(axis=1))
            else:
                values.append(data.labels.astype(np.float64))
        out[name] = values
    return out


def imaging_distance(
    clients: Mapping[str, ImagingClient],
    method: str,
    *,
    random_seed: int,
    options: Mapping[str, Any] | None = None,
) -> tuple[np.ndarray, list[str]]:
    """The ``method`` matrix over the imaging clients (sorted ids).

    Parameters
    ----------
    clients : mapping of id to ImagingClient
    method : {"emd", "euclidean", "ot"}
    random_seed : int
        Seeds the probe round, PCA and OT subsampling.
    options : mapping, optional
        The ``distance`` configuration section (``emd_metadata``, ``encoder``, ``n_components``,
        ``ot_*``).

    Returns
    -------
    matrix : array, shape (K, K)
    ids : list of str
    """
    from rvfedprs import similarity
    from rvfedprs.config import section_defaults
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.imaging.engine import client_embeddings, probe_parameters
    from rvfedprs.similarity.ot import section_options

    opts = {**section_defaults("distance"), **dict(options or {})}
    ids = sorted(clients)
    if method == "emd":
        names = [n for n in opts["emd_metadata"] if n in METADATA_GROUPS]
        if not names:
            raise ConfigError(
                "distance.emd_metadata has no imaging metadata; "
                f"choose from {sorted(METADATA_GROUPS)}"
            )
        meta = image_metadata(clients, names, ids)
        groups = {n: METADATA_GROUPS[n] for n in names}
        return similarity.compute("emd", meta, groups=groups), ids
    if method == "euclidean":
        encoder = opts["encoder"]
        params = None if encoder else probe_parameters(clients, random_seed)
        embs, _ = client_embeddings(clients, params, encoder=encoder, ids=ids)
        d = similarity.compute(
            "euclidean", embs, n_components=opts["n_components"], random_seed=random_seed
        )
        return d, ids
    if method == "ot":
        params = probe_parameters(clients, random_seed)
        embs, labels = client_embeddings(clients, params, ids=ids)
        d = similarity.compute("ot", embs, labels, **section_options(opts), random_seed=random_seed)
        return d, ids
    raise ConfigError(
        f"distance method {method!r} is not available on imaging federations; "
        "choose from ['emd', 'euclidean', 'ot'] (jaccard needs rare-variant Bloom filters)"
    )


def distance_from_config(
    config: Mapping[str, Any], method: str, seed: int, *, data: str | Path | None = None
) -> tuple[np.ndarray, list[str]]:
    """``method``'s matrix on the imaging federation the ``imaging`` section describes.

    The MedMNIST file (``data`` or ``imaging.data``) is pooled, subsampled when asked and
    Dirichlet-partitioned with ``seed``; options from the ``distance`` section.
    """
    from rvfedprs.imaging.federation import build_federation, stratified_subsample
    from rvfedprs.imaging.loader import load_medmnist

    section = config["imaging"]
    dataset = load_medmnist(data or section["data"])
    pooled = dataset.pooled()
    if section.get("subsample"):
        pooled = stratified_subsample(pooled, int(section["subsample"]), seed)
    clients = build_federation(
        pooled,
        dataset.n_classes,
        n_clients=section["n_clients"],
        alpha=section["alpha"],
        random_seed=seed,
        test_fraction=section["test_fraction"],
    )
    return imaging_distance(clients, method, random_seed=seed, options=config["distance"])
