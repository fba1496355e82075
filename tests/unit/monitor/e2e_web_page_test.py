"""The live page of `vramkit serve` in headless Chromium, driven over WebDriver (chromedriver,
plain HTTP from the standard library): it loads from the binary with no network and no script
errors; every chart (per GPU: memory, utilization, temperature, power, PCIe, top processes; host
and each NUMA node) has a title with its unit, a legend, a y axis and a wall-clock x axis; no two
labels of a chart overlap and none leaves its chart, at desktop and at phone width (390 px, where
the page must not scroll sideways); the per-process memory history comes from /api/samples; the
host-only page draws its charts too. Screenshots are written where VRAMKIT_TEST_ARTIFACTS points
(else a temporary folder) for a person to look at."""
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import (check, fail, free_port, http_get, parse_args, require_tool, start, start_serve,  # noqa: E402
                        temp_dir, wait_for)

args = parse_args()
chromium = require_tool("chromium", ["chromium", "chromium-browser", "google-chrome"])
driver = require_tool("chromedriver", ["chromedriver", "/usr/lib/chromium/chromedriver"])
tmp = temp_dir("vramkit-web-")
shots = os.environ.get("VRAMKIT_TEST_ARTIFACTS") or tmp
os.makedirs(shots, exist_ok=True)
host_root = os.path.join(args.data, "host")
serve, port = start_serve(args.vramkit, os.path.join(args.data, "fake_gpus.json"), host_root, interval="100ms")
no_gpus = os.path.join(tmp, "no_gpus.json")
with open(no_gpus, "w") as f:
    json.dump({"gpus": []}, f)
serve_host, port_host = start_serve(args.vramkit, no_gpus, host_root, interval="100ms")

status, page = http_get(f"http://127.0.0.1:{port}/")
check(status == 200 and "<script src=\"/monitor.js\"></script>" in page, "the page is served from the binary")
check("http://" not in page.replace(f"http://127.0.0.1:{port}", "") and "https://" not in page, "the page references no other host")
wait_for("a few samples", lambda: len(json.loads(http_get(f"http://127.0.0.1:{port}/api/samples")[1])["samples"]) >= 4, 10)
api = json.loads(http_get(f"http://127.0.0.1:{port}/api/samples")[1])
procs = [[p["pid"] for p in s["gpus"][0]["procs"]] for s in api["samples"]]
check(all(p == [4343, 4242] for p in procs), f"/api/samples keeps the top processes of every sample, by memory ({procs[:2]})")
check(all(set(s["gpus"][0]) >= {"used", "util", "temp", "power", "rx", "tx"} for s in api["samples"]),
      "/api/samples has memory, utilization, temperature, power and PCIe per sample")
check(all([n["node"] for n in s["numa"]] == [0, 1] for s in api["samples"]), "/api/samples has both NUMA nodes per sample")

