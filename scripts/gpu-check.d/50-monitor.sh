#!/usr/bin/env bash
# GPU stage of the monitor: `vramkit watch --once`, three `--json` samples compared with
# nvidia-smi, the monitor's GPU tests, and the sampling-cost benchmark on the real NVML and on
# fake devices. Writes $RESULTS_DIR/monitor-summary.md and keeps its logs under
# $RESULTS_DIR/monitor/. `vramkit serve` is only checked where cpp-httplib was found at build time.
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
OUT="$RESULTS_DIR/monitor"
mkdir -p "$OUT"
VK="$BUILD_DIR/vramkit"
SUMMARY="$RESULTS_DIR/monitor-summary.md"
status=0
note() { echo "$*" | tee -a "$OUT/stage.log"; }

{
  echo "# vramkit monitor on a GPU machine"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # VRAMKIT_COMMIT names the commit of a tree exported without (or with a stale) git.
  echo "- commit: ${VRAMKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (uncommitted changes)')}"
  echo "- GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -)"
  echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo
} > "$SUMMARY"

# 1. watch --once
if "$VK" watch --once > "$OUT/watch-once.txt" 2> "$OUT/watch-once.err"; then
  note "watch --once: ok"
  echo "## vramkit watch --once" >> "$SUMMARY"
  echo '```' >> "$SUMMARY"; head -40 "$OUT/watch-once.txt" >> "$SUMMARY"; echo '```' >> "$SUMMARY"
else
  note "watch --once FAILED: $(cat "$OUT/watch-once.err")"; status=1
  echo "- watch --once FAILED: $(head -3 "$OUT/watch-once.err")" >> "$SUMMARY"
fi

# 2. three JSON samples next to nvidia-smi's figures, read around them
nvidia-smi --query-gpu=index,memory.used,memory.total,memory.reserved --format=csv,noheader,nounits > "$OUT/smi-before.csv" 2>&1
"$VK" watch --json --count 3 --interval 1s > "$OUT/watch.jsonl" 2> "$OUT/watch-json.err" || { note "watch --json FAILED"; status=1; }
nvidia-smi --query-gpu=index,memory.used,memory.total,memory.reserved --format=csv,noheader,nounits > "$OUT/smi-after.csv" 2>&1
python3 - "$OUT/watch.jsonl" "$OUT/smi-before.csv" "$OUT/smi-after.csv" >> "$SUMMARY" 2> "$OUT/compare.err" <<'PY' || { note "comparison with nvidia-smi FAILED: $(tail -3 "$OUT/compare.err")"; status=1; }
import json, sys
samples = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def smi(path):
    rows = {}
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0].isdigit():
            rows[int(parts[0])] = [float(p) if p.replace(".", "").isdigit() else None for p in parts[1:]]
    return rows
before, after = smi(sys.argv[2]), smi(sys.argv[3])
print("\n## vramkit watch --json (3 samples) vs nvidia-smi (MiB)\n")
print(f"samples: {len(samples)}; sample duration (ms): " + ", ".join(f"{s['sample_duration_seconds']*1e3:.2f}" for s in samples))
print("\n| gpu | vramkit used (last) | vramkit reserved | nvidia-smi used before/after | vramkit total | nvidia-smi total | used - reserved vs smi | ratio total |")
print("|---|---|---|---|---|---|---|---|")
bad = False
if len(samples) != 3:
    print(f"expected 3 samples, got {len(samples)}")
    bad = True
if not samples or not samples[-1]["gpus"] or not before:
    print("no GPUs: " + (samples[-1].get("gpu_unavailable_reason", "") if samples else "no samples") + f"; nvidia-smi rows: {len(before)}")
    bad = True
for g in samples[-1]["gpus"]:
    i = g["index"]
    used = g.get("memory_used_bytes", 0) / 2**20
    total = g.get("memory_total_bytes", 0) / 2**20
    res = g.get("memory_reserved_bytes", 0) / 2**20
    b, a = before.get(i), after.get(i)
    if not b or not a:
        bad = True
        continue
    smi_used = (b[0] + a[0]) / 2
    tol = 0.01 * b[1]
    ok = abs(used - smi_used) <= tol + abs(a[0] - b[0]) or abs(used - res - smi_used) <= tol + abs(a[0] - b[0])
    bad = bad or not ok or abs(total - b[1]) > 0.01 * b[1]
    print(f"| {i} | {used:.0f} | {res:.0f} | {b[0]:.0f}/{a[0]:.0f} | {total:.0f} | {b[1]:.0f} | {used - res:.0f} | {total / b[1]:.4f} |")
print("\nwithin 1% of total memory: " + ("yes" if not bad else "NO"))
unavailable = sorted({k + "=" + v for g in samples[-1]["gpus"] for k, v in g.get("unavailable", {}).items()})
print("fields the driver did not provide: " + (", ".join(unavailable) if unavailable else "none"))
sys.exit(1 if bad else 0)
PY

# 3. the GPU tests of this module (also run by the gpu stage; here with their output kept)
( cd "$BUILD_DIR" && VRAMKIT_REQUIRE_GPU=1 ctest -R RealNvml --no-tests=error -V --timeout 120 ) > "$OUT/gpu-tests.log" 2>&1
gpu_rc=$?
[ $gpu_rc -eq 0 ] || status=1
{
  echo
  echo "## GPU tests (ctest -R RealNvml): $([ $gpu_rc -eq 0 ] && echo passed || echo FAILED)"
  echo '```'
  grep -E "gpu [0-9]+:|helper pid|sample took|Passed|Failed|SKIPPED|Skipped|tests passed|FAIL" "$OUT/gpu-tests.log" | head -30
  echo '```'
} >> "$SUMMARY"

# 4. sampling cost: real NVML and 8 fake GPUs (figures with their targets)
if [ -x "$BUILD_DIR/bench/monitor/monitor_overhead_bench" ]; then
  "$BUILD_DIR/bench/monitor/monitor_overhead_bench" --real-nvml > "$OUT/bench.txt" 2>&1 || { note "bench FAILED"; status=1; }
  { echo; echo "## Sampling cost (bench/monitor)"; echo '```'; cat "$OUT/bench.txt" | head -40; echo '```'; } >> "$SUMMARY"
else
  echo "- bench/monitor/monitor_overhead_bench not built" >> "$SUMMARY"
fi

# 5. serve: needs cpp-httplib, which this machine may not have
timeout 3 "$VK" serve --port 0 --interval 1s > "$OUT/serve.out" 2> "$OUT/serve.err"
if grep -q "built without cpp-httplib" "$OUT/serve.err"; then
  echo -e "\n- vramkit serve: not built on this machine (cpp-httplib is not installed here); covered by the CPU tests" >> "$SUMMARY"
else
  echo -e "\n- vramkit serve: $(head -1 "$OUT/serve.out")" >> "$SUMMARY"
fi

note "monitor stage status $status"
exit $status
