"""GPU tests (label gpu) of vramkit.compress_activations: fp8 round trips on CUDA tensors within
the stated error for every backend (the CUDA kernels of libvramkit_compress.so, torch's float8
operations eager and compiled), the kernels' bits equal to torch's and to the host reference's,
the fused encode into pinned memory equal to the encode on the device, the gated MLP's fused
restore equal to two decodes and torch's silu and mul, a few training steps alone and combined
with offload, saved bytes halved; selective and selective-offload blocks with their GEMM outputs
as fp8, gradients within fp8 error of the uncompressed mix."""

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
from vramkit import fp8_codec  # noqa: E402
from _models import LlamaLike, loss_in  # noqa: E402
from test_activation_compress import RoundTrip, check_bound  # noqa: E402,F401 - the CPU round trips, here too

SHAPES = [(4, 2048, 512), (3, 1000), (129,), (7, 5, 333)]
DTYPES = (torch.bfloat16, torch.float32, torch.float16)


def backends():
    out = []
    if fp8_codec.cuda_kernels_available():
        out.append(("cuda", False))
    if fp8_codec.torch_fp8_available():
        out += [("torch", False), ("torch", True)]
    return out


def recompute_step(**kw):
    """One bf16-autocast step of a seeded LlamaLike on the GPU with mlp,attn,norm compressed and
    the products recomputed (compress_activations' options `kw`): (gradients, stats)."""
    torch.manual_seed(0)
    model = LlamaLike(vocab=512, d=256, ffn=688, layers=4, heads=4).cuda()
    tokens = torch.randint(0, 512, (4, 256), device="cuda")
    comp = vramkit.compress_activations(model, modules=ac.MODULES, min_bytes=0, recompute=True,
                                        norm_inputs="exact", **kw)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        with comp:
            loss = model(tokens)
    loss.backward()
    torch.cuda.synchronize()
    return [p.grad.float() for p in model.parameters()], comp.stats()


