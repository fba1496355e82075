# Tier stage: the out-of-core pipeline and residency manager benchmark (bench/tier/tier_bench)
# beside the baselines it measures in the same run, plus `vramkit probe --only h2d` for reference.
# Writes RESULTS_DIR/tier-summary.md, tier-bench.json, tier-bench.txt and a residency trace.
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
summary="$RESULTS_DIR/tier-summary.md"
bench="$BUILD_DIR/bench/tier/tier_bench"
status=0

# Host memory: the bench pins the dataset (+1 GiB) and holds a pageable copy and managed memory
# of up to 4 GiB each; keep all of it within half of what is available.
avail_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
avail_gib=$(( avail_kib / 1024 / 1024 ))
dataset_gib=16
while [ $dataset_gib -gt 2 ] && [ $(( dataset_gib + 10 )) -gt $(( avail_gib / 2 )) ]; do
  dataset_gib=$(( dataset_gib / 2 ))
done

{
  echo "# tier: out-of-core streaming and residency"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  commit=$(git rev-parse --short HEAD 2>/dev/null || true)
  [ -n "$commit" ] || commit=$(awk -F': ' '/^commit:/ {print $2; exit}' "$RESULTS_DIR/machine.txt" 2>/dev/null)
  [ "$commit" = "HEAD" ] && commit=""
  echo "- commit: ${commit:-unknown}"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- host: $(lscpu 2>/dev/null | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}'), ${avail_gib} GiB available"
  echo "- dataset ${dataset_gib} GiB in pinned host memory; pipeline depth 4 x 128 MiB chunks = 512 MiB device budget"
  echo "- conventions: reduction GB/s = dataset bytes / time; transform and bidirectional GB/s = bytes read + written / time; medians of 3 runs after a warm-up"
  echo
} > "$summary"

if [ ! -x "$bench" ]; then
  echo "tier_bench not built ($bench)" | tee -a "$summary"
  exit 1
fi

echo "running tier_bench (dataset ${dataset_gib} GiB)"
if timeout 170 "$bench" --dataset "${dataset_gib}GiB" --chunk 128MiB --depth 4 --reps 3 \
    --summary "$RESULTS_DIR/tier-bench-table.md" --json "$RESULTS_DIR/tier-bench.json" \
    --trace "$RESULTS_DIR/tier-residency-trace.json" > "$RESULTS_DIR/tier-bench.txt" 2>&1; then
  cat "$RESULTS_DIR/tier-bench-table.md" >> "$summary"
else
  rc=$?
  status=1
  echo "**tier_bench failed (exit $rc)**; last lines:" >> "$summary"
  echo '```' >> "$summary"
  tail -15 "$RESULTS_DIR/tier-bench.txt" >> "$summary"
  echo '```' >> "$summary"
fi
cat "$RESULTS_DIR/tier-bench.txt"

echo >> "$summary"
echo "## vramkit probe --only h2d --quick (same run)" >> "$summary"
if timeout 60 "$BUILD_DIR/vramkit" probe --only h2d --quick --json "$RESULTS_DIR/tier-probe-h2d.json" \
    > "$RESULTS_DIR/tier-probe-h2d.txt" 2>&1; then
  python3 - "$RESULTS_DIR/tier-probe-h2d.json" "$RESULTS_DIR/tier-bench.json" >> "$summary" 2>/dev/null <<'PY' || echo "(probe JSON not parsed)" >> "$summary"
import json, sys
probe = json.load(open(sys.argv[1]))
try:
    bench = json.load(open(sys.argv[2]))
except Exception:
    bench = {}
med = {r.get("key"): r.get("stats", {}).get("median") for r in probe.get("results", [])}
print("| probe key | median GB/s | pipeline figure (same run) | ratio |")
print("|---|---|---|---|")
pairs = [("gpu0.h2d.pinned", "pipeline_reduction_gbps", "reduction"),
         ("gpu0.bidir.pinned", "pipeline_transform_gbps_read_plus_written", "transform (read + written)"),
         ("gpu0.h2d.pageable", "pageable_pipeline_gbps", "pageable source through the pipeline")]
for key, bkey, label in pairs:
    p = med.get(key)
    b = bench.get(bkey, {}).get("median")
    if p is None:
        print(f"| {key} | not measured | | |")
    elif b is None:
        print(f"| {key} | {p:.2f} | | |")
    else:
        print(f"| {key} | {p:.2f} | {label} {b:.2f} GB/s | {b / p:.2f} |")
PY
  echo '```' >> "$summary"
  grep -iE "h2d|host.?to.?device" "$RESULTS_DIR/tier-probe-h2d.txt" | head -8 >> "$summary"
  echo '```' >> "$summary"
else
  echo "probe did not run (exit $?): $(tail -1 "$RESULTS_DIR/tier-probe-h2d.txt")" >> "$summary"
fi

echo >> "$summary"
echo "## tier GPU tests" >> "$summary"
if [ -f "$RESULTS_DIR/gpu-tests.txt" ]; then
  echo '```' >> "$summary"
  grep -E "TierGpu" "$RESULTS_DIR/gpu-tests.txt" | tail -12 >> "$summary"
  echo '```' >> "$summary"
fi
cat "$summary"
exit $status
