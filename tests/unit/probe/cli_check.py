#!/usr/bin/env python3
"""Runs the built `vramkit` binary for one `probe` case and checks its exit code and output.

usage: cli_check.py VRAMKIT CASE [WORKDIR]
"""
import html.parser
import json
import re
import resource
import subprocess
import sys


def run(binary, *args, address_space=None):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

    p = subprocess.run([binary, "probe", *args], capture_output=True, text=True, timeout=240,
                       preexec_fn=limit if address_space else None)
    return p.returncode, p.stdout, p.stderr


AS_LIMIT = re.compile(r"RLIMIT_AS limit ([0-9.]+) (B|KiB|MiB|GiB), ([0-9.]+) (B|KiB|MiB|GiB) in use")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def memory_limit(binary):
    """The probe under a real address-space limit (setrlimit RLIMIT_AS, as `ulimit -v` sets): its
    own sizes fit in what the limit leaves, a requested size that cannot fit is refused."""
    args = ["--quick", "--only", "host,latency,loaded-latency", "--json", "-"]
    # First under a loose limit, to learn what the process maps before it allocates anything.
    rc, out, err = run(binary, *args, address_space=8 << 30)
    expect(rc == 0, f"exit 0 under an 8 GiB address-space limit, got {rc}", out, err)
    m = AS_LIMIT.search(json.loads(out)["header"].get("host.memory.limits", ""))
    expect(m is not None, "the header lists the RLIMIT_AS limit", out, err)
    in_use = float(m.group(3)) * UNITS[m.group(4)]
    # Then with 320 MiB left: the default quick arrays (3 x >= 64 MiB, 4x the last-level cache)
    # would not all fit; the probe's own choice must, and every section must still measure.
    tight = int(in_use) + (320 << 20)
    rc, out, err = run(binary, *args, address_space=tight)
    expect(rc == 0, f"exit 0 with 320 MiB of address space left, got {rc}", out, err)
    doc = json.loads(out)
    sizing = doc["header"].get("host.bw.array_bytes", "")
    expect("limited to half of the" in sizing, f"array size limited by the budget: {sizing}", out, err)
    array = next(r["size_bytes"] for r in doc["results"] if r["key"] == "host.bw.copy.all_threads")
    expect(3 * array <= 170 << 20, f"three arrays within half of what is left: {array}", out, err)
    keys = {r["key"] for r in doc["results"]}
    for k in ("host.bw.copy.all_threads", "host.latency.loaded.idle"):
        expect(k in keys, f"{k} measured under the limit", out, err)
    chase = next((c for c in doc["curves"] if c["key"] == "host.latency"), None)
    expect(chase is not None, "the latency curve measured under the limit", out, err)
    top = max(p["x"] for p in chase["points"])
    expect(top <= 80 << 20, f"the latency curve within a quarter of what is left: {top}", out, err)
    # A requested size that cannot fit: one line naming it and the limit, exit 2, nothing run.
    rc, out, err = run(binary, "--quick", "--only", "host", "--size", "256MiB",
                       address_space=tight)
    expect(rc == 2, f"exit 2 for --size 256MiB under the limit, got {rc}", out, err)
    lines = [l for l in err.strip().splitlines() if l]
    expect(len(lines) == 1, "one line on stderr", out, err)
    for word in ("--size 256.00 MiB", "RLIMIT_AS", "at most"):
        expect(word in lines[0], f"message names '{word}'", out, err)


def expect(cond, what, out="", err=""):
    if not cond:
        print(f"FAILED: {what}\n--- stdout ---\n{out[-3000:]}\n--- stderr ---\n{err[-3000:]}")
        sys.exit(1)


def invalid_input(binary, args, must_name):
    rc, out, err = run(binary, *args)
    expect(rc == 2, f"exit code 2 for {args}, got {rc}", out, err)
    lines = [l for l in err.strip().splitlines() if l]
    expect(len(lines) == 1, f"one line on stderr for {args}", out, err)
    for word in must_name:
        expect(word in lines[0], f"message names '{word}'", out, err)


class BalanceChecker(html.parser.HTMLParser):
    VOID = {"meta", "link", "br", "hr", "img", "input"}

    def __init__(self):
        super().__init__()
        self.stack, self.problems, self.external = [], [], []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") or (value and ("http://" in value or "https://" in value)):
                self.external.append(f"{tag} {name}={value}")
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in self.VOID:
            self.stack.pop()

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"unexpected </{tag}> (open: {self.stack[-3:]})")
        else:
            self.stack.pop()


def main():
    binary, case = sys.argv[1], sys.argv[2]
    workdir = sys.argv[3] if len(sys.argv) > 3 else "."
    if case == "bad_flag":
        invalid_input(binary, ["--no-such-flag"], ["--no-such-flag"])
    elif case == "bad_only":
        invalid_input(binary, ["--only", "host,warp"], ["warp", "latency", "h2d"])
    elif case == "bad_size":
        invalid_input(binary, ["--size", "12XB"], ["12XB"])
    elif case == "bad_threads":
        invalid_input(binary, ["--threads", "-3", "--only", "host"], ["--threads"])
    elif case == "list":
        rc, out, err = run(binary, "--list")
        expect(rc == 0, "exit 0", out, err)
        for key in ("host.bw.copy.all_threads", "host.latency", "gpu{N}.h2d.pinned"):
            expect(key in out, f"--list shows {key}", out, err)
    elif case == "json":
        rc, out, err = run(binary, "--quick", "--only", "host,latency", "--json", "-")
        expect(rc == 0, f"exit 0, got {rc}", out, err)
        doc = json.loads(out)
        expect(doc.get("schema_version") == 1, "schema_version 1", out, err)
        keys = {r["key"] for r in doc["results"]}
        expect("host.bw.copy.all_threads" in keys, "copy figure present", out, err)
        for r in doc["results"]:
            for f in ("unit", "convention", "size_bytes", "repetitions", "samples", "stats"):
                expect(f in r, f"{r['key']} has {f}", out, err)
            expect(r["verified"], f"{r['key']} verified", out, err)
            expect(len(r["samples"]) >= 3, f"{r['key']} has >= 3 samples", out, err)
        expect(any(c["key"] == "host.latency" for c in doc["curves"]), "latency curve", out, err)
        expect("probe" in doc["header"].get("command_line", ""), "command line in header", out, err)
    elif case == "memory_limit":
        memory_limit(binary)
    elif case == "html":
        path = f"{workdir}/probe_cli_report.html"
        rc, out, err = run(binary, "--quick", "--only", "latency", "--latency-size", "4MiB", "--html", path)
        expect(rc == 0, f"exit 0, got {rc}", out, err)
        text = open(path, encoding="utf-8").read()
        checker = BalanceChecker()
        checker.feed(text)
        checker.close()
        expect(not checker.problems, f"balanced tags: {checker.problems[:3]}")
        expect(not checker.stack, f"unclosed tags: {checker.stack}")
        expect(not checker.external, f"no external references: {checker.external[:3]}")
        expect("http://" not in text and "https://" not in text, "no URL in the page")
        expect("<svg" in text, "a chart")
    else:
        expect(False, f"unknown case {case}")
    print(f"ok: {case}")


if __name__ == "__main__":
    main()
