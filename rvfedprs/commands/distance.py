"""``rvfedprs distance``: a client×client distance matrix (TSV) and its heat map (PNG)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

HELP = "compute a client×client distance matrix (emd, euclidean, ot, jaccard) and a heat map"

METHODS = ("emd", "euclidean", "ot", "jaccard")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs distance``."""
    parser.add_argument(
        "--method", choices=METHODS, help="distance method (default: distance.method)"
    )
    parser.add_argument("--config", type=Path, help="YAML file (sections distance, imaging/train)")
    parser.add_argument("--data", type=Path, help="MedMNIST .npz or per-client inputs folder")
    parser.add_argument("--seed", type=int, help="random seed (overrides distance.seed)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def write_matrix(
    out: Path, name: str, matrix: np.ndarray, ids: list[str], title: str
) -> tuple[Path, Path]:
    """``out/distance_<name>.tsv`` (ids as header and first column) and a heat map PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    tsv = out / f"distance_{name}.tsv"
    pd.DataFrame(matrix, index=ids, columns=ids).rename_axis("client").to_csv(
        tsv, sep="\t", float_format="%.6g"
    )
    fig, ax = plt.subplots(figsize=(1.2 + 0.6 * len(ids), 1.0 + 0.6 * len(ids)))
    im = ax.imshow(matrix, cmap="viridis")
    ax.set_xticks(range(len(ids)), ids, rotation=90)
    ax.set_yticks(range(len(ids)), ids)
    if len(ids) <= 12:
        for i in range(len(ids)):
            for j in range(len(ids)):
                ax.text(
                    j, i, f"{matrix[i, j]:.2g}", ha="center", va="center", color="w", fontsize=7
                )
    fig.colorbar(im, ax=ax, shrink=0.8)
    ax.set_title(title)
    fig.tight_layout()
    png = out / f"distance_{name}.png"
    fig.savefig(png, dpi=120)
    plt.close(fig)
    return tsv, png


def _imaging(config: Mapping[str, Any], method: str, seed: int, data: Path | None):
    from rvfedprs.imaging.benchmark import stratified_subsample
    from rvfedprs.imaging.distances import imaging_distance
    from rvfedprs.imaging.engine import build_federation
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


def _genomic_probe(config, federation, seed):
    from rvfedprs.federation.inprocess import run_inprocess
    from rvfedprs.run import training_config
    from rvfedprs.strategies.fedavg import FedAvg

    model_config = dict(config["model"])
    result = run_inprocess(
        federation,
        FedAvg(),
        rounds=1,
        model_config=model_config,
        training=training_config(config, federation),
        random_seed=seed,
    )
    return result.strategy.parameters_for(federation.client_ids[0]), model_config


def _genomic_embeddings(federation, params, model_config):
    import torch

    from rvfedprs.federation.client import build_model
    from rvfedprs.model import set_parameters
    from rvfedprs.training import to_torch_sparse

    model = build_model(federation.n_rare, model_config)
    set_parameters(model, params)
    model.eval()
    embs, labels = [], []
    with torch.no_grad():
        for cid in federation.client_ids:
            d = federation.train[cid]
            h = model.embed(torch.from_numpy(d.prs), to_torch_sparse(d.rare))
            embs.append(h.numpy().astype(np.float64))
            labels.append(d.y.astype(np.int64))
    return embs, labels


def _genomics(config: Mapping[str, Any], method: str, seed: int, data: Path | None):
    from rvfedprs.federation.data import load_federation

    federation = load_federation(data or config["train"]["data"])
    return genomic_distance(config, federation, method, seed)


def genomic_distance(config: Mapping[str, Any], federation, method: str, seed: int):
    """The ``(K, K)`` distance matrix of ``method`` on a genomic federation, and its client ids.

    What each method sees: ``emd`` the clients' standardised-PRS distributions and/or the
    distributions of their per-variant rare allele frequencies (``distance.emd_metadata``);
    ``euclidean`` / ``ot`` the penultimate activations of the model after one FedAvg round;
    ``jaccard`` 1 − Jaccard of the Bloom filters of each client's influential rare variants after
    one local round from w^0 (FedCE's matrix, ``fedce`` section options).
    """
    from rvfedprs import similarity
    from rvfedprs.exceptions import ConfigError

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
    return similarity.compute(
        "ot",
        embs,
        labels,
        w_feature=opts["ot_w_feature"],
        w_label=opts["ot_w_label"],
        reg=opts["ot_reg"],
        normalisation=opts["ot_normalisation"],
        max_per_class=opts["ot_max_per_class"],
        dp_rho=opts["ot_dp_rho"],
        random_seed=seed,
    ), ids


def _genomic_jaccard(config, federation, seed) -> np.ndarray:
    """1 − Jaccard of the clients' Bloom filters after one local round from w^0."""
    from rvfedprs import similarity
    from rvfedprs.bloom import BloomSpec, read_bloom_key
    from rvfedprs.federation.client import ClientContext, fit_client
    from rvfedprs.federation.inprocess import derive_seed, initial_parameters
    from rvfedprs.run import training_config
    from rvfedprs.strategies.base import FitInstruction

    fedce = config["fedce"]
    key = read_bloom_key(fedce["bloom_key_file"])
    model_config = dict(config["model"])
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
    from rvfedprs.strategies import DISTANCE_METHODS, DISTANCE_STRATEGIES

    source = config["strategies"]["distance"]
    if name not in DISTANCE_STRATEGIES or source not in DISTANCE_METHODS:
        return {}
    matrix, ids = genomic_distance(config, federation, source, seed)
    return {"distance": matrix, "distance_clients": list(ids)}


def run(args: argparse.Namespace) -> int:
    """Compute the matrix and write TSV, PNG and provenance."""
    from rvfedprs.config import load_config
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.provenance import draw_seed, write_provenance

    overrides: dict[str, Any] = {}
    if args.method is not None:
        overrides["method"] = args.method
    if args.seed is not None:
        if args.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {args.seed}")
        overrides["seed"] = args.seed
    config = load_config(args.config, overrides={"distance": overrides} if overrides else None)
    section = config["distance"]
    seed = draw_seed(section["seed"])
    section["seed"] = seed
    method = section["method"]
    if section["domain"] == "imaging":
        matrix, ids = _imaging(config, method, seed, args.data)
    else:
        matrix, ids = _genomics(config, method, seed, args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    label = "1 − Jaccard" if method == "jaccard" else method.upper()
    tsv, png = write_matrix(out, method, matrix, ids, f"{label} distance ({section['domain']})")
    write_provenance(out, command="distance", parameters=dict(config["distance"]), seed=seed)
    print(f"wrote {tsv} and {png}")
    return 0
