#!/usr/bin/env python3
"""Activation and optimizer-state offload, side by side, on LLaMA-shaped models (random weights,
amp-bf16, AdamW) under a GPU memory cap of about half the uncapped peak.

For each shape: the uncapped reference (also measures the model's inputs: saved bytes and
forward/backward time per block, link rates), then under the cap: no offload (expected to run out
of memory), full checkpointing, torch's save_on_cpu(pin_memory=True), a torchtune-style offload
(written from its published algorithm: side stream, 5-tensor stash, copy back on use), vramkit
with the mix its offload model chooses, and vramkit activations + OffloadedAdamW. Every config
runs in its own process, so one that fails (out of memory, timeout) loses only its own result.

    python3 bench/offload/offload_bench.py --out offload.json --summary offload.md [--shapes 1b,3b-wide]

Figures: step time (CUDA events, median of the timed steps, min-max), peak reserved and
allocated (torch.cuda.max_memory_*), pinned host bytes (the pools' peak), per-step losses, and for
vramkit the overlap: (T_compute + T_copy - T_both) / T_copy with T_compute the same mix with its
offloaded blocks kept (uncapped) and T_copy the copies' CUDA-event time.
"""

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

SHAPES = {
    # 1B class: TinyLlama-like width, 16 blocks, 0.95B parameters.
    "1b": dict(d=2048, layers=16, heads=16, ffn=5632, vocab=32000, batch=12, seq=2048),
    # Wider (LLaMA-7B width) with fewer blocks: 2.7B parameters. With fp32 master weights and
    # Adam (16 B per parameter, 43 GB) full checkpointing may not fit half the peak on one
    # 141 GB GPU: the bench reports it as it runs (activation + optimizer offload is the answer).
    "3b-wide": dict(d=4096, layers=12, heads=32, ffn=11008, vocab=32000, batch=8, seq=2048),
    # The same width with 8 blocks (1.9B), where half the peak leaves room for checkpointing.
    "2b-wide": dict(d=4096, layers=8, heads=32, ffn=11008, vocab=32000, batch=16, seq=2048),
}


# --------------------------------------------------------------------------------------------
# Model (plain torch: RMSNorm, causal SDPA attention, SwiGLU MLP; no rotary, it saves nothing
# that changes the memory picture).
def build_model(shape, device):
    import torch

    class RMSNorm(torch.nn.Module):
        def __init__(self, d):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5).to(x.dtype) * self.weight

    class Block(torch.nn.Module):
        def __init__(self, d, heads, ffn):
            super().__init__()
            self.heads = heads
            self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
            self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
            self.o = torch.nn.Linear(d, d, bias=False)
            self.gate_up = torch.nn.Linear(d, 2 * ffn, bias=False)
            self.down = torch.nn.Linear(ffn, d, bias=False)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
            g, u = self.gate_up(self.n2(x)).chunk(2, dim=-1)
            return x + self.down(torch.nn.functional.silu(g) * u)

    class LM(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.embed = torch.nn.Embedding(c["vocab"], c["d"])
            self.layers = torch.nn.ModuleList(Block(c["d"], c["heads"], c["ffn"]) for _ in range(c["layers"]))
            self.norm = RMSNorm(c["d"])
            self.head = torch.nn.Linear(c["d"], c["vocab"], bias=False)

        def forward(self, tokens):
            x = self.embed(tokens)
            for layer in self.layers:
                x = layer(x)
            logits = self.head(self.norm(x)).float()
            return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                     tokens[:, 1:].reshape(-1))

    torch.manual_seed(0)
    with torch.device(device):
        m = LM(shape)
    for p in m.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
    return m


