"""Cost of one round of every method of the scenario map, in CPU seconds (issue #17).

On a prepared cohort (a scenario preset's 10 sites × 1,000 people), each method of
``simulations/scenario_map/run.py`` trains ``--rounds`` rounds at each of the given shared
optimiser points, with the validation AUC scored after every round as the protocol does. CPU
seconds (``time.process_time``, one torch thread) do not depend on other jobs' load; wall
seconds do, and are printed beside them with the load average. The scenario map's cost is
Σ over trials of rounds × CPU seconds per round (plus simulation and preparation).

    python benchmarks/bench_protocol.py --data COHORT/results --out benchmarks/protocol.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from rvfedprs.config import validate_config
from rvfedprs.genomic.data import load_federation
from rvfedprs.protocol import run_trial, three_way_split
from rvfedprs.protocol.grids import LOGISTIC

METHODS = ("fedavg", "fedprox", "fedadam", "fedavgm", "fedavg_masked", "clustered", "ditto",
           "local", "centralized", "fedce", "fedce_carried")  # fmt: skip
POINTS = (
    {"train.lr": 0.05, "train.batch_size": 64, "train.local_epochs": 1},
    {"train.lr": 0.05, "train.batch_size": 32, "train.local_epochs": 2},
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    torch.set_num_threads(1)
    base = validate_config({"train": {"progress": False}})
    data = three_way_split(load_federation(args.data), 0.2, random_seed=1)
    rows = []
    for index, point in enumerate(POINTS):
        for method in (*METHODS, LOGISTIC) if index == 0 else METHODS:
            configuration = {"logistic.C": 0.01} if method == LOGISTIC else dict(point)
            load = os.getloadavg()[0]
            t0 = time.process_time()
            trial, _ = run_trial(data, method, configuration, base_config=base,
                                 max_rounds=args.rounds, patience=None, random_seed=1)  # fmt: skip
            cpu = time.process_time() - t0
            rounds = max(trial.rounds_run, 1)
            rows.append({"method": method, **point, "rounds": trial.rounds_run,
                         "cpu_s_per_round": cpu / rounds, "wall_s_per_round": trial.wall_s / rounds,
                         "load": load})  # fmt: skip
            wall = trial.wall_s / rounds
            print(f"{method:14s} lr={point['train.lr']} batch={point['train.batch_size']} "
                  f"epochs={point['train.local_epochs']}: {cpu / rounds:.3f} CPU s/round, "
                  f"{wall:.3f} wall s/round (load {load:.1f})", flush=True)  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({"data": str(args.data), "n_rare": data.n_rare,
                                        "rows": rows}, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
