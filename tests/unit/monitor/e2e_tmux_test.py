"""The terminal view of `vramkit watch` driven in tmux: panels, sorting keys, device selection,
resize, and clean exits on q and Ctrl-C."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import check, fail, parse_args, require_tool, temp_dir, wait_for  # noqa: E402

args = parse_args()
tmux = require_tool("tmux", ["tmux"])
sock = f"vramkit-test-{os.getpid()}"
fixture, host = os.path.join(args.data, "fake_gpus.json"), os.path.join(args.data, "host")


def tm(*a, check_rc=True):
    r = subprocess.run([tmux, "-L", sock, *a], capture_output=True, text=True, timeout=10)
    if check_rc and r.returncode != 0:
        fail(f"tmux {' '.join(a)}: {r.stderr.strip()}")
    return r.stdout


def screen():
    return tm("capture-pane", "-p", "-t", "v")


def pid_order(text):
    """The pids in the process table, top to bottom."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[0] in ("4242", "4343", "5151"):
            out.append(parts[0])
    return out


tmp = temp_dir("vramkit-tmux-")


def start_view(session="v"):
    # The shell records the exit status in a file: tmux does not always report a dead pane's status.
    status_file = os.path.join(tmp, session + ".status")
    cmd = (f"'{args.vramkit}' watch --fake-gpus '{fixture}' --host-root '{host}' --interval 200ms; "
           f"echo $? > '{status_file}.tmp'; mv '{status_file}.tmp' '{status_file}'")
    tm("new-session", "-d", "-s", session, "-x", "150", "-y", "45", cmd)


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
    tm("send-keys", "-t", "v", "p")
    wait_for("pid order", lambda: pid_order(screen()) == ["4242", "4343", "5151"] and "sort: pid" in screen(), 5)
    print("ok: p sorts by pid")
    tm("send-keys", "-t", "v", "c")
    wait_for("command order", lambda: pid_order(screen()) == ["5151", "4242", "4343"] and "sort: command" in screen(), 5)
    print("ok: c sorts by command")
    tm("send-keys", "-t", "v", "d")
    wait_for("device 0 only", lambda: "device: 0" in screen() and pid_order(screen()) == ["4242", "4343"], 5)
    print("ok: d selects device 0")
    tm("send-keys", "-t", "v", "Tab")
    wait_for("device 1 only", lambda: "device: 1" in screen() and pid_order(screen()) == ["5151"], 5)
    print("ok: Tab selects device 1")
    tm("send-keys", "-t", "v", "d")
    wait_for("all devices again", lambda: "device: all" in screen() and len(pid_order(screen())) == 3, 5)
    print("ok: cycling returns to all devices")
    tm("resize-window", "-t", "v", "-x", "90", "-y", "24")
    def small():
        s = screen()
        lines = s.splitlines()
        return "GPU 0" in s and max(len(l.rstrip()) for l in lines) <= 90 and "q quit" in s
    wait_for("the view to fit 90x24", small, 5)
    print("ok: the view adapts to a resize")
    tm("send-keys", "-t", "v", "q")
    check(pane_exit() == "0", "q exits with status 0")

    start_view("w")
    wait_for("the second view", lambda: "GPU 0" in tm("capture-pane", "-p", "-t", "w"), 15)
    tm("send-keys", "-t", "w", "C-c")
    check(pane_exit("w") == "0", "Ctrl-C exits cleanly with status 0")
finally:
    subprocess.run([tmux, "-L", sock, "kill-server"], capture_output=True, timeout=10)
print("PASS")
