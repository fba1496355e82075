#!/usr/bin/env bash
# GPU stage of the cluster module: `vramkit slurm gres` on the real driver (NVML totals), checked
# against nvidia-smi's memory.total and the shard arithmetic; the extender cost benchmark and the
# 1,000-node placement simulation (CPU work, recorded with the machine they ran on). Writes
# $RESULTS_DIR/cluster-summary.md and logs under $RESULTS_DIR/cluster/.
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
OUT="$RESULTS_DIR/cluster"
mkdir -p "$OUT"
VK="$BUILD_DIR/vramkit"
SUMMARY="$RESULTS_DIR/cluster-summary.md"
status=0
{
  echo "# vramkit cluster placement on a GPU machine"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -)"
  echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
  echo
} > "$SUMMARY"

# 1. slurm gres from NVML, compared with nvidia-smi (MiB) and the expected shard counts.
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits > "$OUT/smi.csv" 2>&1
if "$VK" slurm gres --node gpucheck --shard-size 1GiB --json > "$OUT/gres.json" 2> "$OUT/gres.err"; then
  python3 - "$OUT/gres.json" "$OUT/smi.csv" >> "$SUMMARY" 2> "$OUT/gres-compare.err" <<'PY' || status=1
import json, sys
g = json.load(open(sys.argv[1]))
smi = {}
for line in open(sys.argv[2]):
    parts = [p.strip() for p in line.split(",")]
    if len(parts) == 3 and parts[0].isdigit():
        smi[int(parts[0])] = (parts[1], int(parts[2]))
print("## vramkit slurm gres (NVML) against nvidia-smi\n")
print("| GPU | name | NVML total | nvidia-smi total | ratio | shards of 1 GiB | expected |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
bad = 0
for gpu in g["gpus"]:
    i = gpu["index"]
    nvml_mib = gpu["total_bytes"] / 2**20
    smi_mib = smi.get(i, ("?", 0))[1]
    ratio = nvml_mib / smi_mib if smi_mib else float("nan")
    # shards = floor((total - reserved) / 1 GiB) <= floor(total / 1 GiB)
    upper = gpu["total_bytes"] // 2**30
    ok = smi_mib and abs(ratio - 1) < 0.001 and 0 < gpu["shards"] <= upper
    bad += not ok
    print(f"| {i} | {gpu['name']} | {nvml_mib:.0f} MiB | {smi_mib} MiB | {ratio:.4f} | {gpu['shards']} | <= {upper} |{'' if ok else ' MISMATCH'}")
print()
print("```")
print(g["node_line"].strip())
print("```\n")
sys.exit(1 if bad or not g["gpus"] else 0)
PY
  [ $status -eq 0 ] || echo "- slurm gres comparison FAILED: $(tail -3 "$OUT/gres-compare.err")" >> "$SUMMARY"
else
  echo "- vramkit slurm gres FAILED: $(head -3 "$OUT/gres.err")" >> "$SUMMARY"; status=1
fi

# 2. Extender cost per request over 1,000 nodes (baseline: one place_on_node).
if [ -x "$BUILD_DIR/bench/cluster/cluster_extender_bench" ]; then
  "$BUILD_DIR/bench/cluster/cluster_extender_bench" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
    > "$OUT/extender-bench.txt" 2>&1 || status=1
  { echo "## Extender cost per request (median of 5)"; echo; echo '```'; grep -E "median|Benchmark|---" "$OUT/extender-bench.txt"; echo '```'; echo; } >> "$SUMMARY"
fi

# 2b. Filter+prioritize latency over 1,000 nodes, 10% hung and 10% stale exporters, with
# reservations; three runs (target p99 < 50 ms), against the on-request scraper.
if [ -x "$BUILD_DIR/bench/cluster/cluster_extender_latency_bench" ]; then
  { echo "## Extender latency, 1,000 nodes, 10% hung, 10% stale (3 runs)"; echo; echo '```'; } >> "$SUMMARY"
  for run in 1 2 3; do
    # The on-request baseline (4 s a request) only in the first run, to keep the stage short.
    "$BUILD_DIR/bench/cluster/cluster_extender_latency_bench" 400 1000 "$([ $run -eq 1 ] && echo 3 || echo 0)" \
      > "$OUT/latency-$run.txt" 2>&1 || status=1
    sed -n '2,4p' "$OUT/latency-$run.txt" >> "$SUMMARY"
  done
  { echo '```'; echo; } >> "$SUMMARY"
fi

# 3. The 1,000 nodes x 8 GPUs, 100,000-job simulation.
if [ -x "$BUILD_DIR/bench/cluster/cluster_placement_sim" ]; then
  if "$BUILD_DIR/bench/cluster/cluster_placement_sim" > "$OUT/sim.md" 2> "$OUT/sim.err"; then
    { echo "## Placement simulation"; echo; sed 's/^# /### /' "$OUT/sim.md"; } >> "$SUMMARY"
  else
    echo "- placement simulation FAILED: $(tail -3 "$OUT/sim.err")" >> "$SUMMARY"; status=1
  fi
fi
exit $status
