"""What the CLI test scripts share: running the vramkit binary (argv[1]), expect() on its exit
code and output, and finish() reporting the failures (exit 1 when there are any)."""
import re
import subprocess
import sys

VRAMKIT = sys.argv[1]
failures = []


def run(*args):
    r = subprocess.run([VRAMKIT, *args], capture_output=True, timeout=60)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def expect(rc, pattern, *args):
    """Runs vramkit ARGS; a failure unless it exits `rc` and its output matches `pattern`."""
    code, out, err = run(*args)
    text = out + err
    if code != rc:
        failures.append(f"{' '.join(args)} exited {code}, expected {rc}: {text[-400:]!r}")
    elif not re.search(pattern, text, re.M):
        failures.append(f"{' '.join(args)} printed {text[-400:]!r}, expected /{pattern}/")
    return text


def finish(name):
    for f in failures:
        print("FAILED:", f, file=sys.stderr)
    if failures:
        sys.exit(1)
    print("ok: " + name)
