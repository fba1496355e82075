#!/usr/bin/env python3
"""Collects the measured configurations of compress_offload.py runs into the offload model's
ground truth (tests/data/offload/measured_compress_offload.json): per mix and compression, the
peak allocated and reserved bytes and the step time as measured, from the newest run that
measured it (runs are given oldest first). Configurations that did not run, or ran out of memory
under the cap, are left out; the cap and the shape must be the same in every run.

    python3 bench/offload/collect_measured.py W=rW/compress-offload.json Z=rZ/compress-offload.json \\
        --machine rZ/machine.txt --out tests/data/offload/measured_compress_offload.json
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

#: What the cases are checked against (tests/python/test_offload_measured.py): issue 22's bar
#: for the planner's peak (allocated within 5%).
TOLERANCE = 0.05


def letters(mix):
    from vramkit import offload_plan

    return offload_plan.letters(mix)


def collect(runs):
    """runs: [(label, compress_offload JSON)], oldest first -> (shape, cap_bytes, cases)."""
    shape = cap = None
    cases = {}
    for label, res in runs:
        got = (res.get("shape"), res.get("cap_bytes"))
        if shape is None:
            shape, cap = got
        elif got != (shape, cap):
            raise ValueError("run %s: shape %s, cap %s differ from the first run's (%s, %s)" % (
                label, got[0], got[1], shape, cap))
        for c in res.get("configs", []):
            if not c.get("ok") or not c.get("mix"):
                continue
            comp = "fp8:mlp,attn,norm" if c.get("compressed") else "none"
            key = (letters(c["mix"]), comp)
            cases[key] = {
                "name": "%s-%s" % (key[0], "fp8" if c.get("compressed") else "bf16"),
                "mix": key[0], "compress_activations": comp, "run": label,
                "max_allocated_bytes": c["peak_allocated_bytes"],
                "max_reserved_bytes": c["peak_reserved_bytes"],
                "step_time_s": round(c["step_time_s"]["median"], 4),
                "timed_steps": c["step_time_s"]["n"]}
    return shape, cap, [cases[k] for k in sorted(cases)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=JSON", help="compress_offload.py outputs, oldest first")
    ap.add_argument("--machine", required=True, help="machine.txt of the newest run (GPU, driver)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--note", default="", help="provenance: which commit and call each run was")
    args = ap.parse_args()
    runs = []
    for item in args.runs:
        label, sep, path = item.partition("=")
        if not sep or not label:
            ap.error("%s: give LABEL=JSON" % item)
        try:
            with open(path) as f:
                runs.append((label, json.load(f)))
        except (OSError, ValueError) as e:
            ap.error("%s: %s" % (path, e))
    try:
        shape, cap, cases = collect(runs)
    except ValueError as e:
        ap.error(str(e))
    with open(args.machine) as f:
        machine = f.read().splitlines()
    # machine.txt: nvidia-smi's CSV line (index, name, driver, memory, ...) and a date line.
    row = next((line.split(", ") for line in machine if line[:1].isdigit() and line.count(", ") >= 3), None)
    gpu = "%s (driver %s, %s)" % (row[1], row[2], row[3]) if row else "unknown"
    date = next((line.split(": ", 1)[1] for line in machine if line.startswith("date: ")), "unknown")
    out = {"about": "Peak memory and step time of vramkit's offload engine (compress_offload.py) per mix, with "
                    "and without fp8 compression, under one cap, as measured; tests/python/"
                    "test_offload_measured.py checks `vramkit plan --offload activations:MIX` against them "
                    "(allocated within %d%%)." % round(100 * TOLERANCE),
           "gpu": gpu, "date": date, "shape": shape, "config": "configs/llama-d2048-l16.json",
           "precision": "amp-bf16", "batch": shape["batch"], "seq": shape["seq"], "cap_bytes": cap,
           "runs": [label for label, _ in runs], "provenance": args.note, "cases": cases}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("%d cases from runs %s -> %s" % (len(cases), ", ".join(out["runs"]), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
