"""Tests of vramkit.compress_activations: module selection (mlp, attn, norm), what is never
compressed, views of one tensor sharing one compressed copy, aliased tensors left alone, option
errors (any torch); fp8 round trips within the stated error, training steps alone and through
offload where an fp8 backend exists on the CPU (torch >= 2.1's float8 dtypes, or
libvramkit_compress.so's host code: skipped per test otherwise). GPU cases: test_compress_gpu.py."""

import contextlib
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
from vramkit import fp8_codec  # noqa: E402
from _models import LlamaLike  # noqa: E402

CPU_BACKEND = fp8_codec.default_backend(torch.device("cpu"))
HAS_CODEC = CPU_BACKEND is not None


class Recorder:
    """Saved-tensor hooks that record, for every save, whether the compressor selects it."""

    def __init__(self, comp):
        self.comp, self.selected, self.kept = comp, [], []

    def pack(self, t):
        (self.selected if self.comp.selects(t) else self.kept).append((t, list(self.comp._kinds)))
        return t

    def __enter__(self):
        self.comp._arm()
        self.h = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda x: x)
        self.h.__enter__()
        return self

    def __exit__(self, *e):
        self.h.__exit__(*e)
        self.comp._disarm()


class GatedMLP(torch.nn.Module):
    """gate and up as the two halves of one projection (views of one tensor)."""

    def __init__(self, d, f):
        super().__init__()
        self.gate_up = torch.nn.Linear(d, 2 * f, bias=False)
        self.down = torch.nn.Linear(f, d, bias=False)

    def forward(self, x):
        g, u = self.gate_up(x).chunk(2, dim=-1)
        return self.down(torch.nn.functional.silu(g) * u)


class SquashAttention(torch.nn.Module):
    """An 'attention' whose core op (sigmoid) saves its output, which o_proj then saves again."""

    def __init__(self, d):
        super().__init__()
        self.in_proj = torch.nn.Linear(d, d, bias=False)
        self.o_proj = torch.nn.Linear(d, d, bias=False)

    def forward(self, x):
        return self.o_proj(torch.sigmoid(self.in_proj(x)))


class Block(torch.nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.self_attn = SquashAttention(d)
        self.mlp = GatedMLP(d, f)

    def forward(self, x):
        x = x + self.self_attn(self.norm(x))
        return x + self.mlp(x)


class Net(torch.nn.Module):
    def __init__(self, d=64, f=96, layers=3):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(d, f) for _ in range(layers))

    def forward(self, x):
        for b in self.layers:
            x = b(x)
        return x.float().pow(2).mean()


