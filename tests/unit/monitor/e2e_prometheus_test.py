"""A real Prometheus server scrapes `vramkit serve --fake-gpus` on loopback; the values read back
through Prometheus's query API must match the fixture, including after the fixture changes."""
import json
import os
import shutil
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import (check, free_port, http_get, parse_args, require_tool, start, start_serve, temp_dir, wait_for)  # noqa: E402

args = parse_args()
prometheus = require_tool("prometheus", ["/usr/bin/prometheus", "prometheus"])
tmp = temp_dir("vramkit-prom-")
fixture = os.path.join(tmp, "gpus.json")
shutil.copy(os.path.join(args.data, "fake_gpus.json"), fixture)
expected = json.load(open(fixture))

serve, port = start_serve(args.vramkit, fixture, os.path.join(args.data, "host"), interval="200ms")
prom_port = free_port()
config = os.path.join(tmp, "prometheus.yml")
with open(config, "w") as f:
    f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: vramkit
    scrape_interval: 1s
    static_configs:
      - targets: ['127.0.0.1:{port}']
""")
log = open(os.path.join(tmp, "prometheus.log"), "w")
prom = start([prometheus, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
              f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"], stdout=log, stderr=log)


def query(expr):
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    status, body = http_get(url)
    doc = json.loads(body)
    if doc.get("status") != "success":
        raise RuntimeError(body)
    return doc["data"]["result"]


def by_gpu(results):
    return {r["metric"]["gpu"]: float(r["value"][1]) for r in results}


try:
    wait_for("Prometheus to answer", lambda: http_get(f"http://127.0.0.1:{prom_port}/-/ready")[0] == 200, 30)
    up = wait_for("a successful scrape of vramkit", lambda: [r for r in query('up{job="vramkit"}') if r["value"][1] == "1"], 30)
    check(len(up) == 1, "Prometheus scrapes vramkit serve")
    used = wait_for("vramkit_gpu_memory_used_bytes", lambda: by_gpu(query("vramkit_gpu_memory_used_bytes")), 10)
    for i, g in enumerate(expected["gpus"]):
        check(used.get(str(i)) == g["memory_used_bytes"], f"GPU {i} used bytes via Prometheus = {g['memory_used_bytes']}")
    total = by_gpu(query("vramkit_gpu_memory_total_bytes"))
    check(total["0"] == expected["gpus"][0]["memory_total_bytes"], "total bytes match")
    reserved = by_gpu(query("vramkit_gpu_memory_reserved_bytes"))
    check(reserved["1"] == expected["gpus"][1]["memory_reserved_bytes"], "reserved bytes match")
    free = by_gpu(query("vramkit_gpu_memory_free_bytes"))
    g0 = expected["gpus"][0]
    check(free["0"] == g0["memory_total_bytes"] - g0["memory_used_bytes"] - g0["memory_reserved_bytes"], "free = total - used - reserved")
    util = by_gpu(query("vramkit_gpu_utilization_ratio"))
    check(abs(util["0"] - 0.87) < 1e-9, "utilization as a 0-1 ratio")
    procs = query('vramkit_gpu_process_memory_used_bytes{pid="4343"}')
    check(len(procs) == 1 and float(procs[0]["value"][1]) == 34359738368, "per-process memory with its pid label")
    check(procs[0]["metric"]["command"] == 'vllm serve model,"x"', "escaped label value survives the round trip")
    check(procs[0]["metric"]["uuid"] == expected["gpus"][0]["uuid"], "uuid label")
    host = query("vramkit_host_memory_total_bytes")
    check(float(host[0]["value"][1]) == 2113396288 * 1024, "host memory total from the fixture tree")
    numa = {r["metric"]["node"]: float(r["value"][1]) for r in query("vramkit_host_numa_memory_free_bytes")}
    check(numa == {"0": 950000000 * 1024, "1": 940000000 * 1024}, "NUMA free per node")

    # Change the figures under the running server: Prometheus must see the new value.
    expected["gpus"][0]["memory_used_bytes"] = 99 * 2**30
    with open(fixture + ".new", "w") as f:
        json.dump(expected, f)
    os.replace(fixture + ".new", fixture)
    wait_for("the new used bytes in Prometheus", lambda: by_gpu(query("vramkit_gpu_memory_used_bytes")).get("0") == 99 * 2**30, 20)
    print("ok: a changed fixture reaches Prometheus")
    scrapes = query("vramkit_exporter_scrapes_total")
    check(float(scrapes[0]["value"][1]) >= 2, "scrape counter counts Prometheus's scrapes")
finally:
    log.close()
    if os.environ.get("VRAMKIT_TEST_VERBOSE"):
        print(open(os.path.join(tmp, "prometheus.log")).read())
print("PASS")
