#!/usr/bin/env python3
"""End-to-end test of `vramkit serve --extender` on loopback.

Nodes are played by `vramkit serve --fake-gpus FILE` exporters (or, in a build whose serve cannot
run, by small Python exporters that print the same metric names), plus one exporter that never
answers and one that answers garbage. This script plays kube-scheduler's part of the protocol as
pkg/scheduler/extender.go does it: POST <urlPrefix>/<verb> with ExtenderArgs, non-200 is an error,
returned NodeNames must be a subset of those sent, scores are 0..10 and get multiplied by the
weight. Usage: extender_e2e_test.py VRAMKIT_BINARY
"""
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from cluster_test_support import FAILURES, ThreadingServer, check

GiB = 1 << 30
VRAMKIT = sys.argv[1]
PROCS = []


def start(args):
    """Starts a vramkit process and returns (process, port) from its 'listening on' line."""
    p = subprocess.Popen([VRAMKIT] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    PROCS.append(p)
    line = p.stdout.readline()
    m = re.search(r"http://[\d.]+:(\d+)/", line)
    if not m:
        err = p.stderr.read() if p.poll() is not None else ""
        raise RuntimeError(f"{' '.join(args)}: no 'listening on' line: {line!r} {err!r}")
    return p, int(m.group(1))


def metrics_text(fixture):
    lines = []
    for i, g in enumerate(fixture["gpus"]):
        labels = f'gpu="{i}",uuid="{g["uuid"]}",name="{g["name"]}"'
        used = g.get("memory_used_bytes", 0)
        lines += [f"vramkit_gpu_up{{{labels}}} 1",
                  f"vramkit_gpu_memory_total_bytes{{{labels}}} {g['memory_total_bytes']}",
                  f"vramkit_gpu_memory_used_bytes{{{labels}}} {used}",
                  f"vramkit_gpu_memory_free_bytes{{{labels}}} {g['memory_total_bytes'] - used}"]
    return "\n".join(lines) + "\n"


def python_exporter(body_for_request):
    """A loopback HTTP server; body_for_request() returns the /metrics body or None to hang."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = body_for_request()
            if body is None:
                time.sleep(5)  # slower than the extender's scrape timeout
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def post(url, body, raw=False):
    data = body if raw else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", errors="replace")


def gpu(name, total_gib, used_gib):
    return {"name": name, "uuid": f"GPU-{name[-4:]}-{total_gib}-{used_gib}", "memory_total_bytes": total_gib * GiB,
            "memory_used_bytes": used_gib * GiB, "memory_reserved_bytes": 0, "processes": []}


def pod(request=None, annotation=None):
    p = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default", "annotations": {}},
         "spec": {"schedulerName": "vramkit-scheduler", "containers": [{"name": "c", "resources": {}}]}}
    if request:
        p["spec"]["containers"][0]["resources"] = {"limits": {"vramkit.io/gpu-memory": request},
                                                    "requests": {"vramkit.io/gpu-memory": request}}
    if annotation:
        p["metadata"]["annotations"]["vramkit.io/plan"] = annotation
    return p


def main():
    tmp = tempfile.mkdtemp(prefix="vramkit-extender-e2e.")
    fixtures = {
        "gpu-a": {"gpus": [gpu("NVIDIA H100 80GB HBM3", 80, 70), gpu("NVIDIA H100 80GB HBM3", 80, 40)]},
        "gpu-b": {"gpus": [gpu("NVIDIA H200", 140, 0)]},
        "gpu-c": {"gpus": [gpu("NVIDIA A100-SXM4-40GB", 40, 30), gpu("NVIDIA A100-SXM4-40GB", 40, 30)]},
        "gpu-d": {"gpus": [gpu("NVIDIA T4", 16, 0)]},
    }
    paths = {}
    for name, f in fixtures.items():
        paths[name] = os.path.join(tmp, name + ".json")
        with open(paths[name], "w") as out:
            json.dump(f, out)

    # Nodes: real `vramkit serve` exporters when this build can serve, else Python stand-ins.
    urls = {}
    probe = subprocess.run([VRAMKIT, "serve", "--help"], capture_output=True, text=True)
    use_serve = probe.returncode == 0 and "--fake-gpus" in probe.stdout
    servers = []
    for name in fixtures:
        if use_serve:
            _, port = start(["serve", "--port", "0", "--fake-gpus", paths[name], "--interval", "100ms"])
        else:
            def body(path=paths[name]):
                with open(path) as f:
                    return metrics_text(json.load(f))
            server, port = python_exporter(body)
            servers.append(server)
        urls[name] = f"http://127.0.0.1:{port}"
    hang, hang_port = python_exporter(lambda: None)
    junk, junk_port = python_exporter(lambda: "this is { not metrics\n")
    urls["gpu-hang"] = f"http://127.0.0.1:{hang_port}/metrics"
    urls["gpu-junk"] = f"http://127.0.0.1:{junk_port}/metrics"
    urls["gpu-down"] = "http://127.0.0.1:1/metrics"
    node_map = os.path.join(tmp, "nodes.json")
    with open(node_map, "w") as f:
        json.dump(urls, f)
    print(f"exporters: {'vramkit serve' if use_serve else 'python stand-ins'}")

    _, port = start(["serve", "--extender", "--port", "0", "--nodes", node_map, "--resource-unit", "1", "--policy", "pack",
                     "--scrape-ttl", "300ms", "--scrape-timeout", "500ms"])
    prefix = f"http://127.0.0.1:{port}/vramkit"  # urlPrefix; verbs are appended as kube-scheduler does

    # Wait until every real exporter has taken its first sample (they answer /metrics with GPUs).
    all_nodes = ["gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-hang", "gpu-junk", "gpu-down", "gpu-unknown"]
    deadline = time.time() + 20
    while True:
        status, body = post(prefix + "/filter", {"Pod": pod("1Mi"), "NodeNames": ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]})
        if status == 200 and len(json.loads(body)["NodeNames"]) == 4:
            break
        if time.time() > deadline:
            raise RuntimeError(f"exporters never became ready: {status} {body}")
        time.sleep(0.2)

    # filter, nodeCacheCapable: NodeNames in and out.
    t0 = time.time()
    status, body = post(prefix + "/filter", {"Pod": pod("24Gi"), "NodeNames": all_nodes})
    elapsed = time.time() - t0
    check(status == 200, f"filter status {status}: {body}")
    r = json.loads(body)
    check(set(r) == {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}, f"filter fields {sorted(r)}")
    check(r["NodeNames"] == ["gpu-a", "gpu-b"], f"kept {r['NodeNames']}")
    check(set(r["NodeNames"]) <= set(all_nodes), "returned names must be a subset of those sent")
    check(set(r["FailedNodes"]) == {"gpu-c", "gpu-hang", "gpu-junk", "gpu-down", "gpu-unknown"}, f"failed {r['FailedNodes']}")
    check(set(r["FailedAndUnresolvableNodes"]) == {"gpu-d"}, f"unresolvable {r['FailedAndUnresolvableNodes']}")
    check("10.00 GiB" in r["FailedNodes"].get("gpu-c", ""), f"gpu-c reason {r['FailedNodes'].get('gpu-c')}")
    check("no exporter URL" in r["FailedNodes"].get("gpu-unknown", ""), "gpu-unknown reason")
    check("metrics line 1" in r["FailedNodes"].get("gpu-junk", ""), f"gpu-junk reason {r['FailedNodes'].get('gpu-junk')}")
    check(r["Error"] == "", "filter Error must be empty")
    check(elapsed < 3, f"a hanging exporter held the filter for {elapsed:.1f}s (timeout 0.5s)")

    # filter, !nodeCacheCapable: a NodeList in, the kept items out as sent.
    items = [{"metadata": {"name": n, "labels": {"zone": "z1"}}} for n in all_nodes]
    status, body = post(prefix + "/filter", {"Pod": pod("24Gi"), "Nodes": {"metadata": {}, "items": items}})
    r = json.loads(body) if status == 200 else {}
    check(status == 200 and r["NodeNames"] is None, f"NodeList filter: {status} {body[:200]}")
    check([i["metadata"]["name"] for i in r.get("Nodes", {}).get("items", [])] == ["gpu-a", "gpu-b"], "NodeList kept items")
    check(r.get("Nodes", {}).get("items", [{}])[0].get("metadata", {}).get("labels") == {"zone": "z1"}, "items returned as sent")

    # prioritize: pack prefers the node left fullest; kube-scheduler multiplies by weight and by 10.
    status, body = post(prefix + "/prioritize", {"Pod": pod("24Gi"), "NodeNames": all_nodes})
    check(status == 200, f"prioritize status {status}")
    scores = {e["Host"]: e["Score"] for e in json.loads(body)}
    check([e["Host"] for e in json.loads(body)] == all_nodes, "one score per node, in the order sent")
    check(all(0 <= s <= 10 for s in scores.values()), f"scores out of 0..10: {scores}")
    check(scores["gpu-a"] == 8 and scores["gpu-b"] == 2, f"pack scores {scores}")
    weight = 2
    framework = {h: s * weight * 10 for h, s in scores.items()}
    check(max(framework, key=framework.get) == "gpu-a", "pack should steer the pod to gpu-a")

    # A plan annotation instead of the extended resource: 100 GiB fits only gpu-b (140 GiB free).
    plan = json.dumps({"schema_version": 1, "device_peak_bytes": 100 * GiB})
    status, body = post(prefix + "/filter", {"Pod": pod(annotation=plan), "NodeNames": ["gpu-a", "gpu-b"]})
    check(status == 200 and json.loads(body)["NodeNames"] == ["gpu-b"], f"plan annotation: {body}")

    # Malformed requests: HTTP 400 with a message, and the server keeps serving.
    for bad in [b"", b"{", b"[]", b'{"NodeNames": ["gpu-a"]}', json.dumps({"Pod": pod("1Gi")}).encode(),
                json.dumps({"Pod": pod("1Gi"), "NodeNames": "gpu-a"}).encode(), b"\xff\xfe"]:
        for verb in ("filter", "prioritize"):
            status, body = post(prefix + "/" + verb, bad, raw=True)
            check(status == 400 and body.strip() != "" and body.isascii() and body.count("\n") == 1,
                  f"{verb} {bad[:40]!r}: {status} {body!r}")
    status, body = post(prefix + "/filter", {"Pod": pod("lots"), "NodeNames": ["gpu-a"]})
    check(status == 200 and "invalid quantity" in json.loads(body)["Error"], f"bad quantity: {body}")

    # Live figures: gpu-b fills up; after the scrape TTL the extender sees it.
    fixtures["gpu-b"]["gpus"][0]["memory_used_bytes"] = 130 * GiB
    with open(paths["gpu-b"] + ".tmp", "w") as f:
        json.dump(fixtures["gpu-b"], f)
    os.replace(paths["gpu-b"] + ".tmp", paths["gpu-b"])
    deadline = time.time() + 10
    while True:
        status, body = post(prefix + "/filter", {"Pod": pod("24Gi"), "NodeNames": ["gpu-a", "gpu-b"]})
        r = json.loads(body)
        if r["NodeNames"] == ["gpu-a"]:
            check("gpu-b" in r["FailedNodes"], "gpu-b now full")
            break
        if time.time() > deadline:
            check(False, f"the extender never saw gpu-b fill up: {body}")
            break
        time.sleep(0.1)

    for p in PROCS:
        check(p.poll() is None, f"process exited early: {p.args}")
    for s in servers + [hang, junk]:
        s.shutdown()
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("PASSED: extender filter/prioritize over live exporters, malformed requests, timeouts")
    return 0


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        for p in PROCS:
            p.terminate()
        for p in PROCS:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
    sys.exit(rc)
