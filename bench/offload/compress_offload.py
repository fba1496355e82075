#!/usr/bin/env python3
"""Offload with fp8 compression against offload alone, under one memory cap, in one process on
one GPU, with offload_bench's model, steps and measurements (offload_bench.run_config):

In this order (a budget cut short drops the last):
1. the planner's `--fit --allow-lossy` mix with fp8 (the fastest compressed mix under the cap:
   the planner lists it beside a faster lossless one), then offload alone at its plain `--fit`
   mix;
2. offload alone's best forced mix: the plain fit's first k checkpointed blocks offloaded, the
   k (of FORCED_KS) the planner predicts fastest without compression within the cap, when
   neither fit copies a block;
3. one offloading mix (blocks whose saved tensors are copied to pinned host memory) with fp8 and
   without: the planner's fit when one of its fits copies a block, else a FORCED mix, labelled
   so, k the fewest at which the planner expects the uncompressed copies exposed and both mixes
   within the cap, else its fastest compressed one within the cap (or --forced-blocks); without
   fp8 only when the planner expects it within the cap. Halving the copied bytes is what lets
   the copies hide behind compute.
`--compressed-mix MIX` (a letter per block; repeatable) runs that mix with fp8, right after the
lossy fit, and `--plain-mix MIX` (repeatable) one without, right after the plain fit: the same
number of tries for each side, so that the bar's comparison of fastest against fastest stays
fair when mixes the planner did not pick are tried. Every compressed mix runs through offload_activations(compress=...), its selective blocks'
GEMM outputs stored (s) or copied (h) as fp8. A mix that repeats (the same mix, compressed alike)
runs once. The bar's comparison is offload
with fp8 at its fastest measured mix against offload alone at its fastest, under the same cap.

Each with the engine settings the planner assumes for it (copy window, prefetch depth), and the
planner's figures for each are its estimate of the mix as given on the H200 (one cost model for
all; the fits themselves are searched under the bare capacity, which the planner prices on its
generic GPU).

    python3 bench/offload/compress_offload.py --cap-from compress-bench.json --out compress-offload.json

The cap is `--cap-fraction` (0.5, the offload bench's) of the peak reserved of the uncompressed
run that `--cap-from` (compress_bench.py's JSON of the same run, same shape) measured; the
planner is given the cap plus what the device holds outside PyTorch's allocator. Reported per
configuration: the mix, step time (median), peak allocated and reserved against the planner's,
the bytes copied each way per step, and the step-time ratios. The JSON and the summary are
rewritten after each configuration, so a run cut short keeps what it measured.
"""

import functools
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

GiB = 1 << 30
MODULES = "mlp,attn,norm"
# Blocks of the forced offloading mix tried (its first k checkpointed blocks offloaded), when
# neither of the planner's fits copies a block to the host.
FORCED_KS = (1, 2, 3, 4, 6, 8)
# A forced mix fits when the planner's allocated peak is within this share of the cap (room for
# the allocator's fragmentation: the cap bounds what it reserves).
FIT_MARGIN = 0.97
# A mix's copies count as exposed when the planner leaves this much of them unhidden a step.
EXPOSED_S = 0.02


def plan_mixes(shape, capacity, out_dir):
    """{config: the planner's choice} for offload alone and offload with compression."""
    import offload_bench

    plans = offload_bench.planner_runs(shape, capacity, out_dir, None)
    return offload_bench.planner_choices(plans, shape), plans


# Policies that copy a block's saved tensors to the host, which compression shrinks (a
# checkpointed block with its input on the host copies only that input).
COPIES_SAVED = ("offload", "selective-offload")
# What a forced mix turns into "offload": checkpointed blocks, their input on the host or not.
RECOMPUTED = ("checkpoint", "checkpoint-offload")


def copies(mix):
    return any(p in COPIES_SAVED for p in mix or [])


def forced_mix(mix, k):
    """`mix` with its first k checkpointed blocks offloaded (None when it has fewer)."""
    idx = [i for i, p in enumerate(mix) if p in RECOMPUTED]
    if len(idx) < k:
        return None
    out = list(mix)
    for i in idx[:k]:
        out[i] = "offload"
    return out


def mix_estimates(shape, capacity, out_dir, mixes):
    """The planner's estimate of each given mix ({key: (mix, compressed)}): {key: offload JSON}."""
    import offload_bench

    plans = offload_bench.planner_runs(shape, capacity, out_dir, None,
                                       mixes={k: (m, False, c) for k, (m, c) in mixes.items()})
    return {k[4:]: ((v.get("json") or {}).get("offload") or {"error": v.get("error")})
            for k, v in plans.items() if k.startswith("mix:")}


