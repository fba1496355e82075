# Compression stage (issue 22), at most 150 s in all (COMPRESS_STAGE_CAP_S): fp8 activation
# compression alone on the 1B LLaMA shape (bench/offload/compress_bench.py: the codec's kernels
# against a device copy of the same bytes, round trips checked against fp8's bound and the torch
# backend's bits; step time, saved bytes and peak allocated with each module selection against
# bf16 in the same process, the planner's peak beside the measured one, and the speed verdict
# from bf16 and compressed steps interleaved on one model; budget COMPRESS_BENCH_S, default
# 30 s: 6-8 rounds, hard stop 5 s later; in run Y, on a machine just started, 23 s reached only
# the bf16 run), then the loss curves of a small model with and without
# compression against bf16's own run-to-run variation, and per-block gradient error
# (bench/offload/compress_accuracy.py, COMPRESS_ACCURACY_S, default 25 s: in run M its eight
# processes started in about 9 s and trained 140 steps in 5-7 s), then offload with compression
# against offload alone under a cap: the planner's lossy fit (its fastest compressed mix), offload
# alone at its plain fit and its best forced mix, then one offloading mix with and without fp8
# (forced and labelled so when the planner's fits copy nothing; without fp8 only where the
# planner expects it within the cap) (bench/offload/compress_offload.py, what is left of
# the cap, at most COMPRESS_OFFLOAD_S, default 80 s, hard stop 2 s later; on the 1b shape with
# mixes tried on both sides beside the planner's, see COMPRESS_OFFLOAD_ARGS). Each writes its JSON
# and summary as it goes, so a cut-short run keeps what it measured.
# Writes RESULTS_DIR/compress-summary.md (always), compress-bench.json, compress-offload.json,
# compress-accuracy.json.
set -uo pipefail
: "${RESULTS_DIR:?}"
summary="$RESULTS_DIR/compress-summary.md"
started=$(date +%s)
cap_s=${COMPRESS_STAGE_CAP_S:-150}
left() { echo $(( cap_s - ($(date +%s) - started) )); }
build="${BUILD_DIR:-build-gpu}"
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
if [ -z "${VRAMKIT_CLI:-}" ] && [ -x "$build/vramkit" ]; then export VRAMKIT_CLI="$build/vramkit"; fi
if [ -z "${VRAMKIT_COMPRESS_LIB:-}" ] && [ -f "$build/libvramkit_compress.so" ]; then
  export VRAMKIT_COMPRESS_LIB="$build/libvramkit_compress.so"
fi
bench_md="$RESULTS_DIR/compress-bench.md"
acc_md="$RESULTS_DIR/compress-accuracy.md"
both_md="$RESULTS_DIR/compress-offload.md"
write_summary() {
  {
    echo "# compression stage (issue 22)"
    echo
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)"
    echo "- commit: ${VRAMKIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || awk -F': ' '/^commit:/ {print $2; exit}' "$RESULTS_DIR/machine.txt" 2>/dev/null)}"
    echo "- planner: ${VRAMKIT_CLI:-not found}; fp8 kernels: ${VRAMKIT_COMPRESS_LIB:-not found}"
    echo
    if [ -s "$bench_md" ]; then cat "$bench_md"; else echo "compress bench: no figures (not run or cut off before its first)"; fi
    echo
    if [ -s "$both_md" ]; then cat "$both_md"; else echo "offload with compression: no figures (not run or cut off)"; fi
    echo
    if [ -s "$acc_md" ]; then cat "$acc_md"; else echo "compression accuracy: no figures (not run or cut off)"; fi
    echo
    echo "stage time $(( $(date +%s) - started )) s (cap ${cap_s} s)"
  } > "$summary"
}
# The summary exists whatever happens next (a kill of the stage included).
trap write_summary EXIT
rm -f "$bench_md" "$acc_md" "$both_md"
status=0
# run_part LABEL MD BUDGET_S MIN_S SCRIPT ARGS...: the script with --budget-s BUDGET_S (less when
# the stage has less left) under a hard stop 5 s later; not run below MIN_S, MD then says so.
# MARGIN_S (default 5) is that hard stop's margin; each script ends by its budget on its own.
run_part() {
  local label=$1 md=$2 budget=$3 min=$4 script=$5 margin=${MARGIN_S:-5}
  shift 5
  if [ $((budget + margin)) -gt "$(left)" ]; then budget=$(( $(left) - margin )); fi
  if [ "$budget" -lt "$min" ]; then
    echo "$label: not run (the stage's $cap_s s were spent)" > "$md"
    status=1
    return
  fi
  PYTHONUNBUFFERED=1 timeout $((budget + margin)) python3 "$script" --budget-s "$budget" --summary "$md" "$@"
  local rc=$?
  [ $rc -eq 124 ] && echo "$label: passed its hard stop ($((budget + margin)) s); $(basename "$md") holds what it measured"
  [ $rc -eq 0 ] || status=1
}
# COMPRESS_BENCH_ARGS: more options for the bench (e.g. "--variants --side-ctas-variant 32": more
# configurations in the interleaved rounds; raise COMPRESS_BENCH_S with them).
# shellcheck disable=SC2086
run_part "compress bench" "$bench_md" "${COMPRESS_BENCH_S:-30}" 10 bench/offload/compress_bench.py \
  --shape "${COMPRESS_SHAPE:-1b}" --out "$RESULTS_DIR/compress-bench.json" ${COMPRESS_BENCH_ARGS:-}
run_part "compression accuracy" "$acc_md" "${COMPRESS_ACCURACY_S:-25}" 12 bench/offload/compress_accuracy.py \
  --steps "${COMPRESS_STEPS:-300}" --out "$RESULTS_DIR/compress-accuracy.json"
# Offload with compression against offload alone under half the uncompressed run's peak
# reserved (the bench's bf16 run): what is left of the stage (bench/offload/compress_offload.py).
# COMPRESS_OFFLOAD_ARGS: its options (e.g. "--forced-blocks 2": that forced mix instead of the
# planner's pick). On the 1b shape they default to six timed steps a mix and two mixes tried on
# each side beside the planner's fits: its last seven blocks kept as fp8 (the first nine
# checkpointed, their inputs on the host or not) against its last three kept in bf16 (the most
# that fit uncompressed; the first thirteen likewise). In run X the planner's fits, whose
# estimates of fp8-kept blocks run 3-5% high, chose neither, and they were the fastest of each
# side under the cap.
default_offload_args=""
if [ "${COMPRESS_SHAPE:-1b}" = 1b ]; then
  default_offload_args="--timed 6 --compressed-mix xxxxxxxxxkkkkkkk --compressed-mix ccccccccckkkkkkk \
    --plain-mix xxxxxxxxxxxxxkkk --plain-mix ccccccccccccckkk"
fi
# shellcheck disable=SC2086
MARGIN_S=2 run_part "offload with compression" "$both_md" "${COMPRESS_OFFLOAD_S:-80}" 12 bench/offload/compress_offload.py \
  --shape "${COMPRESS_SHAPE:-1b}" --cap-from "$RESULTS_DIR/compress-bench.json" \
  --out "$RESULTS_DIR/compress-offload.json" ${COMPRESS_OFFLOAD_ARGS-$default_offload_args}
write_summary
trap - EXIT
cat "$summary"
exit $status
