"""The subcommands' spellings and their exit codes on bad input: `vramkit extender` and the
deprecated `vramkit serve --extender`, the durations they take, and options refused where they
would be ignored. Usage: cli_test.py VRAMKIT_BINARY"""
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

from cli_checks import VRAMKIT, expect, failures, finish

def listens(*args):
    """Starts vramkit, returns (its 'listening on' line, its stderr) once it answers /healthz, and
    stops it."""
    p = subprocess.Popen([VRAMKIT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        port = re.search(r":(\d+)/", line)
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port.group(1)}/healthz", timeout=1)
                break
            except (OSError, AttributeError):
                time.sleep(0.05)
    finally:
        p.terminate()
        _, err = p.communicate(timeout=10)
    return line, err


with tempfile.TemporaryDirectory(prefix="vramkit-cli.") as tmp:
    nodes = os.path.join(tmp, "nodes.txt")
    with open(nodes, "w") as f:
        f.write("node-a http://127.0.0.1:9/metrics\n")
    missing = os.path.join(tmp, "missing.txt")

    expect(0, r"--scrape-ttl", "extender", "--help")
    expect(2, r"needs --nodes", "extender")
    # Durations, sizes and headroom are checked as the options are read: one line naming the
    # option, before anything runs (the --nodes file is not read).
    expect(2, r"^vramkit: --scrape-ttl: duration '2x' has an unknown unit 'x' \(use ms, s, m or h\) "
           r"\(see vramkit --help\)$", "extender", "--nodes", missing, "--scrape-ttl", "2x")
    expect(2, r"^vramkit: --scrape-timeout: duration 'soon' is not a duration",
           "extender", "--nodes", nodes, "--scrape-timeout", "soon")
    expect(2, r"^vramkit: --headroom: .*'lots'", "extender", "--nodes", nodes, "--headroom", "lots")
    expect(2, r"^vramkit: --resource-unit: .*'1Gx'", "extender", "--nodes", nodes, "--resource-unit", "1Gx")
    expect(2, r"^vramkit: --shard-size: .*'big'", "slurm", "gres", "--shard-size", "big")
    expect(2, r"^vramkit: --headroom: .*'-5%'", "slurm", "gres", "--headroom=-5%")
    expect(2, r"^vramkit: --size: .*'12 parsecs'", "probe", "--size", "12 parsecs")
    expect(2, r"^vramkit: --latency-size: .*'x'", "probe", "--latency-size", "x")
    expect(2, r"^vramkit: --budget: .*'half'", "texture", "plan", tmp, "--budget", "half")
    expect(2, r"cannot read --nodes file", "extender", "--nodes", missing)
    expect(2, r"not a TCP port", "extender", "--nodes", nodes, "--port", "70000")
    # The old spelling still works, says that it is deprecated, and refuses what it would ignore.
    expect(2, r"^vramkit: 'serve --extender' is deprecated: use 'vramkit extender'",
           "serve", "--extender", "--nodes", missing)
    expect(2, r"requires --extender", "serve", "--nodes", nodes)
    expect(2, r"excludes --extender", "serve", "--extender", "--nodes", nodes, "--interval", "2s")
    expect(2, r"a subcommand is required: .*extender")

    # Both spellings serve where this build can: each says where it listens (port 0: a free one).
    help_text = subprocess.run([VRAMKIT, "serve", "--help"], capture_output=True, text=True).stdout
    if "--fake-gpus" in help_text:
        for spelling in (["extender"], ["serve", "--extender"]):
            line, err = listens(*spelling, "--port", "0", "--nodes", nodes)
            name = "vramkit " + " ".join(spelling)
            if not re.match(re.escape(name) + r": listening on http://127\.0\.0\.1:\d+/ .*1 nodes, "
                            r"policy pack$", line.strip()):
                failures.append(f"{name} printed {line!r} {err!r}")
            deprecated = [l for l in err.splitlines() if "deprecated" in l]
            if len(deprecated) != (1 if "serve" in spelling else 0):
                failures.append(f"{name}: deprecation lines {deprecated!r}")

finish("cli")
