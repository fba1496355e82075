# Offload stage: activation and optimizer-state offload side by side on two LLaMA-shaped models
# under a cap of half the uncapped peak (bench/offload/offload_bench.py; each config in its own
# process, so an out-of-memory loses only that config). At most about 4 minutes: the bench stops
# starting configs after OFFLOAD_BUDGET_S (default 200 s). The GPU tests of the Python package
# (python.offload_gpu) run in the gpu-tests stage. Writes RESULTS_DIR/offload-summary.md and
# offload-bench.json.
set -uo pipefail
: "${RESULTS_DIR:?}"
summary="$RESULTS_DIR/offload-summary.md"
if ! python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  echo "offload: PyTorch with CUDA is not importable by python3: nothing measured" | tee "$summary"
  exit 1
fi
{
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || awk -F': ' '/^commit:/ {print $2; exit}' "$RESULTS_DIR/machine.txt" 2>/dev/null)"
  echo "- host: $(lscpu 2>/dev/null | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}'), $(awk '/MemAvailable/ {print int($2/1048576)}' /proc/meminfo) GiB available"
  echo
} > "$RESULTS_DIR/offload-header.md"
PYTHONUNBUFFERED=1 timeout 235 python3 bench/offload/offload_bench.py \
  --shapes "${OFFLOAD_SHAPES:-1b,3b-wide}" --budget-s "${OFFLOAD_BUDGET_S:-200}" \
  --out "$RESULTS_DIR/offload-bench.json" --summary "$RESULTS_DIR/offload-table.md"
status=$?
cat "$RESULTS_DIR/offload-header.md" "$RESULTS_DIR/offload-table.md" > "$summary" 2>/dev/null
rm -f "$RESULTS_DIR/offload-header.md"
exit $status
