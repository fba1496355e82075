#!/usr/bin/env python3
"""Activation and optimizer-state offload, and fp8 activation compression, side by side on
LLaMA-shaped models (transformers' LlamaForCausalLM from a config when transformers is
importable, else a built-in copy of its layout; random weights, amp-bf16, AdamW) under a GPU
memory cap of half the uncapped peak.

    python3 bench/offload/offload_bench.py --out offload.json --summary offload.md [--shapes 1b,3b-wide]

Per shape, in this order (vramkit's configurations first, so that a run cut short by the time
budget has measured them): the uncapped reference (which also counts the saved bytes by module
and block and measures the link), then `vramkit plan --fit --json` under the cap picks the mixes;
under the cap: vramkit activation offload with the planner's mix, the same mix with its offloaded
blocks kept (uncapped: the compute time of the overlap), full checkpointing, torch's
save_on_cpu(pin_memory=True), a torchtune-style offload (written from torchtune's published
OffloadActivations with use_streams: every saved tensor to pinned memory on a side stream, the
last 5 kept on the device, each copied back on its use with the compute stream waiting for it),
fp8 compression with offload (the planner's --allow-lossy mix, first shape; compression alone is
bench/offload/compress_bench.py's), vramkit activations + OffloadedAdamW with the planner's mix
for it, no offload (expected to run out of memory), and one block offloaded where the planner
offloads none. Right after the reference, a kernel probe (bf16 GEMMs of the block's shapes,
causal SDPA forward and backward, an elementwise product, pinned copies) writes the rates the
planner's cost model takes (offload-probe-SHAPE.json, `vramkit plan --probe`).

Process layout: one worker process per shape builds the model once and runs every configuration
in turn, printing one RESULT line as soon as each is measured; the orchestrator rewrites the JSON
and the summary after every line, so nothing measured is lost when the budget cuts a run short. A
configuration that runs out of memory is recorded and the worker goes on; a worker that dies is
restarted once for the configurations left.

Figures: step time (CUDA events, median of the timed steps, min-max, n), peak reserved and
allocated (torch.cuda.max_memory_*), pinned host bytes, per-step losses (and their largest
difference from the reference's: 0 for exact methods), vramkit's copy time from CUDA events and
the overlap (T_compute + T_copy - T_both) / T_copy, the planner's peaks and times beside the
measured ones, and the order of the configurations by step time, predicted and measured.
"""

import argparse
import functools
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)  # llama_layout, the built-in model

from vramkit import offload_plan  # noqa: E402 - pure Python, no torch

GiB = 1 << 30
SHAPES = {
    # 1B class: TinyLlama's width and MLP, 16 blocks (0.95B parameters); 24K tokens a step make
    # the saved activations (~45 GB) outweigh the 16 bytes a parameter of AdamW state.
    "1b": dict(d=2048, layers=16, heads=16, ffn=5632, vocab=32000, batch=12, seq=2048),
    # LLaMA-2-7B's width and MLP with 6 blocks (1.48B parameters); 32K tokens a step, so that
    # full checkpointing fits half the peak (with fewer tokens AdamW's 16 bytes a parameter
    # alone pass it).
    "3b-wide": dict(d=4096, layers=6, heads=32, ffn=11008, vocab=32000, batch=16, seq=2048),
    # The same width with 8 blocks (1.88B parameters).
    "2b-wide": dict(d=4096, layers=8, heads=32, ffn=11008, vocab=32000, batch=8, seq=2048),
    # A few seconds on any GPU: for trying the bench.
    "tiny": dict(d=256, layers=4, heads=4, ffn=688, vocab=1024, batch=4, seq=256),
}
COMPRESS_MODULES = ("mlp", "attn", "norm")
CENSUS_MIN_BYTES = 1 << 16  # compress_activations' min_bytes: the census counts what it sees
# Configurations in the order they run: what the targets compare first (the planner's mix, its
# overlap, the three baselines at the cap, save_on_cpu and the torchtune-style offload one after
# the other: the second reuses the first's pinned host memory), the optimizer offload the planner
# ranks, offload with compression against offload alone, the capped run without offload, and the one-block
# offload (for shapes where the planner offloads nothing; it may not fit).
# (When the planner's mix copies nothing, a mix derived from it that copies and that the planner
# expects to fit the cap is the one whose overlap vramkit-compute-only measures: its first
# checkpointed block selective-offload, or every checkpointed block's input on the host.) Mixes
# given with --try-mix (configs "vramkit-try-MIX") run right after the planner's.
ORDER = ["reference", "vramkit-act", "vramkit-selective-offload", "vramkit-inputs-offload", "vramkit-compute-only",
         "full-checkpoint", "save-on-cpu", "torchtune-style", "vramkit-act+opt", "vramkit-act+compress", "none-capped",
         "vramkit-offload1"]
CAPPED = {"vramkit-act", "vramkit-offload1", "vramkit-act+opt", "vramkit-act+compress", "full-checkpoint",
          "torchtune-style", "save-on-cpu", "none-capped", "vramkit-selective-offload", "vramkit-inputs-offload"}
TRY = "vramkit-try-"
#: The configurations whose predicted order the issue asks for.
RANKED = ("reference", "vramkit-act", "full-checkpoint", "vramkit-act+opt")
#: The engine's host_lead_blocks for mixes that copy: what the planner's peak assumes (its offload
#: JSON's host_lead_blocks; the --fit candidates do not print it).
HOST_LEAD_BLOCKS = 2
#: When the planner's mix gains less than this over full checkpointing by its own estimate (or
#: it found none), its best few other mixes are measured too (candidate_mixes).
MIN_GAIN = 0.02
#: Seconds per GiB of saved tensors that save_on_cpu and the torchtune-style offload spend
#: pinning and releasing host memory beside their steps (the budget's estimate of their cost).
PIN_S_PER_GIB = 0.15
#: The candidates' device peak within the planner's capacity less this share (not the fit's 5%:
#: run Q's planner put full checkpointing's allocated peak 1.5% under the measured one on the
#: 3b-wide shape, so 2% keeps a candidate clear of that error without ruling out what fits).
CANDIDATE_MARGIN = 0.02
#: How many of those beat full checkpointing, at most, plus one that copies when none of them
#: does (each costs a few steps of the stage's time, taken from the baselines after them).
CANDIDATES = 1
#: Mixes measured beside the planner's, derived from it (run when derived and the planner expects
#: them to fit the cap), in the order the overlap figure takes the first that copies.
DERIVED = ("vramkit-selective-offload", "vramkit-inputs-offload", "vramkit-offload1")
# Each run's steps: (warm-up, timed). The baselines that copy every saved tensor each way run one
# timed step after one warm-up (the warm-up also pins tens of GB of host memory); they are 3-5x
# slower than vramkit's, so one step ranks them. OffloadedAdamW's runs two warm-up steps and three
# timed (its two timed steps in run L took 0.682 and 0.972 s: the median of three, and every
# step's parts in the JSON, show which part varies).
# The overlap figure is a difference of two step times against a copy time of 40-100 ms: the
# configurations it may come from run four timed steps (their median).
STEPS = {"save-on-cpu": (1, 1), "torchtune-style": (1, 1), "none-capped": (1, 1), "vramkit-act+opt": (2, 3),
         "vramkit-act": (1, 4), "vramkit-compute-only": (1, 4), "vramkit-selective-offload": (1, 4),
         "vramkit-inputs-offload": (1, 4)}


# --------------------------------------------------------------------------------------------
# Models.
def shape_config(shape):
    """The shape as a Hugging Face LLaMA config.json (what `vramkit plan` reads, and what the HF
    model is built from)."""
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": shape["d"],
            "intermediate_size": shape["ffn"], "num_hidden_layers": shape["layers"],
            "num_attention_heads": shape["heads"], "num_key_value_heads": shape["heads"],
            "vocab_size": shape["vocab"], "max_position_embeddings": max(4096, shape["seq"]),
            "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
            "torch_dtype": "float32"}


def build_hf(shape, device):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    fields = dict(shape_config(shape))
    for k in ("model_type", "architectures", "torch_dtype"):
        fields.pop(k)
    cfg = LlamaConfig(**fields)
    cfg.use_cache = False
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
        except TypeError:  # transformers 4.x spells it torch_dtype
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", torch_dtype=torch.float32)
    model.train()

    def loss_fn(m, x):
        return m(input_ids=x, labels=x).loss

    return model, loss_fn


def build_builtin(shape, device):
    """LlamaForCausalLM's layout in plain torch (llama_layout.py: RMSNorm in fp32, rotary,
    separate q/k/v and gate/up projections, SDPA, the loss on upcast logits with shifted labels)."""
    import torch

    from llama_layout import Block, CausalLM

    def make():
        blocks = [Block(shape["d"], shape["heads"], shape["ffn"]) for _ in range(shape["layers"])]
        return CausalLM(shape["vocab"], shape["d"], blocks, rotary_heads=shape["heads"])

    if hasattr(torch.device, "__enter__"):
        with torch.device(device):
            model = make()
    else:  # torch < 2.0
        model = make().to(device)
    return model, (lambda m, x: m(x))


def build_model(shape, kind, device="cuda"):
    """(model, loss_fn, kind): kind "hf" needs transformers; "auto" falls back to "builtin"."""
    if kind in ("hf", "auto"):
        try:
            model, loss_fn = build_hf(shape, device)
            return model, loss_fn, "hf"
        except Exception as e:  # noqa: BLE001 - "auto": any failure to build it falls back
            if kind == "hf":
                raise
            build_model.fallback_reason = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
    model, loss_fn = build_builtin(shape, device)
    return model, loss_fn, "builtin"


def init_weights(model):
    """The same weights for every configuration: N(0, 0.02) matrices, norm weights 1."""
    import torch

    g = torch.Generator(device=next(model.parameters()).device).manual_seed(0)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02, generator=g)
            else:
                p.fill_(1.0)


def make_tokens(shape, n, device):
    import torch

    g = torch.Generator(device=device).manual_seed(1)
    return [torch.randint(0, shape["vocab"], (shape["batch"], shape["seq"]), device=device, generator=g)
            for _ in range(n)]


# --------------------------------------------------------------------------------------------
# Baselines.
def torchtune_style(model):
    """torchtune's OffloadActivations(use_pin_memory=True, use_streams=True) as published: every
    saved tensor of >= 1 KiB that is not a parameter goes to pinned memory on a side stream that
    waits for the compute stream; the last 5 stay on the device (max_fwd_stash_size) and are used
    as is; the rest come back on the side stream when backward asks for them, the compute stream
    waiting for that copy (torchtune starts no copy before its use)."""
    import torch

    params = {_storage_ptr(p) for p in model.parameters()}
    side = torch.cuda.Stream()
    stash, counter, bytes_ = {}, [0], [0]

    def pack(t):
        if t.numel() * t.element_size() < 1024 or _storage_ptr(t) in params or not t.is_cuda:
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
        pack = inner.pack_hook

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
# Measurements inside a worker.
def _ev():
    import torch

    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


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
            a, b = _ev(), torch.cuda.Event(enable_timing=True)
            dst.copy_(src, non_blocking=True)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        rates[name] = n / statistics.median(times)
    return rates


