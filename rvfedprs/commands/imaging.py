"""``rvfedprs imaging``: the ``002_*`` comparison of FL strategies on a MedMNIST file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HELP = "compare federated strategies on a MedMNIST .npz (Dirichlet non-IID clients, small CNN)"

#: the quick preset: a few rounds on a small subsample (tests, smoke runs)
QUICK = {"rounds": 2, "subsample": 300, "eval_rounds": None, "cv_folds": None}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``rvfedprs imaging``."""
    parser.add_argument("--config", type=Path, help="YAML file with an 'imaging:' section")
    parser.add_argument("--data", type=Path, help="MedMNIST .npz (overrides imaging.data)")
    parser.add_argument("--quick", action="store_true", help="2 rounds on 300 images")
    parser.add_argument("--seed", type=int, help="master seed (overrides imaging.seed)")
    parser.add_argument(
        "--strategies", nargs="+", metavar="NAME", help="strategies (overrides imaging.strategies)"
    )
    parser.add_argument("--rounds", type=int, help="rounds (overrides imaging.rounds)")
    parser.add_argument(
        "--engine",
        help="where the clients train: inprocess, flower-sim or flower-deploy (overrides "
        "imaging.engine; docs/DEPLOYMENT.md)",
    )
    parser.add_argument(
        "--class-counts",
        type=Path,
        metavar="TSV",
        help="fixed per-client class counts (rows: client, columns: class 0..C-1) instead of a"
        " Dirichlet draw, e.g. a paper's published partition",
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder")


def read_class_counts(path: Path, n_classes: int):
    """A (K, C) integer matrix from a TSV with a header row and the client id in column 1.

    Raises
    ------
    InputDataError
        Missing file, non-integer cells, or a column count other than ``n_classes``.
    """
    import numpy as np
    import pandas as pd

    from rvfedprs.exceptions import InputDataError

    if not Path(path).is_file():
        raise InputDataError(f"class counts file not found: {path}")
    table = pd.read_csv(path, sep="\t", index_col=0, comment="#")
    if table.shape[1] != n_classes:
        raise InputDataError(
            f"{path}: {table.shape[1]} class columns {list(table.columns)}, the data have "
            f"{n_classes} classes"
        )
    values = table.to_numpy()
    if not np.issubdtype(values.dtype, np.integer):
        raise InputDataError(f"{path}: class counts must be integers, got {values.tolist()}")
    return values.astype(np.int64)


def run(args: argparse.Namespace) -> int:
    """Run the comparison; write metrics.json, table.csv, table.md and provenance.json.

    Every evaluated round is also appended to ``progress.jsonl`` (and a line printed) as soon as
    it is computed, so an interrupted run keeps what it had evaluated (on a Flower engine, when
    each strategy's run ends: the rounds are evaluated from its checkpoints).
    """
    import time

    import torch

    from rvfedprs.config import load_config
    from rvfedprs.exceptions import ConfigError
    from rvfedprs.imaging.benchmark import check_engine, results_table, run_benchmark
    from rvfedprs.imaging.loader import load_medmnist
    from rvfedprs.provenance import draw_seed, jsonable, write_provenance

    overrides: dict[str, Any] = {}
    if args.quick:
        overrides.update(QUICK)
    if args.data is not None:
        overrides["data"] = str(args.data)
    if args.strategies:
        overrides["strategies"] = list(args.strategies)
    if args.rounds is not None:
        if args.rounds < 1:
            raise ConfigError(f"--rounds must be >= 1, got {args.rounds}")
        overrides["rounds"] = args.rounds
    if getattr(args, "engine", None) is not None:
        check_engine(args.engine)
        overrides["engine"] = args.engine
    if args.seed is not None:
        if args.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {args.seed}")
        overrides["seed"] = args.seed
    config = load_config(args.config, overrides={"imaging": overrides} if overrides else None)
    section = config["imaging"]
    seed = draw_seed(section["seed"])
    section["seed"] = seed
    if section["torch_threads"]:
        torch.set_num_threads(int(section["torch_threads"]))
    dataset = load_medmnist(section["data"])
    class_counts = None
    if args.class_counts is not None:
        class_counts = read_class_counts(args.class_counts, dataset.n_classes)
        section["n_clients"] = int(class_counts.shape[0])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if section.get("eval_rounds"):
        section["eval_rounds"] = [r for r in section["eval_rounds"] if r <= section["rounds"]]
    progress_file = out / "progress.jsonl"
    progress_file.write_text("")
    start = time.time()

    def progress(row: dict[str, Any]) -> None:
        row = {"elapsed_s": round(time.time() - start, 1), **row}
        with progress_file.open("a") as handle:
            handle.write(json.dumps(jsonable(row)) + "\n")
        print(
            f"[{row['elapsed_s']:8.1f}s] {row['strategy']} fold {row['fold']} round {row['round']}:"
            f" accuracy {row['accuracy']:.4f} log-loss {row['log_loss']:.4f}",
            flush=True,
        )

    result = run_benchmark(
        dataset,
        section,
        random_seed=seed,
        progress=progress,
        class_counts=class_counts,
        engine=section["engine"],
        flower=config.get("flower"),
        out=out,
    )
    if result["n_unassigned"]:
        print(f"note: {result['n_unassigned']} of {result['n_images']} images are in no client")
    wall_s = time.time() - start
    rounds = section["rounds"]
    marks = sorted({1, max(1, rounds // 2), rounds})
    table = results_table(result["history"], marks)
    table.to_csv(out / "table.csv", index=False)
    (out / "table.md").write_text(table.to_markdown(index=False, floatfmt=".4f") + "\n")
    metrics = {
        "seed": seed,
        "config": section,
        "dataset": str(dataset.path),
        "wall_s": round(wall_s, 1),
        "torch_version": torch.__version__,
        "class_counts": None if class_counts is None else class_counts.tolist(),
        "class_counts_file": None if args.class_counts is None else str(args.class_counts),
        **result,
    }
    (out / "metrics.json").write_text(json.dumps(jsonable(metrics), indent=1) + "\n")
    write_provenance(
        out,
        command="imaging",
        parameters=section,
        seed=seed,
        inputs=[section["data"], *([str(args.class_counts)] if args.class_counts else [])],
    )
    print(f"wrote {out}: {len(section['strategies'])} strategies × {rounds} rounds")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    return 0