dport = free_port()
drv = start([driver, f"--port={dport}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{dport}"


def wd(method, path, body=None, timeout=60):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read().decode())["value"]
    except urllib.error.HTTPError as e:
        fail(f"WebDriver {method} {path}: {e.read().decode()[:500]}")


wait_for("chromedriver", lambda: json.loads(urllib.request.urlopen(base + "/status", timeout=2).read())["value"]["ready"], 15)
flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", "--disable-dev-shm-usage", f"--user-data-dir={os.path.join(tmp, 'profile')}"]
sess = wd("POST", "/session", {"capabilities": {"alwaysMatch": {
    "browserName": "chrome", "goog:chromeOptions": {"binary": chromium, "args": flags}}}})["sessionId"]
S = f"/session/{sess}"


def js(script):
    return wd("POST", S + "/execute/sync", {"script": script, "args": []})


# Every chart's boxes: its own, the title, legend entries, axis labels; whether the page scrolls
# sideways.
MEASURE = """
function box(e) { var r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }
return { errors: window.vramkitErrors.length, samples: +(document.body.getAttribute('data-samples') || 0),
  scrollWidth: document.documentElement.scrollWidth, width: window.innerWidth,
  charts: Array.prototype.map.call(document.querySelectorAll('.chart'), function (c) {
    var svg = c.querySelector('svg');
    return { box: box(c), title: c.querySelector('.title').textContent,
      attrs: Array.prototype.reduce.call(svg.attributes, function (o, a) { o[a.name] = a.value; return o; }, {}),
      legend: Array.prototype.map.call(c.querySelectorAll('.legend li'), function (l) { return [l.textContent, box(l)]; }),
      labels: Array.prototype.map.call(c.querySelectorAll('.title, .legend li, svg text'), function (l) {
        return [l.getAttribute('class') || l.tagName, l.textContent, box(l)]; }),
      ylabels: c.querySelectorAll('svg text.ylabel').length, xlabels: c.querySelectorAll('svg text.xlabel').length,
      lines: Array.prototype.map.call(c.querySelectorAll('svg path.line'), function (p) { return +p.getAttribute('data-points'); }) };
  }) };
"""


def overlap(a, b):
    return min(a[2], b[2]) - max(a[0], b[0]) > 0.5 and min(a[3], b[3]) - max(a[1], b[1]) > 0.5


def check_layout(m, where):
    check(m["errors"] == 0, f"{where}: no script errors")
    for c in m["charts"]:
        name = c["title"]
        check("(" in name and name.endswith(")"), f"{where}: {name}: the title names the unit")
        check(len(c["legend"]) >= 1 and all(t.strip() for t, _ in c["legend"]), f"{where}: {name}: has a legend")
        check(c["ylabels"] >= 3 and c["xlabels"] >= 1, f"{where}: {name}: y axis ({c['ylabels']} labels) and time axis ({c['xlabels']})")
        labels = c["labels"]
        for i in range(len(labels)):
            for j in range(i + 1, len(labels)):
                if overlap(labels[i][2], labels[j][2]):
                    fail(f"{where}: {name}: labels overlap: {labels[i][:2]} {labels[i][2]} and {labels[j][:2]} {labels[j][2]}")
            b, l = c["box"], labels[i][2]
            if l[0] < b[0] - 0.5 or l[2] > b[2] + 0.5:
                fail(f"{where}: {name}: label {labels[i][1]!r} leaves its chart ({l} outside {b})")
        print(f"ok: {where}: {name}: {len(labels)} labels, none overlapping, all inside")


def load(url, min_samples):
    wd("POST", S + "/url", {"url": url})
    wait_for("the charts", lambda: js("return +(document.body.getAttribute('data-samples') || 0)") >= min_samples, 20)
    time.sleep(0.3)


def shot(name):
    png = base64.b64decode(wd("GET", S + "/screenshot"))
    path = os.path.join(shots, name)
    with open(path, "wb") as f:
        f.write(png)
    check(png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10000, f"screenshot {path} ({len(png)} bytes)")


try:
    wd("POST", S + "/window/rect", {"width": 1280, "height": 2600})
    load(f"http://127.0.0.1:{port}/", 8)
    m = js(MEASURE)
    kinds = sorted((c["attrs"].get("data-gpu", ""), c["attrs"].get("data-kind", "")) for c in m["charts"] if c["attrs"].get("data-kind"))
    check(sum(1 for c in m["charts"] if c["attrs"].get("data-kind")) == 12, f"six charts per GPU ({len(kinds)})")
    mem = [c for c in m["charts"] if c["attrs"].get("data-kind") == "memory"]
    check(sorted(c["attrs"]["data-gpu"] for c in mem) == ["0", "1"], "a memory chart per GPU")
    check(all(c["lines"][0] >= 2 for c in mem), "each memory chart drew a line of at least 2 points")
    top = [c for c in m["charts"] if c["attrs"].get("data-kind") == "processes"]
    check([c["attrs"]["data-processes"] for c in top] == ["2", "1"], "per-process history: 2 processes on GPU 0, 1 on GPU 1")
    check(any("pid 4343 vllm" in t for t, _ in top[0]["legend"]) and all(n >= 2 for n in top[0]["lines"]),
          "the top-process chart draws each process over time, named in the legend")
    check(sorted(c["attrs"].get("data-numa") for c in m["charts"] if "data-numa" in c["attrs"]) == ["0", "1"],
          "a host chart per NUMA node")
    check(any(c["attrs"].get("data-host") == "1" for c in m["charts"]), "the host memory chart")
    check_layout(m, "1280 px")
    shot("monitor-desktop.png")
    check("vllm serve" in js("return document.getElementById('processes').textContent"), "the process table is filled")

    wd("POST", S + "/window/rect", {"width": 390, "height": 4000})
    time.sleep(0.6)
    m = js(MEASURE)
    check(m["scrollWidth"] <= m["width"] + 1, f"phone width: the page does not scroll sideways ({m['scrollWidth']} > {m['width']})")
    check_layout(m, "390 px")
    shot("monitor-phone.png")

    wd("POST", S + "/window/rect", {"width": 1000, "height": 1400})
    load(f"http://127.0.0.1:{port_host}/", 5)
    m = js(MEASURE)
    check(len(m["charts"]) == 3 and all(c["lines"] and c["lines"][0] >= 2 for c in m["charts"]),
          f"host-only page: host and two NUMA charts with data ({len(m['charts'])})")
    check("host memory only" in js("return document.getElementById('gpus').textContent"), "host-only page says so")
    check_layout(m, "host only")
    shot("monitor-host-only.png")
finally:
    try:
        wd("DELETE", S, timeout=20)
    except Exception:  # noqa: BLE001
        pass
print("PASS")