class CudaRoundTrip(unittest.TestCase):
    def test_kernels_are_loaded(self):
        # gpu-check builds libvramkit_compress.so with CUDA: the kernels must be what runs.
        self.assertTrue(fp8_codec.cuda_kernels_available(), fp8_codec.library_error())
        self.assertEqual(fp8_codec.default_backend(torch.device("cuda")), "cuda")

    def test_every_backend_within_the_stated_error(self):
        torch.manual_seed(0)
        for backend, compile in backends():
            for fmt in ("e4m3", "e5m2"):
                for shape in SHAPES:
                    for dtype in DTYPES:
                        if compile and (fmt, dtype) != ("e4m3", torch.bfloat16):
                            continue  # each (format, dtype) is a compilation of its own: one suffices
                        t = (torch.randn(shape, device="cuda") * 10 ** torch.empty(shape, device="cuda").uniform_(-2, 2)).to(dtype)
                        p = ac.pack_tensor(t, fmt, compile, backend=backend)
                        back = ac.unpack_tensor(p)
                        self.assertEqual((back.dtype, back.shape, back.device.type), (t.dtype, t.shape, "cuda"))
                        # Rounding the restored value to bf16/fp16 adds 2^-8/2^-11 relative.
                        extra = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}.get(dtype, 0.0)
                        with self.subTest(backend=backend, compile=compile, fmt=fmt, shape=shape, dtype=dtype):
                            check_bound(self, t, back, fmt, extra)

    def test_kernels_match_torch_and_the_host_reference_bit_for_bit(self):
        if not (fp8_codec.cuda_kernels_available() and fp8_codec.torch_fp8_available()):
            self.skipTest("needs the CUDA kernels and torch's float8 dtypes")
        torch.manual_seed(1)
        for fmt in ("e4m3", "e5m2"):
            for shape in SHAPES:
                for dtype in DTYPES:
                    t = (torch.randn(shape, device="cuda") * 10 ** torch.empty(shape, device="cuda").uniform_(-3, 3)).to(dtype)
                    qk, sk = fp8_codec.encode(t, fmt, "cuda")
                    qt, st = fp8_codec.encode(t, fmt, "torch")
                    qh, sh = fp8_codec.encode(t.cpu(), fmt, "host")
                    self.assertTrue(torch.equal(qk, qt) and torch.equal(sk, st), (fmt, shape, dtype, "torch"))
                    self.assertTrue(torch.equal(qk.cpu(), qh) and torch.equal(sk.cpu(), sh), (fmt, shape, dtype, "host"))
                    n = t.numel()
                    dk = fp8_codec.decode(qk, sk, n, fmt, dtype, "cuda")
                    dt = fp8_codec.decode(qk, sk, n, fmt, dtype, "torch")
                    self.assertTrue(torch.equal(dk, dt), (fmt, shape, dtype, "decode"))

    def test_fused_encode_into_pinned_memory(self):
        if not fp8_codec.cuda_kernels_available():
            self.skipTest("needs the CUDA kernels")
        torch.manual_seed(2)
        t = torch.randn(3, 4096, 1000, device="cuda", dtype=torch.bfloat16)
        n = t.numel()
        q_dev, s_dev = fp8_codec.encode(t, "e4m3", "cuda")
        host = torch.empty(fp8_codec.payload_bytes(n) + 4 * fp8_codec.scale_count(n), dtype=torch.uint8, pin_memory=True)
        nq = fp8_codec.payload_bytes(n)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            fp8_codec.encode(t, "e4m3", "cuda", q=host[:nq], scales=host[nq:].view(torch.float32), max_ctas=16)
        side.synchronize()
        self.assertTrue(torch.equal(host[:nq], q_dev.cpu()))
        self.assertTrue(torch.equal(host[nq:].view(torch.float32), s_dev.cpu()))
        with self.assertRaisesRegex(RuntimeError, "pageable"):
            pageable = torch.empty(nq, dtype=torch.uint8)
            fp8_codec.encode(t, "e4m3", "cuda", q=pageable, scales=torch.empty(n // 128 + 1, dtype=torch.float32))


class CudaSwiglu(unittest.TestCase):
    def test_fused_restore_equals_decodes_and_torchs_silu_and_mul(self):
        if not fp8_codec.cuda_kernels_available():
            self.skipTest("needs the CUDA kernels")
        torch.manual_seed(3)
        for dtype in DTYPES:
            for n in (4 * 2048 * 688, 1000, 129):
                g = (torch.randn(n, device="cuda") * 3).to(dtype)
                u = torch.randn(n, device="cuda").to(dtype)
                qg, qu = fp8_codec.encode(g, "e4m3", "cuda"), fp8_codec.encode(u, "e4m3", "cuda")
                got = fp8_codec.decode_swiglu(qg, qu, n, "e4m3", dtype, "cuda", max_ctas=8)
                dg = fp8_codec.decode(*qg, n, "e4m3", dtype, "cuda")
                du = fp8_codec.decode(*qu, n, "e4m3", dtype, "cuda")
                act = torch.nn.functional.silu(dg)
                want = (dg, du, act, act * du)
                with self.subTest(dtype=dtype, n=n):
                    self.assertTrue(torch.equal(got[0], dg) and torch.equal(got[1], du))
                    for units, a, b in zip((1, 2), got[2:], want[2:]):
                        # torch's silu: x / (1 + exp(-x)) in float, as the kernel's (expf may
                        # differ in its last bits, moving a rounding to a 16-bit dtype by one
                        # unit now and then; the product's factor may be one unit off already).
                        diff = (a.float() - b.float()).abs()
                        ulp = units * b.float().abs() * {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10,
                                                         torch.float32: 2.0 ** -20}[dtype] + 1e-30
                        self.assertTrue(bool((diff <= ulp).all()), float((diff / ulp).max()))
                        if dtype != torch.float32:
                            self.assertLessEqual(int((diff > 0).sum()), max(1, n // 1000))
                    host = fp8_codec.decode_swiglu(tuple(t.cpu() for t in qg), tuple(t.cpu() for t in qu), n, "e4m3",
                                                   dtype, "host")
                    self.assertTrue(torch.equal(host[0], dg.cpu()) and torch.equal(host[1], du.cpu()))


class CudaSteps(unittest.TestCase):
    def steps(self, wrap, n=4):
        torch.manual_seed(0)
        model = LlamaLike(vocab=512, d=256, ffn=688, layers=4, heads=4).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        tokens = torch.randint(0, 512, (4, 256), device="cuda")
        ctx = wrap(model)
        losses = []
        for _ in range(n):
            loss = loss_in(model, tokens, ctx, torch.bfloat16)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        torch.cuda.synchronize()
        return losses, ctx

    def test_alone_and_with_offload(self):
        ref, _ = self.steps(lambda m: None)
        got, comp = self.steps(lambda m: vramkit.compress_activations(m, modules=ac.MODULES, min_bytes=0))
        st = comp.stats()
        self.assertGreater(st["compressed"], 0)
        self.assertLessEqual(st["stored_bytes"], 0.55 * st["input_bytes"])
        both, off = self.steps(lambda m: vramkit.offload_activations(
            m, min_bytes=0, compress=vramkit.compress_activations(m, modules=ac.MODULES, min_bytes=0)))
        self.assertGreater(off.stats()["offloaded"], 0)
        off.wait()
        self.assertEqual(off.stats()["live_records"], 0)
        for a, b, c in zip(ref, got, both):
            self.assertTrue(abs(a - b) < 0.05 * abs(a) and abs(a - c) < 0.05 * abs(a), (a, b, c))
        self.assertLess(got[-1], got[0])

    def test_offload_with_compression_equals_compression_alone(self):
        # The fused encode into pinned memory and the encode on the device give the same bits,
        # so the gradients of compression through offload equal compression alone's (up to the
        # attention backward's own run-to-run noise, far below fp8's error).
        def grads(wrap):
            torch.manual_seed(0)
            model = LlamaLike(vocab=512, d=256, ffn=688, layers=4, heads=4).cuda()
            tokens = torch.randint(0, 512, (4, 256), device="cuda")
            ctx = wrap(model)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                with ctx:
                    loss = model(tokens)
            loss.backward()
            return [p.grad.float() for p in model.parameters()], ctx

        alone, _ = grads(lambda m: vramkit.compress_activations(m, min_bytes=0))
        both, off = grads(lambda m: vramkit.offload_activations(
            m, min_bytes=0, compress=vramkit.compress_activations(m, min_bytes=0)))
        self.assertGreater(off.stats()["offloaded_bytes"], 0)
        for a, b in zip(alone, both):
            self.assertLess(float((a - b).norm() / (a.norm() + 1e-12)), 1e-4)
    def test_side_stream_encode_equals_the_current_stream_one(self):
        # The encode on a side stream reads the same tensor (after its producer) and the decode
        # waits for it: the same bits as encoding in line, step after step.
        if not fp8_codec.cuda_kernels_available():
            self.skipTest("needs the CUDA kernels")

        def run(side):
            torch.manual_seed(0)
            model = LlamaLike(vocab=512, d=256, ffn=688, layers=4, heads=4).cuda()
            tokens = torch.randint(0, 512, (4, 256), device="cuda")
            comp = vramkit.compress_activations(model, modules=ac.MODULES, min_bytes=0, side_stream=side)
            out = []
            for _ in range(2):
                model.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    with comp:
                        loss = model(tokens)
                loss.backward()
                out.append([loss.detach()] + [p.grad.clone() for p in model.parameters()])
            return out, comp

        inline, _ = run(False)
        side, comp = run(True)
        self.assertGreater(comp.stats()["compressed"], 0)
        for a, b in zip(inline, side):
            for x, y in zip(a, b):
                self.assertLess(float((x.float() - y.float()).norm() / (x.float().norm() + 1e-12)), 1e-4)

    def test_recompute_ahead_on_the_side_stream_equals_in_line(self):
        # Products and silu(gate) recomputed ahead on the side stream (decode_ahead) read the
        # same factors as when recomputed at use: the same gradients, up to the attention
        # backward's run-to-run noise.
        def run(ahead):
            return recompute_step(decode_ahead=ahead)

        inline, st0 = run(0)
        ahead, st = run(2)
        self.assertEqual(st0["decoded_ahead"], 0)
        self.assertGreater(st["decoded_ahead"], 0)
        self.assertGreaterEqual(st["recomputed"], 2 * 4)  # silu(gate) and its product per block
        for a, b in zip(inline, ahead):
            self.assertLess(float((a - b).norm() / (a.norm() + 1e-12)), 1e-4)

    def test_fused_swiglu_restore_equals_the_separate_kernels(self):
        # The gated MLP's gate, up, silu(gate) and product restored ahead by one kernel give the
        # gradients of two decodes and torch's silu and mul (up to the attention backward's
        # run-to-run noise); with side_ctas bounding the side stream's kernels too.
        apart, st0 = recompute_step(fuse_swiglu=False)
        fused, st = recompute_step(fuse_swiglu=True, side_ctas=8)
        self.assertEqual(st0["swiglu_fused"], 0)
        self.assertGreaterEqual(st["swiglu_fused"], 3)  # every block's MLP but the last (not decoded ahead)
        for a, b in zip(apart, fused):
            self.assertLess(float((a - b).norm() / (a.norm() + 1e-12)), 1e-4)


class CudaSelectiveCompressed(unittest.TestCase):
    """Selective (s) and selective-offload (h) blocks with compress=: their GEMM outputs (the
    MLP's and o_proj's; q, k, v stay exact for the attention kernel) stored or copied as fp8, a
    few steps' gradients within fp8 error of the same mix uncompressed."""

    MIX = ["selective", "selective-offload", "selective", "keep"]

    def steps(self, compress, n=3):
        from vramkit import activation_offload as ao

        if not ao._has_context_fn():  # noqa: SLF001
            self.skipTest("the selective policies need torch >= 2.1 (checkpoint's context_fn)")
        torch.manual_seed(0)
        model = LlamaLike(vocab=512, d=256, ffn=688, layers=4, heads=4).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        tokens = torch.randint(0, 512, (4, 256), device="cuda")
        comp = vramkit.compress_activations(model, modules=ac.MODULES, min_bytes=0) if compress else None
        ctx = vramkit.offload_activations(model, mix=self.MIX, min_bytes=0, compress=comp)
        out = []
        for _ in range(n):
            loss = loss_in(model, tokens, ctx, torch.bfloat16)
            loss.backward()
            out.append((loss.item(), [p.grad.float().clone() for p in model.parameters()]))
            opt.step()
            opt.zero_grad(set_to_none=True)
        ctx.wait()
        torch.cuda.synchronize()
        return out, ctx

    def test_gradients_within_fp8_error_and_bytes_shrink(self):
        ref, plain = self.steps(False)
        got, comp = self.steps(True)
        for (la, ga), (lb, gb) in zip(ref, got):
            self.assertLess(abs(la - lb), 0.02 * abs(la), (la, lb))
            for a, b in zip(ga, gb):
                if a.norm() > 0:
                    self.assertLess(float((a - b).norm() / a.norm()), 0.1)
        s0, s1 = plain.stats(), comp.stats()
        self.assertEqual(s0["selective_compressed"], 0)
        # Per block: o_proj, gate, up, down; q, k, v exact.
        self.assertEqual(s1["selective_compressed"], 3 * 3 * 4)
        self.assertEqual(s1["selective_saved"], s0["selective_saved"])
        self.assertLess(s1["selective_kept_bytes"], s0["selective_kept_bytes"])
        self.assertLess(s1["offloaded_bytes"], s0["offloaded_bytes"])
        self.assertEqual(s1["live_records"], 0)


if __name__ == "__main__":
    unittest.main()
