#!/usr/bin/env python3
"""fp8 activation compression alone (no offload), side by side in one process on one GPU: the
codec's kernels against a device-to-device copy of the same bytes, and training steps of a
LLaMA-shaped model (offload_bench's shapes and model) without compression and with each module
selection of vramkit.compress_activations.

    python3 bench/offload/compress_bench.py --out compress-bench.json --summary compress-bench.md

1. Kernels: for the tensor sizes the model saves (bf16 at the hidden and MLP widths, fp32 at the
   hidden width), encode and decode time (CUDA events, median of 10) and bandwidth (bytes read +
   written / time) against torch's copy_ of the input (cudaMemcpy device to device) in the same
   run; every round trip checked against fp8 e4m3's stated bound and the payload checked bit for
   bit against the torch backend (torch's float8 operations, the same arithmetic); the gated
   MLP's restore in one kernel (fp8_codec.decode_swiglu) against two decodes and torch's silu
   and mul into the same outputs, with the elements where the two differ.
2. Steps: per configuration, the median step time (CUDA events; forward, backward, optimizer),
   the bytes the graph holds at the end of the forward (memory_allocated after minus before:
   the saved activations), the peak allocated, and, in one extra step with events around every
   encode and decode, the kernels' time per step; `vramkit plan` gives its allocated peak for
   the same configuration. "hooks" runs the selection hooks with nothing compressed (their
   Python cost).
3. Interleaved: bf16 steps and steps of the headline selection (INTERLEAVED, and with
   --variants those of INTERLEAVED_ALSO beside it) alternate on one model and optimizer, in rounds whose order
   flips every other round (A B B A A B ...), so that a drift of the device (clocks,
   temperature, the allocator's cache) falls on all alike; the speed verdict is the ratio of the
   two medians over --pairs rounds, with the median of the per-round ratios and the bf16 steps'
   spread beside it (one run's few steps per configuration spread 0.417-0.433 s, as wide as the
   bar's margin).

The JSON and the summary are rewritten after every configuration, so a run cut short keeps what
it measured; configurations that do not fit the time left (--budget-s) are reported as skipped.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

GiB = 1 << 30
# (name, modules or None for no compression, other options); "hooks": the selection without
# compression. In the order they run: what a budget cut short drops is the last.
RECOMPUTE = {"norm_inputs": "exact", "recompute": True}
CONFIGS = (("bf16", None, {}), ("fp8 mlp,attn,norm, recompute", ("mlp", "attn", "norm"), RECOMPUTE),
           ("hooks", ("mlp", "attn"), {}), ("fp8 mlp,attn", ("mlp", "attn"), {}),
           ("fp8 mlp,attn,norm", ("mlp", "attn", "norm"), {}),
           ("fp8 mlp,attn, recompute", ("mlp", "attn"), {"recompute": True}), ("fp8 mlp", ("mlp",), {}))
# The selection the interleaved steps time against bf16 (the speed verdict's).
INTERLEAVED = "fp8 mlp,attn,norm, recompute"
# Timed in the same rounds beside it with --variants (not judged): the same selection with the gated MLP's
# restore as two decodes and torch's silu and mul (run L's kernels).
# restore as two decodes and torch's silu and mul (run L's kernels), and with autocast's casts of
# the norms' outputs (q/k/v's, gate/up's inputs) kept as one bf16 copy each instead of fp8.
INTERLEAVED_ALSO = (("fp8 mlp,attn,norm, recompute, separate kernels", ("mlp", "attn", "norm"),
                     dict(RECOMPUTE, fuse_swiglu=False)),
                    ("fp8 mlp,attn,norm, recompute, casts kept", ("mlp", "attn", "norm"), dict(RECOMPUTE, casts="kept")))
STEP_TARGET = 1.05
SAVED_TARGET = 0.55
PEAK_TOLERANCE = 0.05


# --------------------------------------------------------------------------------------------
# Kernels.
def _median_time(fn, reps=10):
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def roundtrip_violations(x, back, scales, fmt="e4m3"):
    """Elements of `back` (decoded from x, in x's dtype) outside the stated bound: |x' - x| <=
    2^-m |x| + scale * 2^(min_exp - mant) (fp8's rounding, subnormals included) + the rounding of
    x' into its dtype (2^-8 of |x'| for bf16)."""
    import torch

    rel = {"e4m3": 2.0 ** -4, "e5m2": 2.0 ** -3}[fmt]
    sub = {"e4m3": 2.0 ** -9, "e5m2": 2.0 ** -16}[fmt]
    out_rel = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 0.0}[x.dtype]
    xf, bf = x.float().reshape(-1), back.float().reshape(-1)
    n = xf.numel()
    s = scales.float().repeat_interleave(128)[:n]
    bound = rel * xf.abs() + sub * s + out_rel * bf.abs()
    return int(((bf - xf).abs() > bound * 1.0001).sum())


def kernel_bench(shape, deadline):
    """Encode/decode bandwidth against a device copy, per tensor kind the model saves."""
    import torch
    from vramkit import fp8_codec

    if not fp8_codec.cuda_kernels_available():
        return {"error": "CUDA kernels not loadable: %s" % fp8_codec.library_error()}
    rows = shape["batch"] * shape["seq"]
    kinds = (("bf16 hidden", rows * shape["d"], torch.bfloat16), ("bf16 mlp", rows * shape["ffn"], torch.bfloat16),
             ("fp32 hidden", rows * shape["d"], torch.float32))
    out = []
    g = torch.Generator(device="cuda").manual_seed(3)
    for name, n, dtype in kinds:
        if time.time() > deadline:
            out.append({"kind": name, "skipped": "time budget spent"})
            continue
        # Activations' spread: normal values times a per-row magnitude over three decades.
        x = (torch.randn(n // 1024, 1024, device="cuda", generator=g)
             * torch.exp2(torch.rand(n // 1024, 1, device="cuda", generator=g) * 10 - 5)).to(dtype).reshape(-1)
        nq, ns = fp8_codec.payload_bytes(x.numel()), fp8_codec.scale_count(x.numel())
        q = torch.empty(nq, dtype=torch.uint8, device="cuda")
        s = torch.empty(ns, dtype=torch.float32, device="cuda")
        back = torch.empty_like(x)
        copy = torch.empty_like(x)
        t_enc = _median_time(lambda: fp8_codec.encode(x, "e4m3", "cuda", q=q, scales=s))
        t_dec = _median_time(lambda: fp8_codec.decode(q, s, x.numel(), "e4m3", dtype, "cuda", out=back))
        t_copy = _median_time(lambda: copy.copy_(x))
        in_b = x.numel() * x.element_size()
        packed_b = nq + 4 * ns
        r = {"kind": name, "elements": x.numel(), "input_bytes": in_b, "packed_bytes": packed_b,
             "encode_s": t_enc, "decode_s": t_dec, "copy_s": t_copy,
             "encode_gbps": (in_b + packed_b) / t_enc / 1e9, "decode_gbps": (in_b + packed_b) / t_dec / 1e9,
             "copy_gbps": 2 * in_b / t_copy / 1e9}
        r["encode_vs_copy"] = r["encode_gbps"] / r["copy_gbps"]
        r["decode_vs_copy"] = r["decode_gbps"] / r["copy_gbps"]
        fp8_codec.encode(x, "e4m3", "cuda", q=q, scales=s)
        fp8_codec.decode(q, s, x.numel(), "e4m3", dtype, "cuda", out=back)
        torch.cuda.synchronize()
        r["bound_violations"] = roundtrip_violations(x, back, s)
        if fp8_codec.torch_fp8_available():
            tq, ts = fp8_codec.encode(x, "e4m3", "torch")
            r["equals_torch_backend"] = bool(torch.equal(tq, q) and torch.equal(ts, s))
            del tq, ts
        out.append(r)
        x = q = s = back = copy = None  # freed before the next kind's tensors
        torch.cuda.empty_cache()
    res = {"kinds": out}
    if time.time() < deadline:
        res["swiglu"] = swiglu_bench(rows * shape["ffn"], g)
    return res


def swiglu_bench(n, g):
    """The gated MLP's restore (gate, up, silu(gate), product from two fp8 copies of n bf16
    elements): the fused kernel against two decodes and torch's silu and mul into the same
    outputs, times (median of 10) and the elements where the two differ."""
    import torch
    from vramkit import fp8_codec

    gate = (torch.randn(n, device="cuda", generator=g) * 2).to(torch.bfloat16)
    up = torch.randn(n, device="cuda", generator=g).to(torch.bfloat16)
    qg, qu = fp8_codec.encode(gate, "e4m3", "cuda"), fp8_codec.encode(up, "e4m3", "cuda")
    del gate, up
    fused = tuple(torch.empty(n, dtype=torch.bfloat16, device="cuda") for _ in range(4))
    apart = tuple(torch.empty_like(t) for t in fused)

    def separate():
        fp8_codec.decode(*qg, n, "e4m3", torch.bfloat16, "cuda", out=apart[0])
        fp8_codec.decode(*qu, n, "e4m3", torch.bfloat16, "cuda", out=apart[1])
        torch.ops.aten.silu.out(apart[0], out=apart[2])
        torch.mul(apart[2], apart[1], out=apart[3])

    t_f = _median_time(lambda: fp8_codec.decode_swiglu(qg, qu, n, "e4m3", torch.bfloat16, "cuda", out=fused))
    t_s = _median_time(separate)
    torch.cuda.synchronize()
    moved = 2 * (fp8_codec.payload_bytes(n) + 4 * fp8_codec.scale_count(n)) + 4 * 2 * n
    out = {"elements": n, "fused_s": t_f, "separate_s": t_s, "fused_gbps": moved / t_f / 1e9,
           "differing": [int((a != b).sum()) for a, b in zip(fused, apart)]}
    fused = apart = qg = qu = None  # freed
    torch.cuda.empty_cache()
    return out


# --------------------------------------------------------------------------------------------
# Training steps.
class KernelClock:
    """Events around every fp8_codec.encode, decode and decode_swiglu (a decode) while installed (on the
    stream each runs on)."""

    def __init__(self):
        from vramkit import fp8_codec

        self.codec = fp8_codec
        self.events = {"encode": [], "decode": []}
        self.orig = {}

    def _wrap(self, kind, fn):
        import torch

        def timed(*a, **k):
            st = k.get("stream") or torch.cuda.current_stream()
            e0 = torch.cuda.Event(enable_timing=True)
            e0.record(st)
            r = fn(*a, **k)
            e1 = torch.cuda.Event(enable_timing=True)
            e1.record(st)
            self.events[kind].append((e0, e1))
            return r

        return timed

    # The codec's functions timed, and the kind each counts as.
    TIMED = {"encode": "encode", "decode": "decode", "decode_swiglu": "decode"}

    def __enter__(self):
        for fn, kind in self.TIMED.items():
            self.orig[fn] = getattr(self.codec, fn)
            setattr(self.codec, fn, self._wrap(kind, self.orig[fn]))
        return self

    def __exit__(self, *e):
        for kind, fn in self.orig.items():
            setattr(self.codec, kind, fn)
        return False

    def seconds(self):
        return {k: sum(a.elapsed_time(b) for a, b in v) / 1e3 for k, v in self.events.items()}


def make_compressor(blocks, name, modules, options):
    import vramkit

    if modules is None:
        return None
    if name == "hooks":
        class PassThrough(vramkit.compress_activations):
            """The selection runs (module hooks, saved-tensor hooks, selects()), nothing compressed."""

            def selects(self, t):
                super().selects(t)
                return False

        return PassThrough(blocks=blocks, modules=modules, **options)
    return vramkit.compress_activations(blocks=blocks, modules=modules, **options)


def run_config(w, name, modules, options, warmup, timed):
    import torch

    model, loss_fn, blocks, shape = w["model"], w["loss_fn"], w["blocks"], w["shape"]
    from offload_bench import init_weights, make_tokens

    init_weights(model)
    model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    comp = make_compressor(blocks, name, modules, options)
    tokens = make_tokens(shape, warmup + timed + (1 if comp is not None and name != "hooks" else 0), "cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    out = {"config": name, "modules": list(modules) if modules else None, "options": options, "steps": {"warmup": warmup, "timed": timed}}
    times, fwd, bwd, optim, losses = [], [], [], [], []
    clock = None
    for step, x in enumerate(tokens):
        clocked = step == warmup + timed
        if clocked:
            clock = KernelClock().__enter__()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        before = torch.cuda.memory_allocated()
        ev[0].record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if comp is not None:
                with comp:
                    loss = loss_fn(model, x)
            else:
                loss = loss_fn(model, x)
        ev[1].record()
        if step == warmup - 1 or (warmup == 0 and step == 0):
            out["graph_bytes"] = torch.cuda.memory_allocated() - before
        loss.backward()
        ev[2].record()
        opt.step()
        opt.zero_grad(set_to_none=True)
        ev[3].record()
        torch.cuda.synchronize()
        losses.append(loss.item())
        del loss
        if clocked:
            clock.__exit__()
            ks = clock.seconds()
            out["kernel_s"] = {"encode": ks["encode"], "decode": ks["decode"],
                               "encodes": len(clock.events["encode"]), "decodes": len(clock.events["decode"])}
        elif step >= warmup:
            times.append(ev[0].elapsed_time(ev[3]) / 1e3)
            fwd.append(ev[0].elapsed_time(ev[1]) / 1e3)
            bwd.append(ev[1].elapsed_time(ev[2]) / 1e3)
            optim.append(ev[2].elapsed_time(ev[3]) / 1e3)
    out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    out["step_s"] = {"median": statistics.median(times), "min": min(times), "max": max(times), "n": len(times)}
    out["forward_s"], out["backward_s"], out["optimizer_s"] = (statistics.median(v) for v in (fwd, bwd, optim))
    out["losses"] = losses
    if comp is not None:
        st = comp.stats()
        n = len(tokens)
        out["per_step"] = {k: st[k] / n for k in ("compressed", "input_bytes", "stored_bytes", "deduplicated",
                                                  "aliased", "aliased_bytes", "cast_shared", "cast_shared_bytes",
                                                  "recomputed", "recomputed_bytes", "norm_inputs_bf16")
                           if k in st}
        try:
            out["backend"] = comp.backend_for(torch.device("cuda"))
        except RuntimeError as e:
            out["backend"] = "none: %s" % e
    del opt, comp, tokens
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return out


def interleave_order(rounds, kinds=2):
    """The configuration of each timed step: `rounds` rounds of every kind (0 = bf16, 1 = the
    verdict's selection, then the others), forward in even rounds and backward in odd ones
    (A B B A A B ... for two kinds), so that each round's steps and the whole run's drift fall
    on all alike."""
    out = []
    for k in range(rounds):
        r = list(range(kinds))
        out.extend(r if k % 2 == 0 else r[::-1])
    return out


def interleaved_stats(bf16, comp):
    """The verdict's figures from the timed steps of each kind, in run order (round k: bf16[k],
    comp[k]): the medians and their ratio, the median of the per-round ratios, and the spread of
    each (min, max, and the quartiles of the per-round ratios)."""
    ratios = sorted(c / b for b, c in zip(bf16, comp))
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    mb, mc = statistics.median(bf16), statistics.median(comp)
    return {"pairs": len(ratios), "bf16_s": {"median": mb, "min": min(bf16), "max": max(bf16)},
            "compressed_s": {"median": mc, "min": min(comp), "max": max(comp)},
            "ratio_of_medians": mc / mb, "median_pair_ratio": statistics.median(ratios),
            "pair_ratio_quartiles": [q[0], q[2]]}


def run_interleaved(w, variants, warmup, rounds, deadline):
    """bf16 steps and steps of each of `variants` ((name, modules, options), the verdict's first)
    in rounds (interleave_order) on one model and optimizer: each step's time (CUDA events
    around forward, backward and the optimizer), `warmup` untimed rounds first. Stops early at
    `deadline` (with at least 2 rounds measured). The first variant's figures are the result's
    own (interleaved_stats), every variant's under "variants"."""
    import torch
    from offload_bench import init_weights, make_tokens

    model, loss_fn, blocks, shape = w["model"], w["loss_fn"], w["blocks"], w["shape"]
    init_weights(model)
    model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
    comps = [None] + [make_compressor(blocks, n, m, o) for n, m, o in variants]
    kinds = len(comps)
    order = list(range(kinds)) * warmup + interleave_order(rounds, kinds)
    tokens = make_tokens(shape, len(order), "cuda")
    torch.cuda.synchronize()
    times = [[] for _ in comps]
    graph = [None] * kinds  # bytes the graph holds after each kind's first forward
    per_step = None
    for step, (kind, x) in enumerate(zip(order, tokens)):
        timed = step >= kinds * warmup
        if timed and per_step and len(times[1]) >= 2 and len(set(map(len, times))) == 1 \
                and time.time() + (kinds + 0.2) * per_step > deadline:
            break  # a whole round no longer fits
        t0 = time.time()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        before = torch.cuda.memory_allocated()
        a.record()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if comps[kind] is not None:
                with comps[kind]:
                    loss = loss_fn(model, x)
            else:
                loss = loss_fn(model, x)
        if graph[kind] is None:
            graph[kind] = torch.cuda.memory_allocated() - before
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        b.record()
        b.synchronize()
        del loss
        if timed:
            times[kind].append(a.elapsed_time(b) / 1e3)
        per_step = time.time() - t0 if per_step is None else max(per_step, time.time() - t0)
    n = min(map(len, times))
    out = {"config": variants[0][0], "against": "bf16", "warmup_rounds": warmup, "rounds_asked": rounds,
           "order": "rounds of bf16 | %s, every other round reversed" % " | ".join(v[0] for v in variants),
           "bf16_steps_s": times[0][:n], "variants": {}}
    out["bf16_graph_bytes"] = graph[0]
    for (name, _, options), t, gb in zip(variants, times[1:], graph[1:]):
        v = {"options": options, "steps_s": t[:n], "graph_bytes": gb}
        if n:
            v.update(interleaved_stats(times[0][:n], t[:n]))
        out["variants"][name] = v
    if n:
        out.update(interleaved_stats(times[0][:n], times[1][:n]))
    del opt, comps, tokens
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return out


