#!/usr/bin/env python3
"""Checks a `vramkit probe --json` report against the probe's targets and prints one PASS/FAIL line
each, then the access-pattern ratios and cache levels as a Markdown table.

usage: check_targets.py REPORT.json [--quick-ms MS] [--full-ms MS]
Exit status: 0 when every check passes, 1 when one fails, 2 on a bad report.
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--quick-ms", type=float)
    ap.add_argument("--full-ms", type=float)
    a = ap.parse_args()
    try:
        doc = json.load(open(a.report, encoding="utf-8"))
        results = {r["key"]: r for r in doc["results"]}
        header = doc["header"]
    except (OSError, ValueError, KeyError) as e:
        print(f"check_targets: {a.report}: not a probe report ({e})", file=sys.stderr)
        return 2
    ok = True

    def check(name, passed, detail):
        nonlocal ok
        ok = ok and passed
        print(f"{'PASS' if passed else 'FAIL'} {name}: {detail}")

    def median(key):
        r = results.get(key)
        return r["stats"]["median"] if r else None

    if a.quick_ms is not None:
        check("quick run <= 15 s", a.quick_ms <= 15000, f"{a.quick_ms / 1000:.1f} s")
    if a.full_ms is not None:
        check("full run <= 90 s", a.full_ms <= 90000, f"{a.full_ms / 1000:.1f} s")
    # The report's key is "skipped" (report_json.cpp); a missing list is a bad report.
    if "skipped" not in doc:
        print(f"check_targets: {a.report}: not a probe report (no skipped list)", file=sys.stderr)
        return 2
    failed = [s for s in doc["skipped"] if s.get("failed")]
    check("no verification failed", not failed,
          "; ".join(f"{s['key']}: {s['reason']}" for s in failed) or "none")
    gpus = int(header.get("gpu.count", "0"))
    for g in range(gpus):
        t = f"gpu{g}"
        unit, dev = median(f"{t}.pattern.read.unit"), median(f"{t}.device.read")
        if unit is None or dev is None:
            check(f"{t} unit-stride pattern read within 2% of device read", False,
                  f"missing: pattern.read.unit={unit}, device.read={dev}")
        else:
            r = unit / dev
            check(f"{t} unit-stride pattern read within 2% of device read", abs(r - 1) <= 0.02,
                  f"{unit:.1f} vs {dev:.1f} GB/s = {r:.3f}x")
        l2 = results.get(f"{t}.cache.l2")
        reported = float(header.get(f"gpu.{g}.l2_bytes", "0"))
        if l2 is None or "measured_size_bytes" not in l2.get("extra", {}) or reported <= 0:
            check(f"{t} L2 plateau within 10% of the driver's L2 size", False,
                  f"no L2 plateau size (driver: {reported / 2**20:.1f} MiB)")
        else:
            size = l2["extra"]["measured_size_bytes"]
            r = size / reported
            check(f"{t} L2 plateau within 10% of the driver's L2 size", abs(r - 1) <= 0.10,
                  f"{size / 2**20:.1f} MiB vs {reported / 2**20:.1f} MiB = {r:.3f}x "
                  f"(plateau {l2['stats']['median']:.0f} GB/s)")

    print()
    print("| pattern | ratio to unit stride (median) | useful GB/s |")
    print("| --- | ---: | ---: |")
    rows = 0
    for key, r in results.items():
        if ".pattern." in key and r.get("unit") == "x":
            rows += 1
            print(f"| {key} | {r['stats']['median']:.3f} | {r.get('extra', {}).get('useful_gbps', 0):.1f} |")
    if rows == 0:
        why = "; ".join(f"{s['key']}: {s['reason']}" for s in doc["skipped"]
                        if ".pattern" in s["key"]) or "the section did not run"
        print(f"| (no pattern ratios: {why}) | - | - |")
    print()
    print("| cache level | GB/s | ends at |")
    print("| --- | ---: | ---: |")
    for key, r in results.items():
        if ".cache." in key:
            end = r.get("extra", {}).get("measured_size_bytes")
            print(f"| {key} | {r['stats']['median']:.0f} | {end / 2**20:.1f} MiB |" if end else
                  f"| {key} | {r['stats']['median']:.0f} | - |")
    # Both cache curves point by point (MiB: median GB/s), where the levels' sizes are read off.
    curves = {c["key"]: c for c in doc.get("curves", [])}
    for g in range(gpus):
        for suffix in ("cache.sweep", "cache.l2_sweep"):
            c = curves.get(f"gpu{g}.{suffix}")
            if not c:
                continue
            pts = " | ".join(f"{p['x'] / 2**20:g} {p['stats']['median']:.0f}" for p in c["points"])
            print()
            print(f"{c['key']} (MiB GB/s): {pts}")
    times = [f"{k}: {v}" for k, v in sorted(header.items()) if k.endswith("section_ms")]
    if times:
        print()
        print("GPU section wall times (ms): " + "; ".join(times))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
