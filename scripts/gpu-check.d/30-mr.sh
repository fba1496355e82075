# mr stage, at most MR_STAGE_S seconds (default 110): every step's timeout is
# cut to what is left, and RESULTS_DIR/mr-summary.md is rewritten after each step
# (bench/mr/mr_summary.py), so a stage cut off keeps the figures of the steps that finished.
# In order:
#   1. a LLaMA-shaped training step under PyTorch native (twice: native against itself is the
#      noise), vramkit vmm, expandable segments and vramkit vmm with VRAMKIT_POOL_SLACK_MAX=5%
#      (bench/mr/torch_train_compare.py: one process each, all built at once, then one step each in
#      turn; losses, step time, the pool's mapping work in every step, peaks), while
#      `vramkit replay` of the committed traces and the compilation of torch_alloc_compare run on
#      the CPU (the interleaving puts any such load on every allocator alike);
#   2. every committed trace through torch.empty under the four allocators
#      (bench/mr/torch_replay.py, two processes at a time), beside `vramkit replay`'s models
#      (one pass and as many passes as torch_replay makes);
#   3. allocator calls from C++: PyTorch's caching allocator vs vramkit_torch_malloc/vramkit_free
#      (bench/mr/torch_alloc_compare.cpp, compiled here against the installed PyTorch), the
#      library's default pool;
#   4. the training step's own trace through `vramkit replay` (the pool on the simulated device
#      beside the models of PyTorch's allocators), the classic pool's allocator calls and the pool
#      benchmark (bench/mr/pool_bench.cpp), with what time is left.
# Traces are not recorded here any more (they are committed; bench/mr/record_traces.py records more).
set -uo pipefail
: "${BUILD_DIR:?}" "${RESULTS_DIR:?}"
ROOT=$(pwd)
OUT=$RESULTS_DIR/mr
SUMMARY=$RESULTS_DIR/mr-summary.md
mkdir -p "$OUT"
LIB=$BUILD_DIR/libvramkit_torch.so
TRACE=$ROOT/tests/data/mr/llama_step.trace
START=$(date +%s)
BUDGET=${MR_STAGE_S:-110}
status=0
notes=()

left() { echo $(( BUDGET - ($(date +%s) - START) )); }
# cap N: the smaller of N seconds and what is left of the stage (at least 1).
cap() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
summary() {
  local args=()
  for n in "${notes[@]}"; do args+=(--note "$n"); done
  python3 bench/mr/mr_summary.py "$OUT" "$SUMMARY" --elapsed $(( $(date +%s) - START )) "${args[@]}" \
    || echo "mr_summary.py failed"
}
# step NAME RC: records a failed or timed-out step.
step_done() {
  if [ "$2" -eq 124 ] || [ "$2" -eq 137 ]; then notes+=("$1: cut off by the stage's time cap"); status=1
  elif [ "$2" -ne 0 ] && [ "$2" -ne 77 ]; then notes+=("$1: FAILED (exit $2)"); status=1; fi
  summary
}
trap 'notes+=("stage interrupted"); summary; exit 1' TERM INT

