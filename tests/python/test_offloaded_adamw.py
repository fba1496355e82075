"""vramkit.OffloadedAdamW against torch.optim.AdamW on the CPU (the same chunked path as on the
GPU, without streams). The CUDA case is in test_offload_gpu.py."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _skip import need_torch  # noqa: E402

need_torch()

import torch  # noqa: E402

import vramkit  # noqa: E402

# Stated tolerance: the same elementwise operations in the same order; across devices or torch
# versions rounding may differ in the last bit, so compare relative to the update's scale.
RTOL = 1e-6


def make_params(device, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    shapes = [(300, 7), (1000,), (3,), (64, 64)]
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(device=device, dtype=dtype)) for s in shapes]


def set_grads(params, step):
    g = torch.Generator().manual_seed(100 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(device=p.device, dtype=p.dtype)


def max_rel(a, b):
    a, b = a.float(), b.float().to(a.device)
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


class OffloadedAdamWTest(unittest.TestCase):
    def compare(self, device, chunk_bytes, steps=5, weight_decay=0.1):
        ours = make_params(device)
        ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
        opt = vramkit.OffloadedAdamW(ours, lr=1e-2, weight_decay=weight_decay, chunk_bytes=chunk_bytes)
        ref_opt = torch.optim.AdamW(ref, lr=1e-2, weight_decay=weight_decay, foreach=False)
        for step in range(steps):
            set_grads(ours, step)
            set_grads(ref, step)
            opt.step()
            ref_opt.step()
        opt.synchronize()
        for p, r in zip(ours, ref):
            self.assertLess(max_rel(p, r), RTOL)
            st, rst = opt.state[p], ref_opt.state[r]
            self.assertLess(max_rel(st["exp_avg"], rst["exp_avg"].reshape(-1)), RTOL)
            self.assertLess(max_rel(st["exp_avg_sq"], rst["exp_avg_sq"].reshape(-1)), RTOL)
        return opt

    def test_matches_adamw_on_cpu_across_chunk_sizes(self):
        for chunk in (4096, 4096 * 3, 64 << 20):  # many chunks per tensor, a few, one per tensor
            with self.subTest(chunk=chunk):
                self.compare("cpu", chunk)

    def test_bitwise_on_cpu(self):
        ours = make_params("cpu")
        ref = [torch.nn.Parameter(p.detach().clone()) for p in ours]
        opt = vramkit.OffloadedAdamW(ours, lr=1e-3, chunk_bytes=4096)
        ref_opt = torch.optim.AdamW(ref, lr=1e-3, foreach=False)
        for step in range(3):
            set_grads(ours, step)
            set_grads(ref, step)
            opt.step()
            ref_opt.step()
        for p, r in zip(ours, ref):
            self.assertTrue(torch.equal(p, r))

    def test_master_weights_follow_fp32_adamw(self):
        ours = make_params("cpu", torch.bfloat16)
        master = [torch.nn.Parameter(p.detach().float()) for p in ours]
        opt = vramkit.OffloadedAdamW(ours, lr=1e-2, master_weights=True, chunk_bytes=4096)
        ref_opt = torch.optim.AdamW(master, lr=1e-2, foreach=False)
        for step in range(4):
            set_grads(ours, step)
            for p, m in zip(ours, master):
                m.grad = p.grad.float()
            opt.step()
            ref_opt.step()
        for p, m in zip(ours, master):
            self.assertLess(max_rel(opt.state[p]["master"], m.detach().reshape(-1)), RTOL)
            self.assertTrue(torch.equal(p, m.detach().to(torch.bfloat16)))
        self.assertEqual(opt.host_state_bytes(), 3 * 4 * sum(p.numel() for p in ours))

    def test_refuses_bad_arguments(self):
        with self.assertRaises(ValueError):
            vramkit.OffloadedAdamW(make_params("cpu"), lr=-1)
        with self.assertRaises(ValueError):
            vramkit.OffloadedAdamW(make_params("cpu"), chunk_bytes=16)
        p = torch.nn.Parameter(torch.randn(8, 8).t())
        p.grad = torch.randn(8, 8)
        with self.assertRaises(RuntimeError):
            vramkit.OffloadedAdamW([p]).step()


if __name__ == "__main__":
    unittest.main()
