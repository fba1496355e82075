"""Bad input and hostile system strings through the command line: each case here failed before
(issue 18). Terminal escapes in a process name, replay to CSV, negative numbers in recordings,
options that were accepted and ignored, a bind address that is none, a garbage Slurm config, a
NodeName that breaks gres.conf, and probe's exit code 3 for a requested section that was skipped.
Usage: harden_cli_test.py VRAMKIT_BINARY SOURCE_DIR"""
import json
import os
import shutil
import sys
import tempfile

from cli_checks import expect, failures, finish, run

SOURCE = sys.argv[2]
DATA = os.path.join(SOURCE, "tests", "data", "monitor")


help_serve = run("serve", "--help")[1]
with tempfile.TemporaryDirectory(prefix="vramkit-harden.") as tmp:
    fake = os.path.join(DATA, "fake_gpus.json")

    # 1. A process whose name is an OSC "set title" sequence must not reach the terminal raw.
    host = os.path.join(tmp, "host")
    shutil.copytree(os.path.join(DATA, "host"), host, symlinks=True)
    with open(os.path.join(host, "proc", "4242", "cmdline"), "wb") as f:
        f.write(b"\x1b]0;owned\x07\x00--flag\x9b\x00")
    code, out, err = run("watch", "--once", "--fake-gpus", fake, "--host-root", host)
    if code != 0 or "\x1b" in out or "\x07" in out:
        failures.append(f"watch --once printed a raw escape: {out!r}")
    elif "\\x1b]0;owned\\x07" not in out:
        failures.append(f"watch --once did not show the escaped name: {out!r}")

    # 2. Replay converts a recording to CSV; integers come back exactly.
    rec = os.path.join(tmp, "rec.jsonl")
    code, out, _ = run("watch", "--json", "--count", "2", "--interval", "100ms", "--fake-gpus",
                       fake, "--host-root", host)
    with open(rec, "w") as f:
        f.write(out)
    csv = os.path.join(tmp, "out.csv")
    expect(0, r"^$", "watch", "--replay", rec, "--csv", csv)
    rows = open(csv).read().splitlines() if os.path.exists(csv) else []
    if len(rows) != 5 or "1048576000" not in rows[1]:  # header + 2 samples x 2 GPUs
        failures.append(f"replay --csv wrote {rows!r}")
    else:
        back = os.path.join(tmp, "back.jsonl")
        code, out, _ = run("watch", "--replay", csv, "--json")
        gpu = json.loads(out.splitlines()[0])["gpus"][0]
        if gpu.get("pcie_rx_bytes_per_second") != 1048576000 or \
                gpu.get("memory_used_bytes") != 40802189312:
            failures.append(f"CSV round trip changed numbers: {gpu!r}")

    # 3. Negative memory in a recording is refused by line, not shown as 16384 PiB.
    line = json.loads(open(rec).readline())
    line["gpus"][0]["memory_used_bytes"] = -5
    bad = os.path.join(tmp, "neg.jsonl")
    with open(bad, "w") as f:
        f.write(json.dumps(line) + "\n")
    expect(2, r"neg\.jsonl:1: .*memory_used_bytes is negative", "watch", "--replay", bad, "--once")
    badcsv = os.path.join(tmp, "neg.csv")
    with open(badcsv, "w") as f:
        f.write(rows[0] + "\n" + rows[1].replace("40802189312", "-40802189312") + "\n")
    expect(2, r"neg\.csv:2: .*negative", "watch", "--replay", badcsv, "--once")

    # 4. Options that were accepted and ignored, or failed with an unrelated message.
    expect(2, r"--threads: must be >= 1", "probe", "--threads", "0", "--only", "host")
    if "--fake-gpus" in help_serve:
        expect(2, r"--history", "serve", "--history", "-1")
        expect(2, r"^vramkit: cannot listen on 'notanaddress': not an IP address",
               "serve", "--port", "0", "--bind", "notanaddress")
    expect(2, r"interval '2x' has an unknown unit", "watch", "--once", "--interval", "2x")
    expect(0, r"NVIDIA H200", "watch", "--once", "--interval", "1h", "--fake-gpus", fake,
           "--host-root", host)

    # 5. Slurm: a garbage config and a NodeName that would break gres.conf.
    garbage = os.path.join(tmp, "garbage.conf")
    with open(garbage, "w") as f:
        f.write("this is not a vramkit-slurm.conf\n")
    expect(2, r"garbage\.conf:1: expected shard_bytes=N", "slurm", "shards", "--request", "8GiB",
           "--config", garbage)
    with open(garbage, "w") as f:
        f.write("shard_bytes=12abc\n")
    expect(2, r"garbage\.conf:1: shard_bytes is not a whole number", "slurm", "shards",
           "--request", "8GiB", "--config", garbage)
    good = os.path.join(tmp, "good.conf")
    with open(good, "w") as f:
        f.write("# comment\nshard_bytes=1073741824\nmax_gpu_shards=140\n")
    expect(0, r"^8 shards of 1.00 GiB", "slurm", "shards", "--request", "8GiB", "--config", good)
    gpus = os.path.join(SOURCE, "tests", "data", "cluster")
    fixture = next((os.path.join(gpus, f) for f in sorted(os.listdir(gpus))
                    if f.endswith(".json") and "gpu" in f), fake)
    expect(2, r"--node 'gpu 1\\x0aNodeName=evil': not a Slurm NodeName", "slurm", "gres",
           "--fake-gpus", fixture, "--node", "gpu 1\nNodeName=evil")
    expect(0, r"NodeName=gpu\[01-04\]", "slurm", "gres", "--fake-gpus", fixture, "--node",
           "gpu[01-04]")

    # 6. A config.json whose hidden_size is 1e30 is out of range, not -9223372036854775808.
    cfg = json.load(open(os.path.join(SOURCE, "tests", "data", "plan", "configs", "gpt2-large.json")))
    key = "hidden_size" if "hidden_size" in cfg else "n_embd"
    cfg[key] = 1e30
    huge = os.path.join(tmp, "huge.json")
    with open(huge, "w") as f:
        json.dump(cfg, f)
    text = expect(2, r"out of range", "plan", huge)
    if "-9223372036854775808" in text:
        failures.append(f"plan {key}=1e30 printed INT64_MIN: {text!r}")

    # 7. Exit 3 when a requested section was skipped whole (no GPU on this machine).
    code, out, err = run("probe", "--only", "gpu", "--quick")
    has_gpu = os.path.exists("/dev/nvidia0")
    if not has_gpu and code != 3:
        failures.append(f"probe --only gpu without a GPU exited {code}, expected 3: {err[-300:]!r}")
    if not has_gpu and "section 'gpu' was skipped" not in err:
        failures.append(f"probe --only gpu: no reason on stderr: {err[-300:]!r}")

finish("harden cli")