def choose_forced(base, cap, estimates_of):
    """The forced offloading mixes (the first k checkpointed blocks of `base` offloaded, k in
    FORCED_KS): (k_c, its mix, k_p, its mix, {k: (compressed estimate, plain estimate)}).

    k_c is where the comparison is about: the smallest k at which the planner predicts the
    uncompressed mix's copies exposed (EXPOSED_S of copy time the compute does not hide) while
    both mixes fit (allocated peak within FIT_MARGIN of `cap`: the same mix measured both ways
    shows what halving the copies gives); when no k is, the one the planner predicts fastest
    with compression among those that fit (fp8's best forced mix, as k_p is offload alone's;
    the smallest k when none fits). k_p is the planner's fastest without compression among those whose plain
    peak fits (None when none): offload alone's best forced mix. `estimates_of(mixes)` is
    mix_estimates bound to the shape."""
    cands = {k: forced_mix(base, k) for k in FORCED_KS}
    cands = {k: m for k, m in cands.items() if m is not None}
    if not cands:
        return None, None, None, None, {}
    got = estimates_of({("%d+c" % k): (m, True) for k, m in cands.items()}
                       | {("%d" % k): (m, False) for k, m in cands.items()})
    table = {k: (got.get("%d+c" % k) or {}, got.get("%d" % k) or {}) for k in cands}

    def fits(e):
        return bool(e.get("allocated_peak_bytes") and e["allocated_peak_bytes"] <= FIT_MARGIN * cap
                    and e.get("step_time_s"))

    def fastest(side):
        ks = [k for k in table if fits(table[k][side])]
        return min(ks, key=lambda k: table[k][side]["step_time_s"]) if ks else None

    bound = [k for k, (c, a) in table.items()
             if fits(c) and fits(a) and (a.get("exposed_copy_s") or 0) >= EXPOSED_S]
    k_c = min(bound) if bound else fastest(0)
    k_p = fastest(1)
    if k_c is None:
        k_c = min(cands)
    return k_c, cands[k_c], k_p, cands.get(k_p), table


def pick_offloading(lossy, plain, forced_blocks, cap, estimates_of):
    """The offloading mix measured with fp8 and without: (choose_forced's answer or its like,
    {"offloading_mix": what it is, "forced": the forced mixes' figures}): a fit's mix when one
    copies a block (unless `forced_blocks`), else the forced mixes of choose_forced, or the mix
    with the first `forced_blocks` checkpointed blocks of the plain (else lossy) fit offloaded."""
    from vramkit.offload_plan import letters

    info, forced = {}, None
    base = (plain or lossy or {}).get("mix")
    # --forced-blocks forces the mix whatever the fits copy.
    off_src = None if forced_blocks else next(
        (n for n, f in (("lossy", lossy), ("plain", plain)) if f and copies(f.get("mix"))), None)
    if off_src:
        fm = (lossy if off_src == "lossy" else plain)["mix"]
        info["offloading_mix"] = "the planner's %s fit (%s)" % (off_src, letters(fm))
        return (None, fm, None, None, {}), info
    if not base:
        return None, info
    if forced_blocks:
        fm = forced_mix(base, forced_blocks)
        if not fm:
            info["offloading_mix"] = ("--forced-blocks %d: the fit's mix (%s) has fewer checkpointed blocks; "
                                      "nothing forced" % (forced_blocks, letters(base)))
            return None, info
        forced = (forced_blocks, fm, None, None, {})
    else:
        forced = choose_forced(base, cap, estimates_of)
    if forced and forced[1]:
        k, fm, kp, _, table = forced
        info["forced"] = {"blocks": k, "plain_blocks": kp, "base": base,
                          "candidates": {str(kk): {"compressed": plan_entry(c), "plain": plan_entry(a)}
                                         for kk, (c, a) in table.items()}}
        info["offloading_mix"] = (
            "FORCED, not the planner's: its %s fit's first %d checkpointed blocks offloaded (%s): %s" % (
                "plain" if plain else "lossy", k, letters(fm), "--forced-blocks" if forced_blocks else
                "neither fit copies a block under this cap; the fewest blocks at which the planner expects "
                "uncompressed copies exposed and both mixes within the cap, else its fastest compressed one "
                "within it"))
    return forced, info


