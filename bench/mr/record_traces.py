#!/usr/bin/env python3
"""Records vramkit-trace v1 files from real PyTorch runs on the GPU, one per workload:

  gpt2_checkpointing  GPT-2 (124M shape, random weights) training with gradient checkpointing,
                      amp bf16, AdamW, batch 8 x 1024, 2 steps
  gpt2_generate       GPT-2 bf16 `generate()` (greedy, KV cache growing token by token),
                      batch 8, 64-token prompt, 128 new tokens
  resnet50_train      torchvision ResNet-50 training, amp bf16, SGD momentum, batch 64 x 224 px,
                      2 steps
  gpt2_varlen_train   GPT-2 training whose sequence length changes every step (a fixed
                      pseudo-random list between 128 and 1024 tokens), amp bf16, AdamW, batch 8,
                      6 steps: where fragmentation is worst

Each workload runs in a fresh process under PyTorch's own allocator with
torch.cuda.memory._record_memory_history on from before the model is built; the snapshot's device
trace is converted by bench/mr/trace_tools.py exactly as record_torch_trace.py does (allocations =
'alloc', frees = 'free_completed', bytes = requested size). Weights are random (no downloads).

    python3 bench/mr/record_traces.py --out-dir DIR [--only NAME,...] [--max-bytes N]
    python3 bench/mr/record_traces.py --list

Writes DIR/NAME.trace and DIR/NAME.json (PyTorch's peaks, event count, losses); a trace whose
text exceeds --max-bytes (default 2 MB) is also written gzip-compressed as NAME.trace.gz and the
plain file removed. Exit 1 if a workload fails, 77 without torch or a GPU.
"""

import argparse
import datetime
import gzip
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import trace_tools  # noqa: E402

SKIP = 77
VARLEN_SEQS = [384, 1024, 192, 768, 512, 960]  # every step differs; fixed so runs compare


def gpt2(torch, transformers, layers=12):
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=768, n_head=12, n_positions=1024,
                                  vocab_size=50257)
    cfg._attn_implementation = "sdpa"
    with torch.device("cuda"):
        return transformers.GPT2LMHeadModel(cfg), cfg


def train_steps(torch, model, opt, batches, losses):
    for ids in batches:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach().float().item()))
        del loss


def run_gpt2_checkpointing(torch, losses):
    import transformers
    model, cfg = gpt2(torch, transformers)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [torch.randint(0, cfg.vocab_size, (8, 1024), device="cuda", generator=gen) for _ in range(2)]
    train_steps(torch, model, opt, batches, losses)
    return "GPT-2 124M shape, gradient checkpointing, train amp-bf16 adamw batch 8 x 1024, 2 steps"


def run_gpt2_generate(torch, losses):
    import transformers
    model, cfg = gpt2(torch, transformers)
    model = model.to(torch.bfloat16).eval()
    gen = torch.Generator(device="cuda").manual_seed(2)
    prompt = torch.randint(0, cfg.vocab_size, (8, 64), device="cuda", generator=gen)
    with torch.no_grad():
        out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=128,
                             min_new_tokens=128, do_sample=False, use_cache=True, pad_token_id=0)
    if out.shape[1] != 64 + 128:
        raise RuntimeError("generate() returned %d tokens, expected %d" % (out.shape[1], 64 + 128))
    losses.append(float(out.float().mean().item()))
    return "GPT-2 124M shape bf16 generate() greedy with KV cache, batch 8, prompt 64, 128 new tokens"


def run_resnet50_train(torch, losses):
    import torchvision
    with torch.device("cuda"):
        model = torchvision.models.resnet50(num_classes=1000)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator(device="cuda").manual_seed(3)
    for _ in range(2):
        x = torch.randn(64, 3, 224, 224, device="cuda", generator=gen)
        y = torch.randint(0, 1000, (64,), device="cuda", generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach().float().item()))
        del loss, x, y
    return "torchvision ResNet-50, train amp-bf16 sgd momentum, batch 64 x 3 x 224 x 224, 2 steps"


def run_gpt2_varlen_train(torch, losses):
    import transformers
    model, cfg = gpt2(torch, transformers)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    gen = torch.Generator(device="cuda").manual_seed(4)
    for seq in VARLEN_SEQS:
        ids = torch.randint(0, cfg.vocab_size, (8, seq), device="cuda", generator=gen)
        train_steps(torch, model, opt, [ids], losses)
        del ids
    return "GPT-2 124M shape, train amp-bf16 adamw batch 8, sequence length per step %s" % (
        " ".join(str(s) for s in VARLEN_SEQS))


WORKLOADS = {
    "gpt2_checkpointing": run_gpt2_checkpointing,
    "gpt2_generate": run_gpt2_generate,
    "resnet50_train": run_resnet50_train,
    "gpt2_varlen_train": run_gpt2_varlen_train,
}


