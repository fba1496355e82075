"""The live page of `vramkit serve` in headless Chromium: it loads from the binary with no network,
records no script errors, and draws the GPU and host charts with data points."""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import (check, fail, http_get, parse_args, require_tool, start_serve, temp_dir)  # noqa: E402

args = parse_args()
chromium = require_tool("chromium", ["chromium", "chromium-browser", "google-chrome"])
tmp = temp_dir("vramkit-web-")
serve, port = start_serve(args.vramkit, os.path.join(args.data, "fake_gpus.json"), os.path.join(args.data, "host"), interval="100ms")
# A few samples of history so the first poll already has a line to draw.
time.sleep(0.6)
status, page = http_get(f"http://127.0.0.1:{port}/")
check(status == 200 and "<script src=\"/monitor.js\"></script>" in page, "the page is served from the binary")
check("http://" not in page.replace(f"http://127.0.0.1:{port}", "") and "https://" not in page, "the page references no other host")

cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
       "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={tmp}",
       "--virtual-time-budget=4000", "--dump-dom", f"http://127.0.0.1:{port}/"]
try:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=45, start_new_session=True)
except subprocess.TimeoutExpired:
    fail("chromium did not finish within 45 s")
dom = r.stdout
if r.returncode != 0 or "<html" not in dom:
    fail(f"chromium failed (exit {r.returncode}): {r.stderr[-2000:]}")
m = re.search(r'<html[^>]*data-errors="(\d+)"', dom)
check(m is None or m.group(1) == "0", "no script errors recorded by window.onerror")
errors = re.search(r'<pre id="errors"[^>]*>(.*?)</pre>', dom, re.S)
check(errors is not None and errors.group(1).strip() == "", "the error box is empty")
gpu_charts = re.findall(r'<svg[^>]*data-points="(\d+)"[^>]*data-gpu="(\d+)"', dom)
check(sorted(g for _, g in gpu_charts) == ["0", "1"], f"one chart per GPU ({gpu_charts})")
check(all(int(n) >= 2 for n, _ in gpu_charts), "each GPU chart drew a line of at least 2 points")
paths = re.findall(r'<path class="used" d="M[0-9.]+,[0-9.]+ L[^"]+"', dom)
check(len(paths) >= 3, "SVG paths with data for both GPUs and the host")
check(re.search(r'<svg[^>]*data-host="1"', dom) is not None, "the host memory chart is drawn")
check("vllm serve" in dom and "python3 train.py" in dom, "the process table is filled")
check("live ·" in dom, "the status line says live")
print("PASS")
