#!/usr/bin/env python3
"""Offload with fp8 compression against offload alone, under one memory cap, in one process on
one GPU: each with the mix `vramkit plan --fit` chooses for it (with --allow-lossy and
--compress-activations for the compressed one), the engine settings the planner assumes, and
offload_bench's model, steps and measurements (offload_bench.run_config).

    python3 bench/offload/compress_offload.py --cap-from compress-bench.json --out compress-offload.json

The cap is `--cap-fraction` (0.5, the offload bench's) of the peak reserved of the uncompressed
run that `--cap-from` (compress_bench.py's JSON of the same run, same shape) measured; the
planner is given the cap plus what the device holds outside PyTorch's allocator. Reported per
configuration: the mix, step time (median), peak allocated and reserved against the planner's,
and compressed / alone step time. The JSON and the summary are rewritten after each
configuration, so a run cut short keeps what it measured.
"""

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

GiB = 1 << 30
MODULES = "mlp,attn,norm"
# The compressed one first: a failure of the other (its own mix's memory) leaves it measured.
CONFIGS = ("vramkit-act+compress", "vramkit-act")


def plan_mixes(shape, capacity, out_dir):
    """{config: the planner's choice} for offload alone and offload with compression."""
    import offload_bench

    plans = offload_bench.planner_runs(shape, capacity, out_dir, None)
    return offload_bench.planner_choices(plans, shape), plans


def summarize(res):
    lines = ["## offload with fp8 compression against offload alone (%s)" % res.get("model", "?"), ""]
    if "cap_bytes" in res:
        lines.append("cap %.2f GiB (%.2f x the uncompressed run's peak reserved, compress bench); planner given "
                     "%.2f GiB (plus %.2f GiB outside the allocator); planner's kernel rates: GPU catalogue"
                     % (res["cap_bytes"] / GiB, res["cap_fraction"], res["planner_capacity_bytes"] / GiB,
                        res["outside_bytes"] / GiB))
    if res.get("error"):
        lines.append("not measured: %s" % res["error"])
    lines.append("")
    lines.append("| config | mix | step s (median, n) | peak alloc GiB | planner GiB | error | peak reserved GiB "
                 "| planner step s | loss (last) |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    by = {}
    for r in res.get("configs", []):
        mix = "".join(p[0] for p in r.get("mix") or []) or "-"
        plan = r.get("plan") or {}
        pa = plan.get("allocated_peak_bytes")
        if not r.get("ok"):
            at = r.get("failed_at")
            lines.append("| %s | %s | %s%s | %.2f | %s | | %.2f | %s | |" % (
                r["config"], mix, r.get("error", "?"), " (at step %s, %s)" % (at.get("step"), at.get("phase")) if at else "",
                r.get("peak_allocated_bytes", 0) / GiB,
                "%.2f" % (pa / GiB) if pa else "-", r.get("peak_reserved_bytes", 0) / GiB,
                "%.3f" % plan["step_time_s"] if plan.get("step_time_s") else "-"))
            continue
        by[r["config"]] = r
        st = r["step_time_s"]
        lines.append("| %s | %s | %.3f (%d) | %.2f | %s | %s | %.2f | %s | %.4f |" % (
            r["config"], mix, st["median"], st["n"], r["peak_allocated_bytes"] / GiB,
            "%.2f" % (pa / GiB) if pa else "-",
            "%+.1f%%" % (100 * (pa - r["peak_allocated_bytes"]) / r["peak_allocated_bytes"]) if pa else "-",
            r["peak_reserved_bytes"] / GiB, "%.3f" % plan["step_time_s"] if plan.get("step_time_s") else "-",
            r["losses"][-1] if r.get("losses") else float("nan")))
    a, c = by.get("vramkit-act"), by.get("vramkit-act+compress")
    lines.append("")
    if a and c:
        ratio = c["step_time_s"]["median"] / a["step_time_s"]["median"]
        lines.append("- offload + compression / offload alone step time under the cap: %.3fx (target < 1: %s)" % (
            ratio, "met" if ratio < 1 else "NOT met"))
    else:
        lines.append("- offload + compression / offload alone: not measured (a configuration did not run)")
    lines.append("wall time %.1f s (budget %.0f s)" % (res.get("wall_s", 0), res.get("budget_s", 0)))
    return "\n".join(lines) + "\n"


def main():
    import compress_bench

    ap = compress_bench.bench_parser(__doc__, "compress-offload.json", 1, 2, 26.0)
    ap.add_argument("--cap-from", required=True, help="compress_bench.py's JSON (its bf16 run's peak reserved)")
    ap.add_argument("--cap-fraction", type=float, default=0.5)
    t0 = time.time()
    args = compress_bench.parse_bench_args(ap)
    if not 0 < args.cap_fraction <= 1:
        ap.error("--cap-fraction must be in (0, 1]")
    import offload_bench

    # Pinned host memory registered by 16 threads, as the offload bench's workers do (pinning
    # the offloaded blocks' GiBs otherwise dominates the first step).
    if "PYTORCH_CUDA_ALLOC_CONF" not in os.environ:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = offload_bench.PIN_ENV
    shape = offload_bench.SHAPES[args.shape]
    res = {"schema_version": 1, "argv": sys.argv[1:], "shape": dict(shape, name=args.shape),
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
    res.update({"cap_bytes": cap, "outside_bytes": outside, "planner_capacity_bytes": cap + outside,
                "pytorch_cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")})
    out_dir = os.path.dirname(os.path.abspath(args.out))
    try:
        chosen, plans = plan_mixes(shape, cap + outside, out_dir)
    except Exception as e:  # noqa: BLE001 - recorded in the summary
        res["error"] = "planner: %s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
        save()
        print(summarize(res))
        return 1
    res["planner_argv"] = {k: v.get("argv") for k, v in plans.items() if isinstance(v, dict)}
    w = {"shape": shape, "model": model, "loss_fn": loss_fn, "blocks": find_blocks(model), "kind": kind,
         "total": total, "warmup": args.warmup, "timed": args.timed, "cap": cap,
         "plan_settings": {k: {"max_inflight_bytes": v.get("max_inflight_bytes"),
                               "prefetch_blocks": v.get("prefetch_blocks")} for k, v in chosen.items()}}
    deadline = t0 + args.budget_s
    per_step = 0.6  # about the 1B shape's capped step; the first measured one replaces it
    for name in CONFIGS:
        plan = chosen.get(name)
        if not plan or not plan.get("mix"):
            res["configs"].append({"config": name, "ok": False, "error": "the planner found no mix for it under the cap"})
            save()
            continue
        need = 3 + (args.warmup + args.timed) * per_step * 1.5
        if time.time() + need > deadline:
            res["configs"].append({"config": name, "ok": False, "mix": plan["mix"], "plan": plan,
                                   "error": "skipped: time budget spent"})
            save()
            continue
        r = offload_bench.run_config(w, name, plan["mix"])
        r["plan"] = plan
        if r.get("step_time_s"):
            per_step = r["step_time_s"]["median"]
        res["configs"].append(r)
        save()
    save()
    print(summarize(res))
    return 0 if all(r.get("ok") or "skipped" in r.get("error", "") for r in res["configs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
