# Plan stage: measures a few planner cases afresh with PyTorch on this GPU (the ground-truth
# script, fresh processes) and prints the planner's predictions beside them; also the committed
# ground truth and the planner's speed benchmark. On a machine with two or more GPUs it also
# measures the DDP and FSDP cases (bench/plan/measure_ddp.py). Writes RESULTS_DIR/plan-summary.md.
# PLAN_FRESH=0 skips the fresh measurements (several minutes of GPU time).
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
summary="$RESULTS_DIR/plan-summary.md"
report="$BUILD_DIR/bench/plan/plan_accuracy_report"
bench="$BUILD_DIR/bench/plan/plan_bench"
status=0
{
  echo "# plan: predicted vs measured peak memory"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- torch: $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null || echo 'not importable')"
  echo
} > "$summary"

if [ "${PLAN_FRESH:-1}" = 0 ]; then
  echo "Fresh PyTorch measurements skipped (PLAN_FRESH=0)." >> "$summary"
elif python3 -c 'import torch, transformers, torchvision' 2>/dev/null; then
  # Fresh measurements of five representative cases, then the planner on them.
  timeout 420 python3 bench/plan/measure_ground_truth.py --out "$RESULTS_DIR/plan-fresh.json" \
    --log-dir "$RESULTS_DIR/plan-fresh-logs" --jobs 3 \
    --only gpt2-train-fp32-adamw-b8 --only tinyllama-1.1b-train-amp-bf16-adamw-b8 \
    --only resnet-50-train-fp32 --only bert-base-train-amp-fp16 --only qwen2-0.5b-infer \
    > "$RESULTS_DIR/plan-fresh.txt" 2>&1 || status=1
  {
    echo "## Cases measured in this run (max allocated / reserved / nvidia-smi, measured / predicted / error)"
    echo
    "$report" "$RESULTS_DIR/plan-fresh.json" tests/data/plan 2>&1 || status=1
    echo
  } >> "$summary"
else
  echo "PyTorch, transformers or torchvision not importable here: no fresh measurement." >> "$summary"
  status=1
fi
if [ "${PLAN_FRESH:-1}" != 0 ] && python3 -c 'import torch, transformers' 2>/dev/null; then
  # Cases of the planner's newer modelling (eager attention at inference, sliding-window KV,
  # the Phi-3 family):
  # written in the ground-truth format (plan-fixes.json) so that they can be committed to
  # tests/data/plan; about a minute.
  timeout 180 python3 bench/plan/measure_ground_truth.py --out "$RESULTS_DIR/plan-fixes.json" \
    --log-dir "$RESULTS_DIR/plan-fixes-logs" --jobs 3 \
    --only llama-3-8b-l4-infer --only mistral-7b-l4-w1024-infer --only phi-3-mini \
    > "$RESULTS_DIR/plan-fixes.txt" 2>&1 || status=1
  {
    echo "## Newer modelling measured in this run (eager attention at inference, sliding window, Phi-3)"
    echo
    "$report" "$RESULTS_DIR/plan-fixes.json" tests/data/plan 2>&1 || status=1
    echo
  } >> "$summary"
fi
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
if [ "${PLAN_FRESH:-1}" != 0 ] && [ "$gpus" -ge 2 ] && python3 -c 'import torch, transformers' 2>/dev/null; then
  # Data-parallel cases afresh (DistributedDataParallel over every GPU of this machine).
  {
    echo "## DDP and FSDP cases measured in this run ($gpus GPUs)"
    echo
    for wrap in ddp fsdp; do
      if timeout 300 python3 bench/plan/measure_ddp.py --wrap "$wrap" --out "$RESULTS_DIR/plan-$wrap-fresh.json" \
          > "$RESULTS_DIR/plan-$wrap-fresh.txt" 2>&1; then
        "$report" "$RESULTS_DIR/plan-$wrap-fresh.json" tests/data/plan 2>&1 || status=1
      else
        echo "measure_ddp.py --wrap $wrap failed: see plan-$wrap-fresh.txt"
        status=1
      fi
      echo
    done
    echo
  } >> "$summary"
fi
{
  echo "## Committed ground truth (tests/data/plan/ground_truth.json)"
  echo
  "$report" tests/data/plan/ground_truth.json 2>&1 || status=1
  echo
  for wrap in ddp fsdp; do
    echo "## Committed multi-GPU ground truth (tests/data/plan/ground_truth_$wrap.json)"
    echo
    "$report" "tests/data/plan/ground_truth_$wrap.json" tests/data/plan 2>&1 || status=1
    echo
  done
  echo "## Planner speed (targets: one plan < 1 ms, a full --fit search < 1000 ms)"
  echo
  echo '```'
  "$bench" --benchmark_min_time=0.5s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true 2>&1 | grep -E "Benchmark|----|_median|_min|targets" || status=1
  echo '```'
} >> "$summary"
cat "$summary"
exit $status
