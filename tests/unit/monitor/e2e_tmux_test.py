"""The terminal view of `vramkit watch` driven in tmux: panels with history graphs and their
scales, sorting keys, device selection and its highlight, the help screen, process selection,
filter, grouping by workload (pod / Slurm job, from real cgroup path formats), a signal sent to a
process after confirmation (and not sent when cancelled), resize, and clean exits on q and
Ctrl-C."""
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import check, fail, parse_args, require_tool, temp_dir, wait_for  # noqa: E402

args = parse_args()
tmux = require_tool("tmux", ["tmux"])
sock = f"vramkit-test-{os.getpid()}"
tmp = temp_dir("vramkit-tmux-")

# A process of ours on GPU 0 with the most device memory: the one the signal keys act on.
victim = subprocess.Popen(["sleep", "300"], start_new_session=True)
fixture = os.path.join(tmp, "fake_gpus.json")
with open(os.path.join(args.data, "fake_gpus.json")) as f:
    gpus = json.load(f)
gpus["gpus"][0]["processes"].append({"pid": victim.pid, "used_bytes": 64 << 30, "name": "sleeper"})
with open(fixture, "w") as f:
    json.dump(gpus, f)
# The host tree with the cgroup files of a Kubernetes pod (4242) and a Slurm job (4343).
host = os.path.join(tmp, "host")
shutil.copytree(os.path.join(args.data, "host"), host, symlinks=True)
cgroups = os.path.join(args.data, "..", "cluster", "cgroup")
shutil.copy(os.path.join(cgroups, "k8s-systemd-v2-containerd.txt"), os.path.join(host, "proc", "4242", "cgroup"))
shutil.copy(os.path.join(cgroups, "slurm-v2.txt"), os.path.join(host, "proc", "4343", "cgroup"))
# Their /proc/<pid>/stat, which attribution reads first (field 22, the start time, keys its cache).
for pid, comm in (("4242", "python3"), ("4343", "vllm")):
    with open(os.path.join(host, "proc", pid, "stat"), "w") as f:
        f.write(f"{pid} ({comm}) S 1 {pid} {pid} 0 -1 4194560 1000 0 0 0 50 10 0 0 20 0 8 0 123456 "
                "1000000 2000 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0\n")


def tm(*a, check_rc=True):
    r = subprocess.run([tmux, "-L", sock, *a], capture_output=True, text=True, timeout=10)
    if check_rc and r.returncode != 0:
        fail(f"tmux {' '.join(a)}: {r.stderr.strip()}")
    return r.stdout


def screen(session="v"):
    return tm("capture-pane", "-p", "-t", session)


def styled(session="v"):
    """The screen with its escape sequences: reverse video (highlight) shows as ESC[7m."""
    return tm("capture-pane", "-p", "-e", "-t", session)


SGR = re.compile(r"\x1b\[([0-9;]*)m")


def reversed_lines(text):
    """Lines drawn in reverse video (the highlight), escape sequences removed. tmux carries the
    attributes from line to line, so the reverse state is followed through the whole screen."""
    out, rev = [], False
    for line in text.splitlines():
        plain, any_rev, pos = "", False, 0
        for m in list(SGR.finditer(line)) + [None]:
            chunk = line[pos:m.start()] if m else line[pos:]
            plain += chunk
            any_rev = any_rev or (rev and chunk.strip() != "")
            if m is None:
                break
            params = [int(p) if p else 0 for p in m.group(1).split(";")]
            for p in params:
                if p == 0 or p == 27:
                    rev = False
                elif p == 7:
                    rev = True
            pos = m.end()
        if any_rev:
            out.append(plain)
    return out


