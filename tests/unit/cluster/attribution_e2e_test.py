#!/usr/bin/env python3
"""End to end: GPU processes labelled with their pod, container and Slurm job, and plan drift.

`vramkit serve` reads fake GPUs whose processes are the PIDs of a node tree laid out as the
kubelet, containerd, CRI-O, Docker and slurmstepd leave it (tests/data/cluster/node, under
--host-root). The test checks the per-process series and their labels, the planned bytes and
used / planned per process and per workload, that `vramkit watch --once` shows the workloads and
plans, and, when promtool is installed, that the alert rules of deploy/prometheus fire on the
exporter's own output (its workload ratios turned into promtool's input series).
Usage: attribution_e2e_test.py VRAMKIT_BINARY SOURCE_DIR
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

from cluster_test_support import FAILURES, check

VRAMKIT, SRC = sys.argv[1], sys.argv[2]
NODE = os.path.join(SRC, "tests", "data", "cluster", "node")
GPUS = os.path.join(SRC, "tests", "data", "cluster", "node_gpus.json")
GiB = 1 << 30


def parse(text):
    """{(name, frozenset(labels)): value} of a Prometheus text page."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        out[(m.group(1), frozenset(labels.items()))] = (labels, float(m.group(4)))
    return out


def series(page, name, **want):
    return [(l, v) for (n, _), (l, v) in page.items()
            if n == name and all(l.get(k) == w for k, w in want.items())]


