#!/usr/bin/env python3
"""GPU test of vramkit_torch.memory_snapshot(): under the pluggable allocator (pool kind from
argv), the snapshot has torch.cuda.memory._snapshot()'s structure, agrees with the pool's own
statistics, and PyTorch's visualiser takes it: _memory_viz.segsum (which asserts that blocks tile
every segment), trace, trace_plot and segment_plot.

    python3 tests/gpu/mr/torch_snapshot_test.py LIB pool|vmm
Exit 0 pass, 1 fail, 77 skip (no torch or no GPU; a failure under VRAMKIT_REQUIRE_GPU=1).
"""
import os
import sys
import tempfile

from torch_test_support import SKIP, cuda_torch, fail


def main():
    lib, kind = sys.argv[1], sys.argv[2]
    torch, code = cuda_torch()
    if torch is None:
        return code
    try:
        import torch.cuda._memory_viz as viz
    except ImportError:
        print("skip: no torch.cuda._memory_viz")
        return SKIP
    import vramkit_torch

    tmp = tempfile.mkdtemp()
    os.environ["VRAMKIT_TRACE_FILE"] = os.path.join(tmp, "t.trace")
    vramkit_torch.set_pool_kind(kind)
    vramkit_torch.use_vramkit_allocator(lib)
    keep = [torch.ones(n, device="cuda") for n in (100, 300_000, 5_000_000, 40_000_000)]
    gone = torch.ones(2_000_000, device="cuda")
    addr = gone.data_ptr()
    del gone
    snap = vramkit_torch.memory_snapshot()
    if set(snap) < {"segments", "device_traces"}:
        return fail("keys %s" % sorted(snap))
    stats = vramkit_torch.memory_stats()
    reserved = sum(s["total_size"] for s in snap["segments"])
    allocated = sum(s["allocated_size"] for s in snap["segments"])
    if allocated != stats["allocated_bytes.all.current"]:
        return fail("snapshot allocated %d != pool allocated %d" % (allocated, stats["allocated_bytes.all.current"]))
    if kind == "pool" and reserved != stats["reserved_bytes.all.current"]:
        return fail("snapshot reserved %d != pool reserved %d" % (reserved, stats["reserved_bytes.all.current"]))
    ptrs = {t.data_ptr() for t in keep}
    active = {b["address"] for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"}
    if not ptrs <= active:
        return fail("live tensors missing from the snapshot's active blocks")
    trace = snap["device_traces"][torch.cuda.current_device()]
    actions = [(e["action"], e["addr"]) for e in trace]
    if ("alloc", addr) not in actions or ("free_completed", addr) not in actions:
        return fail("the freed tensor's alloc/free_completed are not in the device trace")
    summary = viz.segsum(snap)
    text = viz.trace(snap)
    html1 = viz.trace_plot(snap)
    html2 = viz.segment_plot(snap)
    if "total_reserved" not in summary or "entries" not in text or "<html>" not in html1 or "<html>" not in html2:
        return fail("visualiser output unexpected")
    print("ok (%s): %d segments, %d trace entries; segsum:\n%s" % (
        kind, len(snap["segments"]), len(trace), "\n".join(summary.splitlines()[-4:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
