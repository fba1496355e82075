#!/usr/bin/env python3
"""Tests of `vramkit extender`'s flags: every refused combination exits 2 with one line; the bind
verb reserves, annotates and binds through --api-url; discovery finds exporters from the API's
PodList; --max-sample-age makes an old exporter sample unknown. A small Python HTTP server plays
the API server (a kubectl proxy) and the node exporters. Usage: extender_cli_test.py VRAMKIT
"""
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request

from cluster_test_support import PROCS, check, outcome, run_script, serve

GiB = 1 << 30
VRAMKIT = sys.argv[1]


def metrics(total_gib, used_gib, sample_time, pods=()):
    labels = 'gpu="0",uuid="GPU-aaaa",name="NVIDIA H200"'
    lines = [f"vramkit_gpu_up{{{labels}}} 1",
             f"vramkit_gpu_memory_total_bytes{{{labels}}} {total_gib * GiB}",
             f"vramkit_gpu_memory_used_bytes{{{labels}}} {used_gib * GiB}",
             f"vramkit_gpu_memory_free_bytes{{{labels}}} {(total_gib - used_gib) * GiB}",
             f"vramkit_exporter_last_sample_timestamp_seconds {sample_time}"]
    for uid in pods:
        lines.append(f'vramkit_gpu_process_memory_used_bytes{{gpu="0",pid="7",pod_uid="{uid}"}} {GiB}')
    return "\n".join(lines) + "\n"


def run(args):
    return subprocess.run([VRAMKIT, "extender"] + args, capture_output=True, text=True, timeout=30)


def start(args):
    p = subprocess.Popen([VRAMKIT, "extender", "--port", "0"] + args, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    PROCS.append(p)
    line = p.stdout.readline()
    m = re.search(r"http://[\d.]+:(\d+)/", line)
    if not m:
        raise RuntimeError(f"{args}: no 'listening on' line: {line!r} {p.stderr.read()!r}")
    return p, int(m.group(1)), line


def post(port, verb, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/vramkit/{verb}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def pod(uid, gib):
    return {"metadata": {"name": "train-" + uid, "namespace": "ml", "uid": uid},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"vramkit.io/gpu-memory": str(gib)}}}]}}


def filter_args(uid, gib, nodes):
    return {"Pod": pod(uid, gib), "NodeNames": nodes}


def refusals(nodes_file):
    cases = [
        ([], "--nodes"),
        (["--nodes", nodes_file, "--discover-namespace", "kube-system", "--api-url", "http://127.0.0.1:1"],
         "exclusive"),
        (["--nodes", nodes_file, "--discover-selector", "app=x"], "--discover-namespace"),
        (["--nodes", nodes_file, "--exporter-port", "9410"], "--discover-namespace"),
        (["--nodes", nodes_file, "--bind-verb"], "--api-url"),
        (["--discover-namespace", "ns"], "--api-url"),
        (["--nodes", nodes_file, "--api-url", "http://127.0.0.1:8001"], "only by"),
        (["--nodes", nodes_file, "--reservation-ttl", "5m"], "--bind-verb"),
        (["--nodes", nodes_file, "--scrape-interval", "2s", "--scrape-ttl", "1s"], "--max-sample-age"),
        (["--nodes", nodes_file, "--max-sample-age", "10s"], "--scrape-interval"),
        (["--nodes", nodes_file, "--scrape-interval", "5s", "--max-sample-age", "1s"], "stale"),
        (["--nodes", nodes_file, "--scrape-interval", "0s"], "above zero"),
        (["--nodes", nodes_file, "--scrape-interval", "soon"], "--scrape-interval"),
        (["--nodes", nodes_file, "--resource-unit", "0"], "--resource-unit"),
        (["--nodes", nodes_file, "--bind-verb", "--api-url", "https://api:6443"], "http://"),
        (["--nodes", nodes_file, "--bind-verb", "--api-url", "http://127.0.0.1:1",
          "--reservation-ttl", "0s"], "above zero"),
    ]
    for args, needle in cases:
        r = run(args)
        err = r.stderr.strip()
        check(r.returncode == 2, f"{args}: exit {r.returncode}, want 2 ({err!r})")
        check(needle in err and len(err.splitlines()) == 1, f"{args}: {err!r} should be one line naming {needle}")