rm -f "$OUT"/*.json "$OUT"/*.txt "$OUT"/*.err "$OUT"/*.trace "$OUT"/*.trace.gz
summary

# --- on the CPU, in the background: `vramkit replay` of every committed trace (tests/data/mr: five
# recorded from real PyTorch programs and random.trace, sizes 512 B - 64 MiB, seed 7) and the
# compilation of torch_alloc_compare.
replay_traces=()
for tr in "$ROOT"/tests/data/mr/*.trace "$ROOT"/tests/data/mr/*.trace.gz; do
  [ -f "$tr" ] && replay_traces+=("$tr")
done
REPEATS=1  # torch_replay: first pass, verification pass, REPEATS timed passes
PASSES=$(( 2 + REPEATS ))
(
  [ -x "$BUILD_DIR/vramkit" ] || { echo "vramkit CLI not built"; exit 1; }
  rc=0
  for tr in "${replay_traces[@]}"; do
    name=$(basename "${tr%.gz}" .trace)
    plain=$tr
    if [[ "$tr" == *.gz ]]; then plain=$OUT/$name.trace; gzip -dc "$tr" > "$plain"; fi
    timeout "$(cap 20)" "$BUILD_DIR/vramkit" replay "$plain" --json --passes "$PASSES" \
      > "$OUT/vramkit_replay_$name.json" 2> "$OUT/vramkit_replay_$name.err" || rc=1
    timeout "$(cap 10)" "$BUILD_DIR/vramkit" replay "$plain" --json \
      > "$OUT/vramkit_replay_$name.pass1.json" 2>> "$OUT/vramkit_replay_$name.err" || rc=1
    [[ "$tr" == *.gz ]] && rm -f "$plain"
  done
  exit $rc
) > "$OUT/vramkit_replay.log" 2>&1 &
replay_pid=$!

TAC=$BUILD_DIR/torch_alloc_compare
rm -f "$TAC"
compile_pid=
if [ ! -f "$LIB" ]; then
  notes+=("$LIB not built: allocator comparison and PyTorch runs skipped"); status=1
elif ! TORCH_INFO=$(python3 -c 'import os, torch
d = os.path.dirname(torch.__file__)
v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
print(os.path.join(d, "include"), os.path.join(d, "lib"), int(torch.compiled_with_cxx11_abi()),
      "c++20" if v >= (2, 12) else "c++17", torch.__version__)' 2>&1); then
  notes+=("torch_alloc_compare: cannot locate PyTorch: ${TORCH_INFO:0:200}"); status=1
else
  read -r TI TL ABI STD TV <<< "$TORCH_INFO"
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  # Run on the CUDA runtime that libc10_cuda.so itself loads (as a Python process would).
  CUDART_DIR=$(ldd "$TL/libc10_cuda.so" 2>/dev/null | awk '/libcudart\.so/ && $3 ~ /^\// {print $3; exit}')
  CUDART_DIR=${CUDART_DIR:+$(dirname "$CUDART_DIR")}
  cmd=(g++ -O2 "-std=$STD" "-D_GLIBCXX_USE_CXX11_ABI=$ABI" -I"$TI" -I"$TI/torch/csrc/api/include"
       -I"$CUDA_HOME/include" -Iinclude bench/mr/torch_alloc_compare.cpp src/core/sample_stats.cpp
       -L"$TL" -lc10_cuda -lc10
       -L"$CUDA_HOME/lib64" -lcudart -ldl -Wl,-rpath,"$TL" ${CUDART_DIR:+-Wl,-rpath,"$CUDART_DIR"}
       -Wl,-rpath,"$CUDA_HOME/lib64" -o "$TAC")
  echo "${cmd[*]}" > "$OUT/torch_alloc_compare.build.log"
  timeout "$(cap 60)" "${cmd[@]}" >> "$OUT/torch_alloc_compare.build.log" 2>&1 &
  compile_pid=$!
fi

# --- 1. the training step (interleaved: a drift of the GPU or the host falls on every run alike).
if [ -f "$LIB" ]; then
  # Five processes of about 20 GB each. 40 steps each; the medians leave out the first 12 of every
  # run (the pool's warm-up; the summary also gives them from step 2 on). The step's allocation
  # trace (run I, recorded by the vramkit_vmm_traced run with --trace-out) replays on the CPU to
  # the same mapping work per step as on the GPU; this run measures the setting that replay found
  # to stop mapping after step 1 (VRAMKIT_POOL_SLACK_MAX=5%).
  echo "== training step: native (twice), vramkit vmm, expandable segments, vramkit vmm with SLACK_MAX=5%"
  rm -f "$OUT/train_vmm.trace" "$OUT/train_vmm.trace.gz"
  PYTHONUNBUFFERED=1 timeout "$(cap 65)" python3 bench/mr/torch_train_compare.py --lib "$LIB" \
    --layers 8 --batch 4 --seq 1024 --steps 40 --warmup 12 \
    --runs torch,vramkit_vmm,torch_expandable,torch_repeat,vramkit_vmm_slackmax5 \
    --json "$OUT/torch_train.json" 2>&1 \
    | tee "$OUT/torch_train.txt"
  rc=${PIPESTATUS[0]}
  # Kept compressed (the stage's results travel); `vramkit replay` reads it decompressed in step 4.
  [ -f "$OUT/train_vmm.trace" ] && gzip -f "$OUT/train_vmm.trace"
  step_done "torch_train_compare" "$rc"
fi

# --- 2. the traces through the real allocators (memory figures, not timings: it may share the CPU
# with the compile and the replays).
if [ -f "$LIB" ]; then
  echo "== replayed traces: PyTorch native, expandable_segments:True, vramkit pool, vramkit vmm pool"
  targs=()
  for tr in "${replay_traces[@]}"; do targs+=(--trace "$tr"); done
  timeout "$(cap 40)" python3 bench/mr/torch_replay.py "${targs[@]}" --lib "$LIB" --repeats "$REPEATS" \
    --jobs 2 --json-dir "$OUT" 2>&1 | tee "$OUT/torch_replay.txt"
  step_done "torch_replay" "${PIPESTATUS[0]}"
fi
# The timed calls below run alone on the CPU.
wait "$replay_pid" || { notes+=("vramkit replay: FAILED (see mr/vramkit_replay.log and *.err)"); status=1; }
summary

# --- 3. allocator calls from C++.
if [ -n "$compile_pid" ]; then
  echo "== allocator calls from C++: PyTorch's caching allocator vs vramkit (default pool, then pool)"
  wait "$compile_pid"; rc=$?
  if [ "$rc" -ne 0 ]; then
    grep -E "error" "$OUT/torch_alloc_compare.build.log" | head -20
    step_done "torch_alloc_compare compile" "$rc"
  else
    for kind in default; do
      envs=(); [ "$kind" = pool ] && envs=(VRAMKIT_POOL_KIND=pool)
      env "${envs[@]}" timeout "$(cap 25)" "$TAC" --trace "$TRACE" --lib "$LIB" --repeats 5 \
        --torch-version "$TV" --json "$OUT/torch_alloc_compare_$kind.json" 2>&1 \
        | tee "$OUT/torch_alloc_compare_$kind.txt"
      step_done "torch_alloc_compare ($kind)" "${PIPESTATUS[0]}"
    done
  fi
fi

# --- 4. with what time is left: the training step's trace through `vramkit replay`, the classic
# pool's allocator calls, the pool benchmark.
if [ -s "$OUT/train_vmm.trace.gz" ] && [ -x "$BUILD_DIR/vramkit" ] && [ "$(left)" -gt 8 ]; then
  plain=$(mktemp)
  gzip -dc "$OUT/train_vmm.trace.gz" > "$plain"
  timeout "$(cap 15)" "$BUILD_DIR/vramkit" replay "$plain" --json \
    > "$OUT/vramkit_replay_train_vmm.json" 2> "$OUT/vramkit_replay_train_vmm.err"
  rc=$?
  rm -f "$plain"
  step_done "vramkit replay of the training step's trace" "$rc"
fi
if [ -x "$TAC" ] && [ "$(left)" -gt 15 ]; then
  VRAMKIT_POOL_KIND=pool timeout "$(cap 15)" "$TAC" --trace "$TRACE" --lib "$LIB" --repeats 5 \
    --torch-version "$TV" --json "$OUT/torch_alloc_compare_pool.json" 2>&1 \
    | tee "$OUT/torch_alloc_compare_pool.txt"
  step_done "torch_alloc_compare (pool)" "${PIPESTATUS[0]}"
fi
if [ -x "$BUILD_DIR/bench/mr/mr_pool_bench" ] && [ "$(left)" -gt 10 ]; then
  echo "== pool benchmark"
  timeout "$(cap 25)" "$BUILD_DIR/bench/mr/mr_pool_bench" --device=cuda --trace="$TRACE" \
    --benchmark_out="$OUT/pool_bench.json" --benchmark_out_format=json 2>&1 | tee "$OUT/pool_bench.txt"
  step_done "mr_pool_bench" "${PIPESTATUS[0]}"
else
  notes+=("mr_pool_bench skipped: not built or no time left"); summary
fi

cat "$SUMMARY"
exit $status
