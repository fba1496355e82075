#!/usr/bin/env bash
# Multi-GPU ground truth for the planner (tensor, sequence and expert parallelism): on 2+ GPUs it
# measures every case of bench/plan/measure_parallel.py. One GPU gives no multi-GPU ground truth,
# so the stage says so and takes no GPU time.
set -uo pipefail
n=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$n" -ge 2 ]; then
  PYTHONUNBUFFERED=1 python3 bench/plan/measure_parallel.py --out "$RESULTS_DIR/ground_truth_parallel.json"
else
  echo "one GPU: no multi-GPU ground truth to measure (skipped)"
fi
