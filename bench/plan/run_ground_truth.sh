#!/usr/bin/env bash
# Measures the planner's ground truth and records the allocator's PyTorch trace on a GPU machine.
#
#   bash bench/plan/run_ground_truth.sh OUTDIR
#
# Writes OUTDIR/ground_truth.json, OUTDIR/llama_step.trace, OUTDIR/llama_step.json and
# OUTDIR/logs/, and copies the results to tests/data/plan/ and tests/data/mr/ (a result is only
# copied when its script succeeded: at least one ground-truth case measured; a valid trace). Bounded to about 7 minutes: the ground-truth cases get
# GT_TOTAL_S seconds (default 270), the trace TRACE_S seconds (default 120).
# Environment: PYTHON (default python3), JOBS (parallel cases, default 4).
set -uo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: bash bench/plan/run_ground_truth.sh OUTDIR" >&2
    exit 2
fi
cd "$(dirname "$0")/../.." || exit 1
out=$1
mkdir -p "$out/logs" tests/data/plan tests/data/mr
out=$(cd "$out" && pwd)
py=${PYTHON:-python3}
jobs=${JOBS:-4}
gt_total=${GT_TOTAL_S:-270}
trace_s=${TRACE_S:-120}
export PYTHONUNBUFFERED=1

ts() { date -u +%H:%M:%S; }
say() { echo "[$(ts)] $*"; }

say "start: $(nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | head -1)"
say "python $($py --version 2>&1); commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"

say "ground truth: $($py bench/plan/measure_ground_truth.py --list | wc -l) cases, $jobs at once, ${gt_total} s limit"
timeout $((gt_total + 60)) "$py" bench/plan/measure_ground_truth.py \
    --out "$out/ground_truth.json" --log-dir "$out/logs/plan" --jobs "$jobs" --total-timeout "$gt_total" \
    2>&1 | tee "$out/logs/ground_truth.log"
gt_rc=${PIPESTATUS[0]}
say "ground truth finished (exit $gt_rc)"
# The script exits non-zero only when no case produced a measurement: never commit that.
if [[ $gt_rc -eq 0 && -s "$out/ground_truth.json" ]]; then
    cp "$out/ground_truth.json" tests/data/plan/ground_truth.json
    say "copied to tests/data/plan/ground_truth.json"
fi

say "trace: recording a TinyLlama-shaped training run, ${trace_s} s limit"
timeout "$trace_s" "$py" bench/mr/record_torch_trace.py \
    --out-trace "$out/llama_step.trace" --out-json "$out/llama_step.json" \
    2>&1 | tee "$out/logs/llama_step.log"
tr_rc=${PIPESTATUS[0]}
say "trace finished (exit $tr_rc)"
if [[ $tr_rc -eq 0 && -s "$out/llama_step.trace" && -s "$out/llama_step.json" ]]; then
    "$py" bench/mr/trace_tools.py "$out/llama_step.trace" > "$out/logs/llama_step.summary.json" 2>&1 \
        && cp "$out/llama_step.trace" "$out/llama_step.json" tests/data/mr/ \
        && say "copied to tests/data/mr/ ($(wc -c < "$out/llama_step.trace") bytes of trace)"
fi

say "done: ground truth exit $gt_rc, trace exit $tr_rc; outputs in $out"
[[ $gt_rc -eq 0 && $tr_rc -eq 0 ]]
