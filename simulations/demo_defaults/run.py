"""Choose the demo workflow's training defaults on validation data only (issue #17 item 5).

The demo defaults (``train.lr``, ``train.batch_size``, ``train.local_epochs``, ``train.rounds``,
``train.proximal_mu``, ``fedce.top_k``, ``fedce.n_clusters``) were once chosen from probes read
on the test split and on the true clusters' ARI. This re-chooses them with the benchmark
protocol (:mod:`rvfedprs.protocol`) on the embedded demo cohort:

1. every client's training split is cut into fit and validation parts (stratified, seeded);
   the test split is taken out of reach;
2. every strategy the workflow compares (``train.compare``) tries the same ``--budget``
   configurations of the shared optimiser settings (each with its own knobs spread over them),
   early-stopped on the pooled validation AUC (``--max-rounds``, ``--patience``);
3. one default per option, because the workflow trains every strategy with the same
   ``train`` section: the shared point (lr, batch size, local epochs) with the highest
   validation AUC averaged over the compared strategies; ``rounds`` = the median of their
   early-stopped rounds at that point; each strategy's own knobs (FedProx μ, FedCE top_k and
   number of clusters) from its best trial.

Nothing reads the test split, the truth or the ARI. Writes ``--out``/``trials.tsv`` (every
trial's validation AUC), ``shared_points.tsv`` (the averages behind the choice),
``chosen.json`` and ``provenance.json``.

Usage (after ``snakemake --cores 2 --directory DEMO results/clients.tsv``)::

    python simulations/demo_defaults/run.py --data DEMO/results \\
        --out simulations/demo_defaults/results
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.config import validate_config
from rvfedprs.genomic.data import load_federation
from rvfedprs.protocol import three_way_split, tune
from rvfedprs.protocol.grids import SHARED_AXES
from rvfedprs.provenance import jsonable, write_provenance

#: Own knobs a strategy's best trial sets, as (configuration key, default it becomes).
OWN_DEFAULTS = {
    "fedprox": ["train.proximal_mu"],
    "fedce": ["fedce.top_k", "fedce.n_clusters"],
}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, required=True, help="the demo's per-client inputs")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--budget", type=int, default=6)
    p.add_argument("--max-rounds", type=int, default=30)
    p.add_argument("--patience", type=int, default=5)
    p.add_argument("--validation-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=20240611, help="train.seed of config/config.yaml")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Tune the compared strategies, derive one default per option; returns 0."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", force=True)
    args.out.mkdir(parents=True, exist_ok=True)
    base = validate_config({"train": {"progress": False}})
    strategies = list(base["train"]["compare"])
    federation = load_federation(args.data)
    data = three_way_split(federation, args.validation_fraction, random_seed=args.seed)
    rows = []
    for name in strategies:
        tuned = tune(data, name, out=args.out / "trials", base_config=base,
                     data_key=str(args.data.resolve()), max_rounds=args.max_rounds,
                     patience=args.patience, random_seed=args.seed, budget=args.budget)  # fmt: skip
        for trial in tuned.trials:
            rows.append({"strategy": name, "validation_auc": trial.validation_auc,
                         "best_round": trial.best_round, "rounds_run": trial.rounds_run,
                         "chosen": trial.key == tuned.chosen.key, "wall_s": trial.wall_s,
                         **trial.configuration})  # fmt: skip
    trials = pd.DataFrame(rows)
    trials.to_csv(args.out / "trials.tsv", sep="\t", index=False)
    shared = list(SHARED_AXES)
    points = (
        trials.groupby(shared)
        .agg(
            mean_validation_auc=("validation_auc", "mean"),
            median_best_round=("best_round", "median"),
            n=("strategy", "nunique"),
        )  # fmt: skip
        .reset_index()
        .sort_values("mean_validation_auc", ascending=False)
    )
    points.to_csv(args.out / "shared_points.tsv", sep="\t", index=False)
    best = points.iloc[0]
    at_best = trials[np.logical_and.reduce([trials[k] == best[k] for k in shared])]
    chosen: dict[str, object] = {key: _plain(best[key]) for key in shared}
    chosen["train.rounds"] = int(round(statistics.median(at_best["best_round"])))
    for name, keys in OWN_DEFAULTS.items():
        if name in strategies:
            winner = trials[(trials["strategy"] == name) & trials["chosen"]].iloc[0]
            chosen.update({key: _plain(winner[key]) for key in keys})
    record = {"chosen": chosen, "strategies": strategies, "budget": args.budget,
              "max_rounds": args.max_rounds, "patience": args.patience,
              "validation_fraction": args.validation_fraction, "seed": args.seed}  # fmt: skip
    (args.out / "chosen.json").write_text(json.dumps(jsonable(record), indent=2) + "\n")
    write_provenance(args.out, command="simulations/demo_defaults/run.py",
                     parameters={k: str(v) if isinstance(v, Path) else v
                                 for k, v in vars(args).items()},
                     seed=args.seed, inputs=[args.data / "clients.tsv"])  # fmt: skip
    logging.info("chosen defaults: %s", chosen)
    return 0


def _plain(value):
    if hasattr(value, "item"):
        return value.item()
    return value


if __name__ == "__main__":
    sys.exit(main())
