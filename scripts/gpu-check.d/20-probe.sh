# probe stage: `vramkit probe --quick` and the full probe (JSON + HTML), each timed, the targets
# checked as PASS/FAIL lines (bench/probe/check_targets.py: run times, unit-stride pattern read
# against the device read, L2 plateau against the driver's L2 size, no failed verification), a
# headless-Chromium screenshot of the page, then the side-by-side comparison with the baselines
# (bench/probe/compare.py). Writes probe-quick.txt, probe-full.txt, probe.json, probe.html,
# probe.png, probe-targets.txt and probe-summary.md into RESULTS_DIR.
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
VRAMKIT="$BUILD_DIR/vramkit"
[ -x "$VRAMKIT" ] || VRAMKIT="$BUILD_DIR/cli/vramkit"
status=0

elapsed() { echo "$(( $(date +%s%N) / 1000000 - $1 ))"; }

echo "== vramkit probe --quick"
t0=$(( $(date +%s%N) / 1000000 ))
timeout 120 "$VRAMKIT" probe --quick > "$RESULTS_DIR/probe-quick.txt" 2> "$RESULTS_DIR/probe-quick.err"
rc=$?
quick_ms=$(elapsed "$t0")
echo "quick: exit $rc, $quick_ms ms"
cat "$RESULTS_DIR/probe-quick.txt"
[ $rc -eq 0 ] || { status=1; tail -20 "$RESULTS_DIR/probe-quick.err"; }

echo "== vramkit probe (full) --json --html"
t0=$(( $(date +%s%N) / 1000000 ))
timeout 240 "$VRAMKIT" probe --json "$RESULTS_DIR/probe.json" --html "$RESULTS_DIR/probe.html" \
  > "$RESULTS_DIR/probe-full.txt" 2> "$RESULTS_DIR/probe-full.err"
rc=$?
full_ms=$(elapsed "$t0")
echo "full: exit $rc, $full_ms ms"
cat "$RESULTS_DIR/probe-full.txt"
[ $rc -eq 0 ] || { status=1; tail -20 "$RESULTS_DIR/probe-full.err"; }

echo "== targets (PASS/FAIL)"
timeout 60 python3 bench/probe/check_targets.py "$RESULTS_DIR/probe.json" \
  --quick-ms "$quick_ms" --full-ms "$full_ms" > "$RESULTS_DIR/probe-targets.txt" 2>&1
rc=$?
cat "$RESULTS_DIR/probe-targets.txt"
[ $rc -eq 0 ] || status=1

if command -v chromium > /dev/null; then
  echo "== screenshot of probe.html (headless Chromium)"
  timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-background-networking \
    --hide-scrollbars --window-size=1280,2400 --screenshot="$RESULTS_DIR/probe.png" \
    "file://$(realpath "$RESULTS_DIR/probe.html")" > /dev/null 2>&1 \
    && echo "probe.png written" || echo "screenshot failed (not a probe failure)"
fi

echo "== side-by-side comparison"
timeout 300 python3 bench/probe/compare.py --vramkit "$VRAMKIT" \
  --baselines "$BUILD_DIR/bench/probe/probe_gpu_baselines" \
  --host-bench "$BUILD_DIR/bench/probe/host_stream_bench" \
  --results "$RESULTS_DIR" > "$RESULTS_DIR/probe-compare.txt" 2> "$RESULTS_DIR/probe-compare.err"
rc=$?
cat "$RESULTS_DIR/probe-compare.txt"
[ $rc -eq 0 ] || { status=1; tail -30 "$RESULTS_DIR/probe-compare.err"; }

echo "== copy kernel shapes beside cudaMemcpy D2D (bench/probe/copy_shapes.cu)"
if nvcc -O3 -std=c++17 -arch=sm_90 -Iinclude -Isrc -o "$BUILD_DIR/copy_shapes" bench/probe/copy_shapes.cu src/core/sample_stats.cpp > "$RESULTS_DIR/copy-shapes-build.log" 2>&1; then
  timeout 120 "$BUILD_DIR/copy_shapes" > "$RESULTS_DIR/copy-shapes.md" 2> "$RESULTS_DIR/copy-shapes.err" || { status=1; tail -5 "$RESULTS_DIR/copy-shapes.err"; }
  cat "$RESULTS_DIR/copy-shapes.md"
else
  echo "copy_shapes did not compile"; tail -20 "$RESULTS_DIR/copy-shapes-build.log"; status=1
fi

if [ -f "$RESULTS_DIR/probe-summary.md" ]; then
  {
    echo
    echo "Run times: \`vramkit probe --quick\` $quick_ms ms (target <= 15 s), full \`vramkit probe\` $full_ms ms (target <= 90 s)."
  } >> "$RESULTS_DIR/probe-summary.md"
fi
exit $status