def _timed(fn, reps=3, inner=8):
    """Median seconds of one fn() on the current stream (CUDA events around `inner` calls back to
    back, so that the GPU runs at the clocks of sustained work, as in training), after one
    warm-up call."""
    import torch

    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = _ev(), torch.cuda.Event(enable_timing=True)
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / inner)
    return statistics.median(times)


def _gemm_cases(T, d, f):
    """(seconds, FLOPs, count per block) of a block's bf16 GEMMs: q/k/v/o, gate/up and down in
    the forward's shapes (their input gradients have the same shapes: counted twice), and the
    weight gradients, which contract over the tokens."""
    import torch
    import torch.nn.functional as F

    bf = torch.bfloat16
    x, y = torch.randn(T, d, device="cuda", dtype=bf), torch.randn(T, f, device="cuda", dtype=bf)
    w_dd, w_fd, w_df = (torch.randn(o, i, device="cuda", dtype=bf) for o, i in ((d, d), (f, d), (d, f)))
    return [(_timed(lambda: F.linear(x, w_dd)), 2 * T * d * d, 8), (_timed(lambda: F.linear(x, w_fd)), 2 * T * d * f, 4),
            (_timed(lambda: F.linear(y, w_df)), 2 * T * f * d, 2), (_timed(lambda: torch.mm(x.t(), x)), 2 * T * d * d, 4),
            (_timed(lambda: torch.mm(y.t(), x)), 2 * T * d * f, 3)]


def _attention_times(b, h, s, hd):
    """Seconds of causal SDPA forward, and of forward + backward, in bf16."""
    import torch
    import torch.nn.functional as F

    q, k, v = (torch.randn(b, h, s, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, s, hd, device="cuda", dtype=torch.bfloat16)
    fwd = _timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    both = _timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g))
    return fwd, both


