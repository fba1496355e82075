# Offload stage (issue 14, with issue 22's offload + compression), at most 170 s in all:
# activation and optimizer-state offload side by side on two LLaMA-shaped models under a cap of
# half the uncapped peak (bench/offload/offload_bench.py: the planner's mix and the baselines the
# targets compare first, one worker per shape, a kernel probe after the reference feeding the
# planner's cost model, the JSON and summary rewritten after every configuration, so a cut-short
# run keeps what it measured; budget: what is left of the 170 s after the checks, hard stop 6 s
# later), after the correctness checks the figures rest on, run first (gradients bit for bit
# equal with and without offload, prefetch_blocks included, and with selective checkpointing, its
# outputs on the device or the host; the side-stream encode equal to the in-line one), hard stop
# 28 s. OFFLOAD_TRY_MIX (a comma list of [SHAPE:]MIX) adds mixes run under the cap after the
# planner's (configs vramkit-try-MIX); OFFLOAD_CALIBRATE=0 gives the planner the probed
# memory-bound rate instead of the one calibrated to the measured block forward;
# OFFLOAD_FIRST_SHARE (default 0.5: run Q's 1b shape used its 55% and 3b-wide now also runs the
# planner's candidate mixes) is the share of the bench's budget the first shape may use.
# Compression alone and its accuracy are the compress stage's
# (46-compress). The other GPU tests of the Python package and of the codec run in the gpu-tests
# stage. Writes RESULTS_DIR/offload-summary.md, offload-bench.json; the summary is written
# whatever step was cut.
set -uo pipefail
: "${RESULTS_DIR:?}"
summary="$RESULTS_DIR/offload-summary.md"
started=$(date +%s)
# One interpreter start for the check and the versions (importing torch takes seconds).
versions=$(python3 - <<'EOF' 2>/dev/null
import importlib.metadata as md
import torch
assert torch.cuda.is_available()
try:
    tf = md.version("transformers")
except md.PackageNotFoundError:
    tf = "not installed (built-in model)"
print("torch %s, transformers %s" % (torch.__version__, tf))
EOF
)
if [ -z "$versions" ]; then
  echo "offload: PyTorch with CUDA is not importable by python3: nothing measured" | tee "$summary"
  exit 1
fi
build="${BUILD_DIR:-build-gpu}"
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac  # the checks below run from tests/python
# The planner's mixes come from the CLI gpu-check built (vramkit plan --fit --json); the fp8
# kernels from its libvramkit_compress.so.
if [ -z "${VRAMKIT_CLI:-}" ] && [ -x "$build/vramkit" ]; then export VRAMKIT_CLI="$build/vramkit"; fi
if [ -z "${VRAMKIT_COMPRESS_LIB:-}" ] && [ -f "$build/libvramkit_compress.so" ]; then
  export VRAMKIT_COMPRESS_LIB="$build/libvramkit_compress.so"
fi
probe=()
if [ -s "$RESULTS_DIR/probe.json" ]; then probe=(--probe "$RESULTS_DIR/probe.json"); fi
{
  echo "# offload stage (issues 14 and 22)"
  echo
  echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
  echo "- commit: ${VRAMKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || awk -F': ' '/^commit:/ {print $2; exit}' "$RESULTS_DIR/machine.txt" 2>/dev/null)}"
  echo "- host: $(lscpu 2>/dev/null | awk -F: '/Model name/ {gsub(/^ +/, "", $2); print $2; exit}'), $(awk '/MemAvailable/ {print int($2/1048576)}' /proc/meminfo) GiB available"
  echo "- $versions"
  echo "- planner: ${VRAMKIT_CLI:-not found}; fp8 kernels: ${VRAMKIT_COMPRESS_LIB:-not found}; link for the planner: ${probe[1]:-GPU catalogue}"
  echo
} > "$RESULTS_DIR/offload-header.md"
cap_s=${OFFLOAD_STAGE_CAP_S:-170}
left() { echo $(( cap_s - ($(date +%s) - started) )); }
# Correctness of what was timed: the engine's gradients bit for bit (every mix, prefetch_blocks
# included) and the side-stream encode against the in-line one.
checks_s=28
checks_status=0
{
  echo
  echo "## correctness checks (same run)"
  if [ "$checks_s" -ge 5 ]; then
    ( cd tests/python && PYTHONUNBUFFERED=1 timeout "$checks_s" python3 -m unittest -v \
        test_offload_gpu.OffloadGpu.test_gradients_bitwise_equal_with_offload \
        test_offload_gpu.OffloadGpu.test_selective_gradients_bitwise_equal \
        test_compress_gpu.CudaSteps.test_side_stream_encode_equals_the_current_stream_one 2>&1 ) \
      | grep -E "\.\.\. (ok|FAIL|ERROR|skipped)|^(OK|FAILED)" | sed 's/^/- /'
    [ "${PIPESTATUS[0]}" -eq 0 ] || checks_status=1
  else
    echo "- not run: the stage's $cap_s s were spent"
  fi
} > "$RESULTS_DIR/offload-checks.md"
budget=${OFFLOAD_BUDGET_S:-$(( $(left) - 8 ))}
if [ $((budget + 6)) -gt "$(left)" ]; then budget=$(( $(left) - 6 )); fi
if [ "$budget" -lt 20 ]; then budget=20; fi
PYTHONUNBUFFERED=1 timeout $((budget + 6)) python3 bench/offload/offload_bench.py \
  --shapes "${OFFLOAD_SHAPES:-1b,3b-wide}" --budget-s "$budget" --steps 3 --warmup 1 "${probe[@]}" \
  ${OFFLOAD_TRY_MIX:+--try-mix "$OFFLOAD_TRY_MIX"} --calibrate "${OFFLOAD_CALIBRATE:-1}" \
  --first-share "${OFFLOAD_FIRST_SHARE:-0.5}" \
  --out "$RESULTS_DIR/offload-bench.json" --summary "$RESULTS_DIR/offload-table.md"
status=$?
[ $checks_status -eq 0 ] || status=1
[ $status -eq 124 ] && echo "offload: the bench passed its hard stop ($((budget + 6)) s); offload-table.md holds what it measured"
cat "$RESULTS_DIR/offload-header.md" "$RESULTS_DIR/offload-table.md" "$RESULTS_DIR/offload-checks.md" \
  > "$summary" 2>/dev/null
echo "stage time $(( $(date +%s) - started )) s" >> "$summary"
rm -f "$RESULTS_DIR/offload-header.md"
cat "$summary"
exit $status
