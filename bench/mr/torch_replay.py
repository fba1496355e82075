#!/usr/bin/env python3
"""Replays a compact allocation trace (tests/data/mr/llama_step.trace) with torch.empty under
PyTorch's own CUDA caching allocator and under vramkit's pool as a pluggable allocator, each in a
fresh process, and compares them: median allocate and free time per op (host clock around the
torch call, Python overhead included and equal for both), peak reserved and peak allocated.

Each run first replays the trace once untouched, from an empty cache, and keeps that pass's peaks
(`first_pass_*`: what one run of the recorded program would reserve). It then replays it once
filling every tensor with a byte of its own and checking it on the GPU at its free (one
synchronization at the end): a mismatch fails the run before any timing is reported. Then it
replays `--repeats` more times, timed. `peak_reserved_bytes` is the peak over all passes, cached
memory kept between them (what a loop repeating the recorded step reserves); `vramkit replay
--passes 2+REPEATS` models the same.

    python3 bench/mr/torch_replay.py --trace FILE [--lib libvramkit_torch.so] [--json OUT]
    python3 bench/mr/torch_replay.py --trace A --trace B ... --json-dir DIR   # DIR/torch_replay_A.json, ...
    python3 bench/mr/torch_replay.py --trace FILE --run torch|vramkit   # one process, JSON on stdout
    --jobs N runs N allocators' processes at a time (their peaks add up on the one GPU)

With several traces, each allocator still runs in one process of its own, replaying the traces one
after the other; between two traces every tensor is freed, the cache emptied
(torch.cuda.empty_cache / vramkit_torch.empty_cache) and the peaks reset, so each trace's figures
are its own. A trace may be gzip-compressed (NAME.trace.gz).
"""

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))


