#!/usr/bin/env python3
"""Measures real PyTorch peak memory of multi-GPU training (DDP or FSDP2) on 2+ GPUs.

The planner models the most loaded rank of `--gpus N --zero 0` (DDP: a full copy of the model,
its gradients and optimizer states on every GPU, plus gradient buckets covering all parameters,
gradient_as_bucket_view=False as PyTorch defaults) and of `--zero 3` (fully sharded: parameters,
gradients and optimizer states split over the ranks, each layer gathered while it runs). This
script runs the same cases as measure_ground_truth.py does on one GPU, on every visible GPU at
once: `--wrap ddp` under DistributedDataParallel, `--wrap fsdp` under FSDP2 (`fully_shard` on
each transformer block, then on the model, default reshard after forward). One process per GPU,
NCCL. Per case it records the largest max_memory_allocated / max_memory_reserved and nvidia-smi
used memory over the ranks. `batch` in the output is the global batch (the planner's --batch);
each rank runs batch / ranks.

Every case starts fresh worker processes (spawn), so contexts and allocator statistics start
clean. Models, inputs, optimizers and the step loop are measure_ground_truth.py's.

Usage:
  python3 bench/plan/measure_ddp.py [--wrap ddp|fsdp] [--out FILE] [--only SUBSTR] [--list]
"""

import argparse
import json
import os
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_ground_truth as gt  # noqa: E402

def cases(ranks, wrap):
    """Per-rank shapes as the single-GPU ground truth uses them; global batch = ranks x per rank."""
    out = []
    for model, per_rank, seq, precision, optimizer in (
        ("gpt2", 8, 1024, "amp-bf16", "adamw"),
        ("gpt2-medium", 4, 1024, "fp32", "adamw"),
        ("tinyllama-1.1b", 4, 1024, "amp-bf16", "adamw"),
        ("bert-base", 16, 512, "amp-fp16", "adam"),
    ):
        c = gt._train(model, per_rank * ranks, seq, precision, optimizer, est_gib=0)
        c["name"] = "%s-%s%d" % (c["name"], wrap, ranks)
        c["per_rank_batch"] = per_rank
        c["wrap"] = wrap
        out.append(c)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, ranks, case, port, result_dir):
    """One DDP rank: three training steps; writes result_dir/rank<N>.json (also on failure)."""
    result = {"error": None}
    try:
        import torch
        import torch.distributed as dist

        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        torch.cuda.set_device(rank)
        device = "cuda:%d" % rank
        dist.init_process_group("nccl", rank=rank, world_size=ranks, device_id=torch.device(device))
        torch.zeros(1, device=device)
        torch.cuda.synchronize()
        result["context_bytes"], _ = gt.query_own_smi_bytes()
        local = dict(case, batch=case["per_rank_batch"])
        model = gt.build_model(torch, local, device)
        result["params"] = sum(p.numel() for p in model.parameters())
        model.train()
        if case["wrap"] == "fsdp":
            # FSDP2 as users apply it to a transformer: each block a unit, then the root
            # (parameters sharded, all-gathered per unit and freed after its forward: ZeRO-3).
            from torch.distributed.fsdp import fully_shard

            blocks = max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len)
            for block in blocks:
                fully_shard(block)
            ddp = fully_shard(model)
        else:
            ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
        opt = gt.make_optimizer(torch, case["optimizer"], ddp.parameters())
        amp = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(case["precision"])
        scaler = torch.amp.GradScaler("cuda") if case["precision"] == "amp-fp16" else None
        batch = gt.make_batch(torch, local, model, device)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        loss_value = None
        for _ in range(case.get("steps", 3)):
            loss_value = gt.train_step(torch, ddp, opt, scaler, amp, batch, cnn=False)
        torch.cuda.synchronize()
        result["loss"] = loss_value
        result["max_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        result["max_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
        result["nvidia_smi_used_bytes"], _ = gt.query_own_smi_bytes()
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as e:  # recorded: the parent reports it and carries on
        import traceback

        traceback.print_exc()
        result["error"] = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]
    with open(os.path.join(result_dir, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)


def run_case(case, ranks):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(ranks, case, free_port(), d), nprocs=ranks, join=True)
        per_rank = []
        for r in range(ranks):
            with open(os.path.join(d, "rank%d.json" % r)) as f:
                per_rank.append(json.load(f))
    errors = [r["error"] for r in per_rank if r.get("error")]
    merged = {"error": errors[0] if errors else None}
    if not errors:
        # The planner predicts the most loaded rank.
        for key in ("max_allocated_bytes", "max_reserved_bytes", "nvidia_smi_used_bytes", "context_bytes"):
            values = [r[key] for r in per_rank if r.get(key) is not None]
            merged[key] = max(values) if values else None
        merged["params"] = per_rank[0]["params"]
        merged["loss"] = per_rank[0]["loss"]
        merged["per_rank_allocated_bytes"] = [r["max_allocated_bytes"] for r in per_rank]
    return merged


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="default tests/data/plan/ground_truth_<wrap>.json")
    ap.add_argument("--wrap", choices=("ddp", "fsdp"), default="ddp",
                    help="DistributedDataParallel, or FSDP2 fully_shard per block (ZeRO-3)")
    ap.add_argument("--only", action="append", default=[], help="run cases whose name contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    import torch

    ranks = torch.cuda.device_count()
    todo = [c for c in cases(max(ranks, 2), args.wrap) if not args.only or any(s in c["name"] for s in args.only)]
    out_path = args.out or os.path.join(gt.DATA_DIR, "ground_truth_%s.json" % args.wrap)
    if args.list:
        for c in todo:
            print(c["name"])
        return 0
    if ranks < 2:
        print("measure_ddp: needs at least 2 GPUs, found %d" % ranks, file=sys.stderr)
        return 2
    doc = gt.environment_header()
    doc["gpus"] = ranks
    doc["cases"] = []
    for case in todo:
        t0 = time.time()
        result = run_case(case, ranks)
        rec = gt.case_record(case, result)
        rec["gpus"] = ranks
        rec["zero"] = 3 if case["wrap"] == "fsdp" else 0
        rec["per_rank_batch"] = case["per_rank_batch"]
        rec["per_rank_allocated_bytes"] = result.get("per_rank_allocated_bytes")
        doc["cases"].append(rec)
        gib = (rec["max_allocated_bytes"] or 0) / gt.GIB
        print("%-48s %6.2f GiB allocated  %s  (%.0f s)" % (case["name"], gib, rec["error"] or "ok", time.time() - t0),
              flush=True)
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 0 if all(c["error"] is None for c in doc["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
