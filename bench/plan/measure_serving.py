#!/usr/bin/env python3
"""Measures a vLLM-style serving budget with a paged KV pool written for the measurement, to check
`vramkit plan --serve` (vLLM is not installed on the measuring machine).

As vLLM's determine_available_memory does: after CUDA init, the non-PyTorch baseline; the model
(random weights, bf16) and its allocated bytes; the peak of a profile forward over the largest
prefill chunk (no grad, no cache, logits of the last position only, as an engine computes them)
and of the sampler over max_num_seqs fp32 rows; the memory outside PyTorch that appeared meanwhile.
The KV budget is utilisation x total memory less those three; it is cut into blocks of 16 tokens
of every layer's K and V, the pool is allocated (one (2, blocks, 16, kv_heads, head_dim) tensor
per layer, proving the bytes exist) and one paged attention step runs over it (a block table,
gathered K/V of a few sequences, SDPA). The measured max concurrency is blocks // ceil(context /
16), capped by max_num_seqs; the planner is then asked the same question and the two compared.

Usage: python3 bench/plan/measure_serving.py --vramkit BUILD/vramkit [--out FILE]
"""

import argparse
import json
import math
import os
import subprocess
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CONFIGS = os.path.join(REPO_ROOT, "tests", "data", "plan", "configs")

# Small enough to leave room beside other work on the GPU, large enough for hundreds of blocks.
CASES = [
    {"model": "tinyllama-1.1b", "utilization": 0.12, "max_model_len": 2048, "max_num_seqs": 1024,
     "max_num_batched_tokens": 2048},
    {"model": "qwen2-0.5b", "utilization": 0.08, "max_model_len": 4096, "max_num_seqs": 1024,
     "max_num_batched_tokens": 4096},
]


def measure(torch, case):
    from transformers import AutoConfig, AutoModelForCausalLM

    with open(os.path.join(CONFIGS, case["model"] + ".json")) as f:
        fields = json.load(f)
    mt = fields.pop("model_type")
    fields.pop("architectures", None)
    cfg = AutoConfig.for_model(mt, **fields)
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    free0, total = torch.cuda.mem_get_info()
    base_nontorch = (total - free0) - torch.cuda.memory_reserved()
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    torch.cuda.synchronize()
    weights = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    chunk = min(case["max_num_batched_tokens"], case["max_model_len"])
    with torch.no_grad():
        ids = torch.randint(0, cfg.vocab_size, (1, chunk), device="cuda")
        out = model(input_ids=ids, use_cache=False, logits_to_keep=1)
        del out, ids
        rows = min(case["max_num_seqs"], case["max_num_batched_tokens"])
        logits = torch.randn(rows, cfg.vocab_size, device="cuda", dtype=torch.float32)
        probs = torch.softmax(logits, dim=-1)
        del logits, probs
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - weights
    free1, _ = torch.cuda.mem_get_info()
    nontorch = max(0, (total - free1) - torch.cuda.memory_reserved() - base_nontorch)
    budget = int(total * case["utilization"])
    kv_bytes = budget - weights - peak - nontorch
    layers = cfg.num_hidden_layers
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    block_bytes = 2 * 16 * kv_heads * head_dim * 2 * layers
    blocks = max(0, kv_bytes // block_bytes)
    pool = [torch.empty((2, blocks, 16, kv_heads, head_dim), dtype=torch.bfloat16, device="cuda")
            for _ in range(layers)]
    per_seq = math.ceil(case["max_model_len"] / 16)
    conc = min(blocks // per_seq, case["max_num_seqs"])
    # One paged attention step: 4 sequences' block tables, their K/V gathered, SDPA.
    with torch.no_grad():
        table = torch.arange(4 * per_seq, device="cuda").view(4, per_seq) % max(1, blocks)
        kv = pool[0][:, table.view(-1)].view(2, 4, per_seq * 16, kv_heads, head_dim).transpose(2, 3)
        q = torch.randn(4, kv_heads, 1, head_dim, device="cuda", dtype=torch.bfloat16)
        torch.nn.functional.scaled_dot_product_attention(q, kv[0], kv[1])
        torch.cuda.synchronize()
    used = total - torch.cuda.mem_get_info()[0]
    del pool
    return {"total_bytes": total, "weights_bytes": weights, "profile_peak_bytes": peak,
            "non_torch_bytes": nontorch, "budget_bytes": budget, "kv_cache_bytes": kv_bytes,
            "block_bytes": block_bytes, "num_blocks": blocks, "max_concurrency": conc,
            "device_used_after_pool_bytes": used}


def child(case_json, out_path):
    import torch

    res = measure(torch, json.loads(case_json))
    with open(out_path, "w") as f:
        json.dump(res, f)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vramkit", required=True, help="the vramkit binary to ask")
    ap.add_argument("--out", default="plan-serving.json")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    records, worst = [], 0.0
    for case in CASES:
        tmp = args.out + "." + case["model"] + ".tmp"
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--vramkit", args.vramkit, "--child",
                            json.dumps(case), tmp], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            records.append(dict(case, error=(p.stderr.strip().splitlines() or ["failed"])[-1][:300]))
            continue
        with open(tmp) as f:
            meas = json.load(f)
        os.remove(tmp)
        cmd = [args.vramkit, "plan", os.path.join(CONFIGS, case["model"] + ".json"), "--serve",
               "--gpu", "%dB" % meas["total_bytes"], "--precision", "bf16",
               "--gpu-memory-utilization", str(case["utilization"]), "--max-model-len", str(case["max_model_len"]),
               "--max-num-seqs", str(case["max_num_seqs"]),
               "--max-num-batched-tokens", str(case["max_num_batched_tokens"]), "--enforce-eager", "--json"]
        q = subprocess.run(cmd, capture_output=True, text=True)
        pred = json.loads(q.stdout) if q.stdout.strip().startswith("{") else {"error": q.stderr.strip()}
        rec = dict(case, measured=meas, predicted=pred)
        if "max_concurrency" in pred and meas["max_concurrency"] > 0:
            err = (pred["max_concurrency"] - meas["max_concurrency"]) / meas["max_concurrency"]
            rec["max_concurrency_error"] = err
            worst = max(worst, abs(err))
        records.append(rec)
    with open(args.out, "w") as f:
        json.dump({"schema": 1, "cases": records}, f, indent=1)
    print("| case | measured max concurrency / predicted / error | KV GiB measured / predicted | profile peak GiB measured / predicted |")
    print("| --- | --- | --- | --- |")
    g = 1 << 30
    for r in records:
        if "error" in r:
            print("| %s | failed: %s | | |" % (r["model"], r["error"]))
            continue
        m, p = r["measured"], r["predicted"]
        if "max_concurrency" not in p:
            print("| %s | planner failed: %s | | |" % (r["model"], p.get("error")))
            continue
        print("| %s | %d / %d / %+.1f%% | %.2f / %.2f | %.3f / %.3f |" % (
            r["model"], m["max_concurrency"], p["max_concurrency"], 100 * r["max_concurrency_error"],
            m["kv_cache_bytes"] / g, p["kv_cache_bytes"] / g, m["profile_peak_bytes"] / g,
            p["activation_peak_bytes"] / g))
    ok = all("max_concurrency_error" in r and abs(r["max_concurrency_error"]) <= 0.05 for r in records)
    print("max concurrent sequences %s 5%% of the measured paged pool (worst %.1f%%)" % (
        "within" if ok else "OUTSIDE", 100 * worst))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
