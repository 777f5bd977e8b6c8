"""``rvfedprs distance``: a client×client distance matrix (TSV) and its heat map (PNG)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

HELP = "compute a client×client distance matrix (emd, euclidean, ot, jaccard) and a heat map"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs distance``."""
    from rvfedprs.similarity import METHODS

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
    from rvfedprs.imaging.distances import imaging_distance
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


def _genomics(config: Mapping[str, Any], method: str, seed: int, data: Path | None):
    from rvfedprs.genomic.data import load_federation
    from rvfedprs.genomic.distance import genomic_distance

    federation = load_federation(data or config["train"]["data"])
    return genomic_distance(config, federation, method, seed)


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
