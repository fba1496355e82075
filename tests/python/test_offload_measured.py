"""The offload model against vramkit's offload engine as measured on an H200
(tests/data/offload/measured_compress_offload.json, written by bench/offload/collect_measured.py
from compress_offload.py runs): `vramkit plan --offload activations:MIX` with and without fp8
compression predicts each measured mix's peak allocated bytes within issue 22's 5%, but the cases
tests/data/offload/known_outside_measured.json lists with their causes: those are reported apart,
and one that comes within the bar fails until it is dropped from that list. Needs the CLI
(VRAMKIT_CLI); skipped (77) without it."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "offload")
TOLERANCE = 0.05


def predicted(cli, truth, case):
    argv = [cli, "plan", os.path.join(DATA, truth["config"]), "--precision", truth["precision"],
            "--batch", str(truth["batch"]), "--seq", str(truth["seq"]), "--gpu", "h200",
            "--offload", "activations:" + case["mix"], "--compress-activations",
            case["compress_activations"], "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv[1:]), proc.returncode, proc.stderr.strip()))
    return json.loads(proc.stdout)["offload"]["allocated_peak_bytes"]


def main():
    cli = os.environ.get("VRAMKIT_CLI")
    if not cli or not os.access(cli, os.X_OK):
        print("skipped: VRAMKIT_CLI names no vramkit binary")
        return 77
    with open(os.path.join(DATA, "measured_compress_offload.json")) as f:
        truth = json.load(f)
    if not truth["cases"]:
        print("FAILED: no measured cases")
        return 1
    with open(os.path.join(DATA, "known_outside_measured.json")) as f:
        known = json.load(f)["cases"]
    names = {c["name"] for c in truth["cases"]}
    failures = ["%s is listed as known outside the bar but not measured" % n for n in known if n not in names]
    print("%-28s %-5s %10s %10s %7s" % ("mix", "run", "measured", "planned", "error"))
    for case in truth["cases"]:
        measured = case["max_allocated_bytes"]
        plan = predicted(cli, truth, case)
        err = (plan - measured) / measured
        print("%-28s %-5s %9.2fG %9.2fG %+6.1f%%" % (case["name"], case["run"], measured / 2**30, plan / 2**30,
                                                   100 * err))
        if case["name"] in known:
            if abs(err) <= TOLERANCE:
                failures.append("%s: within the bar now (%+.1f%%): drop it from known_outside_measured.json" % (
                    case["name"], 100 * err))
            else:
                print("  known outside the bar: %s" % known[case["name"]][:120])
        elif abs(err) > TOLERANCE:
            failures.append("%s: planned %.2f GiB, measured %.2f GiB (%+.1f%%, bar %d%%)" % (
                case["name"], plan / 2**30, measured / 2**30, 100 * err, round(100 * TOLERANCE)))
    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
