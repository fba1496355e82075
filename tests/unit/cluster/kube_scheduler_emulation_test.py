#!/usr/bin/env python3
"""Emulated kube-scheduler against `vramkit extender` (there is no kube-scheduler binary here).

EmulatedHTTPExtender follows upstream pkg/scheduler/extender.go (HTTPExtender) and the calling
code in schedule_one.go step by step:
  * IsInterested: with managedResources set, only a pod whose containers or init containers name
    one of them in requests or limits is sent; other pods skip the extender entirely;
  * Filter: nodeCacheCapable -> ExtenderArgs{Pod, Nodes: null, NodeNames: [...]}, else
    {Pod, Nodes: {"metadata":{},"items":[...]}, NodeNames: null}; a non-200 answer, a non-empty
    Error or a returned node name not among those sent is an error; an error of an ignorable
    extender is skipped, of another one fails the scheduling attempt;
  * Prioritize: errors are ignored (no score from this extender); Score x weight x
    (MaxNodeScore 100 / MaxExtenderPriority 10);
  * Bind: ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}, Error non-empty is a failure;
  * httpTimeout: the whole request (connect, send, read) is bounded by it (Go's http.Client.Timeout);
  * bodies as Go's encoding/json writes them: struct fields in declaration order with their Go
    names (the extender types carry no json tags), nil pointers as null, no spaces, and <, >, &,
    U+2028 and U+2029 escaped as \\u003c, \\u003e, \\u0026, \\u2028, \\u2029.
Usage: kube_scheduler_emulation_test.py VRAMKIT
"""
import gzip
import json
import re
import socket
import subprocess
import sys
import time

from cluster_test_support import PROCS, check, outcome, run_script, serve

GiB = 1 << 30
VRAMKIT = sys.argv[1]
MAX_NODE_SCORE, MAX_EXTENDER_PRIORITY = 100, 10