def recompute_step(**kw):
    """One step of a seeded LlamaLike on the CPU with mlp,attn,norm compressed and the products
    recomputed (compress_activations' options `kw`): (gradients, stats)."""
    torch.manual_seed(0)
    model = LlamaLike(layers=4)
    tokens = torch.randint(0, 64, (2, 64))
    comp = vramkit.compress_activations(model, modules=ac.MODULES, min_bytes=0, recompute=True,
                                        norm_inputs="exact", **kw)
    with comp:
        loss = model(tokens)
    loss.backward()
    return [p.grad.clone() for p in model.parameters()], comp.stats()


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
        norms = [m for b in self.model.layers for m in (b.input_layernorm, b.post_attention_layernorm)]
        self.assertEqual([id(s) for s, k in self.scopes(modules=("mlp",))], [id(m) for m in mlps])
        self.assertEqual({id(s) for s, k in self.scopes(modules="attn")}, {id(m) for m in attn_linears})
        self.assertEqual({id(s) for s, k in self.scopes(modules="norm")}, {id(m) for m in norms})
        self.assertEqual({k for _, k in self.scopes(modules="mlp,attn,norm")}, {"mlp", "attn", "norm"})
        self.assertEqual(len(self.scopes()), 4 + 16)  # default: mlp and attn
        self.assertEqual(len(self.scopes(modules=ac.MODULES)), 4 + 16 + 8)

    def test_keep_ends(self):
        scopes = {id(s) for s, _ in self.scopes(keep_ends=True)}
        for i, b in enumerate(self.model.layers):
            inside = id(b.mlp) in scopes
            self.assertEqual(inside, i not in (0, 3))

    def test_never_parameters_norms_softmax(self):
        comp = ac.compress_activations(self.model, min_bytes=0)
        with Recorder(comp) as rec:
            self.model(self.tokens).backward()
        params = {p.data_ptr() for p in self.model.parameters()}
        self.assertTrue(rec.selected)
        for t, _ in rec.selected:
            self.assertNotIn(t.data_ptr(), params)
            self.assertTrue(t.is_floating_point())
        # The attention core's tensors (softmax output, q/k/v in head layout) are never selected.
        self.assertEqual([t for t, _ in rec.selected if t.dim() == 4], [])
        # Norm inputs are saved outside the default scopes: kept.
        self.assertTrue(any(t.dim() == 3 and t.shape[-1] == 64 and not kinds for t, kinds in rec.kept))

    def test_norm_selects_what_norms_save(self):
        comp = ac.compress_activations(self.model, modules="norm", min_bytes=0)
        with Recorder(comp) as rec:
            self.model(self.tokens).backward()
        self.assertTrue(rec.selected)
        for t, kinds in rec.selected:
            self.assertEqual(kinds[-1], "norm")
            self.assertEqual(t.shape[:2], (2, 32))  # the norms' input rows, never weights

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
        with self.assertRaisesRegex(ValueError, "side_ctas"):
            ac.compress_activations(self.model, side_ctas=-1)
        # Options that would do nothing where they are given are refused, not ignored.
        with self.assertRaisesRegex(ValueError, "fuse_swiglu=True needs recompute"):
            ac.compress_activations(self.model, fuse_swiglu=True)
        with self.assertRaisesRegex(ValueError, "fuse_swiglu=True needs recompute"):
            ac.compress_activations(self.model, recompute=True, decode_ahead=0, fuse_swiglu=True)
        with self.assertRaisesRegex(ValueError, "side_ctas bounds the decodes ahead"):
            ac.compress_activations(self.model, decode_ahead=0, side_ctas=4)
        self.assertTrue(ac.compress_activations(self.model, recompute=True).fuse_swiglu)
        self.assertFalse(ac.compress_activations(self.model).fuse_swiglu)
        for kw in (dict(recompute=True), dict(casts="kept")):
            with self.assertRaisesRegex(ValueError, "compression on its own"):
                vramkit.offload_activations(self.model, compress=ac.compress_activations(self.model, **kw))
        with self.assertRaisesRegex(ValueError, "no module"):
            ac.compress_activations(blocks=[torch.nn.Linear(2, 2)])
        with self.assertRaisesRegex(ValueError, "backend"):
            ac.compress_activations(self.model, backend="triton")
        if fp8_codec.library() is not None:
            with self.assertRaisesRegex(ValueError, "compile"):
                ac.compress_activations(self.model, backend="host", compile=True)
        if not torch.cuda.is_available():
            with self.assertRaisesRegex(RuntimeError, "cuda"):
                ac.compress_activations(self.model, backend="cuda")

    def test_exported(self):
        self.assertIs(vramkit.compress_activations, ac.compress_activations)


def llama_reference():
    """A seeded three-block LlamaLike, a token batch and its uncompressed gradients."""
    torch.manual_seed(0)
    model = LlamaLike(layers=3)
    tokens = torch.randint(0, 64, (2, 64))
    model(tokens).backward()
    return model, tokens, [p.grad.clone() for p in model.parameters()]


def check_bound(test, t, back, fmt, extra_rel=0.0):
    """|back - t| within fp8's stated error: relative in the normal range, else the block's
    subnormal step; plus the restored dtype's own rounding (relative, and half of its smallest
    subnormal step: fp16 values below 2^-14 are restored on a grid of 2^-24)."""
    rel = 2.0 ** -4 if fmt == "e4m3" else 2.0 ** -3
    mant, min_exp = (3, -6) if fmt == "e4m3" else (2, -14)
    x, y = t.float().reshape(-1), back.float().reshape(-1)
    blocks = torch.nn.functional.pad(x.abs(), (0, (-x.numel()) % 128)).view(-1, 128).amax(1)
    scale = (blocks / ac.FORMATS[fmt][1]).repeat_interleave(128)[: x.numel()]
    bound = torch.maximum((rel + extra_rel) * x.abs(), scale * 2.0 ** (min_exp - mant))
    if back.dtype == torch.float16:
        bound = bound + 2.0 ** -25
    test.assertTrue(bool(((x - y).abs() <= bound * 1.0001 + 1e-30).all()), float(((x - y).abs() - bound).max()))