def record_one(name, out_dir, max_bytes, max_entries):
    """Runs one workload in this process; writes its trace and JSON; returns the JSON dict."""
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device visible to PyTorch", file=sys.stderr)
        return None
    torch.cuda.init()
    torch.backends.cudnn.benchmark = False
    torch.cuda.synchronize()
    rec = torch.cuda.memory._record_memory_history
    rec(enabled="all", context=None, stacks="python", max_entries=max_entries)
    losses = []
    t0 = time.perf_counter()
    desc = WORKLOADS[name](torch, losses)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    snapshot = torch.cuda.memory._snapshot()
    rec(enabled=None)
    dev = torch.cuda.current_device()
    traces = snapshot.get("device_traces") or []
    device_trace = traces[dev] if dev < len(traces) else []
    if not device_trace:
        raise RuntimeError("the snapshot holds no device trace")
    events, info = trace_tools.snapshot_to_events(device_trace, "free_completed")
    gpu = torch.cuda.get_device_name(dev)
    source = "pytorch %s %s, %s" % (torch.__version__, desc, gpu)
    notes = [
        "alloc = trace 'alloc', free = trace 'free_completed' (block reusable); bytes = requested size",
        "recorded from before the model was built; blocks live at the end stay live (the replayer frees them)",
        "time_ns from the trace's time_us",
    ]
    overflow = len(device_trace) >= max_entries
    if overflow:
        notes.append("history ring buffer was full: the earliest events were lost")
    path = os.path.join(out_dir, name + ".trace")
    trace_tools.write_trace(path, events, source, notes)
    _, check = trace_tools.read_trace(path)  # the written file must parse
    summary = trace_tools.trace_stats(check)
    size = os.path.getsize(path)
    written = path
    if size > max_bytes:
        with open(path, "rb") as f, gzip.open(path + ".gz", "wb", compresslevel=9) as g:
            g.write(f.read())
        os.remove(path)
        written = path + ".gz"
    doc = {
        "name": name,
        "description": desc,
        "file": os.path.basename(written),
        "bytes": os.path.getsize(written),
        "events": len(events),
        "raw_trace_entries": len(device_trace),
        "ring_buffer_overflow": overflow,
        "dropped_frees": info["dropped_frees"],
        "trace_peak_live_bytes": summary["peak_live_bytes"],
        "max_allocated_bytes": int(torch.cuda.max_memory_allocated()),
        "max_reserved_bytes": int(torch.cuda.max_memory_reserved()),
        "num_segments": len(snapshot.get("segments", [])),
        "wall_s": round(wall, 3),
        "losses": [round(x, 4) for x in losses],
        "torch": torch.__version__,
        "gpu": gpu,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
    }
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    bad = [x for x in losses if x != x or x in (float("inf"), float("-inf"))]
    if bad:
        raise RuntimeError("non-finite loss: %s" % losses)
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", help="folder for NAME.trace and NAME.json")
    ap.add_argument("--only", default="", help="comma-separated workload names (default: all)")
    ap.add_argument("--max-bytes", type=int, default=2_000_000, help="gzip traces larger than this")
    ap.add_argument("--max-entries", type=int, default=2_000_000, help="history ring buffer size")
    ap.add_argument("--list", action="store_true", help="print the workload names and exit")
    ap.add_argument("--run", choices=sorted(WORKLOADS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.list:
        print("\n".join(WORKLOADS))
        return 0
    if not args.out_dir:
        ap.error("--out-dir is required")
    names = [n for n in args.only.split(",") if n] or list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        ap.error("--only: unknown workload %s (known: %s)" % (", ".join(unknown), ", ".join(WORKLOADS)))
    if args.max_bytes < 1 or args.max_entries < 1:
        ap.error("--max-bytes and --max-entries must be positive")
    os.makedirs(args.out_dir, exist_ok=True)
    if args.run:
        try:
            doc = record_one(args.run, args.out_dir, args.max_bytes, args.max_entries)
        except ImportError as e:
            print("%s: %s" % (args.run, e), file=sys.stderr)
            return SKIP
        if doc is None:
            return SKIP
        print(json.dumps(doc))
        return 0
    failed = skipped = 0
    for name in names:
        cmd = [sys.executable, os.path.abspath(__file__), "--run", name, "--out-dir", args.out_dir,
               "--max-bytes", str(args.max_bytes), "--max-entries", str(args.max_entries)]
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)  # record under PyTorch's default allocator
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        dt = time.perf_counter() - t0
        if p.returncode == SKIP:
            skipped += 1
            print("%-20s skipped: %s" % (name, p.stderr.strip().splitlines()[-1:] or ""))
            continue
        if p.returncode != 0:
            failed += 1
            print("%-20s FAILED (%.0f s):\n%s" % (name, dt, p.stderr[-3000:]))
            continue
        d = json.loads(p.stdout.strip().splitlines()[-1])
        print("%-20s %7d events  %9d bytes (%s)  peak live %8.1f MiB  torch reserved %8.1f MiB  %.0f s" % (
            name, d["events"], d["bytes"], d["file"], d["trace_peak_live_bytes"] / 2**20,
            d["max_reserved_bytes"] / 2**20, dt))
    if failed:
        return 1
    return SKIP if skipped == len(names) else 0


if __name__ == "__main__":
    sys.exit(main())
