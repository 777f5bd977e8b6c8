"""``rvfedprs distance``: a client×client distance matrix (TSV) and its heat map (PNG)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rvfedprs.option_types import SEED

HELP = "compute a client×client distance matrix (emd, euclidean, ot, jaccard) and a heat map"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs distance``."""
    from rvfedprs.similarity import METHODS

    parser.add_argument(
        "--method", choices=METHODS, help="distance method (default: distance.method)"
    )
    parser.add_argument("--config", type=Path, help="YAML file (sections distance, imaging/train)")
    parser.add_argument("--data", type=Path, help="MedMNIST .npz or per-client inputs folder")
    parser.add_argument("--seed", type=SEED, help="random seed (overrides distance.seed)")
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def run(args: argparse.Namespace) -> int:
    """Compute the matrix and write TSV, PNG and provenance."""
    from rvfedprs.config import load_config
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.provenance import draw_seed, write_provenance
    from rvfedprs.similarity.plots import write_matrix

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
        from rvfedprs.imaging.distances import distance_from_config
    else:
        from rvfedprs.genomic.distance import distance_from_config
    matrix, ids = distance_from_config(config, method, seed, data=args.data)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    label = "1 − Jaccard" if method == "jaccard" else method.upper()
    tsv, png = write_matrix(out, method, matrix, ids, f"{label} distance ({section['domain']})")
    write_provenance(out, command="distance", parameters=dict(config["distance"]), seed=seed)
    print(f"wrote {tsv} and {png}")
    return 0
