# Texture stage (12 s on an H200; the timeouts cap it at 90 s): the texture GPU tests, the mipmapped-array footprint
# measurement (checks the planner's allocation model), the mip upload benchmark beside a plain
# pinned H2D copy and `vramkit probe --only h2d` from the same run, and the streaming demo with a
# quarter budget. Writes RESULTS_DIR/texture-summary.md, texture-alloc.json, texture-stream.json,
# texture-gpu-tests.txt and texture-demo/ (frames.csv, summary.json, PNG frames).
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
summary="$RESULTS_DIR/texture-summary.md"
status=0
{
  echo "# texture: BCn sampling, mipmapped-array footprints, mip streaming"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "- commit: $(awk -F': ' '/^commit:/ {print $2; exit}' "$RESULTS_DIR/machine.txt" 2>/dev/null)"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo
} > "$summary"

echo "## GPU tests" >> "$summary"
if [ -x "$BUILD_DIR/tests/gpu/texture/texture_gpu_tests" ]; then
  if timeout 30 "$BUILD_DIR/tests/gpu/texture/texture_gpu_tests" > "$RESULTS_DIR/texture-gpu-tests.txt" 2>&1; then
    echo "passed" >> "$summary"
  else
    status=1; echo "**FAILED** (exit $?)" >> "$summary"
  fi
  echo '```' >> "$summary"
  grep -E "^\[texture|OK \]|FAILED|PASSED|Failure|Expected|Which is|error" "$RESULTS_DIR/texture-gpu-tests.txt" | cut -c1-400 | head -120 >> "$summary"
  echo '```' >> "$summary"
else
  status=1; echo "texture_gpu_tests not built" >> "$summary"
fi

echo "## Mipmapped-array footprints (model vs cudaMemGetInfo deltas)" >> "$summary"
if timeout 20 "$BUILD_DIR/bench/texture/texture_alloc_measure" --json "$RESULTS_DIR/texture-alloc.json" \
    > "$RESULTS_DIR/texture-alloc.txt" 2>&1; then
  echo '```' >> "$summary"; cat "$RESULTS_DIR/texture-alloc.txt" >> "$summary"; echo '```' >> "$summary"
else
  status=1; echo "**texture_alloc_measure failed**: $(tail -2 "$RESULTS_DIR/texture-alloc.txt")" >> "$summary"
fi

echo "## Mip upload throughput (pinned staging -> array vs plain pinned H2D, same run)" >> "$summary"
if timeout 10 "$BUILD_DIR/bench/texture/texture_stream_bench" --json "$RESULTS_DIR/texture-stream.json" \
    > "$RESULTS_DIR/texture-stream.txt" 2>&1; then
  echo '```' >> "$summary"; cat "$RESULTS_DIR/texture-stream.txt" >> "$summary"; echo '```' >> "$summary"
else
  status=1; echo "**texture_stream_bench failed**: $(tail -2 "$RESULTS_DIR/texture-stream.txt")" >> "$summary"
fi
if timeout 10 "$BUILD_DIR/vramkit" probe --only h2d --quick --json "$RESULTS_DIR/texture-probe-h2d.json" \
    > "$RESULTS_DIR/texture-probe-h2d.txt" 2>&1; then
  python3 - "$RESULTS_DIR/texture-probe-h2d.json" "$RESULTS_DIR/texture-stream.json" >> "$summary" 2>&1 <<'PY' || true
import json, sys
probe = json.load(open(sys.argv[1]))
bench = json.load(open(sys.argv[2]))
med = {r.get("key"): r.get("stats", {}).get("median") for r in probe.get("results", [])}
p = med.get("gpu0.h2d.pinned")
print()
print(f"probe gpu0.h2d.pinned median: {p} GB/s")
print()
print("| mip | array GB/s | / probe pinned H2D | / plain H2D same run |")
print("|---|---|---|---|")
for r in bench["results"]:
    a = r["array_gbps"]["median"]
    ratio = f"{a / p:.3f}" if p else "n/a"
    print(f"| {r['mip']} | {a:.2f} | {ratio} | {r['ratio_median']:.3f} |")
PY
else
  echo "probe did not run: $(tail -1 "$RESULTS_DIR/texture-probe-h2d.txt")" >> "$summary"
fi

echo "## Streaming demo (quarter budget)" >> "$summary"
rm -rf "$RESULTS_DIR/texture-demo"
if timeout 20 "$BUILD_DIR/vramkit" texture demo --out "$RESULTS_DIR/texture-demo" \
    > "$RESULTS_DIR/texture-demo.txt" 2>&1; then
  echo "all checks passed" >> "$summary"
else
  status=1; echo "**demo checks failed or the demo did not run** (exit $?)" >> "$summary"
fi
echo '```' >> "$summary"; head -c 4000 "$RESULTS_DIR/texture-demo.txt" >> "$summary"; echo '```' >> "$summary"
rm -rf "$RESULTS_DIR/texture-demo/textures"
cat "$summary"
exit $status
