"""GPU tests (label gpu) of vramkit.compress_activations: fp8 round trips on CUDA tensors within
the stated error (eager and compiled pack/unpack), a few training steps alone and combined with
offload, saved bytes halved."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _skip import need_cuda  # noqa: E402

need_cuda()

import torch  # noqa: E402

import vramkit  # noqa: E402
from vramkit import activation_compress as ac  # noqa: E402
from _models import LlamaLike  # noqa: E402
from test_activation_compress import RoundTrip  # noqa: E402,F401 - the CPU round trips, here too


class CudaRoundTrip(unittest.TestCase):
    def test_cuda_shapes_formats_compiled(self):
        torch.manual_seed(0)
        for compile in (False, True):
            for fmt, rel in (("e4m3", 2.0 ** -4), ("e5m2", 2.0 ** -3)):
                for shape in [(4, 2048, 512), (3, 1000), (129,)]:
                    t = (torch.randn(shape, device="cuda") * 3).to(torch.bfloat16)
                    p = ac.pack_tensor(t, fmt, compile)
                    p._compile = compile
                    back = ac.unpack_tensor(p)
                    self.assertEqual(back.dtype, t.dtype)
                    self.assertEqual(back.shape, t.shape)
                    x, y = t.float().reshape(-1), back.float().reshape(-1)
                    amax = torch.nn.functional.pad(x.abs(), (0, (-x.numel()) % 128)).view(-1, 128).amax(1)
                    amax = amax.repeat_interleave(128)[: x.numel()]
                    # bf16 rounding of the restored value adds 2^-8 relative.
                    bound = torch.maximum((rel + 2.0 ** -8) * x.abs(), amax / ac.FORMATS[fmt][1] * 2.0 ** -6)
                    self.assertTrue(bool(((x - y).abs() <= bound * 1.0001).all()), (compile, fmt, shape))


class CudaSteps(unittest.TestCase):
    def steps(self, wrap):
        torch.manual_seed(0)
        model = LlamaLike(vocab=512, d=256, ffn=688, layers=4, heads=4).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        tokens = torch.randint(0, 512, (4, 256), device="cuda")
        ctx = wrap(model)
        losses = []
        for _ in range(4):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                if ctx is None:
                    loss = model(tokens)
                else:
                    with ctx:
                        loss = model(tokens)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        torch.cuda.synchronize()
        return losses, ctx

    def test_alone_and_with_offload(self):
        ref, _ = self.steps(lambda m: None)
        got, comp = self.steps(lambda m: vramkit.compress_activations(m, min_bytes=0))
        st = comp.stats()
        self.assertGreater(st["compressed"], 0)
        self.assertLessEqual(st["stored_bytes"], 0.55 * st["input_bytes"])
        both, off = self.steps(lambda m: vramkit.offload_activations(
            m, min_bytes=0, compress=vramkit.compress_activations(m, min_bytes=0)))
        self.assertGreater(off.stats()["offloaded"], 0)
        off.wait()
        self.assertEqual(off.stats()["live_records"], 0)
        for a, b, c in zip(ref, got, both):
            self.assertTrue(abs(a - b) < 0.05 * abs(a) and abs(a - c) < 0.05 * abs(a), (a, b, c))
        self.assertLess(got[-1], got[0])


if __name__ == "__main__":
    unittest.main()