# --------------------------------------------------------------------------------------------
# Planner.
def planner_peaks(shape, out_dir):
    """The planner's allocated peak per configuration ({name: bytes or None}, errors apart)."""
    try:
        from offload_bench import shape_config
        from vramkit.planner import find_cli

        cli = find_cli()
    except Exception as e:  # noqa: BLE001 - no CLI: reported, the rest still measured
        return {"error": "vramkit CLI not found: %s" % e}
    path = os.path.join(out_dir, "compress-plan-config-%dx%d.json" % (shape["d"], shape["layers"]))
    with open(path, "w") as f:
        json.dump(shape_config(shape), f)
    base = [cli, "plan", path, "--precision", "amp-bf16", "--batch", str(shape["batch"]), "--seq", str(shape["seq"]),
            "--gpu", "h200", "--json"]
    out = {}
    for name, modules, options in CONFIGS:
        rc = bool(options.get("recompute"))
        exact = options.get("norm_inputs", "bf16") == "exact"
        if name == "hooks" or (rc and not exact and "norm" in modules) or (exact and not rc):
            continue  # the planner models the default norm_inputs, and recompute with exact ones
        spec = "fp8:" + ",".join(modules or ()) + (":recompute" if rc else "")
        argv = base + (["--compress-activations", spec] if modules else [])
        p = subprocess.run(argv, capture_output=True, text=True, check=False)
        try:
            j = json.loads(p.stdout)
        except ValueError:
            out[name] = {"error": (p.stderr.strip().splitlines() or ["no output"])[-1], "argv": argv[1:]}
            continue
        o = j.get("offload") if modules else None
        out[name] = {"allocated_peak_bytes": (o or j).get("allocated_peak_bytes"), "argv": argv[1:]}
        if o:
            out[name].update({k: o.get(k) for k in ("step_time_s", "pack_s_per_block", "unpack_s_per_block",
                                                    "saved_bytes_per_block", "stored_bytes_per_block")})
    return out


