# mr stage: allocator benchmarks (vramkit pool vs cudaMallocAsync warm vs cudaMalloc, random and
# replayed PyTorch traces), four traces recorded from real PyTorch runs into RESULTS_DIR/traces,
# every trace under PyTorch's allocators vs the pluggable vramkit pools (through torch.empty, and
# from C++ in one process: bench/mr/torch_alloc_compare.cpp), and a LLaMA-shaped training step
# under all four. Writes RESULTS_DIR/mr-summary.md. About 4 minutes on an H200.
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

echo "== recording traces from real PyTorch runs (bench/mr/record_traces.py)"
# GPT-2 with checkpointing, generate() with a growing KV cache, ResNet-50, and GPT-2 training whose
# sequence length changes every step, each under PyTorch's allocator with its memory history on.
TRACES_OUT=$RESULTS_DIR/traces
mkdir -p "$TRACES_OUT"
timeout 150 python3 bench/mr/record_traces.py --out-dir "$TRACES_OUT" 2>&1 | tee "$OUT/record_traces.txt"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1

echo "== replayed traces: PyTorch native, expandable_segments:True, vramkit pool and vramkit vmm pool"
# Every committed trace, every trace just recorded (unless committed under the same name) and a
# random one (sizes 512 B - 64 MiB, frees interleaved), through torch.empty under the four
# allocators (one process per allocator for all traces) and through `vramkit replay` (vramkit on
# the simulated device and the planner's models of PyTorch), for the side-by-side table.
RANDOM_TRACE=$OUT/random.trace
python3 - "$RANDOM_TRACE" <<'PY'
import random, sys
rng = random.Random(7)
live, out, t = [], ["# vramkit-trace v1", "# source: random sizes 512 B - 64 MiB, seed 7"], 0
for i in range(1, 4001):
    if live and (rng.random() < 0.45 or len(live) > 300):
        ident, size = live.pop(rng.randrange(len(live)))
        out.append("f %d %d 0 %d" % (ident, size, t))
    else:
        size = rng.randint(512, 64 << 20) if rng.random() < 0.3 else rng.randint(512, 1 << 20)
        live.append((i, size))
        out.append("a %d %d 0 %d" % (i, size, t))
    t += 1000
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
replay_traces=()
committed=" "
for tr in "$ROOT"/tests/data/mr/*.trace "$ROOT"/tests/data/mr/*.trace.gz; do
  [ -f "$tr" ] || continue
  replay_traces+=("$tr"); committed+="$(basename "${tr%.gz}" .trace) "
done
for tr in "$TRACES_OUT"/*.trace "$TRACES_OUT"/*.trace.gz; do
  [ -f "$tr" ] || continue
  n=$(basename "${tr%.gz}" .trace)
  [[ "$committed" == *" $n "* ]] || replay_traces+=("$tr")
done
replay_traces+=("$RANDOM_TRACE")
targs=()
for tr in "${replay_traces[@]}"; do targs+=(--trace "$tr"); done
timeout 200 python3 bench/mr/torch_replay.py "${targs[@]}" --lib "$LIB" --repeats 3 \
  --json-dir "$OUT" 2>&1 | tee "$OUT/torch_replay.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ -x "$BUILD_DIR/vramkit" ]; then
  for tr in "${replay_traces[@]}"; do
    name=$(basename "${tr%.gz}" .trace)
    plain=$tr
    if [[ "$tr" == *.gz ]]; then plain=$OUT/$name.trace; gzip -dc "$tr" > "$plain"; fi
    "$BUILD_DIR/vramkit" replay "$plain" --json > "$OUT/vramkit_replay_$name.json" 2> "$OUT/vramkit_replay_$name.err" || status=1
    [[ "$tr" == *.gz ]] && rm -f "$plain"
  done
fi
[ -f "$OUT/torch_replay_llama_step.json" ] && cp "$OUT/torch_replay_llama_step.json" "$OUT/torch_replay.json"

echo "== replayed trace, allocator calls from C++: PyTorch caching allocator vs vramkit, one process"
# torch_replay.py times torch.empty from Python, whose dispatch noise (2.4-4.1 us per call between
# passes for one allocator) dwarfs the allocators; this times raw_alloc_with_stream / raw_delete
# against vramkit_malloc / vramkit_free directly. Compiled here against the installed PyTorch (not
# part of the CMake build). A failed compile fails the stage but not the other steps.
rm -f "$OUT/torch_alloc_compare.json" "$OUT/torch_alloc_compare.txt"
if [ ! -f "$TRACE" ]; then
  echo "no $TRACE yet: C++ allocator comparison skipped"
elif [ ! -f "$LIB" ]; then
  echo "$LIB not built: C++ allocator comparison skipped"; status=1
elif ! TORCH_INFO=$(python3 -c 'import os, torch
d = os.path.dirname(torch.__file__)
v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
print(os.path.join(d, "include"), os.path.join(d, "lib"), int(torch.compiled_with_cxx11_abi()),
      "c++20" if v >= (2, 12) else "c++17", torch.__version__)' 2>&1); then
  echo "torch_alloc_compare: cannot locate PyTorch: $TORCH_INFO"; status=1
else
  read -r TI TL ABI STD TV <<< "$TORCH_INFO"
  CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  # Run on the CUDA runtime that libc10_cuda.so itself loads (as a Python process would), else on
  # the toolkit's; both are the same soname, so the process holds one runtime either way.
  CUDART_DIR=$(ldd "$TL/libc10_cuda.so" 2>/dev/null | awk '/libcudart\.so/ && $3 ~ /^\// {print $3; exit}')
  CUDART_DIR=${CUDART_DIR:+$(dirname "$CUDART_DIR")}
  TAC=$BUILD_DIR/torch_alloc_compare
  cmd=(g++ -O2 "-std=$STD" "-D_GLIBCXX_USE_CXX11_ABI=$ABI" -I"$TI" -I"$TI/torch/csrc/api/include"
       -I"$CUDA_HOME/include" -Iinclude bench/mr/torch_alloc_compare.cpp src/core/sample_stats.cpp
       -L"$TL" -lc10_cuda -lc10
       -L"$CUDA_HOME/lib64" -lcudart -ldl -Wl,-rpath,"$TL" ${CUDART_DIR:+-Wl,-rpath,"$CUDART_DIR"}
       -Wl,-rpath,"$CUDA_HOME/lib64" -o "$TAC")
  echo "${cmd[*]}" | tee "$OUT/torch_alloc_compare.build.log"
  if timeout 300 "${cmd[@]}" >> "$OUT/torch_alloc_compare.build.log" 2>&1; then
    timeout 120 "$TAC" --trace "$TRACE" --lib "$LIB" --repeats 5 --torch-version "$TV" \
      --json "$OUT/torch_alloc_compare.json" 2>&1 | tee "$OUT/torch_alloc_compare.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "torch_alloc_compare FAILED"; status=1; }
    echo "-- the same with the virtual-memory pool (VRAMKIT_POOL_KIND=vmm)"
    VRAMKIT_POOL_KIND=vmm timeout 120 "$TAC" --trace "$TRACE" --lib "$LIB" --repeats 5 --torch-version "$TV" \
      --json "$OUT/torch_alloc_compare_vmm.json" 2>&1 | tee "$OUT/torch_alloc_compare_vmm.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "torch_alloc_compare (vmm) FAILED"; status=1; }
  else
    echo "torch_alloc_compare: compile FAILED (log: $OUT/torch_alloc_compare.build.log)"
    grep -E "error|Error" "$OUT/torch_alloc_compare.build.log" | head -30
    status=1
  fi
fi

echo "== training step: PyTorch native and expandable segments vs both vramkit pools"
timeout 150 python3 bench/mr/torch_train_compare.py --lib "$LIB" --runs torch,torch_expandable,vramkit,vramkit_vmm \
  --json "$OUT/torch_train.json" 2>&1 | tee "$OUT/torch_train.txt"
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
cc = load("torch_alloc_compare.json")
lines += ["## replayed trace, allocator calls from C++ (PyTorch caching allocator vs vramkit, one process, alternating passes)", ""]
if cc:
    t, v, r = cc["torch"], cc["vramkit"], cc["ratios"]
    lines += ["%d timed passes per allocator (alternating, after one verification pass each: %s); %d allocations and %d frees per pass; "
              "%d zero-size allocations skipped for both; PyTorch %s, allocator backend %s; steady_clock read %.0f ns (included once per call)" % (
                  cc["repeats"], "passed" if cc["verification"]["passed"] else "FAILED", cc["trace"]["allocs"], cc["trace"]["frees"],
                  cc["trace"]["zero_size_skipped"], cc.get("torch_version") or "?", cc.get("torch_allocator_backend", "?"),
                  cc["clock"]["read_median_ns"]), "",
              "| allocator | alloc median ns (p10-p90) | free median ns (p10-p90) | alloc+free median ns | alloc mean ns | free mean ns | alloc+free mean ns | peak reserved MiB | peak allocated MiB | reserved/allocated | reserved/requested |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in (t, v):
        lines.append("| %s | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f |" % (
            a["allocator"], a["alloc_median_ns"], a["alloc"]["p10_ns"], a["alloc"]["p90_ns"], a["free_median_ns"],
            a["free"]["p10_ns"], a["free"]["p90_ns"], a["alloc_free_median_ns"], a["alloc_mean_ns"], a["free_mean_ns"],
            a["alloc_free_mean_ns"], a["peak_reserved_bytes"] / 2**20, a["peak_allocated_bytes"] / 2**20,
            a["peak_reserved_over_peak_allocated"] or float("nan"), a["peak_reserved_over_peak_requested"] or float("nan")))
    def f3(x):
        return "-" if x is None else "%.3f" % x
    lines.append("| vramkit / PyTorch | %s | %s | %s | %s | %s | %s | %s | | | |" % (
        f3(r["alloc_median_vramkit_over_torch"]), f3(r["free_median_vramkit_over_torch"]),
        f3(r["alloc_free_median_vramkit_over_torch"]), f3(r["alloc_mean_vramkit_over_torch"]),
        f3(r["free_mean_vramkit_over_torch"]), f3(r["alloc_free_mean_vramkit_over_torch"]),
        f3(r["peak_reserved_vramkit_over_torch"])))
    lines += ["", "per pass, alloc / free median ns: " + "; ".join(
        "torch %.0f / %.0f, vramkit %.0f / %.0f" % (pt["alloc_median_ns"], pt["free_median_ns"], pv["alloc_median_ns"], pv["free_median_ns"])
        for pt, pv in zip(t["passes"], v["passes"])), ""]
else:
    lines += ["no result (not built, failed, or skipped: see 30-mr.log and mr/torch_alloc_compare.build.log)", ""]
import glob
side = sorted(glob.glob(os.path.join(out, "torch_replay_*.json")))
if side:
    lines += ["## peak reserved / peak requested, side by side (same run; torch.empty; verified)", "",
              "| trace | PyTorch native | expandable_segments:True | vramkit pool | vramkit vmm pool | vmm <= 1.03 and <= expandable | model native | model expandable | model vmm (host sim) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p in side:
        name = os.path.basename(p)[len("torch_replay_"):-len(".json")]
        r = load(os.path.basename(p))
        m = load("vramkit_replay_%s.json" % name) or {}
        models = {a["name"]: a["reserved_over_requested"] for a in m.get("allocators", [])}
        def q(k):
            return r[k]["peak_reserved_over_peak_requested"] if k in r else None
        def f(x):
            return "-" if x is None else "%.3f" % x
        ok = q("vramkit_vmm") is not None and q("torch_expandable") is not None and \
            q("vramkit_vmm") <= 1.03 and q("vramkit_vmm") <= q("torch_expandable")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, f(q("torch")), f(q("torch_expandable")), f(q("vramkit")), f(q("vramkit_vmm")),
            "yes" if ok else "NO", f(models.get("pytorch_native")),
            f(models.get("pytorch_expandable_segments")), f(models.get("vramkit_vmm_pool"))))
    lines += ["", "alloc+free median (torch.empty from Python) vmm / native per trace: " + "; ".join(
        "%s %.3f" % (os.path.basename(p)[13:-5], load(os.path.basename(p))["ratios"].get("alloc_free_median_vramkit_vmm_over_torch", float("nan")))
        for p in side), ""]
tr = load("torch_train.json")
if tr:
    t = tr["torch"]
    runs = [k for k in ("torch", "torch_expandable", "vramkit", "vramkit_vmm", "torch_repeat") if k in tr]
    lines += ["## training step (LLaMA-shaped, %d layers, batch %d x %d, amp bf16, AdamW; one process per allocator)" % (
                  t["layers"], t["batch"], t["seq"]), "",
              "| allocator | median step s | step / PyTorch native | peak reserved MiB | peak allocated MiB | reserved/allocated | losses identical to native |",
              "|---|---|---|---|---|---|---|"]
    for k in runs:
        r = tr[k]
        lines.append("| %s | %.4f | %.4f | %.1f | %.1f | %.3f | %s |" % (
            k, r["median_step_s"], r["median_step_s"] / t["median_step_s"], r["peak_reserved_bytes"] / 2**20,
            r["peak_allocated_bytes"] / 2**20, r["peak_reserved_over_peak_allocated"], r["losses"] == t["losses"]))
    rr = tr["ratios"]
    lines += ["", "targets (vmm): identical losses, step time within 1%% of native (%.4f), peak reserved <= expandable (%s)" % (
        rr.get("step_time_vramkit_vmm_over_torch", float("nan")),
        "%.3f" % rr["peak_reserved_vramkit_vmm_over_torch_expandable"] if "peak_reserved_vramkit_vmm_over_torch_expandable" in rr else "-"), ""]
rec = sorted(glob.glob(os.path.join(os.path.dirname(out), "traces", "*.json")))
if rec:
    lines += ["## recorded traces (PyTorch native allocator, memory history on)", "",
              "| trace | events | file | bytes | peak live MiB | PyTorch peak reserved MiB | description |", "|---|---|---|---|---|---|---|"]
    for p in rec:
        with open(p) as f:
            d = json.load(f)
        lines.append("| %s | %d | %s | %d | %.1f | %.1f | %s |" % (d["name"], d["events"], d["file"], d["bytes"],
                     d["trace_peak_live_bytes"] / 2**20, d["max_reserved_bytes"] / 2**20, d["description"]))
    lines.append("")
ccv = load("torch_alloc_compare_vmm.json")
if ccv:
    r = ccv["ratios"]
    lines += ["vmm pool, allocator calls from C++: alloc+free median %.0f ns, vmm / PyTorch native %.3f "
              "(targets <= 500 ns and <= 0.5); peak reserved vmm / PyTorch native %.3f; verification %s" % (
                  ccv["vramkit"]["alloc_free_median_ns"], r["alloc_free_median_vramkit_over_torch"],
                  r["peak_reserved_vramkit_over_torch"], "passed" if ccv["verification"]["passed"] else "FAILED"), ""]
with open(md, "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
exit $status
