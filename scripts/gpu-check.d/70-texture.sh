# Texture stage, capped at 30 s in all (each step gets what is left of the budget, up to its own
# cap; a step cut off is reported as such and the summary is written all the same): the texture
# GPU tests, the mipmapped-array footprint measurement (checks the planner's allocation model), the
# mip upload benchmark beside plain pinned H2D copies and `vramkit probe --only h2d` from the same
# run, and the streaming demo with a quarter budget (its reference and budgeted runs interleaved
# frame by frame; the p99 frame-time target is reported, not asserted). Writes
# RESULTS_DIR/texture-summary.md, texture-alloc.json, texture-stream.json, texture-gpu-tests.txt
# and texture-demo/ (frames.csv, summary.json, PNG frames).
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
summary="$RESULTS_DIR/texture-summary.md"
status=0
stage_start=$(date +%s)
budget_s=${TEXTURE_STAGE_BUDGET_S:-30}
{
  echo "# texture: BCn sampling, mipmapped-array footprints, mip streaming"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "- commit: $(awk -F': ' '/^commit:/ {print $2; exit}' "$RESULTS_DIR/machine.txt" 2>/dev/null)"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
} > "$summary"

# run_capped CAP_S OUT CMD...: runs CMD with stdout+stderr to OUT, for at most CAP_S seconds or
# what is left of the stage budget; sets step_rc, step_s and step_cut (1 when time ran out).
run_capped() {
  local cap=$1 out=$2; shift 2
  local left=$(( budget_s - ($(date +%s) - stage_start) ))
  [ "$left" -lt "$cap" ] && cap=$left
  step_cut=0
  if [ "$cap" -le 0 ]; then
    step_rc=124; step_s=0; step_cut=1; echo "not run: the stage's ${budget_s} s were spent" > "$out"
    return
  fi
  local t0=$(date +%s)
  timeout "$cap" "$@" > "$out" 2>&1
  step_rc=$?
  step_s=$(( $(date +%s) - t0 ))
  [ "$step_rc" -eq 124 ] && step_cut=1
}
note_cut() { [ "$step_cut" -eq 1 ] && echo "**cut off after ${step_s} s (stage budget ${budget_s} s)**" >> "$summary"; }

echo "## GPU tests" >> "$summary"
if [ -x "$BUILD_DIR/tests/gpu/texture/texture_gpu_tests" ]; then
  run_capped 12 "$RESULTS_DIR/texture-gpu-tests.txt" env VRAMKIT_REQUIRE_GPU=1 \
    "$BUILD_DIR/tests/gpu/texture/texture_gpu_tests"
  if [ "$step_rc" -eq 0 ]; then echo "passed (${step_s} s)" >> "$summary"
  else status=1; echo "**FAILED** (exit $step_rc, ${step_s} s)" >> "$summary"; note_cut; fi
  echo '```' >> "$summary"
  grep -E "^\[texture|OK \]|FAILED|PASSED|Failure|Expected|Which is|error" "$RESULTS_DIR/texture-gpu-tests.txt" \
    | cut -c1-400 | head -150 >> "$summary"
  echo '```' >> "$summary"
else
  status=1; echo "texture_gpu_tests not built" >> "$summary"
fi

echo "## Mipmapped-array footprints (model vs cudaMemGetInfo deltas; c = cube map)" >> "$summary"
run_capped 7 "$RESULTS_DIR/texture-alloc.txt" \
  "$BUILD_DIR/bench/texture/texture_alloc_measure" --json "$RESULTS_DIR/texture-alloc.json"
if [ "$step_rc" -eq 0 ]; then
  echo "(${step_s} s)" >> "$summary"
else
  status=1; echo "**texture_alloc_measure failed** (exit $step_rc, ${step_s} s)" >> "$summary"; note_cut
fi
echo '```' >> "$summary"; cat "$RESULTS_DIR/texture-alloc.txt" >> "$summary"; echo '```' >> "$summary"

echo "## Mip upload throughput (pinned staging -> array; plain pinned H2D and probe, same run)" >> "$summary"
run_capped 6 "$RESULTS_DIR/texture-stream.txt" \
  "$BUILD_DIR/bench/texture/texture_stream_bench" --json "$RESULTS_DIR/texture-stream.json"
stream_ok=$step_rc
if [ "$step_rc" -eq 0 ]; then
  echo "(${step_s} s)" >> "$summary"
else
  status=1; echo "**texture_stream_bench failed** (exit $step_rc, ${step_s} s)" >> "$summary"; note_cut