# What plan_runs measures, in order (a budget cut short drops the last): offload with fp8 at the
# planner's lossy fit, offload alone at its plain fit and at its best forced mix, then one
# offloading mix with fp8 and without (the same mix both ways: a fit's when it copies, else forced).
RUN_ORDER = (("planner lossy fit", True), ("planner plain fit", False), ("offload alone's best forced mix", False),
             ("offloading mix + fp8", True), ("offloading mix", False))


#: The options that force a mix (run compressed right after the lossy fit, or without fp8 right
#: after the plain fit); a forced mix's label is the option and its letters.
GIVEN = "--compressed-mix"
GIVEN_PLAIN = "--plain-mix"


def parse_compressed_mix(text, n_blocks, option=GIVEN):
    """The mix `OPTION TEXT` names (letters of vramkit.offload_plan.LETTERS, one per block);
    ValueError with a one-line message for another length or an unknown letter."""
    from vramkit.offload_plan import from_letters

    if len(text) != n_blocks:
        raise ValueError("%s %s: %d letters for a shape of %d blocks" % (option, text, len(text), n_blocks))
    try:
        return from_letters(text)
    except ValueError as e:
        raise ValueError("%s %s: %s" % (option, text, e)) from None


def given_label(option, mix):
    """The label of a mix forced by OPTION (GIVEN or GIVEN_PLAIN): the option and its letters."""
    return "%s %s" % (option, offload_plan_letters(mix))


def plan_runs(lossy, plain, forced, cap, estimates_of, given=(), given_plain=()):
    """The configurations to measure: ([(label, engine config, mix, the planner's entry,
    compressed)], pairs, [configurations not run, as result entries]). `lossy` and `plain`: the
    planner's fits (planner_choices' entries or None); `forced`: choose_forced's answer (k, mix,
    k_p, offload alone's best forced mix, table) or None. A mix already measured under another
    label (the same mix, compressed alike) runs once: the pairs name its first label. Every
    planner entry is its estimate of the mix as given (`estimates_of`, on the GPU of the run),
    so that all the predicted times come from one cost model; the forced mix without fp8 runs
    only when the planner expects its allocated peak within FIT_MARGIN of the cap. `given`: the
    mixes of --compressed-mix (run compressed after the lossy fit) and `given_plain` those of
    --plain-mix (without fp8, after the plain fit), each labelled given_label(option, mix)."""
    _, fmix, _, plain_mix, _ = forced or (None,) * 5
    mixes = {"planner lossy fit": (lossy or {}).get("mix"), "planner plain fit": (plain or {}).get("mix"),
             "offload alone's best forced mix": plain_mix, "offloading mix + fp8": fmix, "offloading mix": fmix}
    forced_c, forced_p = [], []
    for option, given_mixes, comp, out in ((GIVEN, given, True, forced_c), (GIVEN_PLAIN, given_plain, False, forced_p)):
        for m in given_mixes or ():
            mixes[given_label(option, m)] = m
            out.append((given_label(option, m), comp))
    order = RUN_ORDER[:1] + tuple(forced_c) + RUN_ORDER[1:2] + tuple(forced_p) + RUN_ORDER[2:]
    est = estimates_of({str(i): (mixes[label], comp) for i, (label, comp) in enumerate(order) if mixes[label]})
    runs, not_run, first = [], [], {}
    for i, (label, comp) in enumerate(order):
        mix, name = mixes[label], "vramkit-act+compress" if comp else "vramkit-act"
        if not mix:
            if label.startswith("planner"):
                not_run.append({"config": name, "label": label, "ok": False,
                                "error": "the planner found no mix for it under the cap"})
            continue
        key = (tuple(mix), comp)
        if key in first:
            continue  # measured already under the first label
        entry = plan_entry(est.get(str(i)) or {})
        peak = entry.get("allocated_peak_bytes")
        if label == "offloading mix" and not (peak and peak <= FIT_MARGIN * cap):
            not_run.append({"config": name, "label": label, "ok": False, "mix": mix, "plan": entry,
                            "compressed": comp, "error": "not run: the planner expects %s allocated, over %.2f of "
                            "the cap" % ("%.2f GiB" % (peak / GiB) if peak else "no figure", FIT_MARGIN)})
            continue
        first[key] = label
        runs.append((label, name, mix, entry, comp))

    def ran(label):
        return first.get((tuple(mixes[label]), dict(order)[label])) if mixes[label] else None

    pairs = {}
    for key, a, b in (("fits", "planner lossy fit", "planner plain fit"),
                      ("same mix", "offloading mix + fp8", "offloading mix"),
                      ("best forced", "offloading mix + fp8", "offload alone's best forced mix")):
        if ran(a) and ran(b):
            pairs[key] = (ran(a), ran(b), offload_plan_letters(mixes[b]))
    return runs, pairs, not_run