@unittest.skipUnless(fp8_codec.library() is not None, "libvramkit_compress.so not built")
class CodecLibrary(unittest.TestCase):
    def test_bad_arguments_are_refused(self):
        x = torch.randn(300)
        with self.assertRaisesRegex(ValueError, "contiguous"):
            fp8_codec.encode(torch.randn(20, 30).t(), "e4m3", "host")
        with self.assertRaisesRegex(ValueError, "cannot encode"):
            fp8_codec.encode(x, "e4m3", "cuda")
        with self.assertRaisesRegex(ValueError, "q needs 384"):
            fp8_codec.encode(x, "e4m3", "host", q=torch.empty(100, dtype=torch.uint8), scales=torch.empty(3))
        with self.assertRaisesRegex(ValueError, "dtype"):
            fp8_codec.encode(torch.arange(10), "e4m3", "host")
        with self.assertRaisesRegex(ValueError, "fmt"):
            fp8_codec.encode(x, "e3m4", "host")
        lib = fp8_codec.library()
        self.assertEqual(lib.vramkit_fp8_encode(x.data_ptr(), 7, 300, 0, None, None, 0, None, 0), -1)
        with self.assertRaisesRegex(RuntimeError, "element type 7"):
            fp8_codec._check(-1)
        self.assertEqual(lib.vramkit_fp8_encode(x.data_ptr(), 0, 300, 0, None, None, 0, None, 0), -1)
        with self.assertRaisesRegex(RuntimeError, "null pointer"):
            fp8_codec._check(-1)

    def test_host_swiglu_restore(self):
        # gate and up decoded as decode() gives them, silu(gate) = g / (1 + exp(-g)) and its
        # product with up computed in float from the rounded values and rounded once.
        torch.manual_seed(4)
        n = 1000
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            g, u = (torch.randn(n) * 3).to(dtype), torch.randn(n).to(dtype)
            qg, qu = fp8_codec.encode(g, "e4m3", "host"), fp8_codec.encode(u, "e4m3", "host")
            got = fp8_codec.decode_swiglu(qg, qu, n, "e4m3", dtype, "host")
            dg = fp8_codec.decode(*qg, n, "e4m3", dtype, "host")
            du = fp8_codec.decode(*qu, n, "e4m3", dtype, "host")
            act = (dg.double() / (1 + torch.exp(-dg.double()))).to(dtype)
            with self.subTest(dtype=dtype):
                self.assertTrue(torch.equal(got[0], dg) and torch.equal(got[1], du))
                # float's expf against double's exp: at most one unit of the dtype apart.
                ulp = {torch.float32: 2.0 ** -22, torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}[dtype]
                self.assertLessEqual(float(((got[2].double() - act.double()).abs() / (act.double().abs() + 1e-30)).max()),
                                     ulp)
                self.assertTrue(torch.equal(got[3], (got[2].float() * got[1].float()).to(dtype)))
        with self.assertRaisesRegex(ValueError, "four outputs"):
            fp8_codec.decode_swiglu(qg, qu, n, "e4m3", dtype, "host", out=(torch.empty(n, dtype=dtype),) * 3)
        with self.assertRaisesRegex(ValueError, "shorter"):
            fp8_codec.decode_swiglu(qg, qu, 2 * n, "e4m3", dtype, "host")

    def test_host_code_round_trip_and_exact_codes(self):
        # 448 (the largest e4m3 value) and -1.75 * 2^-3 are e4m3 values: with a block amax of 448
        # (scale ~1) they come back up to the scale's own rounding.
        x = torch.tensor([448.0, -0.21875, 0.0, 1.0] + [0.5] * 200)
        q, s = fp8_codec.encode(x, "e4m3", "host")
        self.assertEqual(q.numel(), 256)
        self.assertEqual(s.numel(), 2)
        self.assertEqual(int(q[0]), 0x7E)
        self.assertEqual(int(q[2]), 0)
        self.assertEqual(float(s[0]), float(torch.tensor(448.0) * (1.0 / 448.0)))
        back = fp8_codec.decode(q, s, x.numel(), "e4m3", torch.float32, "host")
        self.assertLessEqual(abs(float(back[0]) - 448.0), 448.0 * 2.0 ** -20)  # the amax: exact up to the scale's rounding
        self.assertLessEqual(abs(float(back[1]) + 0.21875), 0.21875 * 2.0 ** -20)
        check_bound(self, x, back, "e4m3")
        self.assertTrue(torch.equal(q[204:], torch.zeros(52, dtype=torch.uint8)))  # padding


