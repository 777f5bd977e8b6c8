#!/usr/bin/env bash
# Reproduce 002_* Table 8 (PneumoniaMNIST rows). Full protocol: config/imaging_medmnist.yaml
# (50 rounds, all 5,856 images); the CPU-sized run: config_cpu_subsample.yaml.
set -euo pipefail
cd "$(dirname "$0")/../.."
CONFIG=${1:-simulations/imaging_medmnist/config_cpu_subsample.yaml}
OUT=${2:-simulations/imaging_medmnist/results/pneumonia_cpu_subsample}
rvfedprs imaging --config "$CONFIG" --out "$OUT"