def offload_plan_letters(mix):
    from vramkit import offload_plan

    return offload_plan.letters(mix)


def _within_noise(c, a):
    """Whether two measured step times ({"median", "min", "max"}) cannot be told apart, by the
    offload bench's tie rule (offload_bench.measured_tie)."""
    import offload_bench

    def row(name, t):
        return {"config": name, "measured_step_s": t["median"]}

    spread = {n: (t.get("min", t["median"]), t.get("max", t["median"])) for n, t in (("c", c), ("a", a))}
    return offload_bench.measured_tie(row("c", c), row("a", a), spread)


def _ratio_line(what, c, a, target_text="target < 1"):
    """The bar's line: met only where the first is faster beyond the noise of the two runs; a tie
    is NOT met, and says so."""
    if c and a:
        ratio = c["step_time_s"]["median"] / a["step_time_s"]["median"]
        if _within_noise(c["step_time_s"], a["step_time_s"]):
            verdict = "NOT met: a tie, within the runs' noise (medians within 1% or inside the other's min-max)"
        else:
            verdict = "met" if ratio < 1 else "NOT met"
        return "- %s: %.3fx (%s: %s)" % (what, ratio, target_text, verdict)
    return "- %s: not measured (a configuration did not run)" % what


def best_line(by):
    """The bar's comparison: offload with fp8 at its fastest measured mix against offload alone at
    its fastest, both under the cap ({label: measured result})."""
    def fastest(comp):
        got = [(r["step_time_s"]["median"], k) for k, r in by.items() if bool(r.get("compressed")) == comp]
        return min(got) if got else None

    c, a = fastest(True), fastest(False)
    what = "offload + fp8 at its fastest measured mix%s / offload alone at its fastest%s, under the cap"
    if not (c and a):
        return "- %s: not measured (no run of one side)" % (what % ("", ""))

    def name(k):
        return " (%s, %s)" % (k, offload_plan_letters(by[k].get("mix") or []))
    return _ratio_line(what % (name(c[1]), name(a[1])), by[c[1]], by[a[1]])


