#!/usr/bin/env bash
# Reproduce 002_* Table 8 (PneumoniaMNIST rows) and the 000_* study as committed in results/.
# Every run is one `rvfedprs imaging` process per strategy (resumable at strategy granularity:
# a finished strategy has results/<set>/<strategy>/metrics.json and is skipped).
# On a shared machine start the workers detached, e.g.
#   setsid nohup nice -n 5 env OMP_NUM_THREADS=1 simulations/imaging_medmnist/run.sh > run.log 2>&1 &
# (results/ was produced by several such workers in parallel: run_queue.sh / run_pool.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
S=simulations/imaging_medmnist
# 1. 002_* Table 8: full protocol (all 5,856 images, 3 clients, Dirichlet 0.1, 50 rounds, seed 0)
$S/run_queue.sh config/imaging_medmnist.yaml $S/results/table8 50 \
  fedprox fedavg local fedsvrg fedatt fedatt_cosine
# 2. the same on the paper's own client class mix (002_* Table 2), 25 rounds
$S/run_pool.sh $S/tasks_paper_partition.txt 25
# 3. 000_* study: distance matrices, then FedAvg-w / cluster FedAvg / Ditto (50 rounds)
$S/run_distances.sh config/imaging_medmnist.yaml $S/results/distances
$S/run_pool.sh $S/tasks_000.txt 50
# 4. tables and figure
python3 $S/make_tables.py
