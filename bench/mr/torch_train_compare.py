#!/usr/bin/env python3
"""Runs the same LLaMA-shaped training steps (amp bf16 autocast, AdamW, fixed seed, deterministic
algorithms) under PyTorch's own CUDA allocator and under vramkit's pool as a pluggable allocator,
each in a fresh process, and compares: the loss of every step (must be identical: this is the
correctness check of the pluggable allocator), median step time, peak reserved and peak allocated
(vramkit's from its own statistics, since torch.cuda's do not work with a pluggable allocator).

    python3 bench/mr/torch_train_compare.py [--config FILE] [--steps N] [--json OUT]
    python3 bench/mr/torch_train_compare.py --run torch|vramkit ...    # one process, JSON on stdout

--config is a Hugging Face LlamaConfig JSON (default tests/data/plan/configs/tinyllama-1.1b.json);
--layers overrides num_hidden_layers (e.g. 2 for a small model). Runs go in the order of --runs;
--json is rewritten after each run, so a run cut off keeps the ones before it. Exit status 1 when
the losses differ, 77 when torch or a GPU is missing (so a test can skip), 2 for bad arguments.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
SKIP = 77


# Each run is a fresh process: label -> (allocator, environment).
RUNS = {
    "torch": ("torch", {}),
    "torch_expandable": ("torch", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    "vramkit": ("vramkit", {"VRAMKIT_POOL_KIND": "pool"}),
    "vramkit_vmm": ("vramkit", {"VRAMKIT_POOL_KIND": "vmm"}),
    # The vmm pool allowed 5% above its highest allocation before it remaps (the default is 2%):
    # less remapping per step for a little more memory.
    "vramkit_vmm_slack5": ("vramkit", {"VRAMKIT_POOL_KIND": "vmm", "VRAMKIT_POOL_SLACK": "5%"}),
    "torch_repeat": ("torch", {}),  # shows whether the runs are repeatable at all
    # The vmm pool without its limit on repeated remaps (VRAMKIT_POOL_REMAP_REPEATS=0: it remaps
    # the same growth every step), writing its allocation trace (vramkit-trace v1) to --trace-out,
    # so that the step can be replayed through the pool on the CPU (`vramkit replay`); the trace
    # is the same under any pool. Its step time includes the tracing.
    "vramkit_vmm_traced": ("vramkit", {"VRAMKIT_POOL_KIND": "vmm", "VRAMKIT_POOL_REMAP_REPEATS": "0"}),
}


def run_one(args):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if args.run == "vramkit":
        import vramkit_torch
        vramkit_torch.use_vramkit_allocator(args.lib)
    import torch
    import transformers

    with open(args.config) as f:
        cfg = json.load(f)
    if args.layers:
        cfg["num_hidden_layers"] = args.layers
    cfg.pop("architectures", None)
    config = transformers.LlamaConfig(**cfg)
    # Eager attention: SDPA/flash backward kernels are not deterministic, and the loss comparison
    # needs bitwise-repeatable runs.
    config._attn_implementation = "eager"
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    # Built on the GPU: initializing 1.1B parameters on the CPU took most of a run's ~37 s.
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=False, foreach=True)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    batches = [torch.randint(0, config.vocab_size, (args.batch, args.seq), generator=gen)
               for _ in range(args.steps)]
    losses, times = [], []
    vmm_keys = ("vmm.granules_mapped", "vmm.granules_remapped", "vmm.physical_creates", "vmm.map_ns",
                "vmm.unmap_ns")
    mapping_at_warmup = None
    per_step = {k: [] for k in vmm_keys}  # the vmm pool's mapping work in each step

    def vmm_counters():
        import vramkit_torch
        st = vramkit_torch.memory_stats()
        return {k: st.get(k, 0) for k in vmm_keys}

    before = vmm_counters() if args.run == "vramkit" else None
    for step in range(args.steps):
        if args.run == "vramkit" and step == args.warmup:
            import vramkit_torch
            st = vramkit_torch.memory_stats()
            mapping_at_warmup = {k: st.get(k, 0) for k in vmm_keys}
        ids = batches[step].cuda(non_blocking=False)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(out.loss.item())
        del out, ids
        if before is not None:
            now = vmm_counters()
            for k in vmm_keys:
                per_step[k].append(now[k] - before[k])
            before = now
    res = {"allocator": args.run, "losses": losses, "step_s": times,
           "median_step_s": statistics.median(times[args.warmup:] or times),
           "params": sum(p.numel() for p in model.parameters()),
           "layers": config.num_hidden_layers, "batch": args.batch, "seq": args.seq,
           "warmup": args.warmup}
    if args.run == "torch":
        res["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
        res["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    else:
        import vramkit_torch
        st = vramkit_torch.memory_stats()
        # The pool's peak, or the CUDA pool's below it when higher (chunks the pool returned).
        res["peak_reserved_bytes"] = max(st["reserved_bytes.all.peak"], st.get("device_reserved_bytes.peak", 0))
        res["pool_peak_reserved_bytes"] = st["reserved_bytes.all.peak"]
        res["peak_allocated_bytes"] = st["allocated_bytes.all.peak"]
        res["peak_requested_bytes"] = st["requested_bytes.all.peak"]
        res["cross_stream_waits"] = st["num_cross_stream_waits"]
        res["pool"] = st.get("resource", "?")
        if mapping_at_warmup is not None:
            # Mapping work of the virtual-memory pool during the timed steps (what it costs per step).
            res["timed_steps_mapping"] = {k: st.get(k, 0) - mapping_at_warmup[k] for k in vmm_keys}
        res["per_step_mapping"] = per_step
        res["misuse_reports"] = st["num_misuse_reports"]
    res["peak_reserved_over_peak_allocated"] = res["peak_reserved_bytes"] / max(1, res["peak_allocated_bytes"])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=os.path.join(ROOT, "tests/data/plan/configs/tinyllama-1.1b.json"))
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--lib", default=None)
    ap.add_argument("--run", choices=["torch", "vramkit"])
    ap.add_argument("--json")
    ap.add_argument("--trace-out", help="where the vramkit_vmm_traced run writes its allocation trace")
    ap.add_argument("--runs", default="torch,vramkit_vmm,torch_expandable,vramkit,torch_repeat",
                    help="comma-separated, in this order, from %s (torch always runs, first)" % ",".join(RUNS))
    args = ap.parse_args()
    if args.steps <= args.warmup:
        print("--steps must exceed --warmup", file=sys.stderr)
        return 2
    if not os.path.isfile(args.config):
        print("config %s not found" % args.config, file=sys.stderr)
        return 2
    labels = [x for x in args.runs.split(",") if x]
    unknown = [x for x in labels if x not in RUNS]
    if unknown:
        print("--runs: unknown run %s (known: %s)" % (", ".join(unknown), ", ".join(RUNS)), file=sys.stderr)
        return 2
    if "vramkit_vmm_traced" in labels and not args.trace_out:
        print("--runs vramkit_vmm_traced needs --trace-out FILE", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print("skipped: %s" % e, file=sys.stderr)
        return SKIP
    if args.run:
        print(json.dumps(run_one(args)))
        return 0
    if not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device", file=sys.stderr)
        return SKIP
    if "torch" not in labels:
        labels.insert(0, "torch")
    results = {}
    identical = True
    for label in labels:
        kind, extra_env = RUNS[label]
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        env.update(extra_env)
        if label == "vramkit_vmm_traced":
            env["VRAMKIT_TRACE_FILE"] = os.path.abspath(args.trace_out)
        cmd = [sys.executable, os.path.abspath(__file__), "--run", kind]
        for k in ("config", "layers", "steps", "warmup", "batch", "seq", "seed", "lib"):
            v = getattr(args, k)
            if v not in (None, ""):
                cmd += ["--" + k, str(v)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            print("%s run failed (exit %d):\n%s" % (label, p.returncode, p.stderr[-4000:]), file=sys.stderr)
            return 1
        r = json.loads(p.stdout.strip().splitlines()[-1])
        r["allocator"] = label
        results[label] = r
        identical = compare(results) and identical
        r = results[label]
        print("%-16s median step %.4f s  peak reserved %8.1f MiB  peak allocated %8.1f MiB  "
              "reserved/allocated %.3f  losses %s" % (
                  label, r["median_step_s"], r["peak_reserved_bytes"] / 2**20,
                  r["peak_allocated_bytes"] / 2**20, r["peak_reserved_over_peak_allocated"],
                  " ".join("%.6f" % x for x in r["losses"])), flush=True)
        ps = r.get("per_step_mapping")
        if ps:
            print("%-16s granules remapped per step %s; created per step %s; mapping ms per step %s" % (
                label, ps["vmm.granules_remapped"], ps["vmm.physical_creates"],
                [round((a + b) / 1e6, 2) for a, b in zip(ps["vmm.map_ns"], ps["vmm.unmap_ns"])]),
                flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    print("losses identical (every run vs torch): %s" % identical)
    print("ratios: " + ", ".join("%s %.4f" % kv for kv in sorted(results["ratios"].items())))
    return 0 if identical else 1


def compare(results):
    """Adds, for every run so far, its losses check and ratios against PyTorch's native run (and
    against expandable segments for peak reserved); returns whether every run's losses equal
    native's."""
    t = results["torch"]
    ratios = {}
    same = True
    for label, r in results.items():
        if not isinstance(r, dict) or "losses" not in r or label == "torch":
            continue
        r["losses_identical_to_torch"] = r["losses"] == t["losses"]
        r["max_loss_diff_to_torch"] = max(abs(a - b) for a, b in zip(t["losses"], r["losses"]))
        same = same and r["losses_identical_to_torch"]
        ratios["step_time_%s_over_torch" % label] = r["median_step_s"] / t["median_step_s"]
        ratios["peak_reserved_%s_over_torch" % label] = r["peak_reserved_bytes"] / max(1, t["peak_reserved_bytes"])
        if "torch_expandable" in results and label.startswith("vramkit"):
            ratios["peak_reserved_%s_over_torch_expandable" % label] = (
                r["peak_reserved_bytes"] / max(1, results["torch_expandable"]["peak_reserved_bytes"]))
    results["ratios"] = ratios
    results["losses_identical"] = same
    if "torch_repeat" in results:
        results["torch_repeatable"] = results["torch_repeat"]["losses_identical_to_torch"]
    return same


if __name__ == "__main__":
    sys.exit(main())
