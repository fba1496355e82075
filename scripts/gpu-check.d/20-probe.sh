# probe stage: `vramkit probe --quick` and the full probe (JSON + HTML), each timed, the targets
# checked as PASS/FAIL lines (bench/probe/check_targets.py: run times, unit-stride pattern read
# against the device read, L2 size against the driver's, no failed verification, and both cache
# curves point by point), a headless-Chromium screenshot of the page, the side-by-side comparison
# with the baselines (bench/probe/compare.py), then copy kernel shapes. The whole stage stops at
# PROBE_STAGE_SECONDS (default 100): each step gets what is left, later steps are skipped when too
# little is, and probe-summary.md is written (run times, what was cut) whatever happened. Writes
# probe-quick.txt, probe-full.txt, probe.json, probe.html, probe.png, probe-targets.txt and
# probe-summary.md into RESULTS_DIR.
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
VRAMKIT="$BUILD_DIR/vramkit"
[ -x "$VRAMKIT" ] || VRAMKIT="$BUILD_DIR/cli/vramkit"
status=0
stage_start=$(date +%s)
cap=${PROBE_STAGE_SECONDS:-100}
quick_ms="" full_ms=""
notes=()

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
left() { echo $(( stage_start + cap - $(date +%s) )); }
# Seconds for a step that wants $1 s: what is left, at most $1; 0 when less than $2 s is left.
budget() {
  local want=$1 least=${2:-5} l
  l=$(left)
  if [ "$l" -lt "$least" ]; then echo 0; elif [ "$l" -lt "$want" ]; then echo "$l"; else echo "$want"; fi
}
skip_note() { notes+=("skipped: $1 (stage budget, $(left) s left of $cap s)"); echo "== skipped: $1 (stage budget)"; }

finish() {
  local summary="$RESULTS_DIR/probe-summary.md"
  {
    echo
    echo "## probe stage ($(( $(date +%s) - stage_start )) s of $cap s)"
    echo
    echo "Run times: \`vramkit probe --quick\` ${quick_ms:-not run} ms (target <= 15 s), full \`vramkit probe\` ${full_ms:-not run} ms (target <= 90 s)."
    for n in "${notes[@]}"; do echo "- $n"; done
    if [ -f "$RESULTS_DIR/probe-targets.txt" ]; then
      echo
      cat "$RESULTS_DIR/probe-targets.txt"
    fi
  } >> "$summary"
}
trap finish EXIT

echo "== vramkit probe --quick"
t=$(budget 25 10)
if [ "$t" -gt 0 ]; then
  t0=$(now_ms)
  timeout "$t" "$VRAMKIT" probe --quick > "$RESULTS_DIR/probe-quick.txt" 2> "$RESULTS_DIR/probe-quick.err"
  rc=$?
  quick_ms=$(( $(now_ms) - t0 ))
  echo "quick: exit $rc, $quick_ms ms"
  cat "$RESULTS_DIR/probe-quick.txt"
  [ $rc -eq 0 ] || { status=1; [ $rc -eq 124 ] && notes+=("quick probe cut off after $t s"); tail -20 "$RESULTS_DIR/probe-quick.err"; }
else
  skip_note "quick probe"
fi

echo "== vramkit probe (full) --json --html"
t=$(budget 60 20)
if [ "$t" -gt 0 ]; then
  t0=$(now_ms)
  timeout "$t" "$VRAMKIT" probe --json "$RESULTS_DIR/probe.json" --html "$RESULTS_DIR/probe.html" \
    > "$RESULTS_DIR/probe-full.txt" 2> "$RESULTS_DIR/probe-full.err"
  rc=$?
  full_ms=$(( $(now_ms) - t0 ))
  echo "full: exit $rc, $full_ms ms"
  cat "$RESULTS_DIR/probe-full.txt"
  [ $rc -eq 0 ] || { status=1; [ $rc -eq 124 ] && notes+=("full probe cut off after $t s"); tail -20 "$RESULTS_DIR/probe-full.err"; }
else
  skip_note "full probe"
fi

echo "== targets (PASS/FAIL) and the cache curves"
if [ -f "$RESULTS_DIR/probe.json" ]; then
  timeout 20 python3 bench/probe/check_targets.py "$RESULTS_DIR/probe.json" \
    ${quick_ms:+--quick-ms "$quick_ms"} ${full_ms:+--full-ms "$full_ms"} \
    > "$RESULTS_DIR/probe-targets.txt" 2>&1
  rc=$?
  cat "$RESULTS_DIR/probe-targets.txt"
  [ $rc -eq 0 ] || status=1
else
  echo "no probe.json: targets not checked" | tee "$RESULTS_DIR/probe-targets.txt"
  status=1
fi

if command -v chromium > /dev/null && [ -f "$RESULTS_DIR/probe.html" ]; then
  t=$(budget 15 10)
  if [ "$t" -gt 0 ]; then
    echo "== screenshot of probe.html (headless Chromium)"
    timeout "$t" chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
      --hide-scrollbars --window-size=1280,2400 --screenshot="$RESULTS_DIR/probe.png" \
      "file://$(realpath "$RESULTS_DIR/probe.html")" > /dev/null 2>&1 \
      && echo "probe.png written" || echo "screenshot failed (not a probe failure)"
  else
    skip_note "screenshot"
  fi
fi

echo "== side-by-side comparison"
t=$(budget 40 25)
if [ "$t" -gt 0 ]; then
  timeout "$t" python3 bench/probe/compare.py --vramkit "$VRAMKIT" \
    --baselines "$BUILD_DIR/bench/probe/probe_gpu_baselines" \
    --host-bench "$BUILD_DIR/bench/probe/host_stream_bench" \
    --results "$RESULTS_DIR" > "$RESULTS_DIR/probe-compare.txt" 2> "$RESULTS_DIR/probe-compare.err"
  rc=$?
  cat "$RESULTS_DIR/probe-compare.txt"
  [ $rc -eq 124 ] && notes+=("comparison cut off after $t s")
  [ $rc -eq 0 ] || { status=1; tail -30 "$RESULTS_DIR/probe-compare.err"; }
else
  skip_note "side-by-side comparison"
fi

echo "== copy kernel shapes beside cudaMemcpy D2D (bench/probe/copy_shapes.cu)"
t=$(budget 30 15)
if [ "$t" -gt 0 ]; then
  if timeout "$t" nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -o "$BUILD_DIR/copy_shapes" bench/probe/copy_shapes.cu src/core/sample_stats.cpp > "$RESULTS_DIR/copy-shapes-build.log" 2>&1; then
    t=$(budget 30 5)
    if [ "$t" -gt 0 ]; then
      timeout "$t" "$BUILD_DIR/copy_shapes" > "$RESULTS_DIR/copy-shapes.md" 2> "$RESULTS_DIR/copy-shapes.err" || { status=1; tail -5 "$RESULTS_DIR/copy-shapes.err"; }
      cat "$RESULTS_DIR/copy-shapes.md"
    else
      skip_note "copy kernel shapes run"
    fi
  else
    echo "copy_shapes did not compile (or ran out of time)"; tail -20 "$RESULTS_DIR/copy-shapes-build.log"; status=1
  fi
else
  skip_note "copy kernel shapes"
fi
exit $status
