#!/usr/bin/env python3
"""CPU tests of the bitsandbytes stand-ins (bench/plan/stand_ins.py): their buffers have
bitsandbytes' sizes and dtypes, dequantisation reproduces the weight within NF4's error, gradients
reach the input and the adapters only, and the 8-bit optimizer updates in place. Exit 77 (skip)
without torch."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
except ImportError:  # pragma: no cover - the skip path
    sys.exit(77)

import stand_ins  # noqa: E402


class NF4(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(256, 128, bias=False)
        self.q = stand_ins.make_nf4_linear(torch, self.lin, torch.float32)

    def test_buffers_have_bitsandbytes_sizes(self):
        n = 256 * 128
        self.assertEqual(self.q.packed.numel(), n // 2)
        self.assertEqual(self.q.packed.dtype, torch.uint8)
        self.assertEqual(self.q.absmax_q.numel(), n // 64)
        self.assertEqual(self.q.absmax2.numel(), n // 64 // 256)
        self.assertEqual(self.q.absmax2.dtype, torch.float32)

    def test_dequantised_weight_is_close(self):
        w = self.q.dequantize()
        self.assertEqual(w.shape, self.lin.weight.shape)
        err = (w - self.lin.weight).norm() / self.lin.weight.norm()
        self.assertLess(float(err), 0.2)

    def test_backward_reaches_the_input_only(self):
        x = torch.randn(4, 256, requires_grad=True)
        y = self.q(x)
        y.sum().backward()
        ref = torch.ones(4, 128) @ self.q.dequantize()
        self.assertTrue(torch.allclose(x.grad, ref, atol=1e-4))
        self.assertEqual(len(list(self.q.parameters())), 0)

    def test_lora_wrapper_trains_the_adapters(self):
        lora = stand_ins.make_lora_nf4(torch, self.q, 8, 16, 0.0)
        x = torch.randn(4, 256)
        lora(x).pow(2).mean().backward()
        names = {n for n, p in lora.named_parameters() if p.grad is not None}
        self.assertEqual(names, {"lora_A.weight", "lora_B.weight"})


class AdamW8bit(unittest.TestCase):
    def test_states_and_in_place_update(self):
        big = torch.nn.Parameter(torch.randn(64, 256))
        small = torch.nn.Parameter(torch.randn(100))
        opt = stand_ins.make_adamw_8bit(torch, [big, small], lr=1e-2)
        before = big.detach().clone()
        (big.sum() + small.sum()).backward()
        opt.step()
        st = opt.state[big]
        self.assertEqual(st["state1"].dtype, torch.uint8)
        self.assertEqual(st["state1"].shape, big.shape)
        self.assertEqual(st["absmax1"].numel(), big.numel() // 256)
        self.assertEqual(opt.state[small]["state1"].dtype, torch.float32)
        self.assertFalse(torch.equal(before, big.detach()))


if __name__ == "__main__":
    unittest.main()
