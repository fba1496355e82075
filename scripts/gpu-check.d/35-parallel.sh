#!/usr/bin/env bash
# Multi-GPU ground truth for the planner (tensor, sequence and expert parallelism). On 2+ GPUs it
# measures every case of bench/plan/measure_parallel.py; on one GPU it dry-runs them at world size 1
# (checks the script and the models; not ground truth).
set -uo pipefail
n=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$n" -ge 2 ]; then
  PYTHONUNBUFFERED=1 python3 bench/plan/measure_parallel.py --out "$RESULTS_DIR/ground_truth_parallel.json"
else
  echo "one GPU: dry run at world size 1"
  PYTHONUNBUFFERED=1 python3 bench/plan/measure_parallel.py --dry-run --out "$RESULTS_DIR/parallel_dryrun.json"
fi