def main():
    now = time.time()
    state = {"pods_shown": [], "stale_time": now - 3600, "patches": [], "bindings": []}

    def exporter(method, path, body):
        return 200, "text/plain", metrics(141, 0, time.time(), state["pods_shown"])

    def stale_exporter(method, path, body):
        return 200, "text/plain", metrics(141, 0, state["stale_time"])

    exp_port = serve(exporter)
    stale_port = serve(stale_exporter)

    def api(method, path, body):
        if method == "GET" and path.startswith("/api/v1/namespaces/vramkit/pods"):
            check("labelSelector=app%3Dvramkit-exporter" in path or "labelSelector=app=vramkit-exporter" in path,
                  f"discovery selector in {path}")
            items = [{"metadata": {"name": "exp-a"}, "spec": {"nodeName": "node-a"},
                      "status": {"phase": "Running", "podIP": "127.0.0.1",
                                 "conditions": [{"type": "Ready", "status": "True"}]}}]
            return 200, "application/json", json.dumps({"kind": "PodList", "apiVersion": "v1", "items": items})
        if method == "PATCH":
            state["patches"].append((path, json.loads(body)))
            return 200, "application/json", "{}"
        if method == "POST" and path.endswith("/binding"):
            state["bindings"].append((path, json.loads(body)))
            return 201, "application/json", "{}"
        return 404, "text/plain", "not found"

    api_port = serve(api)
    nodes_file = f"/tmp/vramkit-extender-cli-{id(state)}.json"
    with open(nodes_file, "w") as f:
        json.dump({"node-a": f"http://127.0.0.1:{exp_port}/metrics",
                   "node-old": f"http://127.0.0.1:{stale_port}/metrics"}, f)

    refusals(nodes_file)

    # Bind verb: reservations make a second 100 GiB pod not fit the 141 GiB GPU before its process
    # shows; the Binding and the GPU annotations go to the API.
    api_url = f"http://127.0.0.1:{api_port}"
    p, port, line = start(["--nodes", nodes_file, "--bind-verb", "--api-url", api_url,
                           "--scrape-interval", "100ms", "--max-sample-age", "1s", "--reservation-ttl", "1m"])
    check("/bind" in line and "background" in line, f"listening line {line!r}")
    time.sleep(0.5)
    st, res = post(port, "filter", filter_args("uid-1", 100, ["node-a", "node-old"]))
    check(st == 200 and res.get("NodeNames") == ["node-a"], f"filter 1: {st} {res}")
    check("node-old" in (res.get("FailedNodes") or {}), f"stale node-old not failed: {res}")
    st, res = post(port, "bind", {"PodName": "train-uid-1", "PodNamespace": "ml", "PodUID": "uid-1", "Node": "node-a"})
    check(st == 200 and res.get("Error") == "", f"bind 1: {st} {res}")
    check(len(state["bindings"]) == 1 and state["bindings"][0][0] == "/api/v1/namespaces/ml/pods/train-uid-1/binding",
          f"binding posted: {state['bindings']}")
    ann = state["patches"][0][1]["metadata"]["annotations"] if state["patches"] else {}
    check(ann.get("vramkit.io/gpu-uuid") == "GPU-aaaa" and ann.get("vramkit.io/gpu-memory-bytes") == str(100 * GiB),
          f"annotations {ann}")
    st, res = post(port, "filter", filter_args("uid-big", 200, ["node-a"]))
    check(st == 200 and "node-a" in (res.get("FailedAndUnresolvableNodes") or {}), f"200 GiB: {res}")
    st, res = post(port, "filter", filter_args("uid-2", 100, ["node-a"]))
    check(st == 200 and res.get("NodeNames") in (None, []), f"second pod must not fit while reserved: {res}")
    # The pod's process shows on the exporter: the reservation is confirmed and dropped, the
    # exporter's own figure (still 0 used here) is trusted again.
    state["pods_shown"] = ["uid-1"]
    time.sleep(0.6)
    st, res = post(port, "filter", filter_args("uid-3", 100, ["node-a"]))
    check(st == 200 and res.get("NodeNames") == ["node-a"], f"after confirmation: {res}")
    st, res = post(port, "bind", {"PodName": "x", "PodNamespace": "ml", "PodUID": "never-filtered", "Node": "node-a"})
    check(st == 200 and res.get("Error"), f"bind of an unknown pod must fail: {res}")
    p.terminate()
    p.wait(timeout=10)

    # Without --bind-verb there is no bind verb. --resource-unit 1: "100" is 100 bytes, so the
    # request fits anywhere.
    p, port, line = start(["--nodes", nodes_file, "--resource-unit", "1"])
    check("/bind" not in line and "on request" in line, f"listening line {line!r}")
    st, _ = post(port, "bind", {"PodName": "x", "PodNamespace": "ml", "PodUID": "u", "Node": "node-a"})
    check(st == 404, f"bind without --bind-verb answered {st}")
    st, res = post(port, "filter", filter_args("uid-5", 200, ["node-a"]))
    check(st == 200 and res.get("NodeNames") == ["node-a"], f"200 bytes fit: {res}")
    p.terminate()
    p.wait(timeout=10)

    # Discovery: the node map comes from the API's PodList (pod IP 127.0.0.1, --exporter-port).
    p, port, line = start(["--discover-namespace", "vramkit", "--api-url", api_url,
                           "--exporter-port", str(exp_port), "--scrape-interval", "100ms"])
    check("1 nodes from pods app=vramkit-exporter in vramkit" in line, f"discovery line {line!r}")
    time.sleep(0.5)
    st, res = post(port, "filter", filter_args("uid-9", 10, ["node-a", "node-b"]))
    check(st == 200 and res.get("NodeNames") == ["node-a"], f"filter over discovered nodes: {res}")
    p.terminate()
    p.wait(timeout=10)

    return outcome("extender CLI")


if __name__ == "__main__":
    run_script(main)