def go_json(value):
    """json.Marshal: compact, HTML-safe escaping, key order as given (Go struct order)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    for a, b in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(a, b)
    return text.encode()


class ExtenderError(Exception):
    pass


class EmulatedHTTPExtender:
    def __init__(self, url_prefix, filter_verb="filter", prioritize_verb="prioritize", bind_verb="",
                 weight=1, http_timeout=5.0, node_cache_capable=True, ignorable=False, managed_resources=()):
        self.url = url_prefix.rstrip("/")
        self.filter_verb, self.prioritize_verb, self.bind_verb = filter_verb, prioritize_verb, bind_verb
        self.weight, self.timeout = weight, http_timeout
        self.node_cache_capable, self.ignorable = node_cache_capable, ignorable
        self.managed = set(managed_resources)
        self.sent = []  # (verb, body bytes)

    def is_interested(self, pod):
        if not self.managed:
            return True
        for key in ("containers", "initContainers"):
            for c in pod["spec"].get(key) or []:
                res = c.get("resources") or {}
                for section in ("requests", "limits"):
                    if any(r in self.managed for r in (res.get(section) or {})):
                        return True
        return False

    def send(self, verb, body):
        """POST with a deadline over the whole exchange, as http.Client{Timeout} does."""
        self.sent.append((verb, body))
        m = re.match(r"http://([^:/]+):(\d+)(/.*)?", self.url)
        host, port, prefix = m.group(1), int(m.group(2)), m.group(3) or ""
        deadline = time.monotonic() + self.timeout
        try:
            s = socket.create_connection((host, port), timeout=self.timeout)
        except OSError as e:
            raise ExtenderError(f"{verb}: {e}")
        try:
            req = (f"POST {prefix}/{verb} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: Go-http-client/1.1\r\n"
                   f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n").encode() + body
            s.sendall(req)
            data = b""
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ExtenderError(f"{verb}: Client.Timeout exceeded while awaiting headers")
                s.settimeout(left)
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    raise ExtenderError(f"{verb}: Client.Timeout exceeded")
                if not chunk:
                    break
                data += chunk
                head, sep, rest = data.partition(b"\r\n\r\n")
                if sep:
                    m2 = re.search(rb"content-length:\s*(\d+)", head, re.I)
                    if m2 and len(rest) >= int(m2.group(1)):
                        break
        finally:
            s.close()
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1]) if head else 0
        if status != 200:
            raise ExtenderError(f"failed {verb} with extender at URL {self.url}/{verb}, code {status}")
        # Go's transport asked for gzip itself, so it also undoes it transparently.
        if re.search(rb"content-encoding:\s*gzip", head, re.I):
            rest = gzip.decompress(rest)
        return json.loads(rest)

    def args(self, pod, nodes):
        if self.node_cache_capable:
            return {"Pod": pod, "Nodes": None, "NodeNames": [n["metadata"]["name"] for n in nodes]}
        return {"Pod": pod, "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None}

    def filter(self, pod, nodes):
        if not self.filter_verb:
            return nodes, {}, {}
        result = self.send(self.filter_verb, go_json(self.args(pod, nodes)))
        if result.get("Error"):
            raise ExtenderError(result["Error"])
        by_name = {n["metadata"]["name"]: n for n in nodes}
        out = []
        if self.node_cache_capable and result.get("NodeNames") is not None:
            for name in result["NodeNames"]:
                if name not in by_name:
                    raise ExtenderError(f"extender claims a filtered node {name!r} which is not found in the input node list")
                out.append(by_name[name])
        elif result.get("Nodes") is not None:
            out = result["Nodes"].get("items") or []
        return out, result.get("FailedNodes") or {}, result.get("FailedAndUnresolvableNodes") or {}

    def prioritize(self, pod, nodes):
        if not self.prioritize_verb:
            return [{"Host": n["metadata"]["name"], "Score": 0} for n in nodes], 0
        return self.send(self.prioritize_verb, go_json(self.args(pod, nodes))), self.weight

    def bind(self, pod, node):
        args = {"PodName": pod["metadata"]["name"], "PodNamespace": pod["metadata"]["namespace"],
                "PodUID": pod["metadata"]["uid"], "Node": node}
        result = self.send(self.bind_verb, go_json(args))
        if result.get("Error"):
            raise ExtenderError(result["Error"])


def schedule(extenders, pod, nodes):
    """One scheduling cycle's extender part: filter chain, prioritize, pick, bind."""
    feasible = list(nodes)
    for ext in extenders:
        if not feasible:
            break
        if not ext.is_interested(pod):
            continue
        try:
            feasible, failed, unresolvable = ext.filter(pod, feasible)
        except ExtenderError as e:
            if ext.ignorable:
                continue
            return {"error": str(e)}
    if not feasible:
        return {"error": "0 nodes are available"}
    scores = {n["metadata"]["name"]: 0 for n in feasible}
    for ext in extenders:
        if not ext.is_interested(pod):
            continue
        try:
            prios, weight = ext.prioritize(pod, feasible)
        except ExtenderError:
            continue  # upstream: "No score given by this extender"
        for hp in prios:
            if hp["Host"] in scores:
                scores[hp["Host"]] += hp["Score"] * weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
    best = max(feasible, key=lambda n: (scores[n["metadata"]["name"]], n["metadata"]["name"]))
    host = best["metadata"]["name"]
    for ext in extenders:
        if ext.bind_verb and ext.is_interested(pod):
            try:
                ext.bind(pod, host)
            except ExtenderError as e:
                return {"error": f"bind: {e}"}
            return {"node": host, "bound_by_extender": True, "scores": scores}
    return {"node": host, "bound_by_extender": False, "scores": scores}