# --------------------------------------------------------------------------------------------
def summarize(res):
    lines = ["## fp8 activation compression alone (%s)" % res.get("model", "?"), ""]
    k = res.get("kernels") or {}
    if "error" in k:
        lines.append("kernels: %s" % k["error"])
    elif k:
        lines.append("| tensor | MiB | encode GB/s | decode GB/s | copy GB/s (D2D) | encode / copy | decode / copy "
                     "| bound violations | = torch backend |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in k["kinds"]:
            if "skipped" in r:
                lines.append("| %s | skipped: %s | | | | | | | |" % (r["kind"], r["skipped"]))
                continue
            lines.append("| %s | %.0f | %.0f | %.0f | %.0f | %.2f | %.2f | %d | %s |" % (
                r["kind"], r["input_bytes"] / (1 << 20), r["encode_gbps"], r["decode_gbps"], r["copy_gbps"],
                r["encode_vs_copy"], r["decode_vs_copy"], r["bound_violations"], r.get("equals_torch_backend", "-")))
        lines.append("(bytes read + written / time; copy: torch copy_ of the input, read + written)")
        sw = k.get("swiglu")
        if sw:
            lines.append("")
            lines.append("gated MLP restore (%.0f M bf16 elements each of gate, up, silu(gate), product from two fp8 "
                         "copies): one kernel %.2f ms (%.0f GB/s read + written) against two decodes and torch's silu "
                         "and mul %.2f ms (%.2fx); elements differing (gate, up, silu, product): %s" % (
                             sw["elements"] / 1e6, 1e3 * sw["fused_s"], sw["fused_gbps"], 1e3 * sw["separate_s"],
                             sw["fused_s"] / sw["separate_s"], ", ".join(map(str, sw["differing"]))))
    lines.append("")
    runs = {r["config"]: r for r in res.get("configs", []) if "step_s" in r}
    ref = runs.get("bf16")
    plans = res.get("planner") or {}
    lines.append("| config | step s (median, min-max, n) | vs bf16 | forward s | backward s | graph GiB (saved) | vs bf16 "
                 "| peak alloc GiB | planner GiB | error | kernels s/step (enc+dec) |")
    lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in res.get("configs", []):
        if "step_s" not in r:
            lines.append("| %s | %s | | | | | | | | | |" % (r["config"], r.get("skipped") or r.get("error")))
            continue
        st = r["step_s"]
        pl = (plans.get(r["config"]) or {}).get("allocated_peak_bytes")
        ks = r.get("kernel_s")
        lines.append("| %s | %.3f (%.3f-%.3f, %d) | %s | %.3f | %.3f | %.2f | %s | %.2f | %s | %s | %s |" % (
            r["config"], st["median"], st["min"], st["max"], st["n"],
            "%.3fx" % (st["median"] / ref["step_s"]["median"]) if ref else "-", r["forward_s"], r["backward_s"],
            r.get("graph_bytes", 0) / GiB,
            "%.1f%%" % (100 * r["graph_bytes"] / ref["graph_bytes"]) if ref and "graph_bytes" in r else "-",
            r["peak_allocated_bytes"] / GiB, "%.2f" % (pl / GiB) if pl else "-",
            "%+.1f%%" % (100 * (pl - r["peak_allocated_bytes"]) / r["peak_allocated_bytes"]) if pl else "-",
            "%.4f+%.4f (%d+%d)" % (ks["encode"], ks["decode"], ks["encodes"], ks["decodes"]) if ks else "-"))
    if ref:
        lines.append("")
        for name, r in runs.items():
            if name == "bf16":
                continue
            ratio = r["step_s"]["median"] / ref["step_s"]["median"]
            extra = r["step_s"]["median"] - ref["step_s"]["median"]
            ks = r.get("kernel_s")
            il = res.get("interleaved") or {}
            if il.get("config") == name and "ratio_of_medians" in il:
                verdict = "separate runs; the verdict is the interleaved steps' below"
            else:
                verdict = "target <= %.2fx: %s" % (STEP_TARGET, "met" if ratio <= STEP_TARGET else "NOT met")
            parts = ["- %s: step %.3fx bf16's (%s), +%.1f ms (forward %+.1f, backward %+.1f)" % (
                name, ratio, verdict, 1e3 * extra,
                1e3 * (r["forward_s"] - ref["forward_s"]), 1e3 * (r["backward_s"] - ref["backward_s"]))]
            if ks:
                parts.append("encode kernels %.1f ms, decode kernels %.1f ms (events; decodes ahead run on a side "
                             "stream beside backward)" % (1e3 * ks["encode"], 1e3 * ks["decode"]))
            if name != "hooks" and "graph_bytes" in r:
                sr = r["graph_bytes"] / ref["graph_bytes"]
                parts.append("saved bytes %.1f%% of bf16's (target <= %.0f%%: %s)" % (
                    100 * sr, 100 * SAVED_TARGET, "met" if sr <= SAVED_TARGET else "NOT met"))
            pl = (plans.get(name) or {}).get("allocated_peak_bytes")
            if pl:
                err = (pl - r["peak_allocated_bytes"]) / r["peak_allocated_bytes"]
                parts.append("planner peak %+.1f%% (target within %.0f%%: %s)" % (
                    100 * err, 100 * PEAK_TOLERANCE, "met" if abs(err) <= PEAK_TOLERANCE else "NOT met"))
            ps = r.get("per_step")
            if ps:
                parts.append("%d tensors compressed a step (%d of them recomputed), %d casts sharing a copy" % (
                    ps.get("compressed", 0), ps.get("recomputed", 0), ps.get("cast_shared", 0)))
            lines.append(", ".join(parts))
    il = res.get("interleaved")
    if il:
        lines.append("")
        lines.append(interleaved_line(il))
    if "error" in plans:
        lines.append("planner: %s" % plans["error"])
    lines.append("bench wall time %.1f s (budget %.0f s)" % (res.get("wall_s", 0), res.get("budget_s", 0)))
    return "\n".join(lines) + "\n"


def interleaved_line(il):
    """The speed verdict's lines for the interleaved steps (or why they are missing)."""
    if "ratio_of_medians" not in il:
        return "- interleaved bf16 / %s steps: %s" % (il.get("config"), il.get("skipped") or il.get("error") or "none measured")
    r = il["ratio_of_medians"]
    lines = ["- **interleaved** (%d rounds, %s; one model and optimizer): %s step %.4f s median against bf16's "
             "%.4f s (bf16 %.4f-%.4f): **%.3fx** (target <= %.2fx: %s; aim <= 1.03x: %s), median of the per-round "
             "ratios %.3fx (quartiles %.3f-%.3f)" % (
                 il["pairs"], il.get("order", "A B B A"), il["config"], il["compressed_s"]["median"],
                 il["bf16_s"]["median"], il["bf16_s"]["min"], il["bf16_s"]["max"], r, STEP_TARGET,
                 "met" if r <= STEP_TARGET else "NOT met", "yes" if r <= 1.03 else "no", il["median_pair_ratio"],
                 il["pair_ratio_quartiles"][0], il["pair_ratio_quartiles"][1])]
    for name, v in (il.get("variants") or {}).items():
        if name == il["config"] or "ratio_of_medians" not in v:
            continue
        saved = ""
        if v.get("graph_bytes") and il.get("bf16_graph_bytes"):
            saved = ", saved bytes %.1f%% of bf16's (first step)" % (100 * v["graph_bytes"] / il["bf16_graph_bytes"])
        lines.append("- interleaved, same rounds, not judged: %s step %.4f s median: %.3fx bf16's (per-round "
                     "quartiles %.3f-%.3f)%s" % (name, v["compressed_s"]["median"], v["ratio_of_medians"],
                                                v["pair_ratio_quartiles"][0], v["pair_ratio_quartiles"][1], saved))
    return "\n".join(lines)


def bench_parser(doc, out, warmup, timed, budget_s):
    """The options the compression scripts share: --shape, --warmup, --timed, --budget-s, --out,
    --summary (defaults given)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--shape", default="1b", help="offload_bench's shape (default 1b)")
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--timed", type=int, default=timed)
    ap.add_argument("--budget-s", type=float, default=budget_s)
    ap.add_argument("--out", default=out)
    ap.add_argument("--summary", default=None)
    return ap


def parse_bench_args(ap):
    """Parsed options, the shared ones checked (usage errors exit 2)."""
    args = ap.parse_args()
    import offload_bench

    if args.shape not in offload_bench.SHAPES:
        ap.error("--shape %s: use one of %s" % (args.shape, ", ".join(offload_bench.SHAPES)))
    if args.warmup < 1 or args.timed < 1 or args.budget_s <= 0:
        ap.error("--warmup, --timed and --budget-s must be positive")
    return args


def writer(res, args, t0, summarize_fn):
    """save(): rewrites args.out (JSON) and args.summary (summarize_fn(res)) with the wall time."""
    def save():
        res["wall_s"] = time.time() - t0
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
        if args.summary:
            with open(args.summary, "w") as f:
                f.write(summarize_fn(res))

    return save


def main():
    ap = bench_parser(__doc__, "compress-bench.json", 1, 3, 40.0)
    ap.add_argument("--model", default="auto", choices=("auto", "hf", "builtin"))
    ap.add_argument("--pairs", type=int, default=8,
                    help="interleaved rounds of bf16 and %s steps (0: none; fewer when the budget ends)" % INTERLEAVED)
    ap.add_argument("--side-ctas-variant", type=int, default=0, metavar="K",
                    help="K > 0: the interleaved rounds also time %s with side_ctas=K" % INTERLEAVED)
    ap.add_argument("--variants", action="store_true",
                    help="the interleaved rounds also time %s (run M: 1.040x and 1.032x against the "
                    "verdict's 1.032x)" % ", ".join(v[0] for v in INTERLEAVED_ALSO))
    t0 = time.time()
    args = parse_bench_args(ap)
    if args.pairs < 0 or args.side_ctas_variant < 0:
        ap.error("--pairs and --side-ctas-variant must be >= 0")
    if args.pairs == 0 and (args.variants or args.side_ctas_variant):
        ap.error("--variants and --side-ctas-variant add to the interleaved rounds: they need --pairs >= 1")
    import offload_bench
    import torch

    if not torch.cuda.is_available():
        print("compress bench: no CUDA device", file=sys.stderr)
        return 1
    deadline = t0 + args.budget_s
    shape = offload_bench.SHAPES[args.shape]
    res = {"schema_version": 1, "argv": sys.argv[1:], "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "device": torch.cuda.get_device_name(0), "torch": torch.__version__, "shape": dict(shape, name=args.shape),
           "budget_s": args.budget_s, "configs": []}
    save = writer(res, args, t0, summarize)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    res["planner"] = planner_peaks(shape, out_dir)
    save()
    res["kernels"] = kernel_bench(shape, deadline - 25)
    save()
    model, loss_fn, kind = offload_bench.build_model(shape, args.model)
    from vramkit.activation_offload import find_blocks

    w = {"model": model, "loss_fn": loss_fn, "blocks": find_blocks(model), "shape": shape}
    res["model"] = "%s, d %d, %d blocks, ffn %d, batch %d x %d tokens" % (
        "transformers LlamaForCausalLM" if kind == "hf" else "built-in LLaMA layout", shape["d"], shape["layers"],
        shape["ffn"], shape["batch"], shape["seq"])
    per_step = None
    for name, modules, options in CONFIGS:
        steps = args.warmup + args.timed + (1 if modules and name != "hooks" else 0)
        need = (per_step or 1.0) * steps * 1.15 + 1.0
        if time.time() + need > deadline:
            res["configs"].append({"config": name, "skipped": "time budget spent (%.0f s left, ~%.0f s needed)" % (
                deadline - time.time(), need)})
            save()
            continue
        start = time.time()
        try:
            r = run_config(w, name, modules, options, args.warmup, args.timed)
        except Exception as e:  # noqa: BLE001 - recorded, the next configuration runs
            r = {"config": name, "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")}
            torch.cuda.empty_cache()
        r["wall_s"] = time.time() - start
        if per_step is None and "step_s" in r:
            per_step = r["wall_s"] / steps
        res["configs"].append(r)
        save()
        if name == INTERLEAVED and "step_s" in r and args.pairs > 0:
            # The speed verdict's steps; what is left afterwards goes to the other selections.
            if time.time() + per_step * 6 * 1.15 > deadline:
                res["interleaved"] = {"config": name, "skipped": "time budget spent (%.0f s left)" % (deadline - time.time())}
            else:
                try:
                    variants = [(name, modules, options)] + [v for v in INTERLEAVED_ALSO if args.variants]
                    if args.side_ctas_variant:
                        variants.append(("%s, side_ctas=%d" % (name, args.side_ctas_variant), modules,
                                         dict(options, side_ctas=args.side_ctas_variant)))
                    res["interleaved"] = run_interleaved(w, variants, 1, args.pairs, deadline)
                except Exception as e:  # noqa: BLE001 - recorded
                    res["interleaved"] = {"config": name, "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")}
                    torch.cuda.empty_cache()
            save()
    save()
    print(summarize(res))
    ok = all("step_s" in r or "skipped" in r for r in res["configs"]) and "error" not in (res.get("interleaved") or {})
    kern = (res.get("kernels") or {}).get("kinds") or []
    ok = ok and all(r.get("bound_violations", 0) == 0 and r.get("equals_torch_backend", True) for r in kern)
    return 0 if ok else 1


def _main_or_note():
    """main(); an exception that escapes it is also written to the summary (one line)."""
    try:
        return main()
    except Exception as e:  # noqa: BLE001 - reported where the stage's summary reads it
        args = sys.argv
        if "--summary" in args and args.index("--summary") + 1 < len(args):
            with open(args[args.index("--summary") + 1], "a") as f:
                f.write("compress bench failed: %s: %s\n" % (type(e).__name__, str(e).splitlines()[0][:300] if str(e) else ""))
        raise


if __name__ == "__main__":
    sys.exit(_main_or_note())