def pid_order(text):
    """The fixture's pids in the process table, top to bottom."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("4242", "4343", "5151"):
            out.append(parts[0])
    return out


def keys(*k, session="v"):
    tm("send-keys", "-t", session, *k)


def start_view(session="v"):
    # The shell records the exit status in a file: tmux does not always report a dead pane's status.
    status_file = os.path.join(tmp, session + ".status")
    cmd = (f"'{args.vramkit}' watch --fake-gpus '{fixture}' --host-root '{host}' --interval 200ms; "
           f"echo $? > '{status_file}.tmp'; mv '{status_file}.tmp' '{status_file}'")
    tm("new-session", "-d", "-s", session, "-x", "150", "-y", "50", cmd)


def pane_exit(session="v"):
    status_file = os.path.join(tmp, session + ".status")
    return wait_for("the view to exit", lambda: os.path.exists(status_file) and open(status_file).read().strip(), 10)


try:
    start_view()
    wait_for("the GPU panels", lambda: "GPU 1 NVIDIA H200" in screen(), 15)
    s = screen()
    check("GPU 0 NVIDIA H200" in s and "mem [" in s, "one panel per GPU with a memory bar")
    check("host [" in s and "NUMA 1" in s, "host memory panel with NUMA nodes")
    check("sort: memory" in s and pid_order(s) == ["4343", "4242", "5151"], f"sorted by device memory first ({pid_order(s)})")
    # History graphs of every figure, each with its scale, and a wall-clock axis.
    wait_for("a history with a time axis per GPU", lambda: screen().count("UTC") >= 2 and screen().count("|") >= 4, 10)
    s = screen()
    for label, scale in (("util", "0-100 %"), ("temp", "0-100 C"), ("power", "0-500 W"), ("rx", "0-1.05 GB/s")):
        row = [l for l in s.splitlines() if l.startswith(label + " ")]
        check(row and scale in row[0], f"the {label} graph is labelled with its value and scale {scale!r}")
    check("used, bytes" in s and "140.40 GiB" in s and "0 B" in s, "the memory graph has a byte scale (0 B to the total)")
    check(any(l.lstrip().startswith("|") or "|" in l for l in s.splitlines()), "the time axis has ticks")
    check(any(c in s for c in ("\u2581", "\u2588", "#", "=")), "the graphs are drawn")

    keys("p")
    wait_for("pid order", lambda: pid_order(screen()) == ["4242", "4343", "5151"] and "sort: pid" in screen(), 5)
    print("ok: p sorts by pid")
    keys("c")
    wait_for("command order", lambda: pid_order(screen()) == ["5151", "4242", "4343"] and "sort: command" in screen(), 5)
    print("ok: c sorts by command")
    keys("d")
    wait_for("device 0 only", lambda: "device: 0" in screen() and pid_order(screen()) == ["4242", "4343"], 5)
    check(any("> GPU 0" in l for l in reversed_lines(styled())), "the selected device's heading is highlighted")
    print("ok: d selects device 0")
    keys("Tab")
    wait_for("device 1 only", lambda: "device: 1" in screen() and pid_order(screen()) == ["5151"], 5)
    check(any("> GPU 1" in l for l in reversed_lines(styled())), "the highlight follows to device 1")
    print("ok: Tab selects device 1")
    keys("d")
    wait_for("all devices again", lambda: "device: all" in screen() and len(pid_order(screen())) == 3, 5)
    print("ok: cycling returns to all devices")

    # Help screen: every key, closed by any key.
    keys("h")
    wait_for("the help screen", lambda: "vramkit watch: keys" in screen(), 5)
    s = screen()
    for k in ("q ", "h ?", "m p c", "d Tab", "Up Down", "/ ", "g ", "T K I", "Space", "Left Right", "+ -"):
        check(any(l.strip().startswith(k.strip()) for l in s.splitlines()), f"help lists {k.strip()!r}")
    keys("x")
    wait_for("the help to close", lambda: "vramkit watch: keys" not in screen() and "GPU 0" in screen(), 5)
    print("ok: any key closes the help")

    # Selection moves with the arrows and is highlighted; sorted by memory the sleeper is first.
    keys("m")
    keys("Home")
    wait_for("the first row selected", lambda: any(f"{victim.pid} " in l and "sleep" in l for l in reversed_lines(styled())), 5)
    keys("Down")
    wait_for("the second row selected", lambda: any(l.split()[:1] == ["4343"] for l in reversed_lines(styled())), 5)
    print("ok: Down moves the selection")

    # Filter.
    keys("/")
    keys("vllm")
    keys("Enter")
    wait_for("the filter", lambda: pid_order(screen()) == ["4343"] and "filter: vllm" in screen(), 5)
    print("ok: / filters the processes")
    keys("/")
    keys("Escape")
    wait_for("the filter cleared", lambda: len(pid_order(screen())) == 3 and "filter:" not in screen(), 5)
    print("ok: Esc clears the filter")

    # Grouping by workload.
    keys("g")
    wait_for("groups", lambda: "pod 0c9d1e2f-3a4b-4c5d-8e6f-7a8b9c0d1e2f: 1 process" in screen()
             and "slurm job 4242: 1 process" in screen() and "no workload (host)" in screen(), 5)
    print("ok: g groups by pod and Slurm job")
    keys("g")
    wait_for("no groups", lambda: "WORKLOAD" in screen() and "no workload (host)" not in screen(), 5)
    print("ok: g again ungroups (a workload column stays)")

    # Signals: cancelled, then confirmed.
    keys("Home")
    keys("T")
    wait_for("the confirmation", lambda: f"Send SIGTERM to pid {victim.pid}" in screen(), 5)
    keys("n")
    wait_for("cancelled", lambda: "cancelled" in screen(), 5)
    check(victim.poll() is None, "a cancelled signal is not sent")
    keys("T")
    wait_for("the confirmation again", lambda: f"Send SIGTERM to pid {victim.pid}" in screen(), 5)
    keys("y")
    wait_for("the message", lambda: f"sent SIGTERM to pid {victim.pid}" in screen(), 5)
    wait_for("the process to end", lambda: victim.poll() is not None, 5)
    check(victim.returncode == -15, f"the process got SIGTERM (status {victim.returncode})")

    tm("resize-window", "-t", "v", "-x", "90", "-y", "24")

    def small():
        s = screen()
        lines = s.splitlines()
        return "GPU 0" in s and max(len(l.rstrip()) for l in lines) <= 90 and "q quit" in s
    wait_for("the view to fit 90x24", small, 8)
    print("ok: the view adapts to a resize")
    tm("resize-window", "-t", "v", "-x", "40", "-y", "10")
    wait_for("the view to fit 40x10", lambda: "GPU" in screen() and max(len(l.rstrip()) for l in screen().splitlines()) <= 40, 5)
    print("ok: a tiny terminal still draws")
    keys("q")
    check(pane_exit() == "0", "q exits with status 0")

    start_view("w")
    wait_for("the second view", lambda: "GPU 0" in screen("w"), 15)
    keys("C-c", session="w")
    check(pane_exit("w") == "0", "Ctrl-C exits cleanly with status 0")
finally:
    subprocess.run([tmux, "-L", sock, "kill-server"], capture_output=True, timeout=10)
    if victim.poll() is None:
        victim.kill()
print("PASS")