fi
echo '```' >> "$summary"; cat "$RESULTS_DIR/texture-stream.txt" >> "$summary"; echo '```' >> "$summary"
run_capped 5 "$RESULTS_DIR/texture-probe-h2d.txt" \
  "$BUILD_DIR/vramkit" probe --only h2d --quick --json "$RESULTS_DIR/texture-probe-h2d.json"
if [ "$step_rc" -eq 0 ] && [ "$stream_ok" -eq 0 ]; then
  python3 - "$RESULTS_DIR/texture-probe-h2d.json" "$RESULTS_DIR/texture-stream.json" >> "$summary" 2>&1 <<'PY' || true
import json, sys
probe = json.load(open(sys.argv[1]))
bench = json.load(open(sys.argv[2]))
med = {r.get("key"): r.get("stats", {}).get("median") for r in probe.get("results", [])}
p = med.get("gpu0.h2d.pinned")
sweep = {}
for c in probe.get("curves", []):
    if c.get("key") == "gpu0.h2d.pinned.sweep":
        sweep = {int(pt["x"]): pt["stats"]["median"] for pt in c.get("points", [])}
print()
print(f"probe gpu0.h2d.pinned (256 MiB) median: {p} GB/s; in-process plain 256 MiB: "
      f"{bench.get('plain_256mib_gbps', {}).get('median')} GB/s")
print()
print("Target: large mips >= 0.9 x probe's pinned H2D. Small mips are reported as measured.")
print()
print("| mip | array GB/s | / probe | us per upload | 2 streams GB/s | / probe | / plain same size | probe sweep at this size |")
print("|---|---|---|---|---|---|---|---|")
for r in bench["results"]:
    a = r["array_gbps"]["median"]
    a2 = r.get("array_2streams_gbps", {}).get("median")
    f = lambda x: f"{x / p:.3f}" if (p and x) else "n/a"
    at = sweep.get(int(r["bytes"]))
    us = r["bytes"] / (a * 1e9) * 1e6 if a else float("nan")
    print(f"| {r['mip']} | {a:.2f} | {f(a)} | {us:.2f} | {'-' if a2 is None else f'{a2:.2f}'} | {f(a2)} | "
          f"{r['ratio_median']:.3f} | {'-' if at is None else f'{at:.2f}'} |")
print()
print("Streamer chain rebuilds (2048^2 BC7 chain gains its 4 MiB level 0; upload GB/s):")
print()
for v in bench.get("streamer_rebuilds", []):
    m = v["upload_gbps"]["median"]
    print(f"- {v['variant']}: {m:.2f} GB/s = {m / p:.3f} x probe" if p else f"- {v['variant']}: {m:.2f}")
PY
else
  echo "probe or bench did not run: $(tail -1 "$RESULTS_DIR/texture-probe-h2d.txt")" >> "$summary"
fi

echo "## Streaming demo (quarter budget; reference and budgeted runs interleaved)" >> "$summary"
rm -rf "$RESULTS_DIR/texture-demo"
run_capped 9 "$RESULTS_DIR/texture-demo.txt" \
  "$BUILD_DIR/vramkit" texture demo --out "$RESULTS_DIR/texture-demo"
if [ "$step_rc" -eq 0 ]; then
  echo "functional checks passed (${step_s} s)" >> "$summary"
else
  status=1; echo "**demo checks failed or the demo did not run** (exit $step_rc, ${step_s} s)" >> "$summary"; note_cut
fi
if [ -f "$RESULTS_DIR/texture-demo/summary.json" ]; then
  python3 - "$RESULTS_DIR/texture-demo/summary.json" >> "$summary" 2>&1 <<'PY' || true
import json, sys
s = json.load(open(sys.argv[1]))
t = s.get("timing", {})
print()
print(f"Timing target ({t.get('target')}): {'MET' if t.get('target_met') else 'NOT met'}; "
      f"p99 ratio {t.get('p99_ratio'):.3f}, p50 ratio {t.get('p50_ratio'):.3f}, "
      f"median paired ratio {t.get('median_paired_ratio'):.3f}")
f, r, u = t.get("frame_ms", {}), t.get("reference_frame_ms", {}), t.get("update_ms", {})
print(f"frame ms budgeted p50/p99 {f.get('p50'):.3f}/{f.get('p99'):.3f}, reference "
      f"{r.get('p50'):.3f}/{r.get('p99'):.3f}; host time in update() p99 {u.get('p99'):.3f}, max {u.get('max'):.3f}")
PY
fi
echo '```' >> "$summary"; head -c 5000 "$RESULTS_DIR/texture-demo.txt" >> "$summary"; echo '```' >> "$summary"
rm -rf "$RESULTS_DIR/texture-demo/textures"
echo "stage time: $(( $(date +%s) - stage_start )) s of ${budget_s}" >> "$summary"
cat "$summary"
exit $status
