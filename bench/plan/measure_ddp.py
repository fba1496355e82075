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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_ground_truth as gt  # noqa: E402
import multi_rank  # noqa: E402

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


def train(torch, dist, rank, ranks, case, device):
    """One DDP or FSDP rank: three training steps (multi_rank records the peaks)."""
    local = dict(case, batch=case["per_rank_batch"])
    model = gt.build_model(torch, local, device)
    params = sum(p.numel() for p in model.parameters())
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
    return {"params": params, "loss": loss_value}


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
    def record(case, result):
        rec = gt.case_record(case, result)
        rec["gpus"] = ranks
        rec["zero"] = 3 if case["wrap"] == "fsdp" else 0
        rec["per_rank_batch"] = case["per_rank_batch"]
        rec["per_rank_allocated_bytes"] = result.get("per_rank_allocated_bytes")
        return rec

    return multi_rank.measure_cases(todo, train, ranks, record, doc, out_path, 48)


if __name__ == "__main__":
    sys.exit(main())