def go_pod(name, uid, gib=None, plan=None, init_gib=None):
    """A v1.Pod as Go's encoding/json writes it: field order of the Go structs, zero
    creationTimestamp as null, empty structs as {}."""
    meta = {"name": name, "namespace": "ml", "uid": uid, "resourceVersion": "812",
            "creationTimestamp": None}
    if plan:
        meta["annotations"] = {"vramkit.io/plan": plan}
    res = {"limits": {"vramkit.io/gpu-memory": str(gib)}, "requests": {"vramkit.io/gpu-memory": str(gib)}} if gib else {}
    spec = {"containers": [{"name": "main", "image": "registry.example.com/train:1", "resources": res,
                            "terminationMessagePath": "/dev/termination-log",
                            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"}],
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "securityContext": {}, "schedulerName": "vramkit-scheduler",
            "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority"}
    if init_gib:
        spec["initContainers"] = [{"name": "warmup", "image": "registry.example.com/warm:1",
                                   "resources": {"limits": {"vramkit.io/gpu-memory": str(init_gib)}}}]
    return {"metadata": meta, "spec": spec, "status": {"phase": "Pending", "qosClass": "BestEffort"}}


def go_node(name):
    return {"metadata": {"name": name, "uid": f"node-{name}", "resourceVersion": "77", "creationTimestamp": "2026-12-01T08:00:00Z",
                         "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"}},
            "spec": {"podCIDR": "10.244.1.0/24", "providerID": f"kind://docker/kind/{name}"},
            "status": {"capacity": {"cpu": "64", "vramkit.io/gpu-memory": "141"},
                       "allocatable": {"cpu": "64", "vramkit.io/gpu-memory": "141"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status & <ok>"}]}}


def metrics(total_gib, used_gib):
    labels = 'gpu="0",uuid="GPU-1111",name="NVIDIA H200"'
    return "\n".join([f"vramkit_gpu_up{{{labels}}} 1", f"vramkit_gpu_memory_total_bytes{{{labels}}} {total_gib * GiB}",
                      f"vramkit_gpu_memory_used_bytes{{{labels}}} {used_gib * GiB}",
                      f"vramkit_gpu_memory_free_bytes{{{labels}}} {(total_gib - used_gib) * GiB}",
                      f"vramkit_exporter_last_sample_timestamp_seconds {time.time()}"]) + "\n"


def main():
    used = {"gpu-a": 100, "gpu-b": 20, "gpu-c": 0}
    ports = {n: serve(lambda m, p, b, n=n: (200, "text/plain", metrics(141, used[n])), "HTTP/1.1") for n in used}
    hung = serve(lambda m, p, b: (None, "", ""), "HTTP/1.1")
    api_calls = []
    api = serve(lambda m, p, b: (api_calls.append((m, p)) or (201 if p.endswith("/binding") else 200), "application/json", "{}"), "HTTP/1.1")
    nodes_file = f"/tmp/vramkit-kube-emulation-{id(used)}.txt"
    with open(nodes_file, "w") as f:
        for n, port in ports.items():
            f.write(f"{n} http://127.0.0.1:{port}/metrics\n")
        f.write(f"gpu-hung http://127.0.0.1:{hung}/metrics\n")
    p = subprocess.Popen([VRAMKIT, "extender", "--port", "0", "--nodes", nodes_file, "--bind-verb", "--api-url",
                          f"http://127.0.0.1:{api}", "--scrape-interval", "200ms", "--scrape-timeout", "300ms"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    PROCS.append(p)
    m = re.search(r"http://[\d.]+:(\d+)/", p.stdout.readline())
    port = int(m.group(1))
    time.sleep(0.8)
    prefix = f"http://127.0.0.1:{port}/vramkit"
    nodes = [go_node(n) for n in ("gpu-a", "gpu-b", "gpu-c", "gpu-hung")]

    for cache in (True, False):
        ext = EmulatedHTTPExtender(prefix, bind_verb="bind", weight=5, node_cache_capable=cache,
                                   managed_resources=["vramkit.io/gpu-memory"])
        # 60 GiB: gpu-a (41 free) fails, gpu-hung is unknown; pack prefers gpu-b (less left after).
        pod = go_pod(f"train-{int(cache)}", f"uid-{int(cache)}", gib=60)
        r = schedule([ext], pod, nodes)
        check(r.get("node") == "gpu-b" and r.get("bound_by_extender"), f"cache={cache}: {r}")
        verbs = [v for v, _ in ext.sent]
        check(verbs == ["filter", "prioritize", "bind"], f"cache={cache}: verbs {verbs}")
        body = ext.sent[0][1]
        if cache:
            check(b'"Nodes":null,"NodeNames":["gpu-a","gpu-b","gpu-c","gpu-hung"]' in body, f"NodeNames body {body[-120:]!r}")
        else:
            check(b'"NodeNames":null' in body and b'"Nodes":{"metadata":{},"items":[' in body, "Nodes body")
            check(b"\\u0026 \\u003cok\\u003e" in body, "Go's HTML escaping in the body")
        check(b'"creationTimestamp":null' in body, "zero creationTimestamp as null")
    # Both pods were bound through the API: binding POSTs for train-1 and train-0.
    bindings = [path for m_, path in api_calls if path.endswith("/binding")]
    check(bindings == ["/api/v1/namespaces/ml/pods/train-1/binding", "/api/v1/namespaces/ml/pods/train-0/binding"],
          f"bindings {bindings}")
    # gpu-b had 121 GiB free; 60 GiB is reserved by train-1 and 60 by train-0: a third pod of
    # 60 GiB must go to gpu-c, not gpu-b (double booking).
    ext = EmulatedHTTPExtender(prefix, bind_verb="bind", managed_resources=["vramkit.io/gpu-memory"])
    r = schedule([ext], go_pod("train-2", "uid-2", gib=60), nodes)
    check(r.get("node") == "gpu-c", f"third 60 GiB pod: {r}")

    # managedResources: a pod that requests no managed resource is never sent (the plan
    # annotation alone does not reach the extender); an init container's request counts.
    ext = EmulatedHTTPExtender(prefix, bind_verb="bind", managed_resources=["vramkit.io/gpu-memory"])
    r = schedule([ext], go_pod("plan-only", "uid-p", plan='{"schema_version": 1, "device_peak_bytes": 1073741824}'), nodes)
    check(ext.sent == [] and r.get("bound_by_extender") is False, f"plan-only pod was sent: {ext.sent}")
    r = schedule([ext], go_pod("init", "uid-i", init_gib=200), nodes)
    check([v for v, _ in ext.sent] == ["filter"] and "error" in r, f"init container request: {r} {ext.sent}")
    # Without managedResources every pod is sent.
    ext = EmulatedHTTPExtender(prefix)
    schedule([ext], go_pod("plan-only", "uid-p2", plan='{"schema_version": 1, "device_peak_bytes": 1073741824}'), nodes)
    check([v for v, _ in ext.sent] == ["filter", "prioritize"], f"no managedResources: {ext.sent}")

    # httpTimeout and ignorable: an extender that never answers fails the cycle unless ignorable;
    # vramkit's own answer with a hung exporter stays far below the 5 s timeout.
    silent = f"http://127.0.0.1:{hung}/x"
    r = schedule([EmulatedHTTPExtender(silent, http_timeout=0.5, managed_resources=["vramkit.io/gpu-memory"])],
                 go_pod("t", "uid-t", gib=1), nodes)
    check("Timeout" in r.get("error", ""), f"non-ignorable timeout: {r}")
    r = schedule([EmulatedHTTPExtender(silent, http_timeout=0.5, ignorable=True, prioritize_verb=""),
                  EmulatedHTTPExtender(prefix, managed_resources=["vramkit.io/gpu-memory"])],
                 go_pod("t2", "uid-t2", gib=1), nodes)
    check(r.get("node") in ("gpu-a", "gpu-b", "gpu-c"), f"ignorable timeout then vramkit: {r}")
    t0 = time.monotonic()
    EmulatedHTTPExtender(prefix, http_timeout=5.0).filter(go_pod("f", "uid-f", gib=1), nodes)
    elapsed = time.monotonic() - t0
    check(elapsed < 1.0, f"filter with a hung exporter took {elapsed:.2f} s")
    # A bind the extender refuses (never filtered) is a scheduling failure, with its message.
    ext = EmulatedHTTPExtender(prefix, bind_verb="bind")
    try:
        ext.bind(go_pod("ghost", "uid-ghost", gib=1), "gpu-c")
        check(False, "bind of an unfiltered pod succeeded")
    except ExtenderError as e:
        check("filter" in str(e), f"bind error names the cause: {e}")

    return outcome("emulated kube-scheduler")


if __name__ == "__main__":
    run_script(main)
