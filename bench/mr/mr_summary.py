#!/usr/bin/env python3
"""Writes the mr GPU stage's summary (scripts/gpu-check.d/30-mr.sh) from whatever its steps have
left in OUT so far; the stage runs it after every step, so a stage cut off still leaves the figures
of the steps that finished, and says which did not.

    python3 bench/mr/mr_summary.py OUT SUMMARY.md [--elapsed S] [--note TEXT ...]

Sections: allocator calls from C++ (bench/mr/torch_alloc_compare.cpp, vmm pool and classic pool
against PyTorch's caching allocator: targets alloc+free median <= 500 ns and <= 0.5x native), the
training step (bench/mr/torch_train_compare.py: identical losses, step time within 1% of native,
vmm peak reserved <= expandable segments'), the replayed traces side by side with `vramkit
replay`'s models of PyTorch (targets: vmm <= 1.03 x requested and <= expandable; models within 2%
of the real figure), and the pool benchmark (bench/mr/pool_bench.cpp).
"""

import argparse
import datetime
import glob
import json
import os
import subprocess


def load(out, name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001 - a header field, never fatal
        return ""


def f3(x):
    return "-" if x is None else "%.3f" % x


def pct(model, real):
    if model is None or real is None or real == 0:
        return "-"
    return "%+.1f%%" % (100.0 * (model - real) / real)


def alloc_compare(out, lines):
    lines += ["## Allocator calls from C++ (PyTorch's caching allocator vs vramkit through "
              "vramkit_torch_malloc / vramkit_free, one process, alternating passes)", ""]
    rows = [("torch_alloc_compare_default.json", "the default"),
            ("torch_alloc_compare_pool.json", "VRAMKIT_POOL_KIND=pool")]
    found = False
    for name, label in rows:
        cc = load(out, name)
        if not cc:
            continue
        if not found:
            lines += ["| vramkit pool | verified | vramkit alloc / free median ns | alloc+free ns | "
                      "PyTorch alloc / free median ns | alloc+free ns | vramkit / PyTorch | targets "
                      "(<= 500 ns, <= 0.5) | peak reserved vramkit / PyTorch |",
                      "|---|---|---|---|---|---|---|---|---|"]
            found = True
        t, v, r = cc["torch"], cc["vramkit"], cc["ratios"]
        ratio = r["alloc_free_median_vramkit_over_torch"]
        ok = v["alloc_free_median_ns"] <= 500 and ratio <= 0.5
        lines.append("| %s (%s) | %s | %.0f / %.0f | %.0f | %.0f / %.0f | %.0f | %.3f | %s | %s |" % (
            cc.get("vramkit_pool", "?"), label, "yes" if cc["verification"]["passed"] else "FAILED",
            v["alloc_median_ns"],
            v["free_median_ns"], v["alloc_free_median_ns"], t["alloc_median_ns"], t["free_median_ns"],
            t["alloc_free_median_ns"], ratio, "met" if ok else "NOT met",
            f3(r.get("peak_reserved_vramkit_over_torch"))))
        cc_first = cc
    if found:
        lines += ["", "%d timed passes per allocator after one verification pass each; %d allocations "
                  "per pass; PyTorch %s; one steady_clock read (%.0f ns) included per call" % (
                      cc_first["repeats"], cc_first["trace"]["allocs"], cc_first.get("torch_version") or "?",
                      cc_first["clock"]["read_median_ns"]), ""]
    else:
        lines += ["not measured (not built, failed, or cut off: see 30-mr.log, "
                  "mr/torch_alloc_compare.build.log)", ""]


def training(out, lines):
    tr = load(out, "torch_train.json")
    lines += ["## Training step through the pluggable allocator (bench/mr/torch_train_compare.py)", ""]
    if not tr or "torch" not in tr:
        lines += ["not measured (failed or cut off: see mr/torch_train.txt)", ""]
        return
    t = tr["torch"]
    m = tr.get("measurement", {})
    w = t.get("warmup", 0)
    n = len(t["step_s"])
    how = ("interleaved: one process per run, all built at once, then one step each in turn (the order "
           "rotating every round)" if m.get("order") == "interleaved" else "one process per run, one after the other")
    lines += ["LLaMA-shaped, %d layers, batch %d x %d, amp bf16, AdamW, %d steps per run, %s; medians over steps "
              "%d-%d of every run (the same %d warm-up steps left out of every allocator's)%s" % (
                  t["layers"], t["batch"], t["seq"], n, how, w, n - 1, w,
                  "; cut off after %d of %d rounds" % (m["rounds"], m["steps"]) if m.get("rounds", n) < m.get("steps", n)
                  else ""), "",
              "| run | median step s | step / native | paired step ratios q1 / median / q3 | peak reserved MiB | "
              "peak allocated MiB | reserved / expandable's | losses identical to native |",
              "|---|---|---|---|---|---|---|---|"]
    exp = tr.get("torch_expandable", {}).get("peak_reserved_bytes")
    ratios = tr.get("ratios", {})
    paired = tr.get("paired_step_ratios", {})
    labels = ["torch"] + [k for k, v in tr.items() if k != "torch" and isinstance(v, dict) and "losses" in v]
    for k in labels:
        r = tr[k]
        p = paired.get(k)
        lines.append("| %s | %.4f | %s | %s | %.1f | %.1f | %s | %s |" % (
            k, r["median_step_s"], "%.4f" % ratios.get("step_time_%s_over_torch" % k, 1.0),
            "%.4f / %.4f / %.4f" % (p["q1"], p["median"], p["q3"]) if p else "-",
            r["peak_reserved_bytes"] / 2**20, r["peak_allocated_bytes"] / 2**20,
            f3(r["peak_reserved_bytes"] / exp) if exp else "-",
            "-" if k == "torch" else r.get("losses_identical_to_torch")))
    for k in labels:
        ps = tr[k].get("per_step_mapping")
        if ps:
            mapped = ps["vmm.granules_mapped"]
            last = max([i for i, x in enumerate(mapped) if x] or [-1])
            lines.append("")
            lines.append("%s per step: granules remapped %s, created %s, mapping ms %s, device synchronizations "
                         "before a remap %s; last step that mapped: %s; in the timed steps (%d-%d): %d remapped, "
                         "%d mapped in all" % (
                             k, ps["vmm.granules_remapped"], ps.get("vmm.physical_creates", "-"),
                             [round((a + b) / 1e6, 2) for a, b in zip(ps["vmm.map_ns"], ps["vmm.unmap_ns"])],
                             ps.get("vmm.growth_syncs", "-"), last if last >= 0 else "none", w, n - 1,
                             sum(ps["vmm.granules_remapped"][w:]), sum(mapped[w:])))
    noise = ratios.get("step_time_torch_repeat_over_torch")
    noise_p = paired.get("torch_repeat")
    if noise is not None:
        lines += ["", "native against itself (torch_repeat / torch): %.4f, paired q1 / median / q3 %s: the "
                  "measurement's noise beside the 1%% bar" % (
                      noise, "%.4f / %.4f / %.4f" % (noise_p["q1"], noise_p["median"], noise_p["q3"])
                      if noise_p else "-")]
    for k, what in (("vramkit_vmm", "vmm pool, the default"), ("vramkit_vmm_slack5", "vmm pool, 5% slack"),
                    ("vramkit_vmm_slackmax5", "vmm pool, VRAMKIT_POOL_SLACK_MAX=5%")):
        ps = tr.get(k, {}).get("per_step_mapping")
        r = tr.get(k)
        if not r:
            continue
        step = ratios.get("step_time_%s_over_torch" % k, r["median_step_s"] / t["median_step_s"])
        res = r["peak_reserved_bytes"] / exp if exp else None
        after = sum(ps["vmm.granules_mapped"][w:]) if ps else None
        early = ratios.get("step_time_%s_over_torch_from_step2" % k)
        lines += ["", "targets (%s): identical losses %s; step time within 1%% of native: %.4f (%s; paired median "
                  "%s; medians from step 2 on: %s); peak reserved <= expandable segments': %s (%s); no mapping in the timed steps: %s" % (
                      what, "met" if r.get("losses_identical_to_torch") else "NOT met", step,
                      "met" if step <= 1.01 else "NOT met",
                      "%.4f" % paired[k]["median"] if k in paired else "-",
                      "-" if early is None else "%.4f" % early,
                      f3(res) if res is None else "%.4f" % res,
                      "-" if res is None else ("met" if res <= 1 else "NOT met"),
                      "-" if after is None else ("met" if after == 0 else "NOT met (%d granules)" % after))]
    lines.append("")


def train_trace(out, lines):
    """The training step's own allocation trace (written by the traced vmm run) through `vramkit
    replay` on the CPU: the same pool on the simulated device, and the models of PyTorch's."""
    rp = load(out, "vramkit_replay_train_vmm.json")
    if not rp:
        return
    lines += ["## The training step's recorded trace through `vramkit replay` (CPU)", "",
              "| allocator | peak requested MiB | peak reserved MiB | ratio | segments | remaps |",
              "|---|---|---|---|---|---|"]
    for a in rp.get("allocators", []):
        req = a["peak_requested_bytes"]
        lines.append("| %s | %.1f | %.1f | %s | %d | %d |" % (
            a["name"], req / 2**20, a["peak_reserved_bytes"] / 2**20,
            f3(a["peak_reserved_bytes"] / req) if req else "-", a["segments"], a["remaps"]))
    lines.append("")


def replays(out, lines):
    side = sorted(glob.glob(os.path.join(out, "torch_replay_*.json")))
    lines += ["## Replayed traces: peak reserved / peak requested, real allocators (torch.empty, "
              "verified) beside `vramkit replay`'s models", ""]
    if not side:
        lines += ["not measured (failed or cut off: see mr/torch_replay.txt)", ""]
        return
    lines += ["Repeated: the peak over all passes of the trace in one process (first pass, verification "
              "pass, timed passes; cache kept), modelled by `vramkit replay --passes N`. First pass: "
              "from an emptied cache, modelled by `vramkit replay` (one pass).", "",
              "| trace | native | expandable | vramkit pool | vramkit vmm | vmm <= 1.03 and <= expandable | "
              "native model (off) | expandable model (off) | first pass: native / model | first pass: "
              "expandable / model |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    worst = 0.0
    for p in side:
        name = os.path.basename(p)[len("torch_replay_"):-len(".json")]
        r = load(out, os.path.basename(p)) or {}
        rep = load(out, "vramkit_replay_%s.json" % name) or {}
        one = load(out, "vramkit_replay_%s.pass1.json" % name) or {}
        model = {a["name"]: a["reserved_over_requested"] for a in rep.get("allocators", [])}
        model1 = {a["name"]: a["reserved_over_requested"] for a in one.get("allocators", [])}

        def q(k, key="peak_reserved_over_peak_requested"):
            return r[k].get(key) if k in r else None

        vmm, exp = q("vramkit_vmm"), q("torch_expandable")
        ok = vmm is not None and exp is not None and vmm <= 1.03 and vmm <= exp
        for m, real in ((model.get("pytorch_native"), q("torch")),
                        (model.get("pytorch_expandable_segments"), exp)):
            if m is not None and real:
                worst = max(worst, abs(m - real) / real)
        lines.append("| %s | %s | %s | %s | %s | %s | %s (%s) | %s (%s) | %s / %s | %s / %s |" % (
            name, f3(q("torch")), f3(exp), f3(q("vramkit")), f3(vmm), "yes" if ok else "NO",
            f3(model.get("pytorch_native")), pct(model.get("pytorch_native"), q("torch")),
            f3(model.get("pytorch_expandable_segments")), pct(model.get("pytorch_expandable_segments"), exp),
            f3(q("torch", "first_pass_peak_reserved_over_peak_requested")), f3(model1.get("pytorch_native")),
            f3(q("torch_expandable", "first_pass_peak_reserved_over_peak_requested")),
            f3(model1.get("pytorch_expandable_segments"))))
    lines += ["", "largest model error against the real repeated figure: %.2f%% (target <= 2%%)" % (100 * worst), ""]


def pool_bench(out, lines):
    bench = load(out, "pool_bench.json")
    lines += ["## Pool benchmark (bench/mr/pool_bench.cpp: allocate + free, median per allocation, host clock)", ""]
    if not bench:
        lines += ["not measured (failed or cut off: see mr/pool_bench.txt)", ""]
        return
    rows = {}
    for b in bench.get("benchmarks", []):
        if b.get("error_occurred"):
            lines.append("- %s: ERROR %s" % (b["name"], b.get("error_message")))
            continue
        _, trace, res = b["name"].split("/", 2)
        rows.setdefault(trace, {})[res.split("/iterations")[0]] = b
    for trace, rs in rows.items():
        lines += ["### %s" % trace, "",
                  "| resource | alloc ns | free ns | alloc+free ns | vs cudaMallocAsync warm | "
                  "peak reserved / peak requested |", "|---|---|---|---|---|---|"]
        base = rs.get("cuda_async_warm", {}).get("alloc_free_median_ns")
        for name, b in rs.items():
            v = b["alloc_free_median_ns"]
            lines.append("| %s | %.0f | %.0f | %.0f | %s | %s |" % (
                name, b["alloc_median_ns"], b["free_median_ns"], v,
                "%.1fx faster" % (base / v) if base and v else "-",
                f3(b.get("peak_reserved_over_peak_requested"))))
        lines.append("")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("summary")
    ap.add_argument("--elapsed", type=float)
    ap.add_argument("--note", action="append", default=[])
    a = ap.parse_args()
    lines = ["# mr: allocator results", "",
             "- GPU / driver: " + (sh("nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1")
                                   or "unknown"),
             "- commit: " + (os.environ.get("VRAMKIT_COMMIT") or sh("git rev-parse --short HEAD 2>/dev/null") or "unknown"),
             "- date: " + datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")]
    if a.elapsed is not None:
        lines.append("- stage time so far: %.0f s" % a.elapsed)
    lines += ["- " + n for n in a.note]
    lines.append("")
    alloc_compare(a.out, lines)
    training(a.out, lines)
    train_trace(a.out, lines)
    replays(a.out, lines)
    pool_bench(a.out, lines)
    with open(a.summary, "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
