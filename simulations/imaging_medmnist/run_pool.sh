#!/usr/bin/env bash
# Worker of a shared task list (lines "CONFIG OUT STRATEGY [EXTRA OPTIONS]"): each task is claimed
# atomically by creating OUT/STRATEGY (mkdir), so several detached workers can share one list; a
# finished task has OUT/STRATEGY/metrics.json. To re-run an interrupted task, delete its
# OUT/STRATEGY folder. EXTRA OPTIONS are passed to `rvfedprs imaging` (e.g. --class-counts F).
# usage: run_pool.sh TASKS ROUNDS
set -uo pipefail
cd "$(dirname "$0")/../.."
TASKS=$1; ROUNDS=$2
while read -r config out strategy extra; do
  [[ -z "$config" || "$config" == \#* ]] && continue
  mkdir -p "$out"
  mkdir "$out/$strategy" 2>/dev/null || { echo "skip $out/$strategy (claimed)"; continue; }
  echo "$(date -u +%FT%TZ) start $out/$strategy"
  # shellcheck disable=SC2086
  /usr/bin/time -v rvfedprs imaging --config "$config" --strategies "$strategy" \
    --rounds "$ROUNDS" --out "$out/$strategy" $extra > "$out/$strategy/log.txt" 2>&1
  echo "$(date -u +%FT%TZ) done $out/$strategy rc=$?"
done < "$TASKS"
