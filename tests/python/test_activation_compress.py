"""Tests of vramkit.compress_activations: module selection, what is never compressed, option
errors (any torch); fp8 round trips within the stated error and training steps where this torch
has float8 dtypes (PyTorch >= 2.1; skipped per test otherwise). GPU cases: test_compress_gpu.py."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _skip import need_torch  # noqa: E402

need_torch()

import torch  # noqa: E402

import vramkit  # noqa: E402
from vramkit import activation_compress as ac  # noqa: E402
from _models import LlamaLike  # noqa: E402

HAS_FP8 = hasattr(torch, "float8_e4m3fn")


class Recorder:
    """Saved-tensor hooks that record, for every save, whether the compressor selects it."""

    def __init__(self, comp):
        self.comp, self.selected, self.kept = comp, [], []

    def pack(self, t):
        (self.selected if self.comp.selects(t) else self.kept).append(t)
        return t

    def __enter__(self):
        self.comp._arm()
        self.h = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda x: x)
        self.h.__enter__()
        return self

    def __exit__(self, *e):
        self.h.__exit__(*e)
        self.comp._disarm()


class Selection(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.model = LlamaLike(layers=4)
        self.tokens = torch.randint(0, 64, (2, 32))

    def scopes(self, **kw):
        return ac.compress_activations(self.model, min_bytes=0, **kw).scopes

    def test_scopes_by_module(self):
        mlps = [b.mlp for b in self.model.layers]
        attn_linears = [m for b in self.model.layers for m in b.self_attn.modules() if isinstance(m, torch.nn.Linear)]
        self.assertEqual([id(s) for s in self.scopes(modules=("mlp",))], [id(m) for m in mlps])
        self.assertEqual({id(s) for s in self.scopes(modules="attn")}, {id(m) for m in attn_linears})
        self.assertEqual(len(self.scopes()), 4 + 16)

    def test_keep_ends(self):
        scopes = {id(s) for s in self.scopes(keep_ends=True)}
        for i, b in enumerate(self.model.layers):
            inside = id(b.mlp) in scopes
            self.assertEqual(inside, i not in (0, 3))

    def test_never_parameters_norms_softmax(self):
        comp = ac.compress_activations(self.model, min_bytes=0)
        with Recorder(comp) as rec:
            self.model(self.tokens).backward()
        params = {p.data_ptr() for p in self.model.parameters()}
        self.assertTrue(rec.selected)
        for t in rec.selected:
            self.assertNotIn(t.data_ptr(), params)
            self.assertTrue(t.is_floating_point())
        # The attention core's tensors (softmax output, q/k/v in head layout) are never selected:
        # every selected tensor of attention is a projection input of shape (b, s, d).
        heads_shape = [t for t in rec.selected if t.dim() == 4]
        self.assertEqual(heads_shape, [])
        # Norm inputs are saved outside the scopes: kept.
        self.assertTrue(any(t.dim() == 3 and t.shape[-1] == 64 for t in rec.kept))

    def test_min_bytes(self):
        comp = ac.compress_activations(self.model, min_bytes=1 << 30)
        with Recorder(comp) as rec:
            self.model(self.tokens).backward()
        self.assertEqual(rec.selected, [])

    def test_option_errors(self):
        with self.assertRaisesRegex(ValueError, "fmt"):
            ac.compress_activations(self.model, fmt="e3m4")
        with self.assertRaisesRegex(ValueError, "softmax"):
            ac.compress_activations(self.model, modules=("softmax",))
        with self.assertRaisesRegex(ValueError, "empty"):
            ac.compress_activations(self.model, modules=())
        with self.assertRaisesRegex(ValueError, "min_bytes"):
            ac.compress_activations(self.model, min_bytes=-1)
        with self.assertRaisesRegex(ValueError, "no module"):
            ac.compress_activations(blocks=[torch.nn.Linear(2, 2)])

    def test_exported(self):
        self.assertIs(vramkit.compress_activations, ac.compress_activations)


@unittest.skipUnless(HAS_FP8, "this torch has no float8 dtypes")
class RoundTrip(unittest.TestCase):
    def check(self, t, fmt, rel):
        p = ac.pack_tensor(t, fmt)
        self.assertEqual(p.q.dtype, ac.FORMATS[fmt][0])
        back = ac.unpack_tensor(p)
        self.assertEqual(back.shape, t.shape)
        self.assertEqual(back.dtype, t.dtype)
        x, y = t.float().reshape(-1), back.float().reshape(-1)
        blocks = torch.nn.functional.pad(x.abs(), (0, (-x.numel()) % 128)).view(-1, 128).amax(1)
        amax = blocks.repeat_interleave(128)[: x.numel()]
        # Normal range: relative error; below it: an absolute bound from the block's scale.
        bound = torch.maximum(rel * x.abs(), amax / ac.FORMATS[fmt][1] * 2.0 ** -6)
        self.assertTrue(bool(((x - y).abs() <= bound + 1e-30).all()), float(((x - y).abs() - bound).max()))
        self.assertLessEqual(p.nbytes, t.numel() * (1 + 4 / 128) + 4)

    def test_shapes_and_formats(self):
        torch.manual_seed(1)
        for shape in [(7,), (3, 129), (2, 16, 64), (5, 1, 300)]:
            for dtype in (torch.float32, torch.bfloat16):
                t = (torch.randn(shape) * 10 ** torch.empty(shape).uniform_(-3, 3)).to(dtype)
                self.check(t, "e4m3", 2.0 ** -4)
                self.check(t, "e5m2", 2.0 ** -3)

    def test_zeros_and_noncontiguous(self):
        self.check(torch.zeros(4, 256), "e4m3", 2.0 ** -4)
        t = torch.randn(64, 32).t()
        self.check(t, "e4m3", 2.0 ** -4)

    def test_training_step_close(self):
        torch.manual_seed(0)
        model = LlamaLike(layers=3)
        tokens = torch.randint(0, 64, (2, 64))
        ref = model(tokens)
        ref.backward()
        g_ref = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        comp = vramkit.compress_activations(model, min_bytes=0)
        with comp:
            loss = model(tokens)
        loss.backward()
        self.assertEqual(float(loss), float(ref))  # the forward is untouched
        st = comp.stats()
        self.assertGreater(st["compressed"], 0)
        self.assertLess(st["stored_bytes"], 0.3 * st["input_bytes"])  # fp32 -> fp8 + scales
        self.assertGreater(st["deduplicated"], 0)  # q/k/v and gate/up share their input
        for p, g in zip(model.parameters(), g_ref):
            rel = float((p.grad - g).norm() / (g.norm() + 1e-12))
            self.assertLess(rel, 0.1)


if __name__ == "__main__":
    unittest.main()
