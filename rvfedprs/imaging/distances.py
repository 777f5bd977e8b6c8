"""Distance matrices of an imaging federation (SPEC §8 on images).

EMD metadata (``000_*`` §2.1): per-image maximum (and mean) intensity, and the label values
(the label histogram on the class axis); App. C combination with groups ``intensity`` and
``label``.  Euclidean and OT use embeddings of the one-round FedAvg probe (or a TorchScript
encoder for Euclidean).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rvfedprs.imaging.client import ImagingClient

__all__ = ["image_metadata", "imaging_distance", "METADATA_GROUPS"]

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
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.imaging.engine import client_embeddings, probe_parameters

    opts = dict(options or {})
    ids = sorted(clients)
    if method == "emd":
        names = [
            n for n in opts.get("emd_metadata", ["max_intensity", "label"]) if n in METADATA_GROUPS
        ]
        if not names:
            raise ConfigError(
                "distance.emd_metadata has no imaging metadata; "
                f"choose from {sorted(METADATA_GROUPS)}"
            )
        meta = image_metadata(clients, names, ids)
        groups = {n: METADATA_GROUPS[n] for n in names}
        return similarity.compute("emd", meta, groups=groups), ids
    if method == "euclidean":
        encoder = opts.get("encoder")
        params = None if encoder else probe_parameters(clients, random_seed)
        embs, _ = client_embeddings(clients, params, encoder=encoder, ids=ids)
        d = similarity.compute(
            "euclidean", embs, n_components=opts.get("n_components", 2), random_seed=random_seed
        )
        return d, ids
    if method == "ot":
        params = probe_parameters(clients, random_seed)
        embs, labels = client_embeddings(clients, params, ids=ids)
        d = similarity.compute(
            "ot",
            embs,
            labels,
            w_feature=opts.get("ot_w_feature", 2.0),
            w_label=opts.get("ot_w_label", 1.0),
            reg=opts.get("ot_reg", 1e-2),
            normalisation=opts.get("ot_normalisation", "spec"),
            max_per_class=opts.get("ot_max_per_class", 1000),
            dp_rho=opts.get("ot_dp_rho"),
            random_seed=random_seed,
        )
        return d, ids
    raise ConfigError(
        f"distance method {method!r} is not available on imaging federations; "
        "choose from ['emd', 'euclidean', 'ot'] (jaccard needs rare-variant Bloom filters)"
    )
