"""Accuracy of vramkit.compress_activations: a small LLaMA-shaped model trained twice from the
same weights on a fixed synthetic set (bf16 autocast, AdamW), with and without fp8 activation
compression; prints the loss curves' max and final difference and each block's gradient relative
error after one step. Writes a JSON file and a short markdown summary."""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)


def data(vocab, batch, seq, n, device):
    """A fixed synthetic set with learnable structure: tokens from a sparse random Markov chain."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(7)
    nxt = torch.randint(0, vocab, (vocab, 4), generator=g)
    out = []
    for _ in range(n):
        t = torch.empty(batch, seq, dtype=torch.long)
        t[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
        choice = torch.randint(0, 4, (batch, seq), generator=g)
        for i in range(1, seq):
            t[:, i] = nxt[t[:, i - 1], choice[:, i]]
        out.append(t.to(device))
    return out


def train(shape, batches, steps, compress):
    import torch
    import vramkit
    from offload_bench import build_model

    model = build_model(shape, "cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    comp = vramkit.compress_activations(model, modules=("mlp", "attn"), compile=True) if compress else None
    losses, grads0 = [], None
    for step in range(steps):
        x = batches[step % len(batches)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if comp is not None:
                with comp:
                    loss = model(x)
            else:
                loss = model(x)
        loss.backward()
        if step == 0:
            grads0 = [[p.grad.detach().float().clone() for p in b.parameters()] for b in model.layers]
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses, grads0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default="compress-accuracy.json")
    ap.add_argument("--summary", default=None)
    args = ap.parse_args()
    import torch

    shape = dict(d=512, layers=6, heads=8, ffn=1376, vocab=2048, batch=8, seq=256)
    batches = data(shape["vocab"], shape["batch"], shape["seq"], 16, "cuda")
    t0 = time.time()
    ref, g_ref = train(shape, batches, args.steps, False)
    got, g_got = train(shape, batches, args.steps, True)
    rel = []
    for a, b in zip(g_ref, g_got):
        num = sum(float((x - y).norm() ** 2) for x, y in zip(a, b)) ** 0.5
        den = sum(float(x.norm() ** 2) for x in a) ** 0.5
        rel.append(num / den if den > 0 else 0.0)
    diffs = [abs(a - b) for a, b in zip(ref, got)]
    res = {"shape": shape, "steps": args.steps, "device": torch.cuda.get_device_name(0),
           "loss_reference": ref, "loss_compressed": got, "max_abs_diff": max(diffs),
           "final_abs_diff": diffs[-1], "final_loss_reference": ref[-1], "final_loss_compressed": got[-1],
           "grad_rel_error_per_block": rel, "wall_s": time.time() - t0}
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    curve = " ".join("%d:%.3f/%.3f" % (i, ref[i], got[i]) for i in range(0, args.steps, max(1, args.steps // 10)))
    text = ("## compression accuracy (fp8 e4m3, mlp+attn, %d steps, %s)\n"
            "loss max |diff| %.4f, final |diff| %.4f (final %.4f vs %.4f)\n"
            "loss curve (step:bf16/fp8): %s\n"
            "gradient relative error per block after one step: %s\n"
            % (args.steps, json.dumps(shape), res["max_abs_diff"], res["final_abs_diff"], ref[-1], got[-1],
               curve, ", ".join("%.4f" % r for r in rel)))
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text)
    print(text)
    ok = all(d == d for d in diffs)  # NaN-free
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