def trace_name(path):
    base = os.path.basename(path)
    for ext in (".gz", ".trace"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base


def read_trace(path):
    events = []
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        first = f.readline().strip()
        if first != "# vramkit-trace v1":
            raise SystemExit("%s: line 1: expected '# vramkit-trace v1'" % path)
        for n, line in enumerate(f, 2):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 5 or parts[0] not in ("a", "f"):
                raise SystemExit("%s:%d: expected 'a|f id bytes stream time_ns'" % (path, n))
            events.append((parts[0] == "a", int(parts[1]), int(parts[2]), int(parts[3])))
    return events


# Each allocator runs in its own process: kind -> environment it needs.
KINDS = {
    "torch": {},
    "torch_expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "vramkit": {"VRAMKIT_POOL_KIND": "pool"},
    "vramkit_vmm": {"VRAMKIT_POOL_KIND": "vmm"},
}


def run_all(kind, trace_paths, lib, repeats):
    """Replays every trace in this process under `kind`; returns one result per trace."""
    is_torch = kind.startswith("torch")
    if not is_torch:
        import vramkit_torch
        vramkit_torch.use_vramkit_allocator(lib)
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device visible to PyTorch")
    out = []
    for path in trace_paths:
        torch.cuda.synchronize()
        if is_torch:
            torch.cuda.empty_cache()
        else:
            vramkit_torch.empty_cache()
        r = run_one(torch, kind, path, repeats)
        r["trace"] = trace_name(path)
        out.append(r)
    return out


def run_one(torch, kind, trace_path, repeats):
    is_torch = kind.startswith("torch")
    events = read_trace(trace_path)
    streams = {}

    def stream_for(k):
        if k == 0:
            return None
        if k not in streams:
            streams[k] = torch.cuda.Stream()
        return streams[k]

    def replay(check, times):
        live = {}
        bad = torch.zeros((), dtype=torch.int64, device="cuda") if check else None
        for is_alloc, ident, size, st in events:
            s = stream_for(st)
            ctx = torch.cuda.stream(s) if s is not None else None
            if ctx is not None:
                ctx.__enter__()
            if is_alloc:
                t0 = time.perf_counter_ns()
                t = torch.empty(size, dtype=torch.uint8, device="cuda")
                t1 = time.perf_counter_ns()
                if times is not None:
                    times[0].append(t1 - t0)
                if check and size > 0:
                    t[: min(size, 256)].fill_(1 + ident % 251)
                live[ident] = t
            else:
                t = live.pop(ident)
                if check and size > 0:
                    bad += (t[: min(size, 256)] != (1 + ident % 251)).sum()
                t0 = time.perf_counter_ns()
                del t
                t1 = time.perf_counter_ns()
                if times is not None:
                    times[1].append(t1 - t0)
            if ctx is not None:
                ctx.__exit__(None, None, None)
        live.clear()
        if check:
            torch.cuda.synchronize()
            return int(bad.item())
        return 0

    def reset_peaks():
        torch.cuda.synchronize()
        if is_torch:
            torch.cuda.reset_peak_memory_stats()
        else:
            vramkit_torch.reset_peak_memory_stats()

    def peaks():
        if is_torch:
            return torch.cuda.max_memory_reserved(), torch.cuda.max_memory_allocated()
        st = vramkit_torch.memory_stats()
        # The pool's peak, or the CUDA pool's below it when higher (chunks the pool returned).
        return (max(st["reserved_bytes.all.peak"], st.get("device_reserved_bytes.peak", 0)),
                st["allocated_bytes.all.peak"])

    if not is_torch:
        import vramkit_torch
    reset_peaks()
    replay(False, None)  # the first pass, from the emptied cache
    torch.cuda.synchronize()
    first_reserved, first_allocated = peaks()
    mismatches = replay(True, None)
    if mismatches:
        raise SystemExit("verification failed: %d bytes changed while their tensor was live" % mismatches)
    torch.cuda.synchronize()
    steady_before = peaks()[0]
    reset_peaks()
    times = ([], [])
    start = time.perf_counter()
    for _ in range(repeats):
        replay(False, times)
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    peak_live = 0
    live_bytes = 0
    sizes = {}
    for is_alloc, ident, size, _ in events:
        if is_alloc:
            sizes[ident] = size
            live_bytes += size
            peak_live = max(peak_live, live_bytes)
        else:
            live_bytes -= sizes.pop(ident)
    out = {
        "allocator": kind,
        "events": len(events),
        "repeats": repeats,
        "alloc_median_ns": statistics.median(times[0]),
        "free_median_ns": statistics.median(times[1]) if times[1] else 0.0,
        "wall_s": wall,
        "peak_requested_bytes": peak_live,
        "verified": True,
    }
    timed_reserved, out["peak_allocated_bytes"] = peaks()
    # Over all passes: the timed passes' peak, or the reserve the first two passes left if higher.
    out["peak_reserved_bytes"] = max(timed_reserved, steady_before)
    out["passes"] = 2 + repeats
    out["first_pass_peak_reserved_bytes"] = first_reserved
    out["first_pass_peak_allocated_bytes"] = first_allocated
    out["first_pass_peak_reserved_over_peak_requested"] = first_reserved / max(1, peak_live)
    if not is_torch:
        st = vramkit_torch.memory_stats()
        out["pool_peak_reserved_bytes"] = st["reserved_bytes.all.peak"]
        out["peak_requested_pool_bytes"] = st["requested_bytes.all.peak"]
    out["peak_reserved_over_peak_allocated"] = out["peak_reserved_bytes"] / max(1, out["peak_allocated_bytes"])
    out["peak_reserved_over_peak_requested"] = out["peak_reserved_bytes"] / max(1, peak_live)
    out["alloc_free_median_ns"] = out["alloc_median_ns"] + out["free_median_ns"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", action="append", help="trace file (repeatable; default the committed LLaMA step)")
    ap.add_argument("--lib", default=None, help="path of libvramkit_torch.so")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--run", choices=sorted(KINDS))
    ap.add_argument("--kinds", default="torch,torch_expandable,vramkit,vramkit_vmm",
                    help="allocators to compare, comma-separated (torch and vramkit always run)")
    ap.add_argument("--json", help="write the comparison here (one trace only)")
    ap.add_argument("--json-dir", help="write DIR/torch_replay_NAME.json for each trace")
    ap.add_argument("--jobs", type=int, default=1, help="allocator processes at a time")
    args = ap.parse_args()
    traces = args.trace or [os.path.join(ROOT, "tests/data/mr/llama_step.trace")]
    for t in traces:
        if not os.path.isfile(t):
            print("trace %s not found" % t, file=sys.stderr)
            return 2
    if len({trace_name(t) for t in traces}) != len(traces):
        print("--trace: two traces have the same name", file=sys.stderr)
        return 2
    if args.json and len(traces) > 1:
        print("--json takes one trace; use --json-dir with several", file=sys.stderr)
        return 2
    if args.repeats < 1:
        print("--repeats must be at least 1", file=sys.stderr)
        return 2
    if args.jobs < 1:
        print("--jobs must be at least 1", file=sys.stderr)
        return 2
    if args.run:
        print(json.dumps(run_all(args.run, traces, args.lib, args.repeats)))
        return 0
    per_kind = {}
    kinds = [k for k in args.kinds.split(",") if k]
    for k in kinds:
        if k not in KINDS:
            print("--kinds: unknown allocator %r (known: %s)" % (k, ", ".join(sorted(KINDS))), file=sys.stderr)
            return 2
    for required in ("vramkit", "torch"):
        if required not in kinds:
            kinds.insert(0, required)
    def start(kind):
        cmd = [sys.executable, os.path.abspath(__file__), "--run", kind, "--repeats", str(args.repeats)]
        for t in traces:
            cmd += ["--trace", t]
        if args.lib:
            cmd += ["--lib", args.lib]
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.update(KINDS[kind])
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    for at in range(0, len(kinds), args.jobs):
        batch = [(kind, start(kind)) for kind in kinds[at:at + args.jobs]]
        failed = False
        for kind, p in batch:
            stdout, stderr = p.communicate()
            if p.returncode != 0:
                print("%s run failed:\n%s" % (kind, stderr[-3000:]), file=sys.stderr)
                failed = True
            else:
                per_kind[kind] = json.loads(stdout.strip().splitlines()[-1])
        if failed:
            return 1
    for i, path in enumerate(traces):
        results = {kind: per_kind[kind][i] for kind in kinds}
        print("== %s" % trace_name(path))
        report(results, kinds)
        target = args.json or (os.path.join(args.json_dir, "torch_replay_%s.json" % trace_name(path))
                               if args.json_dir else None)
        if target:
            with open(target, "w") as f:
                json.dump(results, f, indent=1)
    return 0


def report(results, kinds):
    """Adds the ratios to results and prints one line per allocator."""
    t, v = results["torch"], results["vramkit"]
    results["ratios"] = {
        "alloc_free_median_vramkit_over_torch": v["alloc_free_median_ns"] / max(1e-9, t["alloc_free_median_ns"]),
        "peak_reserved_vramkit_over_torch": v["peak_reserved_bytes"] / max(1, t["peak_reserved_bytes"]),
    }
    for other in ("torch_expandable", "vramkit_vmm"):
        if other in results:
            results["ratios"]["peak_reserved_%s_over_torch" % other] = (
                results[other]["peak_reserved_bytes"] / max(1, t["peak_reserved_bytes"]))
            results["ratios"]["alloc_free_median_%s_over_torch" % other] = (
                results[other]["alloc_free_median_ns"] / max(1e-9, t["alloc_free_median_ns"]))
    for kind in kinds:
        r = results[kind]
        print("%-16s alloc %7.0f ns  free %7.0f ns  peak reserved %8.1f MiB  peak allocated %8.1f MiB  "
              "reserved/allocated %.3f  reserved/requested %.3f (first pass %.3f)" % (
                  kind, r["alloc_median_ns"], r["free_median_ns"], r["peak_reserved_bytes"] / 2**20,
                  r["peak_allocated_bytes"] / 2**20, r["peak_reserved_over_peak_allocated"],
                  r["peak_reserved_over_peak_requested"], r["first_pass_peak_reserved_over_peak_requested"]))


if __name__ == "__main__":
    sys.exit(main())
