#!/usr/bin/env python3
"""Measures real PyTorch peak memory per rank under tensor, sequence and expert parallelism.

Ground truth for the planner's `--tp`, `--tp --sp` and `--ep` models on every visible GPU at once
(one process per GPU, NCCL). Cases:

- `llama-tp`:  a LLaMA-shaped model (TinyLlama-1.1B's widths) under PyTorch's DTensor
  `parallelize_module`: q/k/v and gate/up colwise, o/down rowwise, the embedding sharded by
  vocabulary (rowwise), the head colwise with a vocabulary-parallel loss (`loss_parallel`), as
  Megatron-LM and torchtitan shard a transformer. Norms and residuals stay whole on every rank.
- `llama-tp-sp`: the same with sequence parallelism: the norms run on sequence shards
  (`SequenceParallel`), attention and MLP inputs are all-gathered and their outputs
  reduce-scattered back to sequence shards (torchtitan's plan).
- `neox-tp`: a GPT-NeoX-shaped model (Pythia-410M's widths) with its packed `query_key_value`
  projection colwise (HF's GPT-NeoX lays it out per head as [heads, 3, head_dim], so a column
  shard holds whole heads with their q, k and v), dense rowwise, the MLP colwise/rowwise.
- `mixtral-ep`: a Mixtral-shaped model (8 experts, top-2) with reduced layers; each rank keeps
  experts/ranks experts; tokens go to their experts' ranks with `all_to_all_single` and come back
  the same way (dropless, as Megablocks and DeepSpeed-MoE dispatch); attention and the router are
  replicated and their gradients averaged like DDP's.

Per case and rank it records max_memory_allocated, max_memory_reserved and nvidia-smi's used
memory after the last step. The output (tests/data/plan/ground_truth_parallel.json) has the format
of the other ground-truth files plus `gpus`, `tp`, `sp`, `ep` and the per-rank lists; the planner's
accuracy test compares its most loaded rank with them.

With one GPU, `--dry-run` runs every case at world size 1 (each parallel plan becomes the identity,
which checks that the script and the models work; the figures are not ground truth and are never
written to tests/data).

Usage:
  python3 bench/plan/measure_parallel.py [--out FILE] [--only SUBSTR] [--list] [--dry-run]
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_ground_truth as gt  # noqa: E402
import multi_rank  # noqa: E402

# Mixtral-8x7B's published widths (hidden 4096, FFN 14336, 32 heads, 8 KV heads, 8 experts, top 2)
# with 4 layers, so that one rank holds its share of the experts comfortably.
MIXTRAL_SHAPE = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 4,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "router_aux_loss_coef": 0.02,
    "output_router_logits": False,
    "sliding_window": None,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def cases(ranks):
    """The measured cases; `per_rank_batch` sequences per rank for data-parallel-like EP,
    the whole batch on every rank for TP/SP (tensor parallel ranks see the same tokens)."""
    out = []
    for name, model, batch, seq, tp, sp, ep in (
        ("llama-tp", "tinyllama-1.1b", 8, 2048, ranks, False, 1),
        ("llama-tp-sp", "tinyllama-1.1b", 8, 2048, ranks, True, 1),
        ("neox-tp", "pythia-410m", 8, 2048, ranks, False, 1),
        ("mixtral-ep", "mixtral-shaped-4l", 2 * ranks, 2048, 1, False, ranks),
    ):
        c = gt._train(model, batch, seq, "amp-bf16", "adamw", est_gib=0)
        c["name"] = "%s%d-%s" % (name, ranks, c["name"])
        c.update(kind=name, tp=tp, sp=sp, ep=ep, per_rank_batch=batch // ep)
        if name == "mixtral-ep":
            # One rank holds 8/ranks experts of each layer; a dry run (all 8 on one GPU) keeps one layer.
            c["layers"] = MIXTRAL_SHAPE["num_hidden_layers"] if ranks > 1 else 1
        out.append(c)
    return out


# --------------------------------------------------------------------------------------------
# Parallel plans (need torch >= 2.4 with DTensor).
# --------------------------------------------------------------------------------------------


def shard_llama(torch, model, mesh, sp):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)

    seq_layout = Shard(1) if sp else Replicate()
    top = {
        # With sp the embedding hands on a DTensor (global shape), so HF's position ids and masks
        # see the whole sequence while each rank holds its sequence shard.
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq_layout,
                                              use_local_output=not sp),
        "lm_head": ColwiseParallel(input_layouts=seq_layout, output_layouts=Shard(-1), use_local_output=False),
    }
    if sp:
        top["model.norm"] = SequenceParallel()
    parallelize_module(model, mesh, top)
    for block in model.model.layers:
        plan = {
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=seq_layout, use_local_output=not sp),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=seq_layout, use_local_output=not sp),
        }
        if sp:
            plan.update({
                "input_layernorm": SequenceParallel(),
                "post_attention_layernorm": SequenceParallel(),
                "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
                "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            })
        parallelize_module(block, mesh, plan)


def shard_neox(torch, model, mesh):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    parallelize_module(model, mesh, {
        "gpt_neox.embed_in": RowwiseParallel(input_layouts=Replicate()),
        "embed_out": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
    })
    for block in model.gpt_neox.layers:
        parallelize_module(block, mesh, {
            "attention.query_key_value": ColwiseParallel(),
            "attention.dense": RowwiseParallel(),
            "mlp.dense_h_to_4h": ColwiseParallel(),
            "mlp.dense_4h_to_h": RowwiseParallel(),
        })


def tp_loss(torch, model, batch):
    """Causal-LM loss with the vocabulary-sharded logits (DTensor loss_parallel)."""
    from torch.distributed.tensor.parallel import loss_parallel

    ids = batch["input_ids"]
    logits = model(input_ids=ids).logits  # DTensor sharded on the vocabulary
    with loss_parallel():
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    return loss


class ExpertParallelMoe:
    """Builds a torch.nn.Module replacing a Mixtral sparse-MoE block: replicated router, this
    rank's experts (SwiGLU), dropless all-to-all dispatch. Created lazily so torch is imported
    only in the workers."""

    @staticmethod
    def make(torch, hidden, ffn, experts, top_k, group, device):
        import torch.distributed as dist

        class Moe(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.ranks = dist.get_world_size(group)
                self.rank = dist.get_rank(group)
                self.local = experts // self.ranks
                self.top_k = top_k
                self.returns_tuple = False
                self.gate = torch.nn.Linear(hidden, experts, bias=False)
                self.w1 = torch.nn.Parameter(torch.randn(self.local, ffn, hidden, device=device) * 0.02)
                self.w3 = torch.nn.Parameter(torch.randn(self.local, ffn, hidden, device=device) * 0.02)
                self.w2 = torch.nn.Parameter(torch.randn(self.local, hidden, ffn, device=device) * 0.02)

            def forward(self, x):
                shape = x.shape
                x = x.reshape(-1, shape[-1])
                probs = torch.softmax(self.gate(x).float(), dim=-1)
                weights, chosen = torch.topk(probs, self.top_k, dim=-1)
                weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
                flat = chosen.flatten()
                order = torch.argsort(flat, stable=True)
                token_of = order // self.top_k
                send = x[token_of]
                per_expert = torch.bincount(flat, minlength=self.local * self.ranks)
                send_counts = per_expert.view(self.ranks, self.local).sum(1)
                recv_counts = _all_to_all_counts(torch, send_counts, group)
                recv = _AllToAll.apply(send, send_counts.tolist(), recv_counts.tolist(), group)
                # Experts of this rank, in the order the ranks sent their tokens.
                counts_from = _all_to_all_counts(torch, per_expert.view(self.ranks, self.local), group)
                out = torch.empty_like(recv)
                start = 0
                for src in range(self.ranks):
                    for e in range(self.local):
                        n = int(counts_from[src, e])
                        if n:
                            seg = recv[start:start + n]
                            h = torch.nn.functional.silu(seg @ self.w1[e].t()) * (seg @ self.w3[e].t())
                            out[start:start + n] = h @ self.w2[e].t()
                        start += n
                back = _AllToAll.apply(out, recv_counts.tolist(), send_counts.tolist(), group)
                y = torch.zeros_like(x)
                y.index_add_(0, token_of, back * weights.flatten()[order].unsqueeze(-1))
                if self.returns_tuple:
                    return y.reshape(shape), probs
                return y.reshape(shape)

        return Moe()


def _all_to_all_counts(torch, counts, group):
    import torch.distributed as dist

    out = torch.empty_like(counts)
    dist.all_to_all_single(out, counts.contiguous(), group=group)
    return out


def _make_all_to_all(torch):
    import torch.distributed as dist

    class AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, send, recv, group):
            ctx.send, ctx.recv, ctx.group = send, recv, group
            out = x.new_empty((sum(recv), x.shape[1]))
            dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
            return out

        @staticmethod
        def backward(ctx, grad):
            out = grad.new_empty((sum(ctx.send), grad.shape[1]))
            dist.all_to_all_single(out, grad.contiguous(), ctx.send, ctx.recv, group=ctx.group)
            return out, None, None, None

    return AllToAll


_AllToAll = None


def build_mixtral_ep(torch, device, group, layers):
    """A Mixtral-shaped model whose sparse-MoE blocks hold this rank's experts. Built on the CPU
    with tiny experts (replaced before the model reaches the GPU), so no rank ever holds all."""
    from transformers import AutoModelForCausalLM, MixtralConfig

    fields = {k: v for k, v in MIXTRAL_SHAPE.items() if k not in ("model_type", "architectures")}
    fields["num_hidden_layers"] = layers
    cfg = MixtralConfig(**fields)
    torch.manual_seed(1234)
    small = MixtralConfig(**dict(fields, intermediate_size=8))
    small.use_cache = False
    model = AutoModelForCausalLM.from_config(small)
    for layer in model.model.layers:
        name = next(n for n, m in layer.named_children() if type(m).__name__.endswith("SparseMoeBlock"))
        # The decoder layer unpacks what its MoE block returns: keep the original's convention.
        probe = getattr(layer, name)(torch.zeros(1, 2, cfg.hidden_size))
        moe = ExpertParallelMoe.make(torch, cfg.hidden_size, cfg.intermediate_size, cfg.num_local_experts,
                                     cfg.num_experts_per_tok, group, device)
        moe.returns_tuple = isinstance(probe, tuple)
        setattr(layer, name, moe)
    model.config.intermediate_size = cfg.intermediate_size
    return model.to(device)


def train(torch, dist, rank, ranks, case, device):
    """One rank: three training steps (multi_rank records the peaks)."""
    global _AllToAll
    _AllToAll = _make_all_to_all(torch)
    torch.manual_seed(1234)
    local = dict(case, batch=case["per_rank_batch"])
    if case["kind"] == "mixtral-ep":
        model = build_mixtral_ep(torch, device, dist.group.WORLD, case["layers"])
    else:
        model = gt.build_model(torch, local, device)
    params = sum(p.numel() for p in model.parameters())
    model.train()
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cuda", (ranks,))
    replicated = []
    if case["kind"].startswith("llama"):
        shard_llama(torch, model, mesh, case["sp"])
    elif case["kind"] == "neox-tp":
        shard_neox(torch, model, mesh)
    else:
        replicated = [p for n, p in model.named_parameters() if not n.split(".")[-1] in ("w1", "w2", "w3")]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    batch = gt.make_batch(torch, local, model, device)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    loss_value, times = None, []
    for _ in range(case.get("steps", 3)):
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if case["kind"] == "mixtral-ep":
                loss = model(**batch).loss
            else:
                loss = tp_loss(torch, model, batch)
        loss.backward()
        for p in replicated:  # attention, norms, router: averaged over the ranks as DDP does
            if p.grad is not None:
                dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = float(loss.detach().float().item()) if not hasattr(loss, "full_tensor") else \
            float(loss.full_tensor().float().item())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    step_time = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else times[0]
    return {"params": params, "loss": loss_value, "step_time_s": step_time}


def record(case, result, ranks):
    rec = gt.case_record(case, result)
    if case["kind"] == "mixtral-ep":
        rec["config"] = None
        rec["model_config"] = dict(MIXTRAL_SHAPE, num_hidden_layers=case["layers"])
    rec.update(gpus=ranks, tp=case["tp"], sp=case["sp"], ep=case["ep"], per_rank_batch=case["per_rank_batch"])
    for key in ("per_rank_allocated_bytes", "per_rank_reserved_bytes", "per_rank_nvidia_smi_bytes"):
        rec[key] = result.get(key)
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="default tests/data/plan/ground_truth_parallel.json")
    ap.add_argument("--only", action="append", default=[], help="run cases whose name contains this")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--dry-run", action="store_true", help="world size 1 on one GPU: checks the script only")
    args = ap.parse_args(argv)
    if args.list:
        for c in cases(1 if args.dry_run else 2):
            if not args.only or any(s in c["name"] for s in args.only):
                print(c["name"])
        return 0
    import torch

    ranks = torch.cuda.device_count()
    world = 1 if args.dry_run else ranks
    todo = [c for c in cases(max(world, 1) if args.dry_run else max(ranks, 2))
            if not args.only or any(s in c["name"] for s in args.only)]
    if not args.dry_run and ranks < 2:
        print("measure_parallel: needs at least 2 GPUs, found %d (--dry-run checks the script on one)" % ranks,
              file=sys.stderr)
        return 2
    if args.dry_run and args.out is None:
        print("measure_parallel: --dry-run needs --out (dry runs are never ground truth)", file=sys.stderr)
        return 2
    out_path = args.out or os.path.join(gt.DATA_DIR, "ground_truth_parallel.json")
    doc = gt.environment_header()
    doc.update(gpus=world, dry_run=args.dry_run, cases=[])
    return multi_rank.measure_cases(todo, train, world, lambda case, result: record(case, result, world), doc,
                                    out_path, 56)


if __name__ == "__main__":
    sys.exit(main())
