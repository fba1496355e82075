"""One process per GPU for the multi-GPU ground truth (measure_ddp.py, measure_parallel.py).

`run_ranks(body, case, ranks)` spawns `ranks` fresh processes (so contexts and allocator
statistics start clean), joins them in an NCCL process group, and in each calls
`body(torch, dist, rank, ranks, case, device)`, which builds and trains the rank's model and
returns the fields it measured (params, loss, ...). Around it every rank records the CUDA
context's nvidia-smi bytes before the model, and after the body the peak allocated / reserved
bytes and nvidia-smi's used bytes; a failure is recorded as the rank's `error` (the parent
reports it and carries on). `merge_ranks` folds the ranks' records into the most loaded rank,
which is what the planner predicts.
"""

import json
import os
import socket
import tempfile

import measure_ground_truth as gt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, ranks, body, case, port, result_dir):
    """One rank: writes result_dir/rank<N>.json (also on failure)."""
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
        result.update(body(torch, dist, rank, ranks, case, device))
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


def merge_ranks(per_rank):
    """The planner predicts the most loaded rank: maxima over ranks, plus the per-rank lists."""
    errors = [r["error"] for r in per_rank if r.get("error")]
    merged = {"error": errors[0] if errors else None}
    if errors:
        return merged
    for key in ("max_allocated_bytes", "max_reserved_bytes", "nvidia_smi_used_bytes", "context_bytes"):
        values = [r[key] for r in per_rank if r.get(key) is not None]
        merged[key] = max(values) if values else None
    for key in ("params", "loss", "step_time_s"):
        merged[key] = per_rank[0].get(key)
    merged["per_rank_allocated_bytes"] = [r["max_allocated_bytes"] for r in per_rank]
    merged["per_rank_reserved_bytes"] = [r["max_reserved_bytes"] for r in per_rank]
    merged["per_rank_nvidia_smi_bytes"] = [r["nvidia_smi_used_bytes"] for r in per_rank]
    return merged


def run_ranks(body, case, ranks):
    """Runs `body` on `ranks` fresh processes; returns merge_ranks of their records."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_rank, args=(ranks, body, case, free_port(), d), nprocs=ranks, join=True)
        per_rank = []
        for r in range(ranks):
            with open(os.path.join(d, "rank%d.json" % r)) as f:
                per_rank.append(json.load(f))
    return merge_ranks(per_rank)


def measure_cases(todo, body, ranks, record, doc, out_path, name_width):
    """Runs every case of `todo` on `ranks` ranks, appends `record(case, merged)` to doc["cases"]
    with a line of progress each, writes doc to out_path; 0 when every case ran, else 1."""
    import time

    for case in todo:
        t0 = time.time()
        rec = record(case, run_ranks(body, case, ranks))
        doc["cases"].append(rec)
        gib = (rec["max_allocated_bytes"] or 0) / gt.GIB
        print("%-*s %6.2f GiB allocated  %s  (%.0f s)" % (name_width, case["name"], gib, rec["error"] or "ok",
                                                           time.time() - t0), flush=True)
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 0 if all(c["error"] is None for c in doc["cases"]) else 1
