"""Accuracy of vramkit.compress_activations: a small LLaMA-shaped model (offload_bench's built-in
LLaMA layout) trained from the same weights on a fixed synthetic set (bf16 autocast, AdamW) in
bf16 and with fp8 activation compression of the mlp+attn tensors and of the mlp+attn+norm
tensors; prints each curve's max and final difference from bf16's against the stated tolerance,
and each block's gradient relative error after the first step. Writes JSON and a markdown
summary; within --budget-s every run gets the same number of steps (fewer when time is short).
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

# Tolerance stated for fp8 e4m3 with per-128 scales (docs/offload.md, "Compression"): the loss
# curve stays within 0.05 nats of bf16's at every step and within 0.02 at the end.
MAX_DIFF_TOL, FINAL_DIFF_TOL = 0.05, 0.02
VARIANTS = (("bf16", None), ("fp8 mlp,attn", ("mlp", "attn")), ("fp8 mlp,attn,norm", ("mlp", "attn", "norm")))


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


def train(shape, batches, steps, modules, deadline):
    import torch
    import vramkit
    from offload_bench import build_builtin, init_weights

    model, loss_fn = build_builtin(shape, "cuda")
    init_weights(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    comp = vramkit.compress_activations(model, modules=modules) if modules else None
    losses, grads0 = [], None
    for step in range(steps):
        if time.time() > deadline:
            break
        x = batches[step % len(batches)]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if comp is not None:
                with comp:
                    loss = loss_fn(model, x)
            else:
                loss = loss_fn(model, x)
        loss.backward()
        if step == 0:
            grads0 = [[p.grad.detach().float().clone() for p in b.parameters()] for b in model.layers]
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    info = {"backend": comp.backend_for(next(model.parameters()).device), "stats": comp.stats()} if comp else {}
    return losses, grads0, info


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--budget-s", type=float, default=40.0)
    ap.add_argument("--out", default="compress-accuracy.json")
    ap.add_argument("--summary", default=None)
    args = ap.parse_args()
    if args.steps < 1 or args.budget_s <= 0:
        ap.error("--steps and --budget-s must be positive")
    t0 = time.time()  # the budget counts from here: importing torch and building the data included
    import torch

    shape = dict(d=512, layers=6, heads=8, ffn=1376, vocab=2048, batch=8, seq=256)
    batches = data(shape["vocab"], shape["batch"], shape["seq"], 16, "cuda")
    runs = {}
    steps = args.steps
    for k, (name, modules) in enumerate(VARIANTS):
        # Each run may use an equal share of what is left; later runs stop at the first's steps.
        deadline = time.time() + (args.budget_s - (time.time() - t0)) / (len(VARIANTS) - k)
        losses, grads0, info = train(shape, batches, steps, modules, deadline)
        steps = min(steps, len(losses))
        runs[name] = {"losses": losses, "grads0": grads0, **info}
    ref = runs["bf16"]
    res = {"shape": shape, "steps": steps, "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
           "tolerance": {"max_abs_diff": MAX_DIFF_TOL, "final_abs_diff": FINAL_DIFF_TOL},
           "loss_bf16": ref["losses"][:steps], "variants": {}}
    lines = ["## compression accuracy (fp8 e4m3, per-128 scales; %d steps of %s)" % (steps, json.dumps(shape))]
    for name, _ in VARIANTS[1:]:
        r = runs[name]
        diffs = [abs(a - b) for a, b in zip(ref["losses"][:steps], r["losses"][:steps])]
        rel = []
        for a, b in zip(ref["grads0"], r["grads0"]):
            num = sum(float((x - y).norm() ** 2) for x, y in zip(a, b)) ** 0.5
            den = sum(float(x.norm() ** 2) for x in a) ** 0.5
            rel.append(num / den if den > 0 else 0.0)
        v = {"losses": r["losses"][:steps], "max_abs_diff": max(diffs) if diffs else None,
             "final_abs_diff": diffs[-1] if diffs else None, "grad_rel_error_per_block": rel,
             "backend": r.get("backend"), "compress_stats": r.get("stats")}
        v["within_tolerance"] = bool(diffs) and v["max_abs_diff"] <= MAX_DIFF_TOL and v["final_abs_diff"] <= FINAL_DIFF_TOL
        res["variants"][name] = v
        idx = list(range(0, steps, max(1, steps // 10))) + [steps - 1]
        st = r.get("stats") or {}
        lines.append("- %s (backend %s): loss max |diff| %.4f, final |diff| %.4f (final %.4f vs bf16 %.4f): %s "
                     "(tolerance %.2f / %.2f); stored %.1f%% of the selected tensors' bytes" % (
                         name, v["backend"], v["max_abs_diff"], v["final_abs_diff"], r["losses"][steps - 1],
                         ref["losses"][steps - 1], "within" if v["within_tolerance"] else "OUTSIDE",
                         MAX_DIFF_TOL, FINAL_DIFF_TOL, 100 * st.get("stored_bytes", 0) / max(1, st.get("input_bytes", 0))))
        lines.append("  curve (step:bf16/fp8): " + " ".join("%d:%.3f/%.3f" % (i, ref["losses"][i], r["losses"][i]) for i in idx))
        lines.append("  gradient relative error per block after one step: " + ", ".join("%.4f" % x for x in rel))
    res["wall_s"] = time.time() - t0
    lines.append("accuracy wall time %.1f s" % res["wall_s"])
    text = "\n".join(lines) + "\n"
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(text)
    print(text)
    finite = all(x == x for v in res["variants"].values() for x in v["losses"])
    return 0 if finite and steps > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