serve = subprocess.Popen([VRAMKIT, "serve", "--port", "0", "--fake-gpus", GPUS, "--host-root", NODE,
                          "--interval", "200ms"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
try:
    line = serve.stdout.readline()
    m = re.search(r"http://[\d.]+:(\d+)/", line)
    if not m:
        print("serve did not start:", line, serve.stderr.read(), file=sys.stderr)
        sys.exit(1)
    text = urllib.request.urlopen(f"http://127.0.0.1:{m.group(1)}/metrics", timeout=5).read().decode()
finally:
    serve.terminate()
    serve.wait(5)
page = parse(text)

used = "vramkit_gpu_process_memory_used_bytes"
label_names = {"gpu", "uuid", "name", "pid", "command", "namespace", "pod", "container", "pod_uid",
               "slurm_job"}
for (l, _) in series(page, used):
    check(set(l) == label_names, f"{used} has labels {sorted(l)}")

trainer = series(page, used, pid="1001")
check(len(trainer) == 1 and trainer[0][0]["namespace"] == "ml" and trainer[0][0]["pod"] == "llama-ft-0"
      and trainer[0][0]["container"] == "trainer"
      and trainer[0][0]["pod_uid"] == "7d3c2a1b-5e6f-4a8b-9c0d-1e2f3a4b5c6d"
      and trainer[0][0]["slurm_job"] == "", f"pid 1001 (containerd pod): {trainer}")
hidden = series(page, used, pid="1003")
check(len(hidden) == 1 and hidden[0][0]["pod"] == "llama-ft-0",
      f"pid 1003 (PID namespace of the pod, cgroup path hidden): {hidden}")
vllm = series(page, used, pid="2001")
check(len(vllm) == 1 and (vllm[0][0]["namespace"], vllm[0][0]["pod"], vllm[0][0]["container"])
      == ("serving", "vllm-7f9c8d-x2k4q", "server"), f"pid 2001 (CRI-O pod): {vllm}")
slurm = series(page, used, pid="4001")
check(len(slurm) == 1 and slurm[0][0]["slurm_job"] == "4242" and slurm[0][0]["pod"] == "",
      f"pid 4001 (Slurm job 4242): {slurm}")
docker = series(page, used, pid="5001")
check(len(docker) == 1 and docker[0][0]["container"] == "ollama" and docker[0][0]["pod"] == "",
      f"pid 5001 (plain Docker container): {docker}")
host = series(page, used, pid="6001")
check(len(host) == 1 and all(host[0][0][k] == "" for k in ("pod", "container", "slurm_job")),
      f"pid 6001 (host process): {host}")

planned = series(page, "vramkit_gpu_process_memory_planned_bytes", pid="1001")
check(planned and planned[0][1] == 22 * GiB, f"planned bytes of pid 1001: {planned}")
cap = series(page, "vramkit_gpu_process_memory_planned_bytes", pid="2001")
check(cap and cap[0][1] == 40 * GiB, f"planned bytes of pid 2001 (its cap): {cap}")
check(not series(page, "vramkit_gpu_process_memory_planned_bytes", pid="5001"),
      "pid 5001 has no plan, and no planned series")
ratio = series(page, "vramkit_gpu_process_memory_plan_ratio", pid="1001")
check(ratio and abs(ratio[0][1] - 19 / 22) < 1e-9, f"used / planned of pid 1001: {ratio}")

w_used = series(page, "vramkit_workload_gpu_memory_used_bytes", pod="llama-ft-0")
check(len(w_used) == 1 and w_used[0][1] == 20.5 * GiB,
      f"the trainer container holds 19 + 1 + 0.5 GiB on GPU 0: {w_used}")
w_ratio = {l["slurm_job"] or l["pod"]: v
           for l, v in series(page, "vramkit_workload_gpu_memory_plan_ratio")}
check(abs(w_ratio.get("llama-ft-0", 0) - 20.5 / 22) < 1e-9, f"workload ratios: {w_ratio}")
check(abs(w_ratio.get("4242", 0) - 6871947674 / (6 * GiB)) < 1e-9, f"workload ratios: {w_ratio}")
check(abs(w_ratio.get("vllm-7f9c8d-x2k4q", 0) - 0.75) < 1e-9, f"workload ratios: {w_ratio}")
check("ollama" not in w_ratio and len(w_ratio) == 3, f"only planned workloads have a ratio: {w_ratio}")

# watch --once shows the workload, the container and the plan with its use.
once = subprocess.run([VRAMKIT, "watch", "--once", "--fake-gpus", GPUS, "--host-root", NODE],
                      capture_output=True, text=True, timeout=30)
check(once.returncode == 0, f"watch --once exit {once.returncode}: {once.stderr}")
rows = {l.split()[0]: l for l in once.stdout.splitlines() if l.split() and l.split()[0].isdigit()}
check("WORKLOAD" in once.stdout and "CONTAINER" in once.stdout and "PLAN" in once.stdout,
      f"watch --once header: {once.stdout}")
check("pod ml/llama-ft-0" in rows.get("1001", "") and "trainer" in rows.get("1001", "")
      and "22.00 GiB (86%)" in rows.get("1001", ""), f"watch --once row of 1001: {rows.get('1001')}")
check("slurm job 4242" in rows.get("4001", "") and "(107%)" in rows.get("4001", ""),
      f"watch --once row of 4001: {rows.get('4001')}")

# The shipped alert rules against this exporter's own series (promtool's unit-test format).
promtool = shutil.which("promtool")
if promtool:
    with tempfile.TemporaryDirectory() as tmp:
        # The rules as shipped, less their annotations (templated text, checked by the rules' own
        # promtool test): what is checked here is which series fire, with which labels.
        rules, skip_deeper = [], None
        with open(os.path.join(SRC, "deploy", "prometheus", "vramkit-rules.yaml")) as f:
            for rl in f:
                indent = len(rl) - len(rl.lstrip())
                if skip_deeper is not None and (indent > skip_deeper or not rl.strip()):
                    continue
                skip_deeper = indent if rl.strip() == "annotations:" else None
                if skip_deeper is None:
                    rules.append(rl)
        with open(os.path.join(tmp, "vramkit-rules.yaml"), "w") as f:
            f.write("".join(rules))
        inputs, near, over = [], [], []
        for l, v in series(page, "vramkit_workload_gpu_memory_plan_ratio"):
            lab = dict(l, instance="node-1:9410")
            sel = ",".join(f'{k}="{lab[k]}"' for k in sorted(lab))
            inputs.append(f"      - series: 'vramkit_workload_gpu_memory_plan_ratio{{{sel}}}'\n"
                          f"        values: '{v!r}x10'\n")
            keep = {k: w for k, w in lab.items() if w != ""}
            exp = "          - exp_labels: {" + ", ".join(f'{k}: "{w}"' for k, w in sorted(keep.items()))
            if v > 0.9:
                near.append(exp + ', severity: "warning"}\n')
            if v > 1:
                over.append(exp + ', severity: "critical"}\n')
        check(len(near) == 2 and len(over) == 1, f"expected 2 near-plan and 1 over-plan: {near} {over}")
        test = ("rule_files: [vramkit-rules.yaml]\nevaluation_interval: 30s\ntests:\n"
                "  - interval: 30s\n    input_series:\n" + "".join(inputs) +
                "    alert_rule_test:\n"
                "      - {eval_time: 1m, alertname: VramkitWorkloadNearPlan, exp_alerts: []}\n"
                "      - eval_time: 3m\n        alertname: VramkitWorkloadNearPlan\n        exp_alerts:\n"
                + "".join(near) +
                "      - eval_time: 3m\n        alertname: VramkitWorkloadOverPlan\n        exp_alerts:\n"
                + "".join(over))
        with open(os.path.join(tmp, "t.yaml"), "w") as f:
            f.write(test)
        # Annotations are not compared when exp_annotations is absent; labels are, exactly.
        r = subprocess.run([promtool, "test", "rules", "t.yaml"], cwd=tmp, capture_output=True,
                           text=True, timeout=60)
        check(r.returncode == 0, f"promtool on the exporter's series:\n{r.stdout}{r.stderr}\n{test}")
else:
    print("promtool not found: the rules were not checked against the exporter's series")

if FAILURES:
    print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
    sys.exit(1)
print("PASSED: attribution labels, plans, workload ratios, watch --once columns"
      + (", alert rules on the exporter's series" if promtool else ""))