@unittest.skipUnless(HAS_CODEC, "no fp8 backend on the CPU (torch < 2.1 and no libvramkit_compress.so)")
class RoundTrip(unittest.TestCase):
    def check(self, t, fmt):
        p = ac.pack_tensor(t, fmt)
        self.assertEqual(p.q.dtype, torch.uint8)
        back = ac.unpack_tensor(p)
        self.assertEqual(back.shape, t.shape)
        self.assertEqual(back.dtype, t.dtype)
        check_bound(self, t, back, fmt, 2.0 ** -8 if t.dtype == torch.bfloat16 else 0.0)
        self.assertLessEqual(p.nbytes, t.numel() * (1 + 4 / 128) + 132)

    def test_shapes_and_formats(self):
        torch.manual_seed(1)
        for shape in [(7,), (3, 129), (2, 16, 64), (5, 1, 300)]:
            for dtype in (torch.float32, torch.bfloat16):
                t = (torch.randn(shape) * 10 ** torch.empty(shape).uniform_(-3, 3)).to(dtype)
                self.check(t, "e4m3")
                self.check(t, "e5m2")

    def test_zeros_and_noncontiguous(self):
        self.check(torch.zeros(4, 256), "e4m3")
        self.check(torch.randn(64, 32).t(), "e4m3")

    def test_backends_agree(self):
        # The library's host code and torch's float8 operations give the same bits.
        if fp8_codec.library() is None or not fp8_codec.torch_fp8_available():
            self.skipTest("needs both libvramkit_compress.so and torch's float8 dtypes")
        torch.manual_seed(2)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            t = (torch.randn(1000) * 10 ** torch.empty(1000).uniform_(-3, 3)).to(dtype)
            for fmt in ("e4m3", "e5m2"):
                a = fp8_codec.encode(t, fmt, "host")
                b = fp8_codec.encode(t, fmt, "torch")
                self.assertTrue(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), (dtype, fmt))

    def test_views_share_one_copy_and_restore_their_geometry(self):
        torch.manual_seed(3)
        model = Net()
        comp = ac.compress_activations(model, modules="mlp", min_bytes=0)
        x = torch.randn(2, 8, 64)
        with comp:
            loss = model(x)
        st = comp.stats()
        # Per block: gate_up's input, gate_up's output (g and u are its two halves: one copy),
        # silu's output, the product: four copies, and the second half deduplicated.
        self.assertEqual(st["compressed"], 4 * 3)
        self.assertGreaterEqual(st["deduplicated"], 3)
        loss.backward()
        g = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).backward()
        for a, b in zip(g, [p.grad for p in model.parameters()]):
            self.assertLess(float((a - b).norm() / (b.norm() + 1e-12)), 0.1)

    def test_casts_of_one_source_share_one_copy(self):
        # Under autocast each Linear casts its fp32 input to bf16 itself: three projections of
        # one input save three equal casts, stored as one compressed copy; a cast of another
        # source, or of the same source after an in-place change, gets its own.
        torch.manual_seed(4)
        lin = [torch.nn.Linear(64, 64) for _ in range(4)]
        blocks = [torch.nn.ModuleDict({"attn": torch.nn.ModuleList(lin)})]
        comp = ac.compress_activations(blocks=blocks, modules="attn", min_bytes=0)
        src = torch.randn(16, 64, requires_grad=True)
        other = torch.randn(16, 64, requires_grad=True)

        def run():
            h = src * 2
            with torch.autocast("cpu", dtype=torch.bfloat16):
                outs = [m(h) for m in lin[:3]]
                h.mul_(1.5)
                outs.append(lin[3](h))
                outs.append(lin[3](other * 1))
            return sum(o.float().sum() for o in outs)

        with comp:
            loss = run()
        st = comp.stats()
        self.assertEqual(st["cast_shared"], 2)  # the 2nd and 3rd projections' casts
        self.assertEqual(st["compressed"], 3)  # the shared cast, the one after mul_, other's
        loss.backward()
        g = [m.weight.grad.clone() for m in lin] + [src.grad.clone()]
        for m in lin:
            m.zero_grad()
        src.grad = None
        run().backward()
        for a, b in zip(g, [m.weight.grad for m in lin] + [src.grad]):
            self.assertLess(float((a - b).norm() / (b.norm() + 1e-12)), 0.1)

    def test_casts_kept_share_one_exact_copy(self):
        # casts="kept": the shared copy of three equal casts is the first cast itself, so the
        # gradients are bit for bit those without compression, and it stores bf16's bytes.
        torch.manual_seed(4)
        lin = [torch.nn.Linear(64, 64) for _ in range(3)]
        blocks = [torch.nn.ModuleDict({"attn": torch.nn.ModuleList(lin)})]
        src = torch.randn(16, 64, requires_grad=True)

        def run(comp):
            h = src * 2
            with torch.autocast("cpu", dtype=torch.bfloat16), (comp or contextlib.nullcontext()):
                loss = sum(m(h).float().sum() for m in lin)
            loss.backward()
            out = [m.weight.grad.clone() for m in lin] + [src.grad.clone()]
            for m in lin:
                m.zero_grad()
            src.grad = None
            return out

        comp = ac.compress_activations(blocks=blocks, modules="attn", min_bytes=0, casts="kept")
        got, want = run(comp), run(None)
        st = comp.stats()
        self.assertEqual((st["casts_kept"], st["cast_shared"]), (1, 2))
        self.assertEqual(st["stored_bytes"], 16 * 64 * 2)
        for a, b in zip(got, want):
            self.assertTrue(torch.equal(a, b))
        with self.assertRaisesRegex(ValueError, "casts"):
            ac.compress_activations(blocks=blocks, modules="attn", casts="bf16")

    def test_norm_inputs_kept_as_bf16_by_default(self):
        # RMSNorm's fp32 input (the residual stream under autocast) is what its backward
        # differentiates through: stored as bf16 by default, its normalized output as fp8; the
        # per-row rsqrt stays as it is. norm_inputs="fp8" stores the input as fp8 too.
        class RMSNorm(torch.nn.Module):
            def __init__(self, d):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.ones(d))

            def forward(self, x):
                x = x.float()
                return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))

        torch.manual_seed(5)
        blocks = [torch.nn.ModuleDict({"input_layernorm": RMSNorm(64), "proj": torch.nn.Linear(64, 64)})
                  for _ in range(2)]
        x0 = torch.randn(4, 32, 64) * 10 ** torch.empty(4, 32, 1).uniform_(-2, 2)

        def grads(comp):
            x = x0.clone().requires_grad_()
            h = x * 1  # not a leaf: leaves are never compressed
            ctx = comp if comp is not None else contextlib.nullcontext()
            with ctx:
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    for b in blocks:
                        h = h + b["proj"](b["input_layernorm"](h)).float()
            (h.pow(2).mean()).backward()
            out = [b["input_layernorm"].weight.grad.clone() for b in blocks] + [x.grad.clone()]
            for b in blocks:
                b.zero_grad()
            return out

        ref = grads(None)
        errs = {}
        for mode in ("bf16", "fp8"):
            comp = ac.compress_activations(blocks=blocks, modules="norm", min_bytes=0, norm_inputs=mode)
            got = grads(comp)
            st = comp.stats()
            # Two norms: each saves its input (twice: one copy) and its normalized output (and,
            # in some torch versions, x**2 for the mean).
            self.assertEqual(st["norm_inputs_bf16"], 2 if mode == "bf16" else 0, mode)
            self.assertGreaterEqual(st["compressed"], 4, mode)
            errs[mode] = float((got[-1] - ref[-1]).norm() / ref[-1].norm())
            for a, b in zip(got, ref):
                self.assertLess(float((a - b).norm() / (b.norm() + 1e-12)), 0.1, mode)
        self.assertLess(errs["bf16"], errs["fp8"])  # the input's gradient: bf16 is closer
        # recompute=True with the inputs kept: the normalized output is recomputed from the input
        # and the rsqrt, bit for bit, and nothing of the norms is stored.
        comp = ac.compress_activations(blocks=blocks, modules="norm", min_bytes=0, norm_inputs="exact",
                                       recompute=True)
        got = grads(comp)
        st = comp.stats()
        self.assertEqual(st["recomputed"], 2)
        self.assertEqual(st["norm_inputs_bf16"], 0)
        self.assertEqual(st["by_module"]["norm"]["compressed"] - st["recomputed"],
                         st["compressed"] - 2)  # anything else stored is what this torch adds
        if st["compressed"] == 2:
            for a, b in zip(got, ref):
                self.assertTrue(torch.equal(a, b))
        else:
            self.assertLess(float((got[-1] - ref[-1]).norm() / ref[-1].norm()), errs["bf16"] + 1e-6)
        with self.assertRaisesRegex(ValueError, "norm_inputs"):
            ac.compress_activations(blocks=blocks, modules="norm", norm_inputs="fp16")

    def test_aliased_tensor_stays(self):
        # o_proj's input is sigmoid's output, which sigmoid saves uncompressed: left alone.
        model = Net()
        comp = ac.compress_activations(model, modules="attn", min_bytes=0)
        with comp:
            model(torch.randn(2, 8, 64)).backward()
        st = comp.stats()
        self.assertEqual(st["aliased"], 3)
        self.assertEqual(st["compressed"], 3)  # in_proj's inputs
        self.assertEqual(st["by_module"]["attn"]["compressed"], 3)

    def test_training_step_close(self):
        torch.manual_seed(0)
        model = LlamaLike(layers=3)
        tokens = torch.randint(0, 64, (2, 64))
        ref = model(tokens)
        ref.backward()
        g_ref = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        comp = vramkit.compress_activations(model, modules=ac.MODULES, min_bytes=0)
        with comp:
            loss = model(tokens)
        loss.backward()
        self.assertEqual(float(loss.detach()), float(ref.detach()))  # the forward is untouched
        st = comp.stats()
        self.assertGreater(st["compressed"], 0)
        self.assertLess(st["stored_bytes"], 0.3 * st["input_bytes"])  # fp32 -> fp8 + scales
        # q/k/v read one input through three distinct view objects: one compressed copy.
        self.assertGreaterEqual(st["deduplicated"], 2 * 3)
        for kind in ac.MODULES:
            self.assertGreater(st["by_module"][kind]["compressed"], 0, kind)
        for p, g in zip(model.parameters(), g_ref):
            rel = float((p.grad - g).norm() / (g.norm() + 1e-12))
            self.assertLess(rel, 0.1)

    def test_recompute_stores_no_products(self):
        # recompute=True: the gated MLP's product and RMSNorm-like products of saved tensors are
        # recomputed in backward, fewer bytes stored, gradients as close as with compression.
        model, tokens, g_ref = llama_reference()
        stored = {}
        for rc in (False, True):
            model.zero_grad()
            comp = vramkit.compress_activations(model, modules=ac.MODULES, min_bytes=0, recompute=rc)
            with comp:
                loss = model(tokens)
            loss.backward()
            st = comp.stats()
            stored[rc] = st["stored_bytes"]
            self.assertEqual(st["recomputed"] > 0, rc)
            for p, g in zip(model.parameters(), g_ref):
                self.assertLess(float((p.grad - g).norm() / (g.norm() + 1e-12)), 0.1)
        self.assertLess(stored[True], stored[False])

    def test_decode_ahead_gives_the_same_gradients(self):
        def run(ahead):
            torch.manual_seed(0)
            model = LlamaLike(layers=4)
            tokens = torch.randint(0, 64, (2, 64))
            comp = vramkit.compress_activations(model, modules=ac.MODULES, min_bytes=0, decode_ahead=ahead)
            with comp:
                loss = model(tokens)
            loss.backward()
            return [p.grad.clone() for p in model.parameters()], comp.stats()

        inline, st0 = run(0)
        self.assertEqual(st0["decoded_ahead"], 0)
        for ahead in (1, 3):
            got, st = run(ahead)
            self.assertGreater(st["decoded_ahead"], 0)
            # Blocks 0 .. 2 decoded ahead (block 3, the first in backward, when asked).
            self.assertLess(st["decoded_ahead"], st["compressed"])
            for a, b in zip(inline, got):
                self.assertTrue(torch.equal(a, b))
        with self.assertRaises(ValueError):
            vramkit.compress_activations(LlamaLike(layers=2), decode_ahead=-1)

    def test_each_copy_decoded_once(self):
        # q/k/v (and gate/up) share one copy of their input, a product's factors are the tensors
        # saved for the product's own backward: one decode per stored copy, whatever the views.
        calls = []
        real = fp8_codec.decode

        def counting(*a, **k):
            calls.append(1)
            return real(*a, **k)

        for rc in (False, True):
            torch.manual_seed(0)
            model = LlamaLike(layers=3)
            tokens = torch.randint(0, 64, (2, 64))
            comp = vramkit.compress_activations(model, modules=ac.MODULES, min_bytes=0, recompute=rc,
                                                decode_ahead=0)
            calls.clear()
            fp8_codec.decode = counting
            try:
                with comp:
                    loss = model(tokens)
                loss.backward()
            finally:
                fp8_codec.decode = real
            st = comp.stats()
            fp8 = st["compressed"] - st["norm_inputs_bf16"] - st["recomputed"]
            self.assertGreater(st["deduplicated"] + st["cast_shared"], 0, st)
            self.assertEqual(len(calls), fp8)

    def test_recompute_ahead_gives_the_same_gradients(self):
        inline, st0 = recompute_step(decode_ahead=0)
        got, st = recompute_step(decode_ahead=2)
        # Per block silu(gate) and silu(gate) * up (LayerNorms here: no x * rsqrt).
        self.assertEqual(st["recomputed"], 2 * 4)
        self.assertGreater(st["decoded_ahead"], 0)
        for a, b in zip(inline, got):
            self.assertTrue(torch.equal(a, b))

    def test_fused_swiglu_restore_gives_the_same_gradients(self):
        # gate, up, silu(gate) and the product restored ahead together (fuse_swiglu): the same
        # gradients, bit for bit, as each restored on its own (the values of one decode each and
        # torch's silu and mul either way off CUDA).
        apart, st0 = recompute_step(fuse_swiglu=False)
        fused, st = recompute_step(fuse_swiglu=True)
        self.assertEqual(st0["swiglu_fused"], 0)
        self.assertEqual(st["swiglu_fused"], 3)  # every block's but the last's, which is not decoded ahead
        self.assertEqual(st["decoded_ahead"], st0["decoded_ahead"])
        for a, b in zip(apart, fused):
            self.assertTrue(torch.equal(a, b))

    def test_through_offload_on_cpu(self):
        model, tokens, g_ref = llama_reference()
        moved = {}
        for modules in (("mlp", "attn"), ac.MODULES):
            model.zero_grad()
            comp = vramkit.compress_activations(model, modules=modules, min_bytes=0)
            off = vramkit.offload_activations(model, min_bytes=0, offload_cpu_tensors=True, compress=comp,
                                              pool=vramkit.PinnedPool(pin=False))
            with off:
                loss = model(tokens)
            self.assertGreater(off.stats()["offloaded"], 0)
            moved[modules] = off.stats()["offloaded_bytes"]
            loss.backward()
            del loss
            self.assertEqual(off.stats()["live_records"], 0)
            # The norms' fp32 inputs travel as bf16 copies.
            self.assertEqual(comp.stats()["norm_inputs_bf16"] > 0, "norm" in modules)
            for p, g in zip(model.parameters(), g_ref):
                self.assertLess(float((p.grad - g).norm() / (g.norm() + 1e-12)), 0.1)
        self.assertLess(moved[ac.MODULES], moved[("mlp", "attn")])


if __name__ == "__main__":
    unittest.main()
