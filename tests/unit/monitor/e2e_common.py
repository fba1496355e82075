"""Shared helpers of the monitor's end-to-end tests: argument parsing, a process registry that
kills everything it started on exit, free loopback ports, bounded polling, and the skip rule
(skip loudly only when a tool is absent and CI is not set; fail in CI)."""
import argparse
import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77  # CTest SKIP_RETURN_CODE

_procs = []


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--vramkit", required=True)
    p.add_argument("--data", required=True)
    return p.parse_args()


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg, flush=True)


def require_tool(name, candidates):
    """Returns the path of the first existing candidate; skips (no CI) or fails (CI) otherwise."""
    for c in candidates:
        path = shutil.which(c) or (c if os.path.isabs(c) and os.access(c, os.X_OK) else None)
        if path:
            return path
    if os.environ.get("CI"):
        fail(f"{name} is not installed (scripts/setup installs it); CI requires this test to run")
    print(f"SKIPPED *** {name} is not installed: this end-to-end test did not run "
          f"(run scripts/setup; in CI it fails instead) ***", flush=True)
    sys.exit(SKIP)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, **kw):
    """Starts a process in its own process group; it is killed at exit whatever happens."""
    p = subprocess.Popen(cmd, start_new_session=True, **kw)
    _procs.append(p)
    return p


def stop(p, timeout=5):
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    return p.returncode


@atexit.register
def _cleanup():
    for p in _procs:
        stop(p, timeout=3)


def start_serve(vramkit, fixture, host_root, interval="200ms", extra=()):
    """Starts `vramkit serve --port 0` and returns (process, port) once it is listening."""
    p = start([vramkit, "serve", "--port", "0", "--interval", interval, "--fake-gpus", fixture,
               "--host-root", host_root, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "listening on http://127.0.0.1:" not in line:
        err = p.stderr.read() if p.poll() is not None else ""
        fail(f"vramkit serve did not start: {line!r} {err!r}")
    port = int(line.split("127.0.0.1:")[1].split("/")[0])
    return p, port


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read().decode("utf-8")


def wait_for(what, fn, timeout_s, interval_s=0.2):
    """Polls fn() until it returns a true value (returned) or the time runs out (fails)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - the server may not be up yet
            last = e
        time.sleep(interval_s)
    fail(f"timed out after {timeout_s} s waiting for {what} (last: {last!r})")


def temp_dir(prefix):
    d = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, d, True)
    return d
