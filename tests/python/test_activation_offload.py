"""CPU tests of vramkit.offload_activations: selection, thresholds, bookkeeping, no leak, exact
gradients. The CUDA cases are in test_offload_gpu.py."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _skip import need_torch  # noqa: E402

need_torch()

import torch  # noqa: E402

import vramkit  # noqa: E402
from _models import TinyLM, forward, grads  # noqa: E402


def run(model, tokens, ctx=None):
    model.zero_grad(set_to_none=True)
    loss = forward(model, tokens, ctx)
    loss.backward()
    return loss.detach(), grads(model)


class ActivationOffloadCpu(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.model = TinyLM()
        self.tokens = torch.randint(0, 64, (2, 16))

    def ctx(self, **kw):
        kw.setdefault("min_bytes", 256)
        return vramkit.offload_activations(self.model, offload_cpu_tensors=True, **kw)

    def assert_bitwise(self, ref, got):
        self.assertTrue(torch.equal(ref[0], got[0]))
        for a, b in zip(ref[1], got[1]):
            self.assertTrue(torch.equal(a, b))

    def test_gradients_bitwise_equal_for_every_mix(self):
        ref = run(self.model, self.tokens)
        for mix in (["offload"] * 4, ["keep"] * 4, ["checkpoint"] * 4,
                    ["offload", "checkpoint", "keep", "offload"]):
            for outside in ("keep", "offload"):
                with self.subTest(mix=mix, outside=outside):
                    ctx = self.ctx(mix=mix, outside=outside)
                    self.assert_bitwise(ref, run(self.model, self.tokens, ctx))

    def test_offloads_only_selected_blocks(self):
        everything = self.ctx(mix=["offload"] * 4)
        run(self.model, self.tokens, everything)
        half = self.ctx(mix=["offload", "keep", "offload", "keep"])
        run(self.model, self.tokens, half)
        n_all, n_half = everything.stats()["offloaded"], half.stats()["offloaded"]
        self.assertGreater(n_all, 0)
        self.assertEqual(n_half * 2, n_all)  # the blocks are identical
        self.assertGreater(half.stats()["kept"]["block"], 0)
        self.assertEqual(everything.stats()["kept"]["block"], 0)

    def test_checkpointed_blocks_save_nothing_and_are_restored(self):
        ctx = self.ctx(mix=["checkpoint"] * 4)
        run(self.model, self.tokens, ctx)
        self.assertEqual(ctx.stats()["offloaded"], 0)
        for layer in self.model.layers:
            self.assertNotIn("forward", layer.__dict__)

    def test_threshold_and_parameters_stay(self):
        big = self.ctx(min_bytes=1 << 40)
        run(self.model, self.tokens, big)
        s = big.stats()
        self.assertEqual(s["offloaded"], 0)
        self.assertEqual(s["kept"]["small"], s["packed"])
        zero = self.ctx(min_bytes=0)
        run(self.model, self.tokens, zero)
        s = zero.stats()
        self.assertGreater(s["kept"]["parameter"], 0)  # linear weights saved for backward
        self.assertGreater(s["offloaded"], 0)
        self.assertEqual(s["offloaded"] + s["deduplicated"] + sum(s["kept"].values()), s["packed"])

    def test_views_of_parameters_stay(self):
        w = torch.nn.Parameter(torch.randn(64, 64))
        ctx = vramkit.offload_activations(min_bytes=0, offload_cpu_tensors=True)
        with ctx:
            y = (torch.randn(8, 64, requires_grad=True) @ w.t()).sum()  # saves w.t(), a view
        y.backward()
        self.assertGreater(ctx.stats()["kept"]["parameter"], 0)

    def test_cpu_tensors_stay_unless_asked(self):
        ctx = vramkit.offload_activations(self.model, min_bytes=0)
        run(self.model, self.tokens, ctx)
        s = ctx.stats()
        self.assertEqual(s["offloaded"], 0)
        self.assertEqual(s["kept"]["device"], s["packed"])

    def test_no_pinned_memory_held_after_backward_or_dropped_graph(self):
        ctx = self.ctx()
        for _ in range(3):
            run(self.model, self.tokens, ctx)
            self.assertEqual(ctx.pool.stats()["in_use_bytes"], 0)
            self.assertEqual(ctx.stats()["live_records"], 0)
        allocations = ctx.pool.stats()["host_allocations"]
        run(self.model, self.tokens, ctx)
        self.assertEqual(ctx.pool.stats()["host_allocations"], allocations)  # buffers reused
        with ctx:
            loss = self.model(self.tokens)
        self.assertGreater(ctx.pool.stats()["in_use_bytes"], 0)
        del loss  # graph freed without a backward
        self.assertEqual(ctx.pool.stats()["in_use_bytes"], 0)
        self.assertEqual(ctx.stats()["live_records"], 0)

    def test_backward_fetches_in_reverse_block_order_with_prefetch(self):
        ctx = self.ctx(prefetch=1)
        run(self.model, self.tokens, ctx)
        order = ctx.stats()["fetch_order"]
        self.assertEqual(order, sorted(order, reverse=True))
        self.assertEqual(len(order), len(set(order)))
        self.assertGreater(ctx.stats()["prefetched"], 0)
        none = self.ctx(prefetch=0)
        run(self.model, self.tokens, none)
        self.assertEqual(none.stats()["prefetched"], 0)

    def test_prefetch_blocks_fetches_when_a_block_above_starts_its_backward(self):
        ref = run(self.model, self.tokens)
        ahead = self.ctx(mix=["offload", "keep", "keep", "keep"], prefetch=0, prefetch_blocks=2)
        self.assert_bitwise(ref, run(self.model, self.tokens, ahead))
        s = ahead.stats()
        self.assertGreater(s["fetched"], 0)
        self.assertEqual(s["prefetched"], s["fetched"])  # all before block 0's first unpack
        near = self.ctx(mix=["offload", "keep", "keep", "keep"], prefetch=0, prefetch_blocks=0)
        self.assert_bitwise(ref, run(self.model, self.tokens, near))
        self.assertEqual(near.stats()["prefetched"], 0)
        spread = self.ctx(mix=["offload", "checkpoint", "offload", "keep"], prefetch=0, prefetch_blocks=1)
        self.assert_bitwise(ref, run(self.model, self.tokens, spread))
        s = spread.stats()
        self.assertEqual(s["prefetched"], s["fetched"])
        self.assertEqual(s["fetch_order"], sorted(s["fetch_order"], reverse=True))
        self.assertEqual(spread.pool.stats()["in_use_bytes"], 0)
        with self.assertRaises(ValueError):
            self.ctx(prefetch_blocks=-1)

    def test_same_tensor_saved_twice_is_copied_once(self):
        x = torch.randn(1024, requires_grad=True)
        ctx = vramkit.offload_activations(min_bytes=0, offload_cpu_tensors=True)
        with ctx:
            h = x * 2
            y = (h * h).sum()  # mul saves h twice
        y.backward()
        self.assertEqual(ctx.stats()["deduplicated"], 1)
        self.assertTrue(torch.equal(x.grad, 8 * x.detach()))

    def test_strides_and_bits_come_back(self):
        base = torch.randn(32, 16)
        for t in (base.t(), base[:, ::2], base.to(torch.bfloat16), base > 0):
            ctx = vramkit.offload_activations(min_bytes=0, offload_cpu_tensors=True)
            with ctx:
                rec = ctx._pack(t)
            self.assertEqual(ctx.stats()["offloaded"], 1)
            back = ctx._unpack(rec)
            self.assertEqual((back.shape, back.stride(), back.dtype), (t.shape, t.stride(), t.dtype))
            self.assertTrue(torch.equal(back, t))
            self.assertNotEqual(back.data_ptr(), t.data_ptr())

    def test_bad_options(self):
        with self.assertRaises(ValueError):
            vramkit.offload_activations(self.model, mix=["offload"] * 3)
        with self.assertRaises(ValueError):
            vramkit.offload_activations(self.model, mix=["offload", "bogus", "keep", "keep"])
        with self.assertRaises(ValueError):
            vramkit.offload_activations(self.model, offload=[0, 1], checkpoint=[1])
        with self.assertRaises(ValueError):
            vramkit.offload_activations(self.model, offload=[4])
        with self.assertRaises(ValueError):
            vramkit.offload_activations(self.model, outside="maybe")
        with self.assertRaises(ValueError):
            vramkit.offload_activations(torch.nn.Linear(2, 2))  # no blocks
        ctx = vramkit.offload_activations(self.model, offload=[self.model.layers[2]])
        self.assertEqual(ctx.mix, ["keep", "keep", "offload", "keep"])
        with self.assertRaisesRegex(ValueError, "host_lead_blocks"):
            vramkit.offload_activations(self.model, host_lead_blocks=-1)

    def test_host_lead_bound_waits_only_for_cuda_mixes_that_copy(self):
        # CPU tensors have no device to wait for: the bound does nothing and the gradients are
        # those of the run without offload (its waits are counted on the GPU: python.offload_gpu).
        tokens = torch.randint(0, 64, (2, 16))
        ref = run(self.model, tokens)
        for mix in (["offload", "checkpoint", "keep", "offload"], ["keep", "checkpoint", "keep", "keep"]):
            ctx = self.ctx(mix=mix, host_lead_blocks=1)
            self.assertEqual(ctx.host_lead_blocks, 1)
            self.assert_bitwise(ref, run(self.model, tokens, ctx))
            self.assertEqual(ctx.stats()["lead_waits"], 0)
            self.assertEqual(ctx._block_starts, [])  # noqa: SLF001


def _has_dispatch_modes():
    try:
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: F401
    except ImportError:
        return False
    return True


class SelectiveCpu(unittest.TestCase):
    """The selective policies: their dispatch modes (torch with TorchDispatchMode), the whole
    policy where torch.utils.checkpoint has context_fn, the refusal where it has not."""

    def setUp(self):
        torch.manual_seed(0)
        self.model = TinyLM()
        self.tokens = torch.randint(0, 64, (2, 16))

    @unittest.skipUnless(_has_dispatch_modes(), "torch has no TorchDispatchMode")
    def test_replay_returns_the_kept_gemm_outputs_and_recomputes_the_rest(self):
        from vramkit import activation_offload as ao

        engine = ao.offload_activations(blocks=[], mix=[])
        save, replay = ao._selective_modes(engine, False)  # noqa: SLF001
        x, w = torch.randn(8, 16), torch.randn(16, 16)
        x0 = x.clone()
        with save:
            y = torch.relu(x @ w) + x.sum()
        self.assertEqual(engine.stats()["selective_saved"], 1)
        x.add_(1.0)  # the GEMM's output is kept: only relu and the sum see the new x
        with replay:
            again = torch.relu(x @ w) + x.sum()
        self.assertTrue(torch.equal(again, torch.relu(x0 @ w) + x.sum()))
        self.assertFalse(torch.equal(again, y))
        with self.assertRaisesRegex(RuntimeError, "more GEMM/attention ops"):
            with replay:
                x @ w

    @unittest.skipUnless(_has_dispatch_modes(), "torch has no TorchDispatchMode")
    def test_outputs_the_recompute_did_not_ask_for_are_freed_when_it_ends(self):
        # checkpoint stops a recompute early once backward has what it needs: the offloaded
        # outputs after that point must not hold their host buffers until the graph is collected.
        from vramkit import activation_offload as ao

        engine = ao.offload_activations(blocks=[], mix=[], min_bytes=64, offload_cpu_tensors=True)
        engine.__enter__()
        engine.__exit__(None, None, None)
        save, replay = ao._selective_modes(engine, True)  # noqa: SLF001
        x, w = torch.randn(8, 16), torch.randn(16, 16)
        with save:
            y = x @ w
            z = y @ w
        self.assertEqual(engine.stats()["offloaded"], 2)
        self.assertEqual(engine.stats()["live_records"], 2)
        with replay:
            again = x @ w  # the second GEMM is never replayed
        self.assertTrue(torch.equal(again, y))
        self.assertEqual(engine.stats()["live_records"], 0)
        self.assertEqual(engine.pool.stats()["in_use_bytes"], 0)
        del z

    @unittest.skipUnless(_has_dispatch_modes() and hasattr(torch._C, "_SetExcludeDispatchKeyGuard"),
                         "torch cannot detach below autograd with a shared version counter")
    def test_an_output_changed_in_place_is_refused(self):
        from vramkit import activation_offload as ao

        engine = ao.offload_activations(blocks=[], mix=[])
        save, replay = ao._selective_modes(engine, False)  # noqa: SLF001
        x, w = torch.randn(4, 4), torch.randn(4, 4)
        with save:
            y = x @ w
            y.mul_(2)
        with self.assertRaisesRegex(RuntimeError, "modified in place"):
            with replay:
                x @ w

    def test_policy_names(self):
        from vramkit import activation_offload as ao

        self.assertIn("selective", ao.POLICIES)
        self.assertIn("selective-offload", ao.POLICIES)
        self.assertIn("checkpoint-offload", ao.POLICIES)
        with self.assertRaisesRegex(ValueError, "selective-offload"):
            vramkit.offload_activations(self.model, mix=["selective", "sac", "keep", "keep"])

    def test_selective_mix_where_checkpoint_has_no_context_fn_is_refused(self):
        from vramkit import activation_offload as ao

        if ao._has_context_fn():  # noqa: SLF001
            self.skipTest("this torch has checkpoint(context_fn=)")
        with self.assertRaisesRegex(ValueError, "context_fn"):
            vramkit.offload_activations(self.model, mix=["selective"] * 4)

    def test_checkpoint_offload_moves_only_the_block_input(self):
        # torch.utils.checkpoint (torch >= 2.1) saves a block's input through the outer hooks
        # and the rest through its own: a checkpoint-offload block sends exactly its input (one
        # tensor) to the pool, fetched back for the recompute; gradients equal bit for bit.
        from vramkit import activation_offload as ao

        if not ao._has_context_fn():  # noqa: SLF001
            with self.assertRaisesRegex(ValueError, "checkpoint-offload needs"):
                vramkit.offload_activations(self.model, mix=["checkpoint-offload"] * 4)
            return
        ref = run(self.model, self.tokens)
        ctx = self.ctx(mix=["checkpoint-offload", "checkpoint-offload", "checkpoint", "keep"])
        got = run(self.model, self.tokens, ctx)
        self.assert_bitwise(ref, got)
        s = ctx.stats()
        self.assertEqual(s["offloaded"], 2)
        self.assertEqual(s["fetched"], 2)
        self.assertEqual(s["offloaded_bytes"], 2 * self.tokens.numel() * 32 * 4)  # fp32 inputs of width 32
        self.assertEqual(s["live_records"], 0)

    def test_selective_gradients_bitwise_equal(self):
        from vramkit import activation_offload as ao

        if not ao._has_context_fn():  # noqa: SLF001
            self.skipTest("torch.utils.checkpoint has no context_fn in torch %s" % torch.__version__)
        ref = run(self.model, self.tokens)
        for mix in (["selective"] * 4, ["selective-offload", "selective", "checkpoint", "keep"]):
            ctx = vramkit.offload_activations(self.model, mix=mix, min_bytes=256, offload_cpu_tensors=True)
            got = run(self.model, self.tokens, ctx)
            self.assertTrue(torch.equal(ref[0], got[0]))
            for a, b in zip(ref[1], got[1]):
                self.assertTrue(torch.equal(a, b))
            self.assertGreater(ctx.stats()["selective_saved"], 0)
            self.assertEqual(ctx.stats()["live_records"], 0)


def _selective_step(engine, offload, block, x, grad):
    """A selective block as torch.utils.checkpoint runs it (no context_fn needed): the forward
    under the engine's Save mode without saving anything, then, as in backward, the recompute
    under its Replay mode and the backward through it. Returns (output, x's gradient)."""
    from vramkit import activation_offload as ao

    save, replay = ao._selective_modes(engine, offload)  # noqa: SLF001
    with engine, torch.no_grad(), save:  # entered: the compressor's module scopes are armed
        y = block(x)
    x = x.detach().requires_grad_(True)
    with replay:
        again = block(x)
    again.backward(grad)
    return y, x.grad


@unittest.skipUnless(_has_dispatch_modes(), "torch has no TorchDispatchMode")
class SelectiveCompressedCpu(unittest.TestCase):
    """Selective blocks with compress=: their GEMM outputs stored as fp8 on the device (s) or
    copied to the pool as fp8 (h), restored for the recompute within fp8 error."""

    def setUp(self):
        from _models import LlamaBlock
        from vramkit import fp8_codec

        if fp8_codec.default_backend(torch.device("cpu")) is None:
            self.skipTest("no fp8 backend on the CPU (build libvramkit_compress.so)")
        torch.manual_seed(0)
        self.block = LlamaBlock(64, 4, 128, norm=torch.nn.LayerNorm)
        self.x = torch.randn(2, 32, 64)
        self.grad = torch.randn(2, 32, 64)

    def engine(self, compress=True, **kw):
        from _models import LlamaBlock

        # keep_ends: self.block is the first of three.
        blocks = [self.block] + [LlamaBlock(64, 4, 128, norm=torch.nn.LayerNorm) for _ in range(2)]
        comp = vramkit.compress_activations(blocks=blocks, modules=("mlp", "attn"), min_bytes=0, **kw) \
            if compress else None
        return vramkit.offload_activations(blocks=[], mix=[], min_bytes=0, offload_cpu_tensors=True, compress=comp,
                                           pool=vramkit.PinnedPool(pin=False))

    def reference(self):
        self.block.zero_grad(set_to_none=True)
        x = self.x.clone().requires_grad_(True)
        y = self.block(x)
        y.backward(self.grad)
        return y.detach(), x.grad, [p.grad.clone() for p in self.block.parameters()]

    def run_mode(self, engine, offload):
        self.block.zero_grad(set_to_none=True)
        y, gx = _selective_step(engine, offload, self.block, self.x, self.grad)
        return y, gx, [p.grad.clone() for p in self.block.parameters()]

    def assert_close(self, ref, got, exact):
        self.assertTrue(torch.equal(ref[0], got[0]))  # the forward is untouched
        for a, b in zip([ref[1]] + ref[2], [got[1]] + got[2]):
            if exact:
                self.assertTrue(torch.equal(a, b))
            else:
                self.assertLess(float((a - b).norm() / (a.norm() + 1e-12)), 0.1)

    def test_without_compress_bit_identical(self):
        ref = self.reference()
        for offload in (False, True):
            e = self.engine(compress=False)
            self.assert_close(ref, self.run_mode(e, offload), exact=True)
            self.assertEqual(e.stats()["selective_compressed"], 0)

    def test_selective_stores_fp8_on_the_device(self):
        ref = self.reference()
        plain, comp = self.engine(compress=False), self.engine()
        self.run_mode(plain, False)
        got = self.run_mode(comp, False)
        self.assert_close(ref, got, exact=False)
        s0, s1 = plain.stats(), comp.stats()
        # q, k, v, o, gate, up, down (the explicit attention's bmms are outside the scopes).
        self.assertEqual(s1["selective_compressed"], 7)
        self.assertEqual(s1["selective_saved"], s0["selective_saved"])
        fp32 = s1["selective_compressed_input_bytes"]
        rest = s0["selective_kept_bytes"] - fp32  # what stays exact
        self.assertLess(s1["selective_kept_bytes"] - rest, 0.3 * fp32)  # fp32 -> fp8 + scales
        self.assertEqual(comp.compress.stats()["selective_outputs"], 7)
        self.assertEqual(s1["offloaded"], 0)

    def test_selective_offload_copies_fp8(self):
        ref = self.reference()
        plain, comp = self.engine(compress=False), self.engine()
        self.run_mode(plain, True)
        got = self.run_mode(comp, True)
        self.assert_close(ref, got, exact=False)
        s0, s1 = plain.stats(), comp.stats()
        self.assertEqual(s1["selective_compressed"], 7)
        self.assertEqual(s1["offloaded"], s0["offloaded"])
        fp32 = s1["selective_compressed_input_bytes"]
        self.assertLess(s1["offloaded_bytes"] - (s0["offloaded_bytes"] - fp32), 0.3 * fp32)
        self.assertEqual(s1["live_records"], 0)
        self.assertEqual(comp.pool.stats()["in_use_bytes"], 0)

    def test_keep_ends_leaves_the_block_exact(self):
        ref = self.reference()
        e = self.engine(keep_ends=True)
        self.assert_close(ref, self.run_mode(e, False), exact=True)
        self.assertEqual(e.stats()["selective_compressed"], 0)

    def test_what_an_attention_kernel_reads_stays_exact(self):
        # An op standing for the fused attention kernel (sigmoid here): the attention
        # projections' outputs computed before it stay exact, o_proj's after it is compressed.
        from vramkit import activation_offload as ao

        saved = ao.SELECTIVE_ATTENTION_OPS, ao._op_kinds  # noqa: SLF001
        ao.SELECTIVE_ATTENTION_OPS, ao._op_kinds = saved[0] + ("sigmoid",), None  # noqa: SLF001
        try:
            attn = self.block.self_attn
            fwd = attn.forward
            attn.forward = lambda x, cos=None, sin=None: attn.o_proj(torch.sigmoid(attn.q_proj(x) + attn.k_proj(x)))
            e = self.engine()
            _selective_step(e, False, self.block, self.x, self.grad)
            self.assertEqual(e.stats()["selective_compressed"], 4)  # o, gate, up, down
        finally:
            attn.forward = fwd
            ao.SELECTIVE_ATTENTION_OPS, ao._op_kinds = saved  # noqa: SLF001


if __name__ == "__main__":
    unittest.main()
