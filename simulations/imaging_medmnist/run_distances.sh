#!/usr/bin/env bash
# 000_* non-IID assessment on the 002_* PneumoniaMNIST federation (same partition as the
# imaging runs: imaging.seed = distance.seed = 0): EMD, Euclidean-embedding and OT matrices.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONFIG=${1:-config/imaging_medmnist.yaml}
OUT=${2:-simulations/imaging_medmnist/results/distances}
for m in emd euclidean ot; do
  echo "$(date -u +%FT%TZ) start $m"
  /usr/bin/time -f "%e s wall, %U s user" rvfedprs distance --config "$CONFIG" --method "$m" --out "$OUT/$m"
done
echo "$(date -u +%FT%TZ) done"
