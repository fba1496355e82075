# mr stage: allocator benchmarks (vramkit pool vs cudaMallocAsync warm vs cudaMalloc, random and
# replayed PyTorch traces), the replayed trace under PyTorch's allocator vs the pluggable vramkit
# allocator, and a LLaMA-shaped training step under both. Writes RESULTS_DIR/mr-summary.md.
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
ROOT=$(pwd)
OUT=$RESULTS_DIR/mr
mkdir -p "$OUT"
LIB=$BUILD_DIR/libvramkit_torch.so
TRACE=$ROOT/tests/data/mr/llama_step.trace
status=0

echo "== allocator benchmarks"
if [ -x "$BUILD_DIR/bench/mr/mr_pool_bench" ]; then
  timeout 150 "$BUILD_DIR/bench/mr/mr_pool_bench" --device=cuda --trace="$TRACE" \
    --benchmark_out="$OUT/pool_bench.json" --benchmark_out_format=json 2>&1 | tee "$OUT/pool_bench.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  echo "mr_pool_bench not built"; status=1
fi

echo "== replayed trace: PyTorch allocator vs vramkit pluggable allocator"
if [ -f "$TRACE" ]; then
  timeout 120 python3 bench/mr/torch_replay.py --trace "$TRACE" --lib "$LIB" --json "$OUT/torch_replay.json" \
    2>&1 | tee "$OUT/torch_replay.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
else
  echo "no $TRACE yet: replay comparison skipped"
fi

echo "== training step: PyTorch allocator vs vramkit pluggable allocator"
timeout 150 python3 bench/mr/torch_train_compare.py --lib "$LIB" --json "$OUT/torch_train.json" \
  2>&1 | tee "$OUT/torch_train.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1

python3 - "$OUT" "$RESULTS_DIR/mr-summary.md" <<'PY'
import json, os, subprocess, sys, datetime
out, md = sys.argv[1], sys.argv[2]
def load(name):
    p = os.path.join(out, name)
    try:
        with open(p) as f:
            return json.load(f)
    except Exception:
        return None
def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception:
        return "unknown"
lines = ["# mr: allocator results", "",
         "- GPU / driver: " + sh("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1"),
         "- commit: " + (sh("git rev-parse --short HEAD") or "unknown (no git here)"),
         "- date: " + datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M UTC"), ""]
bench = load("pool_bench.json")
if bench:
    rows = {}
    for b in bench.get("benchmarks", []):
        if b.get("error_occurred"):
            lines.append("- %s: ERROR %s" % (b["name"], b.get("error_message")))
            continue
        _, trace, res = b["name"].split("/", 2)
        rows.setdefault(trace, {})[res.split("/iterations")[0]] = b
    for trace, rs in rows.items():
        lines += ["## %s (allocate+free, median per allocation, host clock)" % trace, "",
                  "| resource | alloc ns | free ns | alloc+free ns | vs cudaMallocAsync warm | vs cudaMalloc | peak reserved / peak requested |",
                  "|---|---|---|---|---|---|---|"]
        base_async = rs.get("cuda_async_warm", {}).get("alloc_free_median_ns")
        base_malloc = rs.get("cuda_malloc", {}).get("alloc_free_median_ns")
        for name, b in rs.items():
            v = b["alloc_free_median_ns"]
            ra = "%.1fx faster" % (base_async / v) if base_async and v else "-"
            rm = "%.1fx faster" % (base_malloc / v) if base_malloc and v else "-"
            frag = "%.3f" % b["peak_reserved_over_peak_requested"] if "peak_reserved_over_peak_requested" in b else "-"
            lines.append("| %s | %.0f | %.0f | %.0f | %s | %s | %s |" % (
                name, b["alloc_median_ns"], b["free_median_ns"], v, ra, rm, frag))
        lines.append("")
    lines.append("Targets: vramkit pool alloc+free < 500 ns and >= 4x faster than cudaMallocAsync warm.")
    lines.append("")
rep = load("torch_replay.json")
if rep:
    t, v = rep["torch"], rep["vramkit"]
    lines += ["## replayed PyTorch trace through torch.empty (verified)", "",
              "| allocator | alloc ns | free ns | peak reserved MiB | peak allocated MiB | reserved/allocated | reserved/requested |",
              "|---|---|---|---|---|---|---|"]
    for r in (t, v):
        lines.append("| %s | %.0f | %.0f | %.1f | %.1f | %.3f | %.3f |" % (
            r["allocator"], r["alloc_median_ns"], r["free_median_ns"], r["peak_reserved_bytes"] / 2**20,
            r["peak_allocated_bytes"] / 2**20, r["peak_reserved_over_peak_allocated"], r["peak_reserved_over_peak_requested"]))
    lines += ["", "vramkit / PyTorch: alloc+free time %.3f, peak reserved %.3f (targets: <= 1, reserved/allocated <= 1.05)" % (
        rep["ratios"]["alloc_free_median_vramkit_over_torch"], rep["ratios"]["peak_reserved_vramkit_over_torch"]), ""]
tr = load("torch_train.json")
if tr:
    t, v = tr["torch"], tr["vramkit"]
    lines += ["## training step (LLaMA-shaped, %d layers, batch %d x %d, amp bf16, AdamW)" % (t["layers"], t["batch"], t["seq"]), "",
              "| allocator | median step s | peak reserved MiB | peak allocated MiB | reserved/allocated |",
              "|---|---|---|---|---|"]
    for r in (t, v) + ((tr["torch_repeat"],) if "torch_repeat" in tr else ()):
        lines.append("| %s | %.4f | %.1f | %.1f | %.3f |" % (r["allocator"], r["median_step_s"],
                     r["peak_reserved_bytes"] / 2**20, r["peak_allocated_bytes"] / 2**20, r["peak_reserved_over_peak_allocated"]))
    lines += ["", "losses identical: %s (max difference %.3g); PyTorch vs PyTorch again: identical %s; step time vramkit / PyTorch %.4f (target <= 1.02; PyTorch again / PyTorch %.4f); peak reserved vramkit / PyTorch %.3f" % (
        tr["losses_identical"], tr["max_loss_diff"], tr.get("torch_repeatable"), tr["ratios"]["step_time_vramkit_over_torch"],
        tr["ratios"].get("step_time_torch_repeat_over_torch", float("nan")),
        tr["ratios"]["peak_reserved_vramkit_over_torch"]), ""]
with open(md, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
exit $status