def summarize(res):
    lines = ["## offload with fp8 compression against offload alone (%s)" % res.get("model", "?"), ""]
    if "cap_bytes" in res:
        lines.append("cap %.2f GiB (%.2f x the uncompressed run's peak reserved, compress bench); planner given "
                     "%.2f GiB (plus %.2f GiB outside the allocator); planner's kernel rates: GPU catalogue"
                     % (res["cap_bytes"] / GiB, res["cap_fraction"], res["planner_capacity_bytes"] / GiB,
                        res["outside_bytes"] / GiB))
    if res.get("fits"):
        lines.append("the fits: `vramkit plan --fit [--allow-lossy] --gpu CAPACITY` (a bare capacity: the planner's "
                     "generic GPU prices the search; predicted step %s lossy, %s plain); planner step s below: its "
                     "estimate of each mix as given, on the H200 catalogue entry" % tuple(
                         "%.3f s" % f["step_time_s"] if (f or {}).get("step_time_s") else "-"
                         for f in (res["fits"].get("lossy"), res["fits"].get("plain"))))
    if res.get("offloading_mix"):
        lines.append("offloading mix (the same with and without fp8): %s" % res["offloading_mix"])
    if res.get("error"):
        lines.append("not measured: %s" % res["error"])
    lines.append("")
    lines.append("| config | mix | step s (median, n) | peak alloc GiB | planner GiB | error | peak reserved GiB "
                 "| copied GiB/step (out+in) | planner step s | loss (last) |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    by = {}
    for r in res.get("configs", []):
        key = r.get("label", r["config"])
        mix = offload_plan_letters(r.get("mix") or []) or "-"
        plan = r.get("plan") or {}
        pa = plan.get("allocated_peak_bytes")
        if not r.get("ok"):
            at = r.get("failed_at")
            lines.append("| %s | %s | %s%s | %.2f | %s | | %.2f | | %s | |" % (
                key, mix, r.get("error", "?"), " (at step %s, %s)" % (at.get("step"), at.get("phase")) if at else "",
                r.get("peak_allocated_bytes", 0) / GiB,
                "%.2f" % (pa / GiB) if pa else "-", r.get("peak_reserved_bytes", 0) / GiB,
                "%.3f" % plan["step_time_s"] if plan.get("step_time_s") else "-"))
            continue
        by[key] = r
        st = r["step_time_s"]
        cb = r.get("copy_bytes") or {}
        lines.append("| %s | %s | %.3f (%d) | %.2f | %s | %s | %.2f | %s | %s | %.4f |" % (
            key, mix, st["median"], st["n"], r["peak_allocated_bytes"] / GiB,
            "%.2f" % (pa / GiB) if pa else "-",
            "%+.1f%%" % (100 * (pa - r["peak_allocated_bytes"]) / r["peak_allocated_bytes"]) if pa else "-",
            r["peak_reserved_bytes"] / GiB,
            "%.2f+%.2f" % (cb.get("d2h", 0) / GiB, cb.get("h2d", 0) / GiB) if cb else "-",
            "%.3f" % plan["step_time_s"] if plan.get("step_time_s") else "-",
            r["losses"][-1] if r.get("losses") else float("nan")))
    lines.append("")
    pairs = res.get("pairs") or {}
    same = pairs.get("same mix")
    if same:
        lines.append(_ratio_line("the offloading mix (%s) with fp8 / without, under the cap" % same[2],
                                 by.get(same[0]), by.get(same[1])))
    best = pairs.get("best forced")
    if best:
        lines.append(_ratio_line("the offloading mix with fp8 / offload alone's best forced mix (%s), under the cap"
                                 % best[2], by.get(best[0]), by.get(best[1])))
    fits = pairs.get("fits")
    if fits:
        lines.append(_ratio_line("the planner's --allow-lossy fit / its plain fit, under the cap",
                                 by.get(fits[0]), by.get(fits[1])))
    lines.append(best_line(by))
    for key, r in by.items():
        pa = (r.get("plan") or {}).get("allocated_peak_bytes")
        if r.get("compressed") and pa:
            err = (pa - r["peak_allocated_bytes"]) / r["peak_allocated_bytes"]
            lines.append("- planner peak for %s: %+.1f%% (target within 5%%: %s)" % (
                key, 100 * err, "met" if abs(err) <= 0.05 else "NOT met"))
    lines.append("wall time %.1f s (budget %.0f s)" % (res.get("wall_s", 0), res.get("budget_s", 0)))
    return "\n".join(lines) + "\n"


def plan_entry(o):
    """What the summary and the engine take from the planner's offload JSON for a mix."""
    return {k: o.get(k) for k in ("mix", "allocated_peak_bytes", "device_peak_bytes", "step_time_s", "copy_s",
                                  "exposed_copy_s", "max_inflight_bytes", "prefetch_blocks", "host_lead_blocks",
                                  "compress_activations")}


def main():
    import compress_bench

    ap = compress_bench.bench_parser(__doc__, "compress-offload.json", 1, 4, 26.0)
    ap.add_argument("--cap-from", required=True, help="compress_bench.py's JSON (its bf16 run's peak reserved)")
    ap.add_argument("--cap-fraction", type=float, default=0.5)
    ap.add_argument("--forced-blocks", type=int, default=0,
                    help="blocks the forced offloading mix offloads, whatever the fits copy (default 0: the planner's "
                    "pick among %s, forced only when neither fit copies a block)"
                    % ",".join(map(str, FORCED_KS)))
    ap.add_argument(GIVEN, dest="compressed_mix", action="append", default=[], metavar="MIX",
                    help="a mix run with fp8, right after the planner's lossy fit (repeatable): a letter per block "
                    "of the shape (o, c, k, s, h, x as `vramkit plan --offload activations:MIX`)")
    ap.add_argument(GIVEN_PLAIN, dest="plain_mix", action="append", default=[], metavar="MIX",
                    help="a mix run without fp8 (offload alone), right after the planner's plain fit (repeatable)")
    t0 = time.time()
    args = compress_bench.parse_bench_args(ap)
    if not 0 < args.cap_fraction <= 1:
        ap.error("--cap-fraction must be in (0, 1]")
    if args.forced_blocks < 0:
        ap.error("--forced-blocks must be >= 0")
    import offload_bench

    n_blocks = offload_bench.SHAPES[args.shape]["layers"]
    try:
        given = [parse_compressed_mix(m, n_blocks) for m in args.compressed_mix]
        given_plain = [parse_compressed_mix(m, n_blocks, GIVEN_PLAIN) for m in args.plain_mix]
    except ValueError as e:
        ap.error(str(e))

    # Pinned host memory registered by 16 threads, as the offload bench's workers do (pinning
    # the offloaded blocks' GiBs otherwise dominates the first step).
    if "PYTORCH_CUDA_ALLOC_CONF" not in os.environ:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = offload_bench.PIN_ENV
    shape = offload_bench.SHAPES[args.shape]
    res = {"schema_version": 2, "argv": sys.argv[1:], "shape": dict(shape, name=args.shape),
           "budget_s": args.budget_s, "cap_fraction": args.cap_fraction, "configs": []}
    save = compress_bench.writer(res, args, t0, summarize)

    try:
        with open(args.cap_from) as f:
            bench = json.load(f)
        ref = next(r for r in bench.get("configs", []) if r.get("config") == "bf16" and "peak_reserved_bytes" in r)
    except (OSError, ValueError, StopIteration) as e:
        res["error"] = "no uncompressed run in %s to set the cap from (%s)" % (args.cap_from, type(e).__name__)
        save()
        print(summarize(res))
        return 1
    import torch

    if not torch.cuda.is_available():
        res["error"] = "no CUDA device"
        save()
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    model, loss_fn, kind = offload_bench.build_model(shape, "auto")
    from vramkit.activation_offload import find_blocks

    res["model"] = "%s, d %d, %d blocks, batch %d x %d tokens" % (
        "transformers LlamaForCausalLM" if kind == "hf" else "built-in LLaMA layout", shape["d"], shape["layers"],
        shape["batch"], shape["seq"])
    cap = int(ref["peak_reserved_bytes"] * args.cap_fraction)
    free, total = torch.cuda.mem_get_info()
    outside = max(0, (total - free) - torch.cuda.memory_reserved())
    capacity = cap + outside
    res.update({"cap_bytes": cap, "outside_bytes": outside, "planner_capacity_bytes": capacity,
                "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")})
    out_dir = os.path.dirname(os.path.abspath(args.out))
    try:
        chosen, plans = plan_mixes(shape, capacity, out_dir)
    except Exception as e:  # noqa: BLE001 - recorded in the summary
        res["error"] = "planner: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        save()
        print(summarize(res))
        return 1
    res["planner_argv"] = {k: v.get("argv") for k, v in plans.items() if isinstance(v, dict)}
    lossy, plain = chosen.get("vramkit-act+compress"), chosen.get("vramkit-act")
    res["fits"] = {"lossy": lossy, "plain": plain}
    estimates_of = functools.partial(mix_estimates, shape, capacity, out_dir)
    forced, info = pick_offloading(lossy, plain, args.forced_blocks, cap, estimates_of)
    res.update(info)
    runs, pairs, not_run = plan_runs(lossy, plain, forced, cap, estimates_of, given, given_plain)
    res["configs"].extend(not_run)
    res["pairs"] = pairs
    save()
    # Both sides run --warmup and --timed steps (offload alone's own default, 1 and 4, otherwise).
    offload_bench.STEPS["vramkit-act"] = (args.warmup, args.timed)
    w = {"shape": shape, "model": model, "loss_fn": loss_fn, "blocks": find_blocks(model), "kind": kind,
         "total": total, "warmup": args.warmup, "timed": args.timed, "cap": cap, "plan_settings": {}}
    deadline = t0 + args.budget_s
    walls = []  # each configuration's wall time (about 1 s of setup and its 3-5 steps)
    for label, name, mix, plan, comp in runs:
        if time.time() + (1.1 * max(walls) if walls else 5.0) > deadline:
            res["configs"].append({"config": name, "label": label, "ok": False, "mix": mix, "plan": plan,
                                   "compressed": comp, "error": "skipped: time budget spent"})
            save()
            continue
        # The engine's copy windows: the planner's for this mix.
        w["plan_settings"] = {name: {k: plan.get(k) for k in ("max_inflight_bytes", "prefetch_blocks",
                                                              "host_lead_blocks")}}
        r = offload_bench.run_config(w, name, mix)
        r.update({"label": label, "plan": plan, "compressed": comp})
        if r.get("wall_s"):
            walls.append(r["wall_s"])
        res["configs"].append(r)
        save()
    save()
    print(summarize(res))
    # Running out of memory under the cap is a measured outcome (the summary shows it), not a
    # failure of the bench.
    return 0 if all(r.get("ok") or any(k in r.get("error", "") for k in ("skipped", "found no mix", "out of memory",
                                                                        "not run"))
                    for r in res["configs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
