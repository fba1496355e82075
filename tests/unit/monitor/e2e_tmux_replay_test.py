"""Replay controls of `vramkit watch --replay` driven in tmux on a recording with an injected
clock (its timestamps): Space pauses and resumes, Left/Right seek by 10 s of recording time,
Home/End jump to the ends, +/- change the speed, a one-hour gap is skipped (and said so) instead
of waited through, the graphs' time axis shows the recording's wall-clock times, and a resize
keeps the view whole."""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from e2e_common import check, fail, parse_args, require_tool, temp_dir, wait_for  # noqa: E402

args = parse_args()
tmux = require_tool("tmux", ["tmux"])
sock = f"vramkit-replay-{os.getpid()}"
tmp = temp_dir("vramkit-replay-")
fixture, host = os.path.join(args.data, "fake_gpus.json"), os.path.join(args.data, "host")

# One real sample from the binary, then 30 copies 1 s apart with a one-hour gap after the 15th.
r = subprocess.run([args.vramkit, "watch", "--fake-gpus", fixture, "--host-root", host, "--once", "--json"],
                   capture_output=True, text=True, timeout=20)
if r.returncode != 0:
    fail(f"vramkit watch --once --json failed: {r.stderr}")
base = json.loads(r.stdout.splitlines()[0])
t0 = 1796058720000  # 2026-11-30T17:12:00Z
recording = os.path.join(tmp, "rec.jsonl")
with open(recording, "w") as f:
    for i in range(30):
        s = json.loads(json.dumps(base))
        t = t0 + i * 1000 + (3600_000 if i >= 15 else 0)
        s["timestamp_ms"] = t
        s["timestamp"] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t / 1000)) + ".000Z"
        s["gpus"][0]["memory_used_bytes"] = (10 + 3 * i) << 30
        f.write(json.dumps(s) + "\n")


def tm(*a):
    r = subprocess.run([tmux, "-L", sock, *a], capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        fail(f"tmux {' '.join(a)}: {r.stderr.strip()}")
    return r.stdout


def screen():
    return tm("capture-pane", "-p", "-t", "r")


def position():
    m = re.search(r"sample (\d+)/30", screen())
    return int(m.group(1)) if m else None


def keys(*k):
    tm("send-keys", "-t", "r", *k)


status_file = os.path.join(tmp, "status")
cmd = (f"'{args.vramkit}' watch --replay '{recording}' --speed 1; "
       f"echo $? > '{status_file}.tmp'; mv '{status_file}.tmp' '{status_file}'")
try:
    tm("new-session", "-d", "-s", "r", "-x", "140", "-y", "45", cmd)
    wait_for("the replay", lambda: position() is not None, 15)
    check("speed 1x" in screen(), "the title shows the position and the speed")
    keys("Space")
    wait_for("paused", lambda: "paused" in screen(), 5)
    k = position()
    time.sleep(1.5)  # at 1 s per sample, a replay that did not pause would have moved on
    check(position() == k, f"paused: the position stays at {k}")
    keys("Right")
    wait_for("a seek forward of 10 s", lambda: position() == k + 10, 5)
    check("paused" in screen(), "seeking keeps the pause")
    keys("Left")
    wait_for("a seek back of 10 s", lambda: position() == k, 5)
    print("ok: Left/Right seek by 10 s of recording time")
    keys("+")
    wait_for("speed 2x", lambda: "speed 2x" in screen(), 5)
    keys("-")
    keys("-")
    wait_for("speed 0.5x", lambda: "speed 0.5x" in screen(), 5)
    keys("+", "+", "+")
    wait_for("speed 4x", lambda: "speed 4x" in screen(), 5)
    print("ok: +/- double and halve the speed")
    keys("End")
    wait_for("the last sample", lambda: position() == 30 and "end of recording" in screen(), 5)
    keys("Home")
    wait_for("the first sample", lambda: position() == 1, 5)
    print("ok: Home/End jump to the ends")
    axis = [l for l in screen().splitlines()[1:] if "17:12:00" in l]
    check(axis, "the time axis under the graphs shows the recording's wall-clock time")
    # From sample 11 at 4x the gap after sample 15 comes within about 1 s; waited through it would
    # take 15 minutes.
    keys("Right")
    wait_for("sample 11", lambda: position() == 11, 5)
    keys("Space")
    wait_for("the gap skipped", lambda: "gap of 1h00m in the recording skipped (17:12:14 -> 18:12:15 UTC)" in screen(), 8)
    wait_for("the end of the recording", lambda: position() == 30 and "end of recording" in screen(), 10)
    check("2026-11-30T18:12:29" in screen(), "the last frame is the last sample, an hour later")
    print("ok: the one-hour gap was skipped")
    tm("resize-window", "-t", "r", "-x", "70", "-y", "20")
    wait_for("a fit at 70x20", lambda: "sample 30/30" in screen() or max(len(l.rstrip()) for l in screen().splitlines()) <= 70, 5)
    check(max(len(l.rstrip()) for l in screen().splitlines()) <= 70, "the replay fits a resized window")
    keys("q")
    wait_for("the exit status", lambda: os.path.exists(status_file) and open(status_file).read().strip() == "0", 10)
    print("ok: q exits with status 0")
finally:
    subprocess.run([tmux, "-L", sock, "kill-server"], capture_output=True, timeout=10)
print("PASS")