def _memory_rates(b, s, d, heads):
    """Bytes read plus written per second of the memory-bound kernels the planner counts in a
    block, over b x s tokens of width d: an fp32 product, and the mix a LLaMA block's forward runs
    (a cast of the fp32 residual stream to bf16, RMSNorm's square, mean and scaling, the rotary
    product of a transposed bf16 view with fp32 cos, rotate_half's negation and concatenation, a
    residual add of bf16 into fp32, SiLU). Returns (product rate, mix rate)."""
    import torch

    n, hd = b * s * d, d // heads
    x = torch.randn(b, s, d, device="cuda")
    y = torch.randn(b, s, d, device="cuda", dtype=torch.bfloat16)
    q = y.view(b, s, heads, hd).transpose(1, 2)
    cos = torch.randn(1, 1, s, hd, device="cuda")
    r = torch.empty_like(x)
    product = 12.0 * n / _timed(lambda: torch.mul(x, x, out=r))
    # (kernel, bytes read plus written)
    mix = [(lambda: x.to(torch.bfloat16), 6 * n), (lambda: x.pow(2), 8 * n), (lambda: x.mean(-1, keepdim=True), 4 * n),
           (lambda: x * x, 12 * n), (lambda: q * cos, 6 * n),
           (lambda: torch.cat((-q[..., hd // 2:], q[..., : hd // 2]), dim=-1), 6 * n), (lambda: x + y, 10 * n),
           (lambda: torch.nn.functional.silu(y), 4 * n)]
    times = [_timed(fn) for fn, _ in mix]
    return product, sum(nb for _, nb in mix) / sum(times)


def kernel_probe(shape):
    """Kernel rates at the shape's sizes (uncapped), for the planner's cost model: bf16 GEMMs of a
    block's projections weighted by how many a block runs, causal SDPA forward and backward
    (3.5x the forward's FLOPs in all: the backward's 5 GEMMs against 2), and the memory-bound
    kernels of a block (bytes read plus written; a plain fp32 product beside them)."""
    import torch

    T, d, f = shape["batch"] * shape["seq"], shape["d"], shape["ffn"]
    cases = _gemm_cases(T, d, f)
    out = {"gemm_flops": sum(fl * n for _, fl, n in cases) / sum(t * n for t, _, n in cases),
           "gemm_cases_tflops": [fl / t / 1e12 for t, fl, _ in cases]}
    b, h, s = shape["batch"], shape["heads"], shape["seq"]
    fwd, both = _attention_times(b, h, s, d // h)
    flops = 2.0 * b * h * s * s * (d // h)  # QK^T and PV, half of the square (causal)
    product, mixed = _memory_rates(b, s, d, h)
    out.update({"attention_flops": 3.5 * flops / both, "attention_forward_flops": flops / fwd,
                "memory_bytes_per_s": mixed, "product_bytes_per_s": product})
    torch.cuda.empty_cache()
    return out


def calibrated_memory_rate(planner_block_s, planner_memory_s, measured_block_s, rate):
    """The memory-bound rate at which the planner's block forward equals the measured one, its
    GEMM and attention terms (planner_block_s - planner_memory_s, at the probed rates) left as
    they are: rate x planner_memory_s / (measured_block_s - that). None when the measured block
    leaves the memory-bound kernels no time (or any input is missing)."""
    if not (planner_block_s and planner_memory_s and measured_block_s and rate):
        return None
    rest = measured_block_s - (planner_block_s - planner_memory_s)
    if rest <= 0:
        return None
    return rate * planner_memory_s / rest


def calibrate_probe(shape, path, kp, link, measured_block_s, out_dir, stage_probe=None):
    """Rewrites the probe file at `path` with the memory-bound rate calibrated to the measured
    block forward (calibrated_memory_rate, from the planner's block forward and its memory-bound
    part at the probed rates, from `vramkit plan --compress-activations none`'s offload JSON); returns what it did
    ({"probed", "calibrated"} bytes/s, or {"error"}). The GEMM and attention rates stay probed."""
    from vramkit.planner import find_cli

    cfg = os.path.join(out_dir, "plan-config-%dx%d-%d.json" % (shape["d"], shape["layers"], shape["batch"]))
    with open(cfg, "w") as f:
        json.dump(shape_config(shape), f)
    argv = [find_cli(), "plan", cfg, "--precision", "amp-bf16", "--batch", str(shape["batch"]), "--seq",
            str(shape["seq"]), "--probe", path, "--gpu", "h200", "--compress-activations", "none", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    try:
        o = json.loads(proc.stdout)["offload"]
    except (ValueError, KeyError):
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1]}
    rate = calibrated_memory_rate(o.get("block_forward_s"), o.get("selective_recompute_s_per_block"),
                                  measured_block_s, kp.get("memory_bytes_per_s"))
    if rate is None:
        return {"error": "the measured block forward leaves the memory-bound kernels no time"}
    write_probe(path, dict(kp, memory_bytes_per_s=rate), link, stage_probe)
    return {"probed": kp["memory_bytes_per_s"], "calibrated": rate,
            "planner_block_forward_s": o["block_forward_s"], "planner_memory_bound_s": o["selective_recompute_s_per_block"],
            "measured_block_forward_s": measured_block_s}


def write_probe(path, kp, link, stage_probe=None):
    """A probe file (vramkit probe's format) with the kernel rates and the pinned copy rate
    measured here, beside the stage's probe figures when one was given; returns its path."""
    results = []
    if stage_probe:
        with open(stage_probe) as f:
            results = [r for r in (json.load(f).get("results") or []) if isinstance(r, dict)]
    ours = [("gpu0.gemm.bf16", kp["gemm_flops"] / 1e12, "TFLOP/s"),
            ("gpu0.attention.bf16", kp["attention_flops"] / 1e12, "TFLOP/s"),
            ("gpu0.device.copy", kp["memory_bytes_per_s"] / 1e9, "GB/s"),
            ("gpu0.h2d.pinned", link["h2d"] / 1e9, "GB/s")]
    keys = {k for k, _, _ in ours}
    results = [r for r in results if r.get("key") not in keys]
    results += [{"key": k, "unit": u, "stats": {"median": v}, "note": "offload_bench.py kernel probe"} for k, v, u in ours]
    with open(path, "w") as f:
        json.dump({"header": {"source": "bench/offload/offload_bench.py kernel probe"}, "results": results}, f, indent=1)
    return path


def _storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


#: Configurations whose last step records the allocated peak by phase (PhasePeaks).
PHASED = ("vramkit-act", "vramkit-compute-only", "full-checkpoint", "vramkit-act+opt") + DERIVED


def phased(name):
    """Whether the run of `name` records its allocated peak by phase."""
    return name in PHASED or name.startswith(TRY)


class PhasePeaks:
    """The allocated peak of one step by phase: the forward (with the head and the loss), the
    backward up to the start of each block's backward (a hook on the gradient of the block's
    output), the rest of the backward, the optimizer. torch.cuda's peak is reset at each mark
    (the caching allocator counts on the host, at allocation), so the step's overall peaks are
    kept here and restored into the result."""

    def __init__(self, blocks):
        import torch

        self.torch = torch
        self.blocks = blocks
        self.phases = []  # [label, peak allocated bytes, allocated bytes at the mark]
        self.peak_allocated = torch.cuda.max_memory_allocated()
        self.peak_reserved = torch.cuda.max_memory_reserved()
        self.handles = []
        self.label = "forward"
        torch.cuda.reset_peak_memory_stats()

    def arm(self):
        """Hooks on the blocks' outputs for the forward about to run."""
        for i, b in enumerate(self.blocks):
            self.handles.append(b.register_forward_hook(functools.partial(self._leave, i)))

    def disarm(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    def _leave(self, i, module, args, output):
        out = output
        while isinstance(out, (tuple, list)) and out:
            out = out[0]
        if isinstance(out, self.torch.Tensor) and out.requires_grad:
            out.register_hook(functools.partial(self._grad, i))

    def _grad(self, i, grad):
        self.mark("block %d backward" % i)  # block i's backward starts: what ran before it ends

    def mark(self, next_label=None):
        """Closes the phase running now; the next one is called next_label."""
        cuda = self.torch.cuda
        peak = cuda.max_memory_allocated()
        self.phases.append([self.label, peak, cuda.memory_allocated()])
        self.peak_allocated = max(self.peak_allocated, peak)
        self.peak_reserved = max(self.peak_reserved, cuda.max_memory_reserved())
        cuda.reset_peak_memory_stats()
        self.label = next_label

    def result(self):
        top = max(self.phases, key=lambda p: p[1]) if self.phases else None
        return {"phases": self.phases, "peak_phase": top[0] if top else None}


class Census:
    """Saved-tensor hooks that count the bytes autograd saves, each storage once, by where it is
    saved: norm, attention projection input (attn-linear), the attention kernel's own (attn-core),
    MLP, elsewhere in a block, outside the blocks; and per block. A compressed save counts its
    fp8 payload and scales once."""

    def __init__(self, model, blocks, inner=None):
        import torch

        from vramkit.activation_compress import MODULES, compress_activations

        self.torch = torch
        self.inner = inner  # a compress_activations whose pack hook this one wraps
        self.params = {_storage_ptr(p) for p in model.parameters()}
        self.kinds = compress_activations(blocks=blocks, modules=MODULES, min_bytes=0, decode_ahead=0)
        self.stack, self.handles = [], []
        self.block = [None]
        self.bytes = {}
        self.per_block = [0] * len(blocks)
        self.seen = set()
        for i, b in enumerate(blocks):
            self.handles.append(b.register_forward_pre_hook(functools.partial(self._set_block, i)))
            self.handles.append(b.register_forward_hook(functools.partial(self._set_block, None)))
            for name, m in b.named_modules():
                if name and any(k in name.rsplit(".", 1)[-1].lower() for k in ("attn", "attention")) \
                        and "norm" not in name.rsplit(".", 1)[-1].lower():
                    self.handles.append(m.register_forward_pre_hook(self._enter_attention))
                    self.handles.append(m.register_forward_hook(self._leave_attention))

    # Module hooks return None: a value would replace the module's input or output.
    def _set_block(self, i, module, *rest):
        self.block[0] = i

    def _enter_attention(self, module, args):
        self.stack.append("attn-core")

    def _leave_attention(self, module, args, output):
        self.stack.pop()

    def where(self):
        k = self.kinds._kinds
        if k:
            return {"attn": "attn-linear"}.get(k[-1], k[-1])
        if self.stack:
            return self.stack[-1]
        return "block-other" if self.block[0] is not None else "outside"

    def count(self, key, nbytes):
        if key in self.seen:
            return
        self.seen.add(key)
        w = self.where()
        self.bytes[w] = self.bytes.get(w, 0) + nbytes
        if self.block[0] is not None:
            self.per_block[self.block[0]] += nbytes

    def pack(self, t):
        from vramkit.activation_compress import PackedView

        out = self.inner._pack_hook(t) if self.inner is not None else t.detach()
        if isinstance(out, PackedView):
            self.count(("packed", id(out.packed)), out.packed.nbytes)
        elif t.numel() * t.element_size() >= CENSUS_MIN_BYTES:
            ptr = _storage_ptr(t)
            if ptr not in self.params:
                st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
                self.count(("storage", ptr), st.nbytes())
        return out

    def unpack(self, x):
        if self.inner is not None:
            return self.inner._unpack_hook(x)
        return x

    def __enter__(self):
        self.kinds._arm()
        if self.inner is not None:
            self.inner._arm()
            self.inner._active = True
        self.h = self.torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self.h.__enter__()
        return self

    def __exit__(self, *e):
        self.h.__exit__(*e)
        self.kinds._disarm()
        if self.inner is not None:
            self.inner._disarm()
            self.inner._active = False
        for h in self.handles:
            h.remove()
        return False

    def result(self):
        return {"by_where": dict(self.bytes), "per_block": list(self.per_block), "total": sum(self.bytes.values()),
                "blocks": sum(self.per_block)}


def host_available_bytes():
    """MemAvailable of /proc/meminfo in bytes (None where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def is_oom(e):
    import torch

    return isinstance(e, getattr(torch, "OutOfMemoryError", ())) or "out of memory" in str(e)


def run_config(w, name, mix=None):
    """Runs one configuration in this worker; returns its result dict."""
    import torch
    import vramkit

    shape, model, loss_fn, blocks = w["shape"], w["model"], w["loss_fn"], w["blocks"]
    cap = w["cap"] if name in CAPPED or name.startswith(TRY) else 0
    warmup, timed = STEPS.get(name, (w["warmup"], w["timed"]))
    n_steps = warmup + timed
    total = w["total"]
    out = {"config": name, "cap_bytes": cap, "mix": mix, "steps": {"warmup": warmup, "timed": timed},
           "host_available_bytes": host_available_bytes()}
    t0 = time.time()
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total) if cap else 1.0)
    init_weights(model)
    model.zero_grad(set_to_none=True)
    tokens = make_tokens(shape, n_steps, "cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    opt = ctx = comp = census = phases = None
    hf_ckpt = False
    losses, times, fwd, bwd, optim = [], [], [], [], []
    copy = {"d2h": [0.0, 0], "h2d": [0.0, 0]}
    step = -1
    phase = "setup"
    try:
        if name == "vramkit-act+opt":
            opt = vramkit.OffloadedAdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        if name == "vramkit-act+compress":
            comp = vramkit.compress_activations(blocks=blocks, modules=COMPRESS_MODULES)
        if name.startswith("vramkit-"):
            kw = offload_tuning(w, mix, name)
            out.update(kw)
            ctx = vramkit.offload_activations(model, blocks=blocks, mix=mix, timing=name != "vramkit-compute-only",
                                              compress=comp if name == "vramkit-act+compress" else None, **kw)
        elif name == "full-checkpoint":
            if w["kind"] == "hf":
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
                hf_ckpt = True
            else:
                ctx = vramkit.offload_activations(model, blocks=blocks, mix=["checkpoint"] * len(blocks))
        elif name == "save-on-cpu":
            ctx = _Counting()
        elif name == "torchtune-style":
            ctx = torchtune_style(model)
        for step, x in enumerate(tokens):
            if step == n_steps - 1 and phased(name):
                phases = PhasePeaks(blocks)
                phases.arm()
            e = [_ev()]
            phase = "forward"
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if step == 0 and name == "reference":
                    census = Census(model, blocks)
                    with census:
                        loss = loss_fn(model, x)
                elif ctx is not None:
                    with ctx:
                        loss = loss_fn(model, x)
                else:
                    loss = loss_fn(model, x)
            e.append(_ev())
            phase = "backward"
            if phases is not None:
                phases.disarm()
                phases.mark("head and loss backward")
            loss.backward()
            e.append(_ev())
            phase = "optimizer"
            if phases is not None:
                phases.mark("optimizer")
            opt.step()
            opt.zero_grad(set_to_none=True)
            e.append(_ev())
            if phases is not None:
                phases.mark()
            torch.cuda.synchronize()
            losses.append(loss.item())
            del loss
            if step >= warmup:
                times.append(e[0].elapsed_time(e[3]) / 1e3)
                fwd.append(e[0].elapsed_time(e[1]) / 1e3)
                bwd.append(e[1].elapsed_time(e[2]) / 1e3)
                optim.append(e[2].elapsed_time(e[3]) / 1e3)
            if isinstance(ctx, vramkit.offload_activations) and ctx.timing:
                c = ctx.copy_times()
                if step >= warmup:
                    for k in c:
                        copy[k][0] += c[k][0]
                        copy[k][1] += c[k][1]
    except Exception as e:  # noqa: BLE001 - recorded; the worker goes on with the next config
        if not is_oom(e):
            traceback.print_exc(file=sys.stderr)  # into the worker's log
        out["ok"] = False
        out["error"] = ("out of memory" if is_oom(e) else "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300]))
        out["failed_at"] = {"step": step, "phase": phase}
    else:
        out["ok"] = True
    out["losses"] = losses
    out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
    if phases is not None:
        phases.disarm()
        out["peak_reserved_bytes"] = max(out["peak_reserved_bytes"], phases.peak_reserved)
        out["peak_allocated_bytes"] = max(out["peak_allocated_bytes"], phases.peak_allocated)
        out["phase_peaks"] = phases.result()
    # Near the cap the caching allocator frees its cache and retries (cudaFree synchronizes the
    # device): counted, since it costs time that is neither compute nor copy.
    ms = torch.cuda.memory_stats()
    out["allocator"] = {k: ms.get(k, 0) for k in ("num_alloc_retries", "num_device_alloc", "num_device_free",
                                                  "num_sync_all_streams")}
    if times:
        out["step_time_s"] = {"median": statistics.median(times), "min": min(times), "max": max(times), "n": len(times)}
        out["forward_s"], out["backward_s"] = statistics.median(fwd), statistics.median(bwd)
        out["optimizer_s"] = statistics.median(optim)
        out["per_step_s"] = {"step": times, "forward": fwd, "backward": bwd, "optimizer": optim}
    elif out["ok"]:
        out["ok"], out["error"] = False, "no timed step"
    if isinstance(ctx, vramkit.offload_activations):
        ctx.wait()
        out["pinned_host_bytes"] = ctx.pool.stats()["peak_in_use_bytes"]
        st = ctx.stats()
        st.pop("fetch_order", None)
        out["offload_stats"] = st
        if ctx.timing and times:
            out["copy_s"] = {k: v[0] / len(times) for k, v in copy.items()}
            out["copy_bytes"] = {k: v[1] // len(times) for k, v in copy.items()}
        ctx.pool.trim()
    elif isinstance(ctx, _Counting):
        out["pinned_host_bytes"] = ctx.bytes // max(1, len(losses))
    elif name == "torchtune-style" and ctx is not None:
        out["pinned_host_bytes"] = ctx.offloaded_bytes[0] // max(1, len(losses))
    if comp is not None:
        out["compress_stats"] = comp.stats()
        try:
            out["compress_backend"] = comp.backend_for(torch.device("cuda"))
        except RuntimeError as e:
            out["compress_backend"] = "none: %s" % e
    if name == "vramkit-act+opt" and opt is not None:
        opt.synchronize()
        out["optimizer_host_bytes"] = opt.host_state_bytes()
        out["pinned_host_bytes"] = (out.get("pinned_host_bytes") or 0) + opt.host_state_bytes()
    if census is not None:
        out["census"] = census.result()
    if hf_ckpt:
        model.gradient_checkpointing_disable()
    del opt, ctx, comp, census, tokens
    model.zero_grad(set_to_none=True)
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    # PyTorch keeps freed pinned host memory cached (save_on_cpu and the torchtune-style offload
    # pin about 60 GB): released, so that the next configurations do not run beside it; after
    # save_on_cpu it is kept for the torchtune-style offload right after it, which pins the same
    # tensors (release_host_cache releases it before anything else runs).
    w["host_cache_kept"] = name == "save-on-cpu"
    if not w["host_cache_kept"]:
        release_host_cache(w)
    out["wall_s"] = time.time() - t0
    return out


def release_host_cache(w):
    """Frees PyTorch's cache of freed pinned host memory."""
    import torch

    w["host_cache_kept"] = False
    host_empty = getattr(torch._C, "_host_emptyCache", None)  # noqa: SLF001 - no public API yet
    if host_empty is not None:
        host_empty()


def offload_tuning(w, mix, name=None):
    """The engine's copy windows for a mix that offloads blocks: the planner's (those its estimate
    assumes) for the mixes it chose, else up to two blocks' copies out in flight (the forward runs
    on while the link drains them), and the copies back started as many blocks ahead as one
    block's copy takes backward passes of a block (about twice its forward), plus one."""
    n_off = sum(1 for p in (mix or []) if p in offload_plan.TO_HOST)
    planned = (w.get("plan_settings") or {}).get(name) or {}
    if n_off and planned.get("prefetch_blocks") and planned.get("max_inflight_bytes"):
        return {"max_inflight_bytes": int(planned["max_inflight_bytes"]),
                "prefetch_blocks": int(planned["prefetch_blocks"]),
                "host_lead_blocks": int(planned.get("host_lead_blocks") or HOST_LEAD_BLOCKS)}
    a, t_f, link = w.get("block_bytes") or 0, w.get("block_forward_s") or 0, w.get("link") or {}
    if not n_off or not a:
        return {}
    kw = {"max_inflight_bytes": int(1.1 * min(n_off, 2) * a), "host_lead_blocks": HOST_LEAD_BLOCKS}
    if t_f > 0 and link.get("h2d"):
        copy_in = a / link["h2d"]
        kw["prefetch_blocks"] = min(len(mix), int(math.ceil(copy_in / (2 * t_f))) + 1)
    return kw


def overlap_mix(mixes, ran=None):
    """(config, mix) whose overlap is measured (vramkit-compute-only runs it with its copies
    left out): the planner's mix when it copies, else the first mix derived from it that copies
    (and, given `ran`, the configurations that ran, ran); None when none does."""
    for cfg in ("vramkit-act",) + DERIVED + tuple(sorted(c for c in mixes if c.startswith(TRY))):
        m = mixes.get(cfg)
        if m and any(p in offload_plan.TO_HOST for p in m) and (ran is None or cfg in ran):
            return cfg, m
    return None


def selective_offload_mix(mix):
    """mix with its first checkpointed block (else its first selective one) selective-offload;
    None when it has neither."""
    for p in ("checkpoint", "selective"):
        if p in mix:
            i = mix.index(p)
            return mix[:i] + ["selective-offload"] + mix[i + 1:]
    return None


def inputs_offload_mix(mix):
    """mix with every checkpointed block's input on the host (checkpoint-offload); None when it
    checkpoints no block."""
    return [("checkpoint-offload" if p == "checkpoint" else p) for p in mix] if "checkpoint" in mix else None


def block_forward_s(w):
    """Median forward time of a block (CUDA events around each block, uncapped, 3 forwards)."""
    import torch

    events = {}

    def enter(i, module, args, kwargs=None):
        events.setdefault(i, []).append(_ev())

    def leave(i, module, args, output):
        events[i].append(_ev())

    hs = []
    for i, b in enumerate(w["blocks"]):
        hs.append(b.register_forward_pre_hook(functools.partial(enter, i)))
        hs.append(b.register_forward_hook(functools.partial(leave, i)))
    x = make_tokens(w["shape"], 1, "cuda")[0]
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            w["loss_fn"](w["model"], x)
    torch.cuda.synchronize()
    for h in hs:
        h.remove()
    return statistics.median(ev[2 * k].elapsed_time(ev[2 * k + 1]) / 1e3 for ev in events.values() for k in (1, 2))


# --------------------------------------------------------------------------------------------
# The planner.
def planner_runs(shape, cap, out_dir, probe, mixes=None):
    """What `vramkit plan` says: the --fit mixes under the cap (act, act+opt; with --allow-lossy
    the compressed one), and its figures for the fixed configurations; with `mixes` ({config:
    (mix, optimizer offload, compressed)}), only its estimate of each of those mixes (key
    "mix:CONFIG"). Errors are recorded."""
    from vramkit.planner import find_cli

    path = os.path.join(out_dir, "plan-config-%dx%d-%d.json" % (shape["d"], shape["layers"], shape["batch"]))
    with open(path, "w") as f:
        json.dump(shape_config(shape), f)
    base = [find_cli(), "plan", path, "--precision", "amp-bf16", "--batch", str(shape["batch"]),
            "--seq", str(shape["seq"])]
    if probe:
        base += ["--probe", probe]
    cap_gpu = ["--gpu", "%dMiB" % (cap >> 20)]
    h200 = ["--gpu", "h200"]
    comp = ["--compress-activations", "fp8:" + ",".join(COMPRESS_MODULES)]
    # The plain configurations through the offload model too (--compress-activations none: every
    # block kept, or checkpointed), so that every predicted time comes from the same cost model.
    runs = {"fit": base + cap_gpu + ["--fit", "--json"],
            "fit-lossy": base + cap_gpu + ["--fit", "--allow-lossy", "--json"] + comp,
            "reference": base + h200 + ["--compress-activations", "none", "--json"],
            "full-checkpoint": base + h200 + ["--compress-activations", "none", "--checkpointing", "full", "--json"]}
    if mixes is not None:
        runs = {"mix:" + cfg: base + h200 + ["--offload", ("both:" if opt else "activations:") + offload_plan.letters(mix),
                                             "--json"] + (comp if compressed else ["--compress-activations", "none"])
                for cfg, (mix, opt, compressed) in mixes.items()}
    out = {}
    for key, argv in runs.items():
        for attempt in (argv, [a for i, a in enumerate(argv) if "--probe" not in argv[i - 1:i + 1]]):
            proc = subprocess.run(attempt, capture_output=True, text=True, check=False)
            entry = {"argv": attempt[1:], "exit": proc.returncode}
            try:
                entry["json"] = json.loads(proc.stdout)
                break
            except ValueError:
                entry["error"] = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            if not probe:
                break  # without a probe file there is nothing to retry without
        out[key] = entry
    return out


def planner_choices(plans, shape):
    """{config: {"mix", "allocated_peak_bytes", "step_time_s", ...}} from the planner's answers."""
    got = {}

    def fits(key):
        return ((plans.get(key) or {}).get("json") or {}).get("fits") or []

    for f in fits("fit"):
        if f.get("activation_mix") and f.get("micro_batch") == shape["batch"]:
            got.setdefault("vramkit-act+opt" if f.get("optimizer_offload") else "vramkit-act", f)
    for f in fits("fit-lossy"):
        if f.get("activation_mix") and f.get("micro_batch") == shape["batch"] and not f.get("optimizer_offload") \
                and f.get("compress_activations", "none") != "none":
            got.setdefault("vramkit-act+compress", f)
    out = {}
    for cfg, f in got.items():
        out[cfg] = {"mix": f["activation_mix"], "allocated_peak_bytes": f.get("allocated_peak_bytes"),
                    "device_peak_bytes": f.get("device_peak_bytes"), "step_time_s": f.get("step_time_s"),
                    "host_bytes": f.get("host_peak_bytes"), "compress": f.get("compress_activations"),
                    "max_inflight_bytes": f.get("max_inflight_bytes"), "prefetch_blocks": f.get("prefetch_blocks")}
    # The mixes measured beside the planner's (its estimate of each as given).
    for key, entry in plans.items():
        if not key.startswith("mix:") or not isinstance(entry, dict):
            continue
        o = (entry.get("json") or {}).get("offload")
        if o and key[4:] not in out:
            out[key[4:]] = {"mix": o.get("mix"), "allocated_peak_bytes": o.get("allocated_peak_bytes"),
                            "step_time_s": o.get("step_time_s"), "given": True,
                            "max_inflight_bytes": o.get("max_inflight_bytes"), "prefetch_blocks": o.get("prefetch_blocks")}
    # The plain configurations: the allocated peak from their own plan (amp-bf16, AdamW), the
    # time from the offload model's estimate for it.
    for cfg in ("reference", "full-checkpoint"):
        j = (plans.get(cfg) or {}).get("json")
        if not j:
            continue
        o = j.get("offload") or {}
        out[cfg] = {"allocated_peak_bytes": j.get("allocated_peak_bytes"), "device_peak_bytes": j.get("device_peak_bytes"),
                    "step_time_s": o.get("step_time_s"), "block_forward_s": o.get("block_forward_s"),
                    "block_backward_s": o.get("block_backward_s"), "kernel_rates": o.get("kernel_rates")}
    return out


# --------------------------------------------------------------------------------------------
def plan_mixes(shape, capacity, out_dir, probe, tries=(), run=None):
    """What the planner chooses under `capacity` and the mixes measured beside it: {"plans",
    "mixes" ({config: mix}), "plan_settings" ({config: engine windows}), "over_cap" ({config:
    (mix, predicted device peak, capacity)}: derived mixes not run), "extra" (labels for the
    summary)}. `tries`: the configs vramkit-try-MIX; `run`: planner_runs (a stand-in in tests)."""
    run = run or planner_runs
    mixes, settings, over_cap, extra = {}, {}, {}, {}
    try:
        plans = run(shape, capacity, out_dir, probe)
        chosen = planner_choices(plans, shape)
        mixes = {k: v["mix"] for k, v in chosen.items() if v.get("mix")}
        settings = {k: {"max_inflight_bytes": v.get("max_inflight_bytes"), "prefetch_blocks": v.get("prefetch_blocks")}
                    for k, v in chosen.items() if v.get("mix")}
    except (OSError, ValueError, RuntimeError) as e:
        plans = {"error": str(e)}
    act = mixes.get("vramkit-act")
    if act and not overlap_mix({"vramkit-act": act}):
        # The planner copies nothing here. Mixes that copy, derived from its own, to measure the
        # overlap on and to check its choice: its first checkpointed (else selective) block
        # selective-offload; every checkpointed block's input on the host; its first
        # checkpointed block offloaded whole. Run only where the planner expects them to fit.
        first = act.index("checkpoint") if "checkpoint" in act else None
        for cfg, m in (("vramkit-selective-offload", selective_offload_mix(act)),
                       ("vramkit-inputs-offload", inputs_offload_mix(act)),
                       ("vramkit-offload1", None if first is None else act[:first] + ["offload"] + act[first + 1:])):
            if m:
                mixes[cfg] = m
    if "error" not in plans:
        try:
            add_candidates(mixes, plans, shape, capacity, out_dir, probe, run, extra, settings)
            if any(any(c in "ohx" for c in m) for m in (extra.get("candidates") or {}).get("chosen", [])):
                # A candidate copies: it gives the overlap figure and checks the planner's choice,
                # the derived mixes' job; the stage's seconds go to the baselines instead.
                for cfg in DERIVED:
                    mixes.pop(cfg, None)
        except (OSError, ValueError, RuntimeError) as e:
            plans["candidates-error"] = {"error": str(e)}
    if "vramkit-act+compress" in mixes:
        extra["act+compress_mix"] = "the planner's --allow-lossy fit"
        extra["lossy_fit_config"] = "vramkit-act+compress"
    derived = {cfg: (mixes[cfg], False, False) for cfg in DERIVED if cfg in mixes}
    derived.update({t: (offload_plan.from_letters(t[len(TRY):]), False, False) for t in tries})
    if "error" not in plans:
        try:
            if derived:
                plans.update(run(shape, capacity, out_dir, probe, mixes=derived))
            for cfg in DERIVED:
                o = ((plans.get("mix:" + cfg) or {}).get("json") or {}).get("offload") or {}
                if cfg in mixes and (o.get("device_peak_bytes") or 0) > capacity:
                    over_cap[cfg] = (mixes.pop(cfg), o["device_peak_bytes"], capacity)
            more = {}
            om = overlap_mix(mixes)
            if om:
                more["vramkit-compute-only"] = (offload_plan.without_copies(om[1]), False, False)
            if "vramkit-act+compress" not in mixes and "vramkit-act" in mixes:
                # The lossy fit chose no compression under this cap: the copying mix measured
                # here, compressed, against itself uncompressed.
                src = om[0] if om else "vramkit-act"
                mixes["vramkit-act+compress"] = mixes[src]
                extra["act+compress_mix"] = "%s's mix (the planner's --allow-lossy fit chose no compression)" % src
                more["vramkit-act+compress"] = (mixes[src], False, True)
            if more:
                plans.update(run(shape, capacity, out_dir, probe, mixes=more))
                derived.update(more)
            # The engine settings the planner prints for each derived mix.
            for cfg, v in planner_choices(plans, shape).items():
                if cfg in derived and v.get("max_inflight_bytes") and v.get("prefetch_blocks"):
                    settings[cfg] = {"max_inflight_bytes": v["max_inflight_bytes"],
                                     "prefetch_blocks": v["prefetch_blocks"]}
        except (OSError, ValueError, RuntimeError) as e:
            plans["mix-error"] = {"error": str(e)}
    extra["derived_over_cap"] = {k: {"mix": offload_plan.letters(v[0]), "planner_device_peak_bytes": v[1]}
                                 for k, v in over_cap.items()}
    return {"plans": plans, "mixes": mixes, "plan_settings": settings, "over_cap": over_cap, "extra": extra}


def candidate_family(n):
    """Mixes the planner is asked about when its --fit mix gains too little: the first k blocks
    selective-offload (their kept outputs copy out during the later blocks' forward), the last j
    selective, the rest checkpointed with their inputs on the host or on the device (k <= 3,
    j <= 2, forward order)."""
    out = []
    for mid in ("checkpoint-offload", "checkpoint"):
        for k in range(0, min(3, n - 1) + 1):
            for j in range(0, min(2, n - k) + 1):
                m = ["selective-offload"] * k + [mid] * (n - k - j) + ["selective"] * j
                if m not in out:
                    out.append(m)
    return out


def candidate_mixes(estimates, capacity, full_step, act=None, k=CANDIDATES):
    """The mixes to measure beside the planner's: of `estimates` ({letters: planner offload
    object}), those whose device peak the planner puts within `capacity` (add_candidates gives the
    cap plus what the device holds outside the allocator, less CANDIDATE_MARGIN), the k fastest by its estimate
    that beat full checkpointing's `full_step`, and when none of those copies to the host the
    fastest fitting mix that copies after them (the overlap figure needs one). `act` (letters)
    is left out. Returns [(letters, estimate)]."""
    fit = sorted(((m, e) for m, e in estimates.items()
                  if m != act and e.get("device_peak_bytes") is not None and e["device_peak_bytes"] <= capacity
                  and e.get("step_time_s")), key=lambda me: me[1]["step_time_s"])
    faster = [me for me in fit if full_step is None or me[1]["step_time_s"] < full_step][:k]
    copies = lambda m: any(c in "ohx" for c in m)  # noqa: E731
    if not any(copies(m) for m, _ in faster):
        first = next((me for me in fit if copies(me[0])), None)
        if first:
            faster.append(first)
    return faster


def add_candidates(mixes, plans, shape, capacity, out_dir, probe, run, extra, settings):
    """When the planner's mix gains less than MIN_GAIN over full checkpointing by its estimate
    (or there is none): its estimates of candidate_family, and the chosen candidate_mixes added
    to mixes as configs vramkit-try-MIX (run right after the planner's mix)."""
    ck = ((plans.get("full-checkpoint") or {}).get("json") or {}).get("offload") or {}
    full_step = ck.get("step_time_s")
    act = (planner_choices(plans, shape).get("vramkit-act") or {}).get("step_time_s")
    if act and full_step and act <= (1 - MIN_GAIN) * full_step:
        return
    fam = {offload_plan.letters(m): (m, False, False) for m in candidate_family(shape["layers"])}
    got = run(shape, capacity, out_dir, probe, mixes=fam)
    est = {cfg: (e.get("json") or {}).get("offload") for cfg, e in got.items()}
    est = {cfg[4:]: o for cfg, o in est.items() if o}
    act_mix = mixes.get("vramkit-act")
    chosen = candidate_mixes(est, capacity * (1 - CANDIDATE_MARGIN), full_step,
                             offload_plan.letters(act_mix) if act_mix else None)
    for letters, _ in chosen:
        cfg = TRY + letters
        mixes[cfg] = offload_plan.from_letters(letters)
        plans["mix:" + cfg] = got["mix:" + letters]
        o = est[letters]
        if o.get("max_inflight_bytes") and o.get("prefetch_blocks"):
            settings[cfg] = {"max_inflight_bytes": o["max_inflight_bytes"], "prefetch_blocks": o["prefetch_blocks"],
                             "host_lead_blocks": o.get("host_lead_blocks")}
    extra["candidates"] = {"reason": "the planner's mix gains %s over full checkpointing by its estimate" % (
        "%.1f%%" % (100 * (1 - act / full_step)) if act and full_step else "nothing (it found none)"),
        "asked": len(fam), "chosen": [m for m, _ in chosen],
        "estimates": {m: {"step_time_s": o.get("step_time_s"), "device_peak_bytes": o.get("device_peak_bytes")}
                      for m, o in est.items()}}


def try_mixes(given, shape):
    """The mixes of --try-mix for this shape: each entry SHAPE:MIX or MIX (letters), those of
    the shape's block count."""
    out = []
    for item in filter(None, (given or "").split(",")):
        name, _, mix = item.rpartition(":")
        if (not name or SHAPES.get(name) is shape) and len(mix) == shape["layers"]:
            out.append(mix)
    return out


def emit(kind, payload):
    print("%s %s" % (kind, json.dumps(payload)), flush=True)


def worker(args):
    import torch

    shape = SHAPES[args.shape]
    deadline = args.deadline
    state = {}
    if args.state and os.path.exists(args.state):
        with open(args.state) as f:
            state = json.load(f)
    skip = set(filter(None, (args.skip or "").split(",")))
    torch.backends.cuda.matmul.allow_tf32 = False
    # A restarted worker keeps the model its first run measured the reference on.
    model, loss_fn, kind = build_model(shape, state.get("model_kind", args.model))
    from vramkit.activation_offload import find_blocks

    w = {"shape": shape, "model": model, "loss_fn": loss_fn, "blocks": find_blocks(model), "kind": kind,
         "total": torch.cuda.get_device_properties(0).total_memory, "warmup": args.warmup,
         "timed": args.steps - args.warmup, "cap": state.get("cap_bytes", 0),
         "block_bytes": state.get("block_bytes", 0), "block_forward_s": state.get("block_forward_s", 0),
         "saved_bytes": state.get("saved_bytes", 0),
         "link": state.get("link", {}), "plan_settings": state.get("plan_settings", {})}
    del model, loss_fn

    def announce(note=None):
        emit("MODEL", {"kind": w["kind"], "parameters": sum(p.numel() for p in w["model"].parameters()),
                       "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
                       "device_total_bytes": w["total"],
                       "note": note or getattr(build_model, "fallback_reason", None)})

    announce()
    mixes = state.get("mixes", {})
    ref_step = state.get("reference_step_s")
    failed_configs, ran_configs = set(), set()
    over_cap = {k: tuple(v) for k, v in state.get("over_cap", {}).items()}
    tries = [TRY + m for m in try_mixes(args.try_mix, shape)]
    # A restarted worker: the planner's candidates (in the state's mixes) too.
    tries += [c for c in mixes if c.startswith(TRY) and c not in tries]
    order = ORDER[:2] + tries + ORDER[2:]
    for name in order:
        if name in skip:
            continue
        if name != "reference" and not w["cap"]:
            emit("RESULT", {"config": name, "ok": False, "error": "not run: no reference, so no cap"})
            continue
        mix = None
        if name.startswith(TRY):
            mix = offload_plan.from_letters(name[len(TRY):])
        elif name in ("vramkit-act", "vramkit-act+opt", "vramkit-act+compress") + DERIVED:
            mix = mixes.get(name)
            if mix is None:
                if name not in DERIVED:
                    emit("RESULT", {"config": name, "ok": False, "error": "not run: the planner found no mix for it that fits the cap"})
                elif name in over_cap:
                    emit("RESULT", {"config": name, "ok": False, "mix": over_cap[name][0],
                                    "error": "not run: the planner expects %.2f GiB on the device, over the %.2f GiB it "
                                             "was given" % (over_cap[name][1] / GiB, over_cap[name][2] / GiB)})
                continue
        if name == "vramkit-act" and mix and all(p == "checkpoint" for p in mix):
            # The planner's fit is full checkpointing, measured as full-checkpoint below: its
            # candidates (vramkit-try-MIX) are what vramkit runs here.
            emit("RESULT", {"config": name, "ok": False, "mix": mix,
                            "error": "not run: the planner's mix is full checkpointing (the full-checkpoint row)"})
            continue
        if name == "vramkit-inputs-offload" and "vramkit-selective-offload" in ran_configs:
            # One copying mix beside the planner's is enough for the overlap figure; the stage's
            # time goes to the baselines.
            continue
        if name == "vramkit-compute-only":
            # The overlap of the planner's mix, else of the first derived mix that copies (run
            # just before this one); none when no mix that ran copies.
            om = overlap_mix(mixes, ran_configs | skip)  # skip: what a worker before a restart ran
            if not om:
                emit("RESULT", {"config": name, "ok": False, "error": "not run: no mix measured here copies"})
                continue
            mix = offload_plan.without_copies(om[1])
            if all(p == "checkpoint" for p in mix):
                # Full checkpointing itself (measured next, under the cap): derive() takes
                # T_compute from it, and the stage's seconds go to the baselines.
                emit("RESULT", {"config": name, "ok": False, "mix": mix,
                                "error": "not run: the mix without its copies is full checkpointing (T_compute from "
                                         "the full-checkpoint run)"})
                continue
        if name == "vramkit-act+compress" and not args.compress:
            continue
        # Rough cost: the steps at a multiple of the reference step, plus pinning for the
        # configurations that copy everything.
        factor = {"save-on-cpu": 7, "torchtune-style": 5, "vramkit-act+opt": 2.5}.get(name, 2)
        n = sum(STEPS.get(name, (args.warmup, args.steps - args.warmup)))
        cost = 3 + n * factor * (ref_step or 0.5)
        if name == "save-on-cpu" or (name == "torchtune-style" and not w.get("host_cache_kept")):
            # Pinning and releasing every saved tensor's host copy: run Q took 0.12-0.15 s a GiB
            # beside the steps (0.41 for save_on_cpu on the 1b shape); without it both were
            # estimated at half their time and one could start only to be cut off.
            cost += PIN_S_PER_GIB * (w.get("saved_bytes") or 0) / GiB
        if time.time() + cost > deadline:
            emit("RESULT", {"config": name, "ok": False, "error": "skipped: time budget spent (%.0f s left, ~%.0f s needed)"
                            % (deadline - time.time(), cost)})
            continue
        if w.get("host_cache_kept") and name != "torchtune-style":
            release_host_cache(w)
        emit("BEGIN", {"config": name})
        r = run_config(w, name, mix)
        if name == "reference" and not r.get("ok") and w["kind"] == "hf" and r.get("error") != "out of memory":
            # transformers' model failed under the bench's hooks: every configuration on the
            # built-in layout instead (the same for all, so the comparison holds).
            reason = "transformers' model failed the reference (%s): built-in LLaMA layout" % r.get("error")
            del w["model"], w["loss_fn"], w["blocks"]
            gc.collect()
            torch.cuda.empty_cache()
            w["model"], w["loss_fn"], w["kind"] = build_model(shape, "builtin")
            w["blocks"] = find_blocks(w["model"])
            announce(reason)
            r = run_config(w, name, mix)
        r["model_kind"] = w["kind"]
        emit("RESULT", r)
        if not r.get("ok"):
            failed_configs.add(name)
        else:
            ran_configs.add(name)
        if name == "reference" and r.get("ok"):
            ref_step = r["step_time_s"]["median"]
            w["cap"] = int(r["peak_reserved_bytes"] * args.cap_fraction)
            w["block_bytes"] = max((r.get("census") or {}).get("per_block") or [0])
            w["saved_bytes"] = (r.get("census") or {}).get("total") or 0
            # The cap bounds what PyTorch's allocator reserves; the planner's device peak also
            # counts the CUDA context and other memory outside it: the planner is given the cap
            # plus that.
            free, total = torch.cuda.mem_get_info()
            outside = max(0, (total - free) - torch.cuda.memory_reserved())
            extra = {"block_forward_s": block_forward_s(w), "link_bytes_per_s": measure_link(),
                     "outside_allocator_bytes": outside, "planner_capacity_bytes": w["cap"] + outside}
            w["block_forward_s"], w["link"] = extra["block_forward_s"], extra["link_bytes_per_s"]
            probe = args.probe
            try:
                extra["kernel_probe"] = kernel_probe(shape)
                probe = write_probe(os.path.join(args.out_dir, "offload-probe-%s.json" % args.shape),
                                    extra["kernel_probe"], extra["link_bytes_per_s"], args.probe)
            except Exception as e:  # noqa: BLE001 - recorded; the planner then uses the catalogue
                extra["kernel_probe"] = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200])}
            if probe and "gemm_flops" in extra["kernel_probe"] and args.calibrate:
                try:
                    extra["memory_rate_calibration"] = calibrate_probe(
                        shape, probe, extra["kernel_probe"], extra["link_bytes_per_s"], extra["block_forward_s"],
                        args.out_dir, args.probe)
                except (OSError, RuntimeError) as e:
                    extra["memory_rate_calibration"] = {"error": str(e)}
            extra["planner_probe"] = probe
            planned = plan_mixes(shape, w["cap"] + outside, args.out_dir, probe, tries)
            plans, over_cap = planned["plans"], planned["over_cap"]
            mixes = planned["mixes"]
            w["plan_settings"] = planned["plan_settings"]
            extra.update(planned["extra"])
            emit("PLAN", {"cap_bytes": w["cap"], "plans": plans, "mixes": mixes, **extra})
            # The planner's candidates run right after its mix (inserted ahead of the loop's
            # position: the list iterator picks them up).
            cands = [c for c in mixes if c.startswith(TRY) and c not in order]
            at = order.index("vramkit-act") + 1
            order[at:at] = cands
            if args.state:
                with open(args.state, "w") as f:
                    json.dump({"cap_bytes": w["cap"], "mixes": mixes, "reference_step_s": ref_step,
                               "model_kind": w["kind"], "block_bytes": w.get("block_bytes", 0),
                               "block_forward_s": w.get("block_forward_s", 0), "link": w.get("link", {}),
                               "saved_bytes": w.get("saved_bytes", 0),
                               "plan_settings": w.get("plan_settings", {}), "over_cap": over_cap}, f)
    emit("DONE", {})


# --------------------------------------------------------------------------------------------
# Orchestration.
def spawn_worker(args, name, deadline, state_path, skip, env):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--deadline", "%.3f" % deadline,
           "--state", state_path, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--cap-fraction", str(args.cap_fraction), "--model", args.model, "--out-dir", args.out_dir,
           "--calibrate", str(getattr(args, "calibrate", 1))]
    if skip:
        cmd += ["--skip", ",".join(sorted(skip))]
    if args.probe:
        cmd += ["--probe", args.probe]
    if args.compress_shape == name:
        cmd += ["--compress"]
    if args.try_mix:
        cmd += ["--try-mix", args.try_mix]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, env=env)


PIN_ENV = "pinned_use_cuda_host_register:True,pinned_num_register_threads:16"


def run_shape(args, name, entry, deadline, save):
    """Runs the worker of one shape until DONE or the deadline, restarting it once after a
    crash; fills entry in place and calls save() after every event. The worker's stderr goes to
    offload-worker-NAME.log beside the JSON."""
    state_path = os.path.join(args.out_dir, "offload-state-%s.json" % name)
    if os.path.exists(state_path):
        os.remove(state_path)
    env = dict(os.environ)
    if args.fast_pinning and "PYTORCH_CUDA_ALLOC_CONF" not in env:
        env["PYTORCH_CUDA_ALLOC_CONF"] = PIN_ENV
        entry["pinned_allocation"] = "cudaHostRegister, 16 threads (PYTORCH_CUDA_ALLOC_CONF=%s)" % PIN_ENV
    log = open(os.path.join(args.out_dir, "offload-worker-%s.log" % name), "w")
    try:
        _run_workers(args, name, entry, deadline, save, state_path, env, log)
    finally:
        log.close()


def _run_workers(args, name, entry, deadline, save, state_path, env, log):
    import select

    restarts = 0
    skip = set()
    while True:
        proc = spawn_worker(args, name, deadline, state_path, skip, env)
        current, stderr_tail, done = None, [], False
        fds = {proc.stdout.fileno(): [b"", "out"], proc.stderr.fileno(): [b"", "err"]}
        while fds:
            left = deadline + 3 - time.time()
            if left <= 0:
                proc.kill()
                entry["cut_off"] = "worker stopped at the time budget%s" % (" during %s" % current if current else "")
                if current:
                    entry["configs"].append({"config": current, "ok": False, "error": "cut off by the time budget"})
                save()
                proc.wait()
                proc.stdout.close()
                proc.stderr.close()
                return
            ready, _, _ = select.select(list(fds), [], [], min(left, 1.0))
            for fd in ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    del fds[fd]
                    continue
                buf, which = fds[fd]
                buf += chunk
                *complete, rest = buf.split(b"\n")
                fds[fd][0] = rest
                for raw in complete:
                    line = raw.decode(errors="replace")
                    if which == "err":
                        stderr_tail = (stderr_tail + [line.rstrip()])[-20:]
                        log.write(line + "\n")
                        continue
                    kind, _, payload = line.partition(" ")
                    try:
                        data = json.loads(payload)
                    except ValueError:
                        continue
                    if kind == "MODEL":
                        entry["model"] = data
                    elif kind == "BEGIN":
                        current = data["config"]
                    elif kind == "RESULT":
                        current = None
                        skip.add(data["config"])
                        entry["configs"].append(data)
                    elif kind == "PLAN":
                        entry.update({k: v for k, v in data.items() if k != "mixes"})
                        entry["mixes"] = data["mixes"]
                    elif kind == "DONE":
                        done = True
                    save()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        if done:
            return
        err = stderr_tail[-1] if stderr_tail else "exit %s" % proc.returncode
        if env.get("PYTORCH_CUDA_ALLOC_CONF") == PIN_ENV and any("pinned" in l for l in stderr_tail) and restarts == 0:
            env.pop("PYTORCH_CUDA_ALLOC_CONF")  # this torch refuses the pinning options: without them
            entry["pinned_allocation"] = "cudaHostAlloc (the register options were refused: %s)" % err[:200]
            restarts += 1
            continue
        if current:
            entry["configs"].append({"config": current, "ok": False, "error": "worker died: %s" % err[:300]})
            skip.add(current)
        else:
            entry.setdefault("errors", []).append("worker died: %s" % err[:300])
        save()
        if restarts >= 1 or time.time() > deadline - 10:
            return
        restarts += 1


def orchestrate(args):
    t_start = time.time()
    os.makedirs(args.out_dir, exist_ok=True)
    results = {"schema_version": 2, "argv": sys.argv, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "cap_fraction": args.cap_fraction, "budget_s": args.budget_s, "shapes": {}}

    def save():
        derive(results)
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(results, f, indent=1)
        os.replace(tmp, args.out)
        if args.summary:
            with open(args.summary + ".tmp", "w") as f:
                f.write(summarize(results))
            os.replace(args.summary + ".tmp", args.summary)

    names = args.shapes.split(",")
    save()
    for k, name in enumerate(names):
        left = args.budget_s - (time.time() - t_start)
        share = args.first_share if (k == 0 and len(names) > 1) else 1.0 / (len(names) - k)
        deadline = time.time() + left * share
        entry = results["shapes"][name] = {"shape": SHAPES[name], "configs": []}
        run_shape(args, name, entry, deadline, save)
        save()
    results["wall_s"] = time.time() - t_start
    save()
    print(summarize(results))
    measured = [any(c["config"] == "reference" and c.get("ok") for c in e["configs"]) for e in results["shapes"].values()]
    return 0 if measured and all(measured) else 1


def _by(entry):
    return {c["config"]: c for c in entry.get("configs", []) if c.get("ok")}


#: Measured medians closer than this share of the smaller one are a tie (order_verdict).
TIE_SHARE = 0.01


def measured_tie(a, b, spread=None):
    """Whether two measured configurations (rows with "config" and "measured_step_s") are a tie:
    their medians within TIE_SHARE of the smaller one, or either median inside the other's
    min-max spread (spread: {config: (min, max)})."""
    ma, mb = a["measured_step_s"], b["measured_step_s"]
    if abs(ma - mb) <= TIE_SHARE * min(ma, mb):
        return True
    sa, sb = (spread or {}).get(a["config"]), (spread or {}).get(b["config"])
    return bool((sa and sa[0] <= mb <= sa[1]) or (sb and sb[0] <= ma <= sb[1]))


def order_verdict(rows, spread=None):
    """The predicted order of rows (each with "config", "predicted_step_s", "measured_step_s")
    against the measured one. Strict ("same_order"): both sorted lists equal. With ties
    ("same_order_with_ties"): every pair that is not a measured tie (measured_tie) is ordered
    alike by the prediction; a tied pair may come in either order. "ties" and "discordant" list
    the pairs of each kind."""
    pred = [r["config"] for r in sorted(rows, key=lambda r: r["predicted_step_s"])]
    meas = [r["config"] for r in sorted(rows, key=lambda r: r["measured_step_s"])]
    ties, discordant = [], []
    for i, a in enumerate(rows):
        for b in rows[i + 1:]:
            if measured_tie(a, b, spread):
                ties.append(sorted((a["config"], b["config"])))
                continue
            dp = a["predicted_step_s"] - b["predicted_step_s"]
            dm = a["measured_step_s"] - b["measured_step_s"]
            if dp * dm <= 0:
                discordant.append(sorted((a["config"], b["config"])))
    return {"predicted": pred, "measured": meas, "same_order": pred == meas, "same_order_with_ties": not discordant,
            "ties": sorted(ties), "discordant": sorted(discordant)}


def order_line(label, rk):
    """The summary's line for an order_verdict: both orders and both verdicts."""
    ties = "; ties (medians within %.0f%% or inside each other's min-max): %s" % (
        100 * TIE_SHARE, ", ".join("%s = %s" % tuple(t) for t in rk["ties"])) if rk.get("ties") else ""
    disc = "; ordered otherwise than measured: %s" % ", ".join("%s / %s" % tuple(t) for t in rk["discordant"]) \
        if rk.get("discordant") else ""
    return "%s: predicted %s; measured %s (strict: %s; with ties: %s%s%s)" % (
        label, " < ".join(rk.get("predicted", [])), " < ".join(rk.get("measured", [])),
        "same order" if rk.get("same_order") else "DIFFERENT order",
        "same order" if rk.get("same_order_with_ties") else "DIFFERENT order", ties, disc)


def derive(results):
    """Ratios, overlap, the planner against the measurements, and the targets, per shape."""
    for entry in results["shapes"].values():
        by = _by(entry)
        ref = by.get("reference")
        for c in entry.get("configs", []):
            if c.get("ok") and ref and c.get("losses"):
                c["loss_max_abs_diff_vs_reference"] = max(abs(a - b) for a, b in zip(c["losses"], ref["losses"]))
        d = entry["derived"] = {}
        om = overlap_mix(entry.get("mixes") or {}, by)
        co, compute_from = by.get("vramkit-compute-only"), "vramkit-compute-only"
        if om and not co and all(p == "checkpoint" for p in offload_plan.without_copies(om[1])) \
                and "full-checkpoint" in by:
            co, compute_from = dict(by["full-checkpoint"], mix=offload_plan.without_copies(om[1])), "full-checkpoint"
        if om and co and co.get("mix") == offload_plan.without_copies(om[1]) and by[om[0]].get("copy_s"):
            both = by[om[0]]["step_time_s"]["median"]
            comp = co["step_time_s"]["median"]
            copy = sum(by[om[0]]["copy_s"].values())
            d["overlap"] = {"config": om[0], "mix": offload_plan.letters(om[1]), "forced": om[0] != "vramkit-act",
                            "t_compute_s": comp, "t_compute_from": compute_from, "t_copy_s": copy, "t_both_s": both,
                            "t_hidden_s": comp + copy - both,
                            "overlap": (comp + copy - both) / copy if copy > 0 else None}
        plans = planner_choices(entry.get("plans") or {}, entry["shape"]) if entry.get("plans") else {}
        rows = []
        for cfg, p in plans.items():
            m = by.get(cfg)
            row = {"config": cfg, "predicted_step_s": p.get("step_time_s"),
                   "predicted_allocated_peak_bytes": p.get("allocated_peak_bytes"),
                   "measured_step_s": m["step_time_s"]["median"] if m else None,
                   "measured_allocated_peak_bytes": m["peak_allocated_bytes"] if m else None}
            if m and row["predicted_step_s"]:
                row["step_error"] = row["predicted_step_s"] / row["measured_step_s"] - 1
            if m and row["predicted_allocated_peak_bytes"]:
                row["peak_error"] = row["predicted_allocated_peak_bytes"] / row["measured_allocated_peak_bytes"] - 1
            rows.append(row)
        d["planner_vs_measured"] = rows
        ranked = [r for r in rows if r.get("measured_step_s") and r.get("predicted_step_s")]
        spread = {cfg: (m["step_time_s"]["min"], m["step_time_s"]["max"]) for cfg, m in by.items()}
        d["ranking"] = order_verdict(ranked, spread)
        # The same for the configurations the issue ranks (without the mixes measured beside the
        # planner's to check it).
        d["ranking_main"] = order_verdict([r for r in ranked if r["config"] in RANKED], spread)
        cap = entry.get("cap_bytes")
        t = d["targets"] = {}
        act = by.get("vramkit-act")
        for base in ("full-checkpoint", "save-on-cpu", "torchtune-style"):
            if act and base in by:
                t["act_vs_" + base] = act["step_time_s"]["median"] / by[base]["step_time_s"]["median"]
        if act and cap:
            t["act_fits_cap"] = act["peak_reserved_bytes"] <= cap
        # The fastest measured of the planner's mix and the candidates run beside it that kept
        # under the cap (chosen after measuring, and labelled so).
        picks = [c for c in by.values() if (c["config"] == "vramkit-act" or
                                             c["config"][len(TRY):] in ((entry.get("candidates") or {}).get("chosen") or []))
                 and c["config"].startswith(("vramkit-act", TRY)) and (not cap or c["peak_reserved_bytes"] <= cap)]
        if picks:
            best = min(picks, key=lambda c: c["step_time_s"]["median"])
            t["best_vramkit"] = {"config": best["config"], "mix": offload_plan.letters(best.get("mix") or [])}
            for base in ("full-checkpoint", "save-on-cpu", "torchtune-style"):
                if base in by:
                    t["best_vramkit"]["vs_" + base] = best["step_time_s"]["median"] / by[base]["step_time_s"]["median"]
        ac = by.get("vramkit-act+compress")
        if ac:
            # Against the same mix uncompressed when one was measured, else the planner's mix.
            same = [c for c in ("vramkit-offload1", "vramkit-act") if c in by and by[c].get("mix") == ac.get("mix")]
            base = same[0] if same else ("vramkit-act" if act else None)
            if base:
                t["act_compress_vs"] = base
                t["act_compress_vs_act"] = ac["step_time_s"]["median"] / by[base]["step_time_s"]["median"]


def _gib(b):
    return "-" if b is None else "%.2f" % (b / GiB)


def _pct(x):
    return "-" if x is None else "%+.1f%%" % (100 * x)


def summarize(results):
    lines = ["# offload bench, %s" % results["date"], ""]
    for name, entry in results["shapes"].items():
        s = entry["shape"]
        model = entry.get("model") or {}
        lines.append("## %s: %s, d %d, %d blocks, ffn %d, batch %d x %d tokens, %.2fB parameters" % (
            name, {"hf": "transformers LlamaForCausalLM", "builtin": "built-in LLaMA layout"}.get(model.get("kind"), "?"),
            s["d"], s["layers"], s["ffn"], s["batch"], s["seq"], (model.get("parameters") or 0) / 1e9))
        if model:
            lines.append("%s, torch %s%s" % (model.get("device"), model.get("torch"),
                                             "; model: %s" % model["note"] if model.get("note") else ""))
        if entry.get("cap_bytes"):
            lines.append("cap %.2f GiB (%.2f x the reference's peak reserved); link d2h %.1f / h2d %.1f GB/s; "
                         "block forward %.2f ms" % (entry["cap_bytes"] / GiB, results["cap_fraction"],
                                                   entry["link_bytes_per_s"]["d2h"] / 1e9, entry["link_bytes_per_s"]["h2d"] / 1e9,
                                                   1e3 * entry["block_forward_s"]))
        if entry.get("planner_capacity_bytes"):
            lines.append("planner given %.2f GiB: the cap plus %.2f GiB the device holds outside PyTorch's allocator "
                         "(CUDA context)" % (entry["planner_capacity_bytes"] / GiB, entry["outside_allocator_bytes"] / GiB))
        if entry.get("pinned_allocation"):
            lines.append("pinned host memory: %s" % entry["pinned_allocation"])
        kp = entry.get("kernel_probe") or {}
        if "gemm_flops" in kp:
            lines.append("kernel probe for the planner (%s): bf16 GEMMs %.0f TFLOP/s (by shape %s), causal SDPA forward + "
                         "backward %.0f TFLOP/s (forward %.0f), a block's memory-bound kernels %.0f GB/s read + written "
                         "(an fp32 product %.0f)" % (
                             os.path.basename(entry.get("planner_probe") or "-"), kp["gemm_flops"] / 1e12,
                             "/".join("%.0f" % x for x in kp.get("gemm_cases_tflops", [])), kp["attention_flops"] / 1e12,
                             kp["attention_forward_flops"] / 1e12, kp["memory_bytes_per_s"] / 1e9,
                             kp.get("product_bytes_per_s", 0) / 1e9))
        elif kp.get("error"):
            lines.append("kernel probe failed (%s): the planner used the GPU catalogue" % kp["error"])
        mc = entry.get("memory_rate_calibration")
        if mc and mc.get("calibrated"):
            lines.append("memory-bound rate given to the planner: %.0f GB/s, calibrated so that its block forward (%.2f ms "
                         "at the probed rates, %.2f ms of it memory-bound) is the measured %.2f ms; GEMM and attention "
                         "rates as probed" % (mc["calibrated"] / 1e9, 1e3 * mc["planner_block_forward_s"],
                                             1e3 * mc["planner_memory_bound_s"], 1e3 * mc["measured_block_forward_s"]))
        elif mc:
            lines.append("memory-bound rate not calibrated (%s): the probed one" % mc.get("error"))
        for cfg, mix in (entry.get("mixes") or {}).items():
            src = {"vramkit-offload1": "the planner's first checkpointed block offloaded",
                   "vramkit-selective-offload": "the planner's mix with its first checkpointed block selective-offload",
                   "vramkit-inputs-offload": "the planner's mix with its checkpointed blocks' inputs on the host",
                   "vramkit-act+compress": entry.get("act+compress_mix")}.get(cfg) or (
                       "one of the planner's fastest mixes that fit, measured beside its --fit mix"
                       if cfg[len(TRY):] in ((entry.get("candidates") or {}).get("chosen") or [])
                       else "--try-mix" if cfg.startswith(TRY) else "vramkit plan --fit")
            run = _by(entry).get(cfg) or {}
            if run.get("prefetch_blocks") or run.get("max_inflight_bytes"):
                src += "; engine: prefetch_blocks %s, copy-out window %s GiB, host lead %s blocks" % (
                    run.get("prefetch_blocks", 0), _gib(run.get("max_inflight_bytes")), run.get("host_lead_blocks", 0))
            lines.append("mix of %s (o offload, c checkpoint, k keep, s selective, h selective-offload, x checkpoint-offload):"
                         " %s (%s)"
                         % (cfg, offload_plan.letters(mix), src))
        cd = entry.get("candidates")
        if cd:
            lines.append("%s: the planner was asked about %d more mixes; measured beside it: %s" % (
                cd["reason"], cd["asked"], ", ".join(
                    "%s (predicted %.3f s, device %.2f GiB)" % (m, cd["estimates"][m]["step_time_s"],
                                                              cd["estimates"][m]["device_peak_bytes"] / GiB)
                    for m in cd["chosen"]) or "none (none fits the cap and beats full checkpointing)"))
        if entry.get("plans") is not None and not entry.get("mixes"):
            lines.append("planner: no offload mix fits the cap")
        for e in entry.get("errors", []):
            lines.append("error: %s" % e)
        if entry.get("cut_off"):
            lines.append("CUT OFF: %s" % entry["cut_off"])
        lines += ["", "| config | step s (median, min-max, n) | vs full ckpt | peak reserved GiB | peak alloc GiB | "
                  "pinned GiB | loss max abs diff vs reference |", "| --- | --- | --- | --- | --- | --- | --- |"]
        by = _by(entry)
        ck = by.get("full-checkpoint")
        notes = []
        for c in entry["configs"]:
            if not c.get("ok"):
                lines.append("| %s | %s | | | | | |" % (c["config"], c.get("error")))
                continue
            st = c["step_time_s"]
            al = c.get("allocator") or {}
            if al.get("num_alloc_retries"):
                notes.append("%s: the allocator freed its cache and retried %d times (%d cudaMalloc, %d cudaFree)" % (
                    c["config"], al["num_alloc_retries"], al.get("num_device_alloc", 0), al.get("num_device_free", 0)))
            lines.append("| %s | %.3f (%.3f-%.3f, %d) | %s | %s | %s | %s | %s |" % (
                c["config"], st["median"], st["min"], st["max"], st["n"],
                "%.2fx" % (st["median"] / ck["step_time_s"]["median"]) if ck else "-",
                _gib(c["peak_reserved_bytes"]), _gib(c["peak_allocated_bytes"]), _gib(c.get("pinned_host_bytes")),
                "-" if c.get("loss_max_abs_diff_vs_reference") is None else "%.2e" % c["loss_max_abs_diff_vs_reference"]))
        if notes:
            lines += [""] + notes
        d = entry.get("derived") or {}
        if d.get("planner_vs_measured"):
            lines += ["", "| planner vs measured | step s predicted | measured | error | allocated peak GiB predicted | "
                      "measured | error |", "| --- | --- | --- | --- | --- | --- | --- |"]
            for r in d["planner_vs_measured"]:
                lines.append("| %s | %s | %s | %s | %s | %s | %s |" % (
                    r["config"], "-" if r["predicted_step_s"] is None else "%.3f" % r["predicted_step_s"],
                    "-" if r["measured_step_s"] is None else "%.3f" % r["measured_step_s"], _pct(r.get("step_error")),
                    _gib(r["predicted_allocated_peak_bytes"]), _gib(r["measured_allocated_peak_bytes"]), _pct(r.get("peak_error"))))
            pr = (planner_choices(entry.get("plans") or {}, s) or {}).get("reference") or {}
            if pr.get("block_forward_s") and entry.get("block_forward_s"):
                lines.append("")
                lines.append("planner's block forward %.2f ms (backward %.2f ms; kernel rates: %s) against %.2f ms measured "
                             "(%s)" % (1e3 * pr["block_forward_s"], 1e3 * (pr.get("block_backward_s") or 0),
                                       pr.get("kernel_rates"), 1e3 * entry["block_forward_s"],
                                       _pct(pr["block_forward_s"] / entry["block_forward_s"] - 1)))
            lines.append("")
            lines.append(order_line("order by step time", d.get("ranking") or {}))
            rm = d.get("ranking_main") or {}
            if rm.get("predicted"):
                lines.append(order_line("order of " + ", ".join(RANKED), rm))
        if d.get("overlap"):
            o = d["overlap"]
            lines.append("overlap (%s, %s%s): %.3f s of %.3f s copy time hidden, %s (T_compute %.3f s %s, "
                         "the same mix without its copies; T_both %.3f s; target >= 80%%)" % (
                             o["config"], o.get("mix", "?"),
                             "; the planner's mix" if not o.get("forced") else
                             "; a copying mix measured beside the planner's, not its choice" if o["config"].startswith(TRY)
                             else "; a copying mix derived from the planner's, which copies nothing", o.get("t_hidden_s", o["t_compute_s"] + o["t_copy_s"] - o["t_both_s"]),
                             o["t_copy_s"], "-" if o["overlap"] is None else "%.1f%%" % (100 * o["overlap"]),
                             o["t_compute_s"], "uncapped" if o.get("t_compute_from", "vramkit-compute-only") ==
                             "vramkit-compute-only" else "under the cap, full checkpointing's run", o["t_both_s"]))
        for cfg in PHASED:
            pp = (_by(entry).get(cfg) or {}).get("phase_peaks")
            if pp and pp.get("phases"):
                top = sorted(pp["phases"], key=lambda p: -p[1])[:3]
                lines.append("allocated peak by phase (%s, last step): %s" % (
                    cfg, "; ".join("%s %.2f GiB (%.2f held at its end)" % (p[0], p[1] / GiB, p[2] / GiB) for p in top)))
        t = d.get("targets") or {}
        for base in ("full-checkpoint", "save-on-cpu", "torchtune-style"):
            if "act_vs_" + base in t:
                lines.append("vramkit-act / %s step time: %.3fx (target < 1)" % (base, t["act_vs_" + base]))
        if "act_fits_cap" in t:
            lines.append("vramkit-act fits the cap: %s" % ("yes" if t["act_fits_cap"] else "NO"))
        bv = t.get("best_vramkit")
        if bv and bv["config"] != "vramkit-act":
            lines.append("fastest measured of the planner's mix and its candidates, within the cap (picked after "
                         "measuring): %s (%s): %s" % (bv["config"], bv["mix"], ", ".join(
                             "%.3fx %s" % (bv["vs_" + b], b) for b in ("full-checkpoint", "save-on-cpu", "torchtune-style")
                             if "vs_" + b in bv)))
        if "act_compress_vs_act" in t:
            lines.append("- vramkit-act+compress (%s) / %s step time under the cap: %.3fx (target < 1)" % (
                entry.get("act+compress_mix", "?"), t["act_compress_vs"], t["act_compress_vs_act"]))
        lines.append("")
    if "wall_s" in results:
        lines.append("bench wall time %.0f s (budget %.0f s)" % (results["wall_s"], results["budget_s"]))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1b,3b-wide", help="any of: " + ", ".join(SHAPES))
    ap.add_argument("--out", default="offload-bench.json")
    ap.add_argument("--summary", default=None)
    ap.add_argument("--out-dir", default=None, help="scratch files (planner configs); default: --out's folder")
    ap.add_argument("--steps", type=int, default=5, help="steps per configuration, warm-up included")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=180.0, help="the whole bench stops by then")
    ap.add_argument("--first-share", type=float, default=0.55, help="share of the budget the first shape may use")
    ap.add_argument("--cap-fraction", type=float, default=0.5, help="cap = this x the reference's peak reserved")
    ap.add_argument("--model", default="auto", choices=("auto", "hf", "builtin"))
    ap.add_argument("--compress-shape", default=None, help="shape measured with compression (default: the first)")
    ap.add_argument("--probe", default=None, help="vramkit probe --json file for the planner's link rate")
    ap.add_argument("--try-mix", default=None,
                    help="comma list of [SHAPE:]MIX (letters o, c, k, s, h, x per block) run under the cap after the "
                         "planner's mix, as configs vramkit-try-MIX")
    ap.add_argument("--calibrate", type=int, default=1, choices=(0, 1),
                    help="1: give the planner the memory-bound rate at which its block forward is the measured one "
                         "(GEMM and attention rates as probed); 0: the probed rates alone")
    ap.add_argument("--fast-pinning", type=int, default=1, choices=(0, 1),
                    help="1: pin host memory with cudaHostRegister from 16 threads (PyTorch's option)")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--state", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--skip", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--compress", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for s in args.shapes.split(","):
        if s not in SHAPES:
            ap.error("unknown shape %r (known: %s)" % (s, ", ".join(SHAPES)))
    if args.steps <= args.warmup or args.warmup < 0:
        ap.error("--steps must exceed --warmup (>= 0)")
    if not 0 < args.cap_fraction <= 1:
        ap.error("--cap-fraction must be in (0, 1]")
    if not 0 < args.first_share < 1:
        ap.error("--first-share must be in (0, 1)")
    if args.budget_s <= 0:
        ap.error("--budget-s must be positive")
    if args.probe and not os.path.isfile(args.probe):
        ap.error("--probe %s: no such file" % args.probe)
    for item in filter(None, (args.try_mix or "").split(",")):
        name, _, mix = item.rpartition(":")
        if name and name not in SHAPES:
            ap.error("--try-mix %s: unknown shape %r" % (item, name))
        try:
            offload_plan.from_letters(mix)
        except ValueError as e:
            ap.error("--try-mix %s: %s" % (item, e))
        if name and len(mix) != SHAPES[name]["layers"]:
            ap.error("--try-mix %s: %d letters for %d blocks" % (item, len(mix), SHAPES[name]["layers"]))
    if args.compress_shape is None:
        args.compress_shape = args.shapes.split(",")[0]
    elif args.compress_shape not in args.shapes.split(","):
        ap.error("--compress-shape %s is not among --shapes" % args.compress_shape)
    if args.out_dir is None:
        args.out_dir = os.path.dirname(os.path.abspath(args.out))
    if args.worker:
        if args.worker not in SHAPES:
            ap.error("unknown shape %r" % args.worker)
        args.shape = args.worker
        args.deadline = args.deadline or time.time() + args.budget_s
        worker(args)
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
