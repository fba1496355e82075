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

    # Attention and MLP are submodules named as in transformers' LLaMA (attn, mlp): the
    # scopes vramkit.compress_activations selects.
    class Attention(torch.nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
            self.o = torch.nn.Linear(d, d, bias=False)

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(a.transpose(1, 2).reshape(b, s, d))

    class MLP(torch.nn.Module):
        def __init__(self, d, ffn):
            super().__init__()
            self.gate_up = torch.nn.Linear(d, 2 * ffn, bias=False)
            self.down = torch.nn.Linear(ffn, d, bias=False)

        def forward(self, x):
            g, u = self.gate_up(x).chunk(2, dim=-1)
            return self.down(torch.nn.functional.silu(g) * u)

    class Block(torch.nn.Module):
        def __init__(self, d, heads, ffn):
            super().__init__()
            self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
            self.attn = Attention(d, heads)
            self.mlp = MLP(d, ffn)

        def forward(self, x):
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

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
    ctx = comp = None
    if args.config in ("vramkit-compress", "vramkit-act+compress"):
        comp = vramkit.compress_activations(model, modules=("mlp", "attn"), compile=True)
    if args.config == "vramkit-compress":
        ctx = comp
    elif args.config in ("vramkit-act", "vramkit-act+opt", "vramkit-compute-only", "vramkit-act+compress"):
        ctx = vramkit.offload_activations(model, mix=mix, timing=args.config != "vramkit-compute-only",
                                          compress=comp)
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
    if comp is not None:
        st = comp.stats()
        out["compress_stats"] = {k: v // len(tokens) for k, v in st.items()}
        from vramkit.activation_compress import compiled_in_use

        out["compress_compiled"] = compiled_in_use()
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
        out["saved_bytes_total"] = sum(block_bytes.values())
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


def shape_config(shape):
    """The shape as a Hugging Face LLaMA config.json (what `vramkit plan` reads)."""
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": shape["d"],
            "intermediate_size": shape["ffn"], "num_hidden_layers": shape["layers"],
            "num_attention_heads": shape["heads"], "num_key_value_heads": shape["heads"],
            "vocab_size": shape["vocab"], "max_position_embeddings": max(4096, shape["seq"]),
            "tie_word_embeddings": False, "torch_dtype": "float32"}


def planner_fit(name, shape, cap, out_dir):
    """`vramkit plan CONFIG --fit --json` under the cap: the planner's offload candidates, by
    whether they offload the optimizer: {False: fit, True: fit} (absent when none fits), plus the
    command line. The CLI is $VRAMKIT_CLI or a build folder's (vramkit.find_cli)."""
    from vramkit.planner import find_cli

    path = os.path.join(out_dir, "plan-%s.json" % name)
    with open(path, "w") as f:
        json.dump(shape_config(shape), f)
    argv = [find_cli(), "plan", path, "--precision", "amp-bf16", "--batch", str(shape["batch"]),
            "--seq", str(shape["seq"]), "--gpu", "%dMiB" % (cap >> 20), "--fit", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise RuntimeError("vramkit plan failed (exit %d): %s" % (proc.returncode, proc.stderr.strip()))
    res = json.loads(proc.stdout)
    got = {"argv": argv}
    for fit in res["fits"]:
        if fit.get("activation_mix") and fit["micro_batch"] == shape["batch"]:
            got.setdefault(bool(fit["optimizer_offload"]), fit)
    return got


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
        # The mixes run are the planner's (vramkit plan --fit) when it answers; the Python model
        # fitted to the reference run is kept beside it for comparison.
        try:
            fit = planner_fit(name, shape, cap, os.path.dirname(os.path.abspath(args.out)))
            entry["planner"] = {"argv": fit["argv"]}
            for key, opt in (("act", False), ("act+opt", True)):
                f = fit.get(opt)
                entry["planner"][key] = f
            pa, po = entry["planner"]["act"], entry["planner"]["act+opt"]
            plan_act = (pa["activation_mix"], None) if pa else None
            plan_opt = (po["activation_mix"], None) if po else None
            entry["mix_source"] = "vramkit plan --fit"
        except (OSError, RuntimeError, ValueError) as e:
            entry["planner"] = {"error": str(e)}
            entry["mix_source"] = "python model (vramkit plan unavailable: %s)" % e
        # Most important first: when the time budget runs out, the last ones are skipped.
        # Compression is measured on the first shape only (the stage's time budget).
        todo = []
        if plan_act:
            todo.append(("vramkit-act", plan_act[0]))
        todo.append(("full-checkpoint", None))
        if k == 0:
            todo.append(("vramkit-compress", None))
            if plan_act:
                todo.append(("vramkit-act+compress", plan_act[0]))
        if plan_act and "offload" in plan_act[0]:
            todo.append(("vramkit-compute-only", [p if p != "offload" else "keep" for p in plan_act[0]]))
        if plan_opt:
            todo.append(("vramkit-act+opt", plan_opt[0]))
        todo += [("save-on-cpu", None), ("torchtune-style", None), ("none-capped", None)]
        for config, mix in todo:
            left = deadline - time.time()
            if left < 20:
                entry["configs"].append({"config": config, "ok": False, "error": "skipped: time budget spent"})
                continue
            c = 0 if config in ("vramkit-compute-only", "vramkit-compress") else cap
            entry["configs"].append(spawn(args, config, name, cap=c, mix=mix, timeout=min(150, left)))
        # Overlap: (T_compute + T_copy - T_both) / T_copy.
        by = {c["config"]: c for c in entry["configs"] if c.get("ok")}
        if "vramkit-act" in by and "vramkit-compute-only" in by:
            both = by["vramkit-act"]["step_time_s"]["median"]
            comp = by["vramkit-compute-only"]["step_time_s"]["median"]
            copy = sum(by["vramkit-act"]["copy_s"].values())
            entry["overlap"] = {"t_compute_s": comp, "t_copy_s": copy, "t_both_s": both,
                                "overlap": (comp + copy - both) / copy if copy > 0 else None}
        # Compression: saved bytes against the reference's, step time against uncompressed, the
        # planner's allocated peak against the measured one.
        if "vramkit-compress" in by and ref.get("saved_bytes_total"):
            cs = by["vramkit-compress"]
            st = cs["compress_stats"]
            saved = ref["saved_bytes_total"] - st["input_bytes"] + st["stored_bytes"]
            comp_entry = {"saved_bytes_ratio": saved / ref["saved_bytes_total"],
                          "step_ratio_vs_reference": cs["step_time_s"]["median"] / ref["step_time_s"]["median"],
                          "measured_peak_allocated_bytes": cs["peak_allocated_bytes"]}
            if "vramkit-act+compress" in by and "vramkit-act" in by:
                comp_entry["act+compress_vs_act"] = (by["vramkit-act+compress"]["step_time_s"]["median"]
                                                     / by["vramkit-act"]["step_time_s"]["median"])
            try:
                from vramkit.planner import find_cli

                path = os.path.join(os.path.dirname(os.path.abspath(args.out)), "plan-%s.json" % name)
                argv = [find_cli(), "plan", path, "--precision", "amp-bf16", "--batch", str(shape["batch"]),
                        "--seq", str(shape["seq"]), "--compress-activations", "fp8:mlp,attn", "--gpu", "h200", "--json"]
                pj = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
                comp_entry["planner_allocated_peak_bytes"] = pj["offload"]["allocated_peak_bytes"]
                comp_entry["planner_error"] = pj["offload"]["allocated_peak_bytes"] / cs["peak_allocated_bytes"] - 1
            except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as e:
                comp_entry["planner"] = "unavailable: %s" % e
            entry["compression"] = comp_entry
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
        if entry.get("mix_source"):
            lines.append("mixes run: %s" % entry["mix_source"])
        for k in ("act", "act+opt"):
            f = (entry.get("planner") or {}).get(k)
            if f:
                meas = next((c for c in entry["configs"] if c["config"] == "vramkit-" + k and c.get("ok")), None)
                ms = meas["step_time_s"]["median"] if meas else None
                mp = meas["peak_allocated_bytes"] if meas else None
                lines.append("planner's mix (%s): %s%s; predicted %.3f s/step, allocated peak %.2f GiB; "
                             "measured %s s/step (%s), %s GiB (%s)"
                             % (k, "".join(x[0] for x in f["activation_mix"]),
                                "" if f["compress_activations"] == "none" else " " + f["compress_activations"],
                                f["step_time_s"], f["allocated_peak_bytes"] / gib,
                                "-" if ms is None else "%.3f" % ms,
                                "-" if ms is None else "%+.1f%%" % (100 * (f["step_time_s"] / ms - 1)),
                                "-" if mp is None else "%.2f" % (mp / gib),
                                "-" if mp is None else "%+.1f%%" % (100 * (f["allocated_peak_bytes"] / mp - 1))))
            elif (entry.get("planner") or {}).get("argv"):
                lines.append("planner's mix (%s): none fits the cap" % k)
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
        if "compression" in entry:
            c = entry["compression"]
            lines.append("")
            lines.append("compression fp8 (mlp, attn): saved activations %.1f%% of bf16 (target <= 55%%); step %.3fx "
                         "uncompressed (target <= 1.05x); act+compress / act %s (target < 1); planner allocated "
                         "peak %s vs measured %.2f GiB (%s; target within 5%%)"
                         % (100 * c["saved_bytes_ratio"], c["step_ratio_vs_reference"],
                            "%.3fx" % c["act+compress_vs_act"] if "act+compress_vs_act" in c else "-",
                            "%.2f GiB" % (c["planner_allocated_peak_bytes"] / gib) if "planner_allocated_peak_bytes" in c else "-",
                            c["measured_peak_allocated_bytes"] / gib,
                            "%+.1f%%" % (100 * c["planner_error"]) if "planner_error" in c else c.get("planner", "-")))
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
