#!/usr/bin/env python3
"""Records the device allocation stream of a real PyTorch training run as a vramkit compact trace.

Builds a LLaMA-shaped model from tests/data/plan/configs (default TinyLlama-1.1B shape, random
weights), and runs --steps training steps (amp-bf16 autocast, AdamW, batch 8 x 1024 by default)
with torch.cuda.memory._record_memory_history on, from before the model is built, so the trace
holds the weights, the lazily created optimizer states and every step's activations and
temporaries. The snapshot's device trace is converted with bench/mr/trace_tools.py:

  * allocations are the 'alloc' actions; frees are the 'free_completed' actions, the moment the
    caching allocator may hand the block out again (for blocks used on one stream this equals
    'free_requested'; for cross-stream blocks it is later, after the recorded event completed).
    A replayed allocator must see the block busy until then, so free_completed is used throughout.
  * bytes are the trace's 'size' (the size the caller requested, before PyTorch's rounding).
  * frees of blocks allocated before recording began are dropped; blocks still live at the end
    (weights, optimizer states, the input batch) stay live: the replayer frees them at the end.

Afterwards --timing-steps more steps run without recording; their median is step_time_s.
Writes the trace (plain text, kept under --max-bytes by starting the trace at a later step when
needed) and a JSON file with PyTorch's own figures from the same run.

Usage:
  python3 bench/mr/record_torch_trace.py [--out-trace tests/data/mr/llama_step.trace]
                                         [--out-json tests/data/mr/llama_step.json] [--steps 3]
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO_ROOT, "bench", "plan"))
import trace_tools  # noqa: E402
import measure_ground_truth as gt  # noqa: E402

MIB = 1 << 20


def gpu_name_and_driver():
    try:
        line = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip().splitlines()[0]
        name, driver = [f.strip() for f in line.split(",")[:2]]
        return name, driver
    except (OSError, IndexError, ValueError, subprocess.TimeoutExpired):
        return None, None


def start_recording(torch, max_entries):
    """Turns on allocation history without stack frames (cheapest form that keeps every event)."""
    rec = torch.cuda.memory._record_memory_history
    try:
        rec(enabled="all", context=None, stacks="python", max_entries=max_entries)
    except TypeError:  # older signature
        rec(True, max_entries=max_entries)


def stop_recording(torch):
    try:
        torch.cuda.memory._record_memory_history(enabled=None)
    except TypeError:
        torch.cuda.memory._record_memory_history(False)


def train_step(torch, model, opt, batch, amp_dtype):
    with torch.autocast("cuda", dtype=amp_dtype, enabled=amp_dtype is not None):
        loss = model(**batch).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def timed_step(torch, model, opt, batch, amp_dtype, losses, starts_us=None):
    """One training step between two device synchronizations: appends its loss to `losses` (and
    its start, in microseconds since the epoch, to `starts_us` when given); returns its seconds."""
    torch.cuda.synchronize()
    if starts_us is not None:
        starts_us.append(time.time_ns() // 1000)
    t0 = time.perf_counter()
    loss = train_step(torch, model, opt, batch, amp_dtype)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    losses.append(float(loss.detach().float().item()))
    return seconds


def choose_events(device_trace, step_starts_us, max_bytes, source, notes):
    """Converts the device trace, starting at a later step while the text exceeds max_bytes.

    Returns (events, info, first_step) where first_step is the 1-based step the trace starts at
    (0: from before the model was built).
    """
    starts = [None] + list(step_starts_us[1:])  # None: everything, then from step 2, 3, ...
    best = None
    for first, start_us in enumerate(starts):
        events, info = trace_tools.snapshot_to_events(device_trace, "free_completed", start_time_us=start_us)
        if start_us is not None and not events:
            continue  # that step start is not on the trace's clock
        best = (events, info, 0 if start_us is None else first + 1)
        size = len(trace_tools.format_events(events)) + len(source) + sum(len(n) + 3 for n in notes) + 40
        if size <= max_bytes:
            break
    # If even the last step is over the limit, the shortest recording is kept (and reported).
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tinyllama-1.1b", help="preset with a config in tests/data/plan/configs")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--precision", default="amp-bf16", choices=["amp-bf16", "amp-fp16", "fp32", "bf16"])
    ap.add_argument("--steps", type=int, default=3, help="recorded training steps (default 3)")
    ap.add_argument("--timing-steps", type=int, default=3, help="unrecorded steps timed afterwards (default 3)")
    ap.add_argument("--max-entries", type=int, default=3_000_000, help="history ring buffer size")
    ap.add_argument("--max-bytes", type=int, default=5_000_000, help="largest trace file (default 5 MB)")
    ap.add_argument("--out-trace", default=os.path.join(REPO_ROOT, "tests", "data", "mr", "llama_step.trace"))
    ap.add_argument("--out-json", default=os.path.join(REPO_ROOT, "tests", "data", "mr", "llama_step.json"))
    args = ap.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.seq < 1 or args.timing_steps < 0:
        ap.error("--steps, --batch and --seq must be at least 1 and --timing-steps at least 0")
    if gt.config_relpath(args.model) is None:
        ap.error("--model %r has no config in tests/data/plan/configs (choose from %s)" % (
            args.model, ", ".join(sorted(gt.PRESET_CONFIGS))))

    import torch

    amp_dtype = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(args.precision)
    if args.precision == "amp-fp16":
        ap.error("amp-fp16 needs a GradScaler; record amp-bf16, fp32 or bf16")
    case = {"model": args.model, "mode": "train", "batch": args.batch, "seq": args.seq, "image_size": None,
            "precision": args.precision, "attention": "sdpa", "checkpointing": "none"}
    device = "cuda"
    torch.cuda.init()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()

    start_recording(torch, args.max_entries)
    model = gt.build_model(torch, case, device)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    opt = gt.make_optimizer(torch, "adamw", model.parameters())
    batch = gt.make_batch(torch, case, model, device)
    step_starts_us, rec_times, losses = [], [], []
    for _ in range(args.steps):
        rec_times.append(timed_step(torch, model, opt, batch, amp_dtype, losses, step_starts_us))
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    stop_recording(torch)
    max_alloc = int(torch.cuda.max_memory_allocated())
    max_reserved = int(torch.cuda.max_memory_reserved())
    stats = torch.cuda.memory_stats()
    requested_peak = stats.get("requested_bytes.all.peak")
    num_segments = len(snapshot.get("segments", []))

    times = []
    for _ in range(args.timing_steps):
        times.append(timed_step(torch, model, opt, batch, amp_dtype, losses))

    dev = torch.cuda.current_device()
    traces = snapshot.get("device_traces") or []
    device_trace = traces[dev] if dev < len(traces) else []
    if not device_trace:
        print("error: the snapshot holds no device trace (recording did not capture anything)", file=sys.stderr)
        return 1
    overflow = len(device_trace) >= args.max_entries
    has_time = "time_us" in device_trace[0]
    # Trimming by step needs the trace's time_us on the wall clock (PyTorch converts it to Unix
    # microseconds); check it is within a day of the recorded step starts before relying on it.
    same_clock = has_time and abs(int(device_trace[0]["time_us"]) - step_starts_us[0]) < 86_400_000_000
    gpu, driver = gpu_name_and_driver()
    desc = "%s (%s, %d params) train %s adamw batch %d x %d, %d steps, %s" % (
        args.model, type(model).__name__, params, args.precision, args.batch, args.seq, args.steps, gpu or "gpu")
    source = "pytorch %s %s" % (torch.__version__, desc)
    notes = [
        "alloc = trace 'alloc', free = trace 'free_completed' (block reusable); bytes = requested size",
        "frees of blocks allocated before recording are dropped; blocks live at the end stay live (the replayer frees them)",
        "time_ns from " + ("the trace's time_us" if has_time else "the event index (no time_us in this torch)"),
    ]
    if overflow:
        notes.append("history ring buffer was full: the earliest events were lost")
    events, info, first_step = choose_events(device_trace, step_starts_us if same_clock else [], args.max_bytes,
                                             source, notes)
    if first_step:
        notes.append("starts at step %d: blocks live then are allocated at time 0 (file size limit)" % first_step)
    os.makedirs(os.path.dirname(os.path.abspath(args.out_trace)), exist_ok=True)
    trace_tools.write_trace(args.out_trace, events, source, notes)
    _, check = trace_tools.read_trace(args.out_trace)  # the written file must parse
    summary = trace_tools.trace_stats(check)

    doc = {
        "max_allocated_bytes": max_alloc,
        "max_reserved_bytes": max_reserved,
        "requested_peak_bytes": requested_peak,
        "events": len(events),
        "step_time_s": round(statistics.median(times), 4) if times else None,
        "step_time_recording_s": round(statistics.median(rec_times[1:] or rec_times), 4),
        "num_segments": num_segments,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": gpu,
        "driver": driver,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "model": args.model,
        "config": gt.config_relpath(args.model),
        "params": params,
        "precision": args.precision,
        "optimizer": "adamw",
        "batch": args.batch,
        "seq": args.seq,
        "steps_recorded": args.steps,
        "trace_starts_at_step": first_step,
        "free_action": "free_completed",
        "raw_trace_entries": len(device_trace),
        "ring_buffer_overflow": overflow,
        "dropped_frees": info["dropped_frees"],
        "trace_peak_live_bytes": summary["peak_live_bytes"],
        "trace_live_bytes_at_end": summary["live_bytes_at_end"],
        "trace_bytes": os.path.getsize(args.out_trace),
        "losses": [round(x, 4) for x in losses],
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out_json)), exist_ok=True)
    with open(args.out_json, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(json.dumps(doc, indent=1))
    bad = [x for x in losses if x != x or x in (float("inf"), float("-inf"))]
    if bad:
        print("error: non-finite loss in the recorded run: %s" % losses, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
