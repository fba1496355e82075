#!/usr/bin/env python3
"""PyTorch's own copies, timed with CUDA events, for comparison with `vramkit probe`.

Measures tensor.copy_ pinned host -> device, device -> device and device -> pinned host at the
given sizes (bytes copied once, GB/s decimal), checks every destination against its source, and
writes JSON: {"torch": version, "device": name, "h2d_pinned": {...}, "d2d": {...}, "d2h_pinned": {...}}.

    torch_copies.py --h2d-bytes N --device-bytes N [--samples N] [--json FILE]
"""
import argparse
import json
import statistics
import sys


def timed(torch, samples, loops, nbytes, op):
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        op()
    torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        start.record()
        for _ in range(loops):
            op()
        stop.record()
        stop.synchronize()
        out.append(nbytes * loops / (start.elapsed_time(stop) / 1e3) / 1e9)
    return out


def summary(gbps, nbytes):
    return {"median": statistics.median(gbps), "min": min(gbps), "max": max(gbps),
            "size_bytes": nbytes, "samples": len(gbps), "unit": "GB/s", "convention": "copied_once"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--h2d-bytes", type=int, default=1 << 30)
    ap.add_argument("--device-bytes", type=int, default=2 << 30)
    ap.add_argument("--samples", type=int, default=10)
    ap.add_argument("--json", default="-")
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"torch_copies.py: PyTorch not available: {e}", file=sys.stderr)
        return 3
    if not torch.cuda.is_available():
        print("torch_copies.py: no CUDA device visible to PyTorch", file=sys.stderr)
        return 3
    dev = torch.device("cuda:0")
    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0)}

    n = a.h2d_bytes // 4
    host = torch.arange(n, dtype=torch.int32).pin_memory()
    back = torch.zeros(n, dtype=torch.int32).pin_memory()
    d = torch.empty(n, dtype=torch.int32, device=dev)
    loops = max(1, (256 << 20) // a.h2d_bytes)
    up = timed(torch, a.samples, loops, a.h2d_bytes, lambda: d.copy_(host, non_blocking=True))
    down = timed(torch, a.samples, loops, a.h2d_bytes, lambda: back.copy_(d, non_blocking=True))
    torch.cuda.synchronize()
    ok = bool(torch.equal(back, host))
    res["h2d_pinned"] = summary(up, a.h2d_bytes)
    res["d2h_pinned"] = summary(down, a.h2d_bytes)
    del host, back, d

    m = a.device_bytes // 4
    src = torch.arange(m, dtype=torch.int32, device=dev)
    dst = torch.empty_like(src)
    dd = timed(torch, a.samples, 10, a.device_bytes, lambda: dst.copy_(src))
    torch.cuda.synchronize()
    ok = ok and bool(torch.equal(dst, src))
    res["d2d"] = summary(dd, a.device_bytes)
    res["verified"] = ok
    text = json.dumps(res, indent=2)
    if a.json == "-":
        print(text)
    else:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    for k in ("h2d_pinned", "d2h_pinned", "d2d"):
        print(f"torch {k:12s} {res[k]['median']:10.1f} GB/s", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