# --------------------------------------------------------------------------------------------
# torchtune-style offload, from its published algorithm (docs: OffloadActivations).
def torchtune_style(model):
    import torch

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    side = torch.cuda.Stream()
    stash, counter, bytes_ = {}, [0], [0]

    def pack(t):
        if t.numel() * t.element_size() < 1024 or t.untyped_storage().data_ptr() in params or not t.is_cuda:
            return t.detach()
        compute = torch.cuda.current_stream()
        side.wait_stream(compute)
        with torch.cuda.stream(side):
            host = torch.empty(t.size(), dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(side)
        bytes_[0] += t.numel() * t.element_size()
        key = counter[0]
        counter[0] += 1
        stash[key] = (t.detach(), ev)
        for old in [k for k in stash if k <= key - 5]:  # max_fwd_stash_size = 5
            compute.wait_event(stash[old][1])
            del stash[old]
        return (key, host, ev)

    def unpack(x):
        if not isinstance(x, tuple):
            return x
        key, host, ev = x
        if key in stash:
            return stash.pop(key)[0]
        compute = torch.cuda.current_stream()
        with torch.cuda.stream(side):
            side.wait_event(ev)
            dev = host.to(compute.device, non_blocking=True)
            done = torch.cuda.Event()
            done.record(side)
        compute.wait_event(done)
        dev.record_stream(compute)
        return dev

    ctx = torch.autograd.graph.saved_tensors_hooks(pack, unpack)
    ctx.offloaded_bytes = bytes_
    ctx.stash = stash
    return ctx


class _Counting:
    """save_on_cpu(pin_memory=True) with the bytes it pins counted."""

    def __init__(self):
        import torch

        inner = torch.autograd.graph.save_on_cpu(pin_memory=True)
        self.bytes = 0
        pack, unpack = inner.pack_hook, inner.unpack_hook

        def counting_pack(t):
            out = pack(t)
            packed = out[1] if isinstance(out, tuple) else out
            self.bytes += packed.numel() * packed.element_size()
            return out

        inner.pack_hook = counting_pack
        self.inner = inner

    def __enter__(self):
        return self.inner.__enter__()

    def __exit__(self, *a):
        return self.inner.__exit__(*a)


# --------------------------------------------------------------------------------------------
def measure_link():
    import torch

    n = 256 << 20
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    rates = {}
    for name, (dst, src) in {"d2h": (host, dev), "h2d": (dev, host)}.items():
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        times = []
        for _ in range(5):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        rates[name] = n / statistics.median(times)
    return rates


def run_one(args):
    """One config in this process; prints one JSON line."""
    import torch
    import vramkit

    shape = SHAPES[args.shape]
    total = torch.cuda.get_device_properties(0).total_memory
    if args.cap:
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap / total))
    model = build_model(shape, "cuda")
    g = torch.Generator(device="cuda").manual_seed(1)
    tokens = [torch.randint(0, shape["vocab"], (shape["batch"], shape["seq"]), device="cuda", generator=g)
              for _ in range(args.steps)]
    use_offloaded_opt = args.config == "vramkit-act+opt"
    if use_offloaded_opt:
        opt = vramkit.OffloadedAdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    mix = args.mix.split(",") if args.mix else None
    ctx = None
    if args.config in ("vramkit-act", "vramkit-act+opt", "vramkit-compute-only"):
        ctx = vramkit.offload_activations(model, mix=mix, timing=args.config != "vramkit-compute-only")
    elif args.config == "full-checkpoint":
        ctx = vramkit.offload_activations(model, mix=["checkpoint"] * shape["layers"])
    elif args.config == "save-on-cpu":
        ctx = _Counting()
    elif args.config == "torchtune-style":
        ctx = torchtune_style(model)
    block_bytes = {}
    if args.config == "reference":
        # Inputs of the offload model: bytes saved per block (not parameters, >= 1 MiB, distinct
        # storages) and each block's forward time.
        cur = []
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen = set()

        def pack(t):
            ptr = t.untyped_storage().data_ptr()
            if cur and t.is_cuda and ptr not in params and t.numel() * t.element_size() >= (1 << 20) and ptr not in seen:
                seen.add(ptr)
                block_bytes[cur[-1]] = block_bytes.get(cur[-1], 0) + t.numel() * t.element_size()
            return t.detach()

        events = {}

        # Hooks must return None: a value would replace the block's input or output.
        def enter(i, module, inputs):
            cur.append(i)
            events.setdefault(i, []).append(_ev())

        def leave(i, module, inputs, output):
            cur.pop()
            events[i].append(_ev())

        for i, b in enumerate(model.layers):
            b.register_forward_pre_hook(functools.partial(enter, i))
            b.register_forward_hook(functools.partial(leave, i))
        counting = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    losses, times, fwd_times, bwd_times, opt_times = [], [], [], [], []
    copy = {"d2h": [0.0, 0], "h2d": [0.0, 0]}
    torch.cuda.reset_peak_memory_stats()
    for step, x in enumerate(tokens):
        e = [_ev() for _ in range(4)]
        e[0].record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if args.config == "reference" and step == 0:
                with counting:
                    loss = model(x)
            elif ctx is not None:
                with ctx:
                    loss = model(x)
            else:
                loss = model(x)
        e[1].record()
        loss.backward()
        e[2].record()
        opt.step()
        opt.zero_grad(set_to_none=True)
        e[3].record()
        torch.cuda.synchronize()
        losses.append(loss.item())
        del loss
        if step >= args.warmup:
            times.append(e[0].elapsed_time(e[3]) / 1e3)
            fwd_times.append(e[0].elapsed_time(e[1]) / 1e3)
            bwd_times.append(e[1].elapsed_time(e[2]) / 1e3)
            opt_times.append(e[2].elapsed_time(e[3]) / 1e3)
        if ctx is not None and hasattr(ctx, "copy_times") and ctx.timing:
            c = ctx.copy_times()
            if step >= args.warmup:
                for k in c:
                    copy[k][0] += c[k][0]
                    copy[k][1] += c[k][1]
    timed = len(times)
    out = {
        "config": args.config, "shape": args.shape, "cap_bytes": args.cap, "mix": mix, "ok": True,
        "losses": losses,
        "step_time_s": {"median": statistics.median(times), "min": min(times), "max": max(times), "n": timed},
        "forward_s": statistics.median(fwd_times), "backward_s": statistics.median(bwd_times),
        "optimizer_s": statistics.median(opt_times),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "device_total_bytes": total,
        "pinned_host_bytes": None,
    }
    if isinstance(ctx, vramkit.offload_activations):
        out["pinned_host_bytes"] = ctx.pool.stats()["peak_reserved_bytes"]
        out["offload_stats"] = {k: v for k, v in ctx.stats().items() if k != "fetch_order"}
        if ctx.timing:
            out["copy_s"] = {k: v[0] / timed for k, v in copy.items()}
            out["copy_bytes"] = {k: v[1] // timed for k, v in copy.items()}
    elif isinstance(ctx, _Counting):
        out["pinned_host_bytes"] = ctx.bytes // len(tokens)
    elif args.config == "torchtune-style":
        out["pinned_host_bytes"] = ctx.offloaded_bytes[0] // len(tokens)
    if use_offloaded_opt:
        out["pinned_host_bytes"] = (out["pinned_host_bytes"] or 0) + opt.host_state_bytes()
        out["optimizer_host_bytes"] = opt.host_state_bytes()
    if args.config == "reference":
        n_blocks = shape["layers"]
        # Forward time of a block: median over blocks and timed steps (step 0 is the warm-up).
        out["block_bytes"] = [block_bytes.get(i, 0) for i in range(n_blocks)]
        out["block_forward_s"] = statistics.median(
            [events[i][2 * s].elapsed_time(events[i][2 * s + 1]) / 1e3 for i in events for s in range(args.warmup, len(tokens))])
        out["block_input_bytes"] = shape["batch"] * shape["seq"] * shape["d"] * 4
        out["link_bytes_per_s"] = measure_link()
    print("RESULT " + json.dumps(out), flush=True)


def _ev():
    import torch

    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


# --------------------------------------------------------------------------------------------
def spawn(args, config, shape, cap=0, mix=None, timeout=150):
    cmd = [sys.executable, os.path.abspath(__file__), "--run-one", config, "--shape", shape,
           "--cap", str(int(cap)), "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if mix:
        cmd += ["--mix", ",".join(mix)]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"config": config, "shape": shape, "cap_bytes": cap, "mix": mix, "ok": False,
                "error": "timed out after %d s" % timeout}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["wall_s"] = time.time() - t0
            return r
    err = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])
    oom = any("OutOfMemoryError" in l or "out of memory" in l for l in err)
    return {"config": config, "shape": shape, "cap_bytes": cap, "mix": mix, "ok": False,
            "error": "out of memory" if oom else err[-1][:300], "wall_s": time.time() - t0}


