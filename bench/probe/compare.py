#!/usr/bin/env python3
"""Side by side: `vramkit probe` against plain baselines measured in the same run.

Runs `vramkit probe --only device,h2d --json`, the probe_gpu_baselines binary (cudaMemcpyAsync
loop, cudaMemcpy D2D, plain float4 read kernel), torch_copies.py (PyTorch's copy_) and, where it
was built, host_stream_bench (a STREAM-style OpenMP copy loop), then prints one table
(figure, probe, baseline, ratio, target, pass/fail) and writes it with the run's context to
RESULTS_DIR/probe-summary.md. Exit status 0 even when a target is missed (the table says so);
1 when a program it needs fails.

    compare.py --vramkit BUILD/cli/vramkit --baselines BUILD/bench/probe/probe_gpu_baselines
               [--host-bench BUILD/bench/probe/host_stream_bench] [--results DIR]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, what, timeout=600):
    print("+ " + " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    sys.stderr.write(p.stderr[-4000:])
    return p


def load(path):
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vramkit", required=True)
    ap.add_argument("--baselines", required=True)
    ap.add_argument("--host-bench", default="")
    ap.add_argument("--torch-script", default=os.path.join(HERE, "torch_copies.py"))
    ap.add_argument("--results", default=os.environ.get("RESULTS_DIR", "."))
    a = ap.parse_args()
    os.makedirs(a.results, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="probe-compare-")
    have_host = bool(a.host_bench) and os.access(a.host_bench, os.X_OK)

    sections = "device,h2d"
    probe_json = os.path.join(a.results, "compare-probe.json")
    p = run([a.vramkit, "probe", "--only", sections, "--json", probe_json], "vramkit probe")
    if p.returncode != 0:
        print(f"compare.py: vramkit probe failed (exit {p.returncode})", file=sys.stderr)
        return 1
    probe = load(probe_json)
    res = {r["key"]: r for r in probe.get("results", [])}

    def med(key):
        r = res.get(key)
        return None if r is None else r["stats"]["median"]

    h2d_size = (res.get("gpu0.h2d.pinned") or {}).get("size_bytes", 1 << 30)
    dev_size = (res.get("gpu0.device.read") or {}).get("size_bytes", 2 << 30)

    base_json = os.path.join(tmp, "baselines.json")
    p = run([a.baselines, "--h2d-bytes", str(h2d_size), "--device-bytes", str(dev_size), "--json", base_json],
            "baselines")
    if p.returncode != 0:
        print(f"compare.py: baselines failed (exit {p.returncode})", file=sys.stderr)
        return 1
    base = load(base_json)

    torch_doc, torch_note = None, ""
    tj = os.path.join(tmp, "torch.json")
    p = run([sys.executable, a.torch_script, "--h2d-bytes", str(h2d_size), "--device-bytes", str(dev_size),
             "--json", tj], "torch")
    if p.returncode == 0:
        torch_doc = load(tj)
    else:
        torch_note = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]

    host_doc, host_note = None, ""
    if have_host:
        hj = os.path.join(tmp, "host.json")
        p = run([a.host_bench, "--json", hj], "host bench")
        if p.returncode == 0:
            try:
                host_doc = load(hj)
            except (OSError, ValueError):
                try:
                    host_doc = json.loads(p.stdout)
                except ValueError:
                    host_note = "host_stream_bench wrote no JSON"
        else:
            host_note = "host_stream_bench failed (exit %d)" % p.returncode
    else:
        host_note = "host_stream_bench not built"

    rows = []  # figure, probe, baseline, ratio, target, verdict

    def row(figure, pv, bv, target_text, ok_fn, unit="GB/s", ratio=None):
        if pv is None or bv is None:
            rows.append((figure, pv, bv, None, target_text, "n/a"))
            return
        if ratio is None:
            ratio = pv / bv if bv else None
        if target_text.startswith("("):
            verdict = "info"
        else:
            verdict = "pass" if ratio is not None and ok_fn(ratio) else "FAIL"
        rows.append((figure, pv, bv, ratio, target_text, verdict))

    copy = res.get("gpu0.device.copy")
    copy_once = copy["extra"].get("copied_once_gbps") if copy else None
    row("device copy kernel vs cudaMemcpy D2D (copied once)", copy_once,
        base.get("d2d_memcpy", {}).get("median"), ">= 1.00x", lambda r: r >= 1.0)
    rd = res.get("gpu0.device.read")
    row("device read kernel vs theoretical peak", med("gpu0.device.read"), rd and rd.get("peak"),
        ">= 0.93 of peak", lambda r: r >= 0.93)
    row("device read kernel vs plain float4 kernel", med("gpu0.device.read"),
        base.get("read_float4", {}).get("median"), "(context)", lambda r: True)
    row("probe cudaMemcpy D2D vs baseline cudaMemcpy D2D", med("gpu0.device.memcpy"),
        base.get("d2d_memcpy", {}).get("median"), "(context)", lambda r: True)
    row("pinned H2D vs cudaMemcpyAsync loop", med("gpu0.h2d.pinned"), base.get("h2d_pinned", {}).get("median"),
        ">= 0.98x", lambda r: r >= 0.98)
    row("pinned D2H vs cudaMemcpyAsync loop", med("gpu0.d2h.pinned"), base.get("d2h_pinned", {}).get("median"),
        ">= 0.98x", lambda r: r >= 0.98)
    within5 = lambda r: abs(r - 1.0) <= 0.05
    t = torch_doc or {}
    row("pinned H2D vs PyTorch copy_ pinned->device", med("gpu0.h2d.pinned"),
        (t.get("h2d_pinned") or {}).get("median"), "within 5%", within5)
    row("cudaMemcpy D2D vs PyTorch copy_ device->device", med("gpu0.device.memcpy"),
        (t.get("d2d") or {}).get("median"), "within 5%", within5)
    row("pinned D2H vs PyTorch copy_ device->pinned", med("gpu0.d2h.pinned"),
        (t.get("d2h_pinned") or {}).get("median"), "within 5%", within5)
    # host_stream_bench runs the probe's host copy and the STREAM loop itself in alternating
    # rounds; its ratio is the median of the per-round ratios, not the ratio of the two medians.
    hd = host_doc or {}
    row("host all-thread copy vs STREAM-style OpenMP copy (read + written; median of per-round ratios)",
        (hd.get("probe_all_threads") or {}).get("median"), (hd.get("stream_copy") or {}).get("median"),
        ">= 0.95x", lambda r: r >= 0.95, ratio=hd.get("ratio_probe_over_stream"))

    def fmt(v):
        return "-" if v is None else ("%.1f" % v if v >= 10 else "%.3f" % v)

    lines = ["| figure | probe | baseline | ratio | target | result |", "| --- | ---: | ---: | ---: | --- | --- |"]
    for fig, pv, bv, ratio, target, verdict in rows:
        lines.append(f"| {fig} | {fmt(pv)} | {fmt(bv)} | {'-' if ratio is None else '%.3f' % ratio} | {target} | {verdict} |")
    table = "\n".join(lines)
    print(table)

    h = probe.get("header", {})
    # A source tree without git (an exported copy) names its commit in VRAMKIT_COMMIT.
    commit = os.environ.get("VRAMKIT_COMMIT") or subprocess.run(
        ["git", "-C", HERE, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    md = ["# vramkit probe: side-by-side comparison", "",
          f"- GPU: {h.get('gpu.0.name', base.get('device', '?'))}, driver {h.get('gpu.driver_version', '?')}, "
          f"CUDA driver {h.get('gpu.cuda_driver_version', '?')}, runtime {h.get('gpu.cuda_runtime_version', '?')}",
          f"- PCIe link: gen {h.get('gpu.0.pcie.gen.current', '?')} of {h.get('gpu.0.pcie.gen.max', '?')}, "
          f"x{h.get('gpu.0.pcie.width.current', '?')} of x{h.get('gpu.0.pcie.width.max', '?')}; "
          f"GPU NUMA node {h.get('gpu.0.numa_node', '?')}",
          f"- commit {commit}, {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
          f"- sizes: device buffers {dev_size} bytes, host<->device transfers {h2d_size} bytes; "
          "GB/s decimal; medians; every probe figure verified by checksum",
          f"- PyTorch: {t.get('torch', 'not run: ' + torch_note)}; host STREAM baseline: "
          f"{'run' if host_doc else host_note}",
          "", table, ""]
    if rd and rd.get("peak"):
        md.append(f"Device read: {rd['stats']['median']:.1f} GB/s = {100 * rd['stats']['median'] / rd['peak']:.1f}% "
                  f"of {rd['peak']:.1f} GB/s ({rd.get('peak_basis', '')}).")
    for key in ("gpu0.device.read", "gpu0.device.copy"):
        r = res.get(key)
        if r:
            fams = ", ".join(f"{k[len('trial_best_gbps_'):]} {v:.0f}" for k, v in sorted(r.get("extra", {}).items())
                             if k.startswith("trial_best_gbps_"))
            md.append(f"{key}: {r.get('note', '')}. Best trial rate per family of launch shapes (GB/s): "
                      f"{fams or 'n/a'}.")
    md.append("")
    md.append("All probe figures of this run (median, min, max):")
    md.append("")
    md.append("| key | median | min | max | unit | convention |")
    md.append("| --- | ---: | ---: | ---: | --- | --- |")
    for r in probe.get("results", []):
        s = r["stats"]
        md.append(f"| {r['key']} | {fmt(s['median'])} | {fmt(s['min'])} | {fmt(s['max'])} | {r.get('unit', '')} | "
                  f"{r.get('convention', '')} |")
    with open(os.path.join(a.results, "probe-summary.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {os.path.join(a.results, 'probe-summary.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
