#!/usr/bin/env bash
# GPU stage of the cluster module (about 75 s; the timeouts cap it at 120 s): `vramkit slurm gres`
# on the real driver (NVML totals) checked against nvidia-smi's memory.total and the shard
# arithmetic; `vramkit serve` on the real driver with its attribution (per-process series carry
# pod/namespace/container/slurm_job labels, empty here); serve under 100 paced scrapers (p99 against
# /healthz on the same server); the extender cost benchmark; the
# filter+prioritize latency over 1,000 nodes (10% hung, 10% stale) on a quiet many-core host. The
# sharing simulation is CPU-only and runs on the development host (docs/results/). Writes
# $RESULTS_DIR/cluster-summary.md (also when a step is cut off) and logs under $RESULTS_DIR/cluster/.
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
SRC_DIR=${SRC_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
OUT="$RESULTS_DIR/cluster"
mkdir -p "$OUT"
VK="$BUILD_DIR/vramkit"
SUMMARY="$RESULTS_DIR/cluster-summary.md"
status=0
{
  echo "# vramkit cluster placement on a GPU machine"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # VRAMKIT_COMMIT names the commit of a tree exported without (or with a stale) git.
  echo "- commit: ${VRAMKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')}"
  echo "- GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -)"
  echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "- CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)"
  echo
} > "$SUMMARY"

# 1. slurm gres from NVML, compared with nvidia-smi (MiB) and the expected shard counts.
timeout 10 nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits > "$OUT/smi.csv" 2>&1
if timeout 10 "$VK" slurm gres --node gpucheck --shard-size 1GiB --json > "$OUT/gres.json" 2> "$OUT/gres.err"; then
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

# 1b. serve on the real driver: the per-process family with its attribution labels (this host runs
# no pods or Slurm jobs, so they are empty; the label set is what is checked). A build without
# libmicrohttpd has no serve: both serve steps then say "skipped", which is not a failure.
no_http=0
# (--port 70000 is refused at once by a build that has serve, after the check for the server.)
serve_probe=$(timeout 5 "$VK" serve --port 70000 2>&1 </dev/null || true)
case "$serve_probe" in *"built without libmicrohttpd"*) no_http=1 ;; esac
if [ $no_http -eq 1 ]; then
  echo "- vramkit serve (driver, and 100 paced scrapers): skipped: built without libmicrohttpd" >> "$SUMMARY"
  echo >> "$SUMMARY"
else
PORT=$((20000 + RANDOM % 20000))
timeout 15 "$VK" serve --port "$PORT" --interval 500ms > "$OUT/serve.out" 2> "$OUT/serve.err" &
SERVE=$!
sleep 2
if timeout 5 curl -sf "http://127.0.0.1:$PORT/metrics" > "$OUT/metrics.txt" 2> "$OUT/metrics.err"; then
  {
    echo "## vramkit serve on the driver"
    echo
    echo "- families: $(grep -c '^# TYPE' "$OUT/metrics.txt"); GPUs up: $(grep -c '^vramkit_gpu_up{.*} 1' "$OUT/metrics.txt")"
    echo "- per-process series: $(grep -c '^vramkit_gpu_process_memory_used_bytes{' "$OUT/metrics.txt") (with namespace/pod/container/pod_uid/slurm_job labels: $(grep '^vramkit_gpu_process_memory_used_bytes{' "$OUT/metrics.txt" | grep -c 'namespace=.*pod=.*container=.*pod_uid=.*slurm_job='))"
    echo
  } >> "$SUMMARY"
else
  echo "- vramkit serve /metrics FAILED: $(head -3 "$OUT/serve.err" "$OUT/metrics.err")" >> "$SUMMARY"; status=1
fi
kill "$SERVE" 2>/dev/null; wait "$SERVE" 2>/dev/null

# 1c. serve under 100 paced scrapers (10 scrapes/s each, 1,000/s) for 15 s on this quiet host:
# p99 of /metrics (target < 10 ms) with /healthz on the same server as the baseline, and the
# server's CPU per request. A fake-GPU fixture keeps the page the same as on the development host.
PORT=$((20000 + RANDOM % 20000))
"$VK" serve --port "$PORT" --fake-gpus "$SRC_DIR/tests/data/monitor/fake_gpus.json" \
  --host-root "$SRC_DIR/tests/data/monitor/host" > "$OUT/serve-load.out" 2> "$OUT/serve-load.err" &
SERVE=$!
trap 'kill "$SERVE" 2>/dev/null' EXIT
sleep 1
{
  echo "## vramkit serve, 100 paced scrapers for 15 s ($(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo '```'
  for path in /metrics /healthz; do
    if kill -0 "$SERVE" 2>/dev/null; then
      echo "$path: $(timeout 25 python3 "$SRC_DIR/bench/monitor/scrape_load.py" "http://127.0.0.1:$PORT$path" \
        --connections 100 --interval 0.1 --duration 15 --pid "$SERVE" 2>&1 | tail -1)"
    else
      echo "$path: FAILED: serve exited: $(head -2 "$OUT/serve-load.err")"; status=1
    fi
  done
  echo '```'
  echo
} >> "$SUMMARY"
kill "$SERVE" 2>/dev/null; wait "$SERVE" 2>/dev/null
fi

# 2. Extender cost per request over 1,000 nodes (baseline: one place_on_node).
if [ -x "$BUILD_DIR/bench/cluster/cluster_extender_bench" ]; then
  timeout 20 "$BUILD_DIR/bench/cluster/cluster_extender_bench" --benchmark_repetitions=5 \
    --benchmark_report_aggregates_only=true --benchmark_min_time=0.05s \
    > "$OUT/extender-bench.txt" 2>&1 || status=1
  { echo "## Extender cost per request (median of 5)"; echo; echo '```'; grep -E "median|Benchmark|---" "$OUT/extender-bench.txt"; echo '```'; echo; } >> "$SUMMARY"
fi

# 2b. Filter+prioritize latency over 1,000 nodes, 10% hung and 10% stale exporters, with
# reservations; three runs of 200 requests (target p99 < 50 ms), the first against the on-request
# scraper as well.
if [ -x "$BUILD_DIR/bench/cluster/cluster_extender_latency_bench" ]; then
  { echo "## Extender latency, 1,000 nodes, 10% hung, 10% stale (3 runs, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"; echo; echo '```'; } >> "$SUMMARY"
  for run in 1 2 3; do
    timeout 20 "$BUILD_DIR/bench/cluster/cluster_extender_latency_bench" 200 1000 "$([ $run -eq 1 ] && echo 2 || echo 0)" \
      > "$OUT/latency-$run.txt" 2>&1 || { status=1; echo "(run $run cut off or failed)" >> "$OUT/latency-$run.txt"; }
    sed -n '2,5p' "$OUT/latency-$run.txt" >> "$SUMMARY"
  done
  { echo '```'; echo; } >> "$SUMMARY"
fi
exit $status