def choose(ref, cap, shape, with_optimizer):
    from vramkit import offload_plan

    n = shape["layers"]
    a = max(ref["block_bytes"])
    t_f = ref["block_forward_s"]
    # Backward per block: the measured backward less the head's share, spread over the blocks.
    t_b = ref["backward_s"] / n
    other = ref["peak_allocated_bytes"] - n * a
    if with_optimizer:
        other -= 8 * sum_params(shape)  # Adam's two fp32 moments leave the device
    model = dict(block_bytes=a, input_bytes=ref["block_input_bytes"], t_fwd=t_f, t_bwd=t_b,
                 d2h_bytes_per_s=ref["link_bytes_per_s"]["d2h"], h2d_bytes_per_s=ref["link_bytes_per_s"]["h2d"],
                 other_bytes=other, other_time_s=ref["optimizer_s"])
    # 8% of the cap is left to the allocator's rounding and fragmentation.
    got = offload_plan.choose_mix(n, int(cap * 0.92), **model)
    return got, model


def sum_params(c):
    return c["layers"] * (4 * c["d"] ** 2 + 3 * c["d"] * c["ffn"] + 2 * c["d"]) + 2 * c["vocab"] * c["d"] + c["d"]


def orchestrate(args):
    results_start = time.time()
    results = {"schema_version": 1, "argv": sys.argv, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "cap_fraction": args.cap_fraction, "shapes": {}}
    try:
        import torch

        results["device"] = torch.cuda.get_device_name(0)
        results["torch"] = torch.__version__
    except Exception as e:  # the summary still says why nothing ran
        results["error"] = "torch/CUDA not usable: %s" % e
    names = args.shapes.split(",")
    for k, name in enumerate(names):
        # Each shape gets an equal share of what is left of the budget.
        deadline = time.time() + (args.budget_s - (time.time() - results_start)) / (len(names) - k)
        shape = SHAPES[name]
        entry = results["shapes"][name] = {"shape": shape, "configs": []}
        ref = spawn(args, "reference", name)
        entry["configs"].append(ref)
        if not ref.get("ok"):
            continue
        cap = int(ref["peak_reserved_bytes"] * args.cap_fraction)
        entry["cap_bytes"] = cap
        plan_act, model = choose(ref, cap, shape, with_optimizer=False)
        plan_opt, model_opt = choose(ref, cap, shape, with_optimizer=True)
        entry["model_inputs"] = model
        entry["plan"] = {"act": plan_act, "act+opt": plan_opt}
        # Most important first: when the time budget runs out, the last ones are skipped.
        todo = []
        if plan_act:
            todo.append(("vramkit-act", plan_act[0]))
        todo.append(("full-checkpoint", None))
        if plan_act:
            todo.append(("vramkit-compute-only", [p if p != "offload" else "keep" for p in plan_act[0]]))
        todo.append(("save-on-cpu", None))
        if plan_opt:
            todo.append(("vramkit-act+opt", plan_opt[0]))
        todo += [("torchtune-style", None), ("none-capped", None)]
        for config, mix in todo:
            left = deadline - time.time()
            if left < 20:
                entry["configs"].append({"config": config, "ok": False, "error": "skipped: time budget spent"})
                continue
            c = 0 if config == "vramkit-compute-only" else cap
            entry["configs"].append(spawn(args, config, name, cap=c, mix=mix, timeout=min(150, left)))
        # Overlap: (T_compute + T_copy - T_both) / T_copy.
        by = {c["config"]: c for c in entry["configs"] if c.get("ok")}
        if "vramkit-act" in by and "vramkit-compute-only" in by:
            both = by["vramkit-act"]["step_time_s"]["median"]
            comp = by["vramkit-compute-only"]["step_time_s"]["median"]
            copy = sum(by["vramkit-act"]["copy_s"].values())
            entry["overlap"] = {"t_compute_s": comp, "t_copy_s": copy, "t_both_s": both,
                                "overlap": (comp + copy - both) / copy if copy > 0 else None}
        # The model's predictions for the measured mixes, beside the measurements.
        from vramkit import offload_plan

        n = shape["layers"]
        mixes = {"reference": ["keep"] * n, "full-checkpoint": ["checkpoint"] * n}
        if plan_act:
            mixes["vramkit-act"] = plan_act[0]
            mixes["vramkit-compute-only"] = [p if p != "offload" else "keep" for p in plan_act[0]]
        entry["model_vs_measured"] = []
        for cfg, mix in mixes.items():
            pred = offload_plan.simulate(mix, **model)
            meas = by.get(cfg)
            entry["model_vs_measured"].append({
                "config": cfg, "predicted_step_s": pred["step_time_s"],
                "predicted_peak_bytes": pred["device_peak_bytes"],
                "measured_step_s": meas["step_time_s"]["median"] if meas else None,
                "measured_peak_allocated_bytes": meas["peak_allocated_bytes"] if meas else None})
        for c in entry["configs"]:
            if c.get("ok") and ref.get("ok"):
                c["loss_max_abs_diff_vs_reference"] = max(abs(a - b) for a, b in zip(c["losses"], ref["losses"]))
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    summary = summarize(results)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(summary)
    print(summary)
    # Nothing measured is a failure: every shape needs its reference run.
    measured = [any(c["config"] == "reference" and c.get("ok") for c in e["configs"])
                for e in results["shapes"].values()]
    return 0 if measured and all(measured) else 1


