#!/usr/bin/env bash
# Run strategies one per process into OUT/<strategy>/, skipping those already finished
# (metrics.json present), so that an interrupted queue resumes at strategy granularity.
# usage: run_queue.sh CONFIG OUT ROUNDS STRATEGY [STRATEGY ...]
# Meant to be started detached on a shared machine, e.g.
#   setsid nohup nice -n 5 env OMP_NUM_THREADS=1 simulations/imaging_medmnist/run_queue.sh \
#     config/imaging_medmnist.yaml simulations/imaging_medmnist/results/table8 50 fedprox fedavg \
#     > queue.log 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/../.."
CONFIG=$1; OUT=$2; ROUNDS=$3; shift 3
for s in "$@"; do
  if [[ -f "$OUT/$s/metrics.json" ]]; then echo "skip $s (done)"; continue; fi
  mkdir -p "$OUT/$s"
  echo "$(date -u +%FT%TZ) start $s"
  /usr/bin/time -v rvfedprs imaging --config "$CONFIG" --strategies "$s" --rounds "$ROUNDS" \
    --out "$OUT/$s" > "$OUT/$s/log.txt" 2>&1
  echo "$(date -u +%FT%TZ) done $s"
done
