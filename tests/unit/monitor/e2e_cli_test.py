"""`vramkit watch` and `vramkit serve` from the command line: --once, --json, --csv, --replay with
damaged lines, unknown devices, no driver, a port in use, and the fixture reload under serve."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import (check, http_get, parse_args, start_serve, stop, temp_dir, wait_for)  # noqa: E402

args = parse_args()
vk, data = args.vramkit, args.data
fixture, host = os.path.join(data, "fake_gpus.json"), os.path.join(data, "host")
tmp = temp_dir("vramkit-cli-")


def run(*a, env=None, timeout=20):
    return subprocess.run([vk, *a], capture_output=True, text=True, timeout=timeout, env=env)


r = run("watch", "--once", "--fake-gpus", fixture, "--host-root", host)
check(r.returncode == 0, f"watch --once exits 0 ({r.stderr.strip()})")
check("NVIDIA H200" in r.stdout and "vllm serve" in r.stdout, "watch --once prints GPUs and processes")

r = run("watch", "--json", "--count", "3", "--interval", "50ms", "--fake-gpus", fixture, "--host-root", host)
lines = r.stdout.strip().split("\n")
check(r.returncode == 0 and len(lines) == 3, "watch --json --count 3 prints 3 lines")
first = json.loads(lines[0])
check(first["schema_version"] == 1 and first["gpus"][0]["memory_used_bytes"] == 40802189312, "JSON figures match the fixture")
t = [json.loads(x)["timestamp_ms"] for x in lines]
check(t[0] < t[1] < t[2], "timestamps increase")

r = run("watch", "--speed", "2", "--once", "--fake-gpus", fixture, "--host-root", host)
check(r.returncode == 2 and "--replay" in r.stderr, "--speed without --replay is refused with exit 2")
r = run("watch", "--max-gap", "10s", "--once", "--fake-gpus", fixture, "--host-root", host)
check(r.returncode == 2 and "--replay" in r.stderr, "--max-gap without --replay is refused with exit 2")
jl = os.path.join(tmp, "rec.jsonl")
with open(jl, "w") as f:
    f.write(lines[0] + "\n")
r = run("watch", "--replay", jl, "--max-gap", "soon", "--once")
check(r.returncode == 2 and "soon" in r.stderr, f"a bad --max-gap is refused with exit 2 ({r.stderr.strip()})")

csv = os.path.join(tmp, "rec.csv")
for _ in range(2):
    r = run("watch", "--csv", csv, "--count", "2", "--interval", "50ms", "--fake-gpus", fixture, "--host-root", host)
    check(r.returncode == 0, "watch --csv records without a terminal")
rows = open(csv).read().strip().split("\n")
check(rows[0].startswith("timestamp,epoch_ms,device,uuid,name"), "CSV starts with its header")
check(len(rows) == 1 + 2 * 2 * 2, "CSV appends: one header, one line per device per sample")

# Replay: damage the recording, the rest still replays; malformed lines are named.
with open(csv, "a") as f:
    f.write("garbage,line\n")
r = run("watch", "--replay", csv, "--once")
check(r.returncode == 0 and "NVIDIA H200" in r.stdout, "replay --once shows the last snapshot")
check(f"{csv}:10:" in r.stderr and "skipped" in r.stderr, f"a malformed CSV line is reported with its number ({r.stderr.strip()})")
jl = os.path.join(tmp, "rec.jsonl")
with open(jl, "w") as f:
    f.write(lines[0] + "\n{broken\n" + lines[1] + "\n")
r = run("watch", "--replay", jl, "--json")
check(r.returncode == 0 and len(r.stdout.strip().split("\n")) == 2 and ":2:" in r.stderr, "a malformed JSON line is skipped")
r = run("watch", "--replay", os.path.join(tmp, "missing.jsonl"), "--once")
check(r.returncode == 2 and "cannot read recording" in r.stderr, "an unreadable replay file is a usage error")

r = run("watch", "--once", "--device", "7", "--fake-gpus", fixture, "--host-root", host)
check(r.returncode == 2 and "unknown device 7" in r.stderr and "0..1" in r.stderr, f"unknown device -> exit 2 ({r.stderr.strip()})")
check(len(r.stderr.strip().split("\n")) == 1, "one line for the unknown device")

env = dict(os.environ, VRAMKIT_NVML_LIBRARY="libvramkit-no-such-nvml.so.1")
r = run("watch", "--once", "--host-root", host, env=env)
check(r.returncode == 0 and "no NVIDIA driver found (libnvidia-ml.so.1 not loadable): showing host memory only" in r.stderr,
      "no driver: one clear line and host memory")
check("host memory: total" in r.stdout, "host panel printed without a driver")

r = run("watch", "--once", "--interval", "soon", "--fake-gpus", fixture)
check(r.returncode == 2 and "interval" in r.stderr, "bad --interval is a usage error")

# serve: reload on fixture change, and a busy port.
fx = os.path.join(tmp, "gpus.json")
shutil.copy(fixture, fx)
p, port = start_serve(vk, fx, host, interval="100ms")
check(http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200, "serve answers /healthz")
doc = json.load(open(fx))
doc["gpus"][1]["memory_used_bytes"] = 123456789
time.sleep(0.05)
with open(fx + ".new", "w") as f:
    json.dump(doc, f)
os.replace(fx + ".new", fx)
wait_for("the changed fixture in /metrics",
         lambda: 'vramkit_gpu_memory_used_bytes{gpu="1",uuid="GPU-55555555-6666-7777-8888-999999999999",name="NVIDIA H200"} 123456789'
         in http_get(f"http://127.0.0.1:{port}/metrics")[1], 10)
print("ok: serve reloads the fixture when it changes")
r = run("serve", "--port", str(port), "--fake-gpus", fx)
check(r.returncode == 1 and "address already in use" in r.stderr and len(r.stderr.strip().split("\n")) == 1,
      f"port in use -> one line, exit 1 ({r.stderr.strip()})")
check(stop(p) == 0, "serve exits 0 on SIGTERM")
print("PASS")