def summarize(results):
    gib = 1 << 30
    lines = ["# offload bench: %s, torch %s, %s" % (results.get("device"), results.get("torch"), results["date"]), ""]
    if "error" in results:
        lines.append(results["error"])
    for name, entry in results["shapes"].items():
        lines.append("## %s: %s" % (name, json.dumps(entry["shape"])))
        if "cap_bytes" in entry:
            lines.append("cap %.2f GiB (%.2f x the reference's peak reserved)" % (entry["cap_bytes"] / gib, results["cap_fraction"]))
        for k, p in (entry.get("plan") or {}).items():
            if p:
                lines.append("model's mix (%s; o offload, c checkpoint, k keep): %s; predicted %.3f s/step, peak %.2f GiB, overlap %.2f"
                             % (k, "".join(x[0] for x in p[0]), p[1]["step_time_s"],
                                p[1]["device_peak_bytes"] / gib, p[1]["overlap"]))
            else:
                lines.append("model's mix (%s): nothing fits the cap" % k)
        ref = next((c for c in entry["configs"] if c["config"] == "reference" and c.get("ok")), None)
        lines.append("")
        lines.append("| config | step s (median, min-max, n) | vs checkpoint | peak reserved GiB | pinned GiB | loss diff |")
        lines.append("| --- | --- | --- | --- | --- | --- |")
        ck = next((c for c in entry["configs"] if c["config"] == "full-checkpoint" and c.get("ok")), None)
        for c in entry["configs"]:
            if not c.get("ok"):
                lines.append("| %s | FAILED: %s | | | | |" % (c["config"], c.get("error")))
                continue
            s = c["step_time_s"]
            ratio = "%.2fx" % (ck["step_time_s"]["median"] / s["median"]) if ck else "-"
            pinned = "%.2f" % (c["pinned_host_bytes"] / gib) if c.get("pinned_host_bytes") else "-"
            diff = c.get("loss_max_abs_diff_vs_reference")
            lines.append("| %s | %.3f (%.3f-%.3f, %d) | %s | %.2f | %s | %s |"
                         % (c["config"], s["median"], s["min"], s["max"], s["n"], ratio,
                            c["peak_reserved_bytes"] / gib, pinned, "-" if diff is None else "%.2e" % diff))
        if entry.get("model_vs_measured"):
            lines.append("")
            lines.append("| model vs measured | step s predicted | measured | error | peak GiB predicted | measured allocated | error |")
            lines.append("| --- | --- | --- | --- | --- | --- | --- |")
            for m in entry["model_vs_measured"]:
                ms, mp = m["measured_step_s"], m["measured_peak_allocated_bytes"]
                lines.append("| %s | %.3f | %s | %s | %.2f | %s | %s |" % (
                    m["config"], m["predicted_step_s"], "-" if ms is None else "%.3f" % ms,
                    "-" if ms is None else "%+.1f%%" % (100 * (m["predicted_step_s"] / ms - 1)),
                    m["predicted_peak_bytes"] / gib, "-" if mp is None else "%.2f" % (mp / gib),
                    "-" if mp is None else "%+.1f%%" % (100 * (m["predicted_peak_bytes"] / mp - 1))))
        if "overlap" in entry:
            o = entry["overlap"]
            lines.append("")
            lines.append("overlap (vramkit-act): %.1f%% of %.3f s copy hidden (T_compute %.3f s, T_both %.3f s)"
                         % (100 * (o["overlap"] or 0), o["t_copy_s"], o["t_compute_s"], o["t_both_s"]))
        lines.append("")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1b,3b-wide", help="any of: " + ", ".join(SHAPES))
    ap.add_argument("--out", default="offload.json")
    ap.add_argument("--summary", default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--budget-s", type=float, default=210.0, help="stop starting configs after this")
    ap.add_argument("--cap-fraction", type=float, default=0.5, help="cap = this x the reference's peak reserved")
    ap.add_argument("--run-one", default=None)
    ap.add_argument("--shape", default=None)
    ap.add_argument("--cap", type=int, default=0)
    ap.add_argument("--mix", default=None)
    args = ap.parse_args()
    for s in args.shapes.split(","):
        if s not in SHAPES:
            ap.error("unknown shape %r (known: %s)" % (s, ", ".join(SHAPES)))
    if args.steps <= args.warmup:
        ap.error("--steps must exceed --warmup")
    if args.run_one:
        args.config = args.run_one
        run_one(args)
    else:
        return orchestrate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
