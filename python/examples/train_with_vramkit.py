#!/usr/bin/env python3
"""Trains a small MLP for a few steps with vramkit as PyTorch's CUDA allocator, then prints the
pool's summary. Run from the repository root after a CUDA build:

    PYTHONPATH=python python3 python/examples/train_with_vramkit.py
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import vramkit_torch  # noqa: E402

vramkit_torch.use_vramkit_allocator()  # before the first CUDA tensor

import torch  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(5):
    x = torch.randn(64, 1024, device="cuda")
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    print("step %d loss %.6f" % (step, loss.item()))

stats = vramkit_torch.memory_stats()
print("peak allocated %.1f MiB, peak reserved %.1f MiB" % (
    stats["allocated_bytes.all.peak"] / 2**20, stats["reserved_bytes.all.peak"] / 2**20))
print(vramkit_torch.memory_summary())
