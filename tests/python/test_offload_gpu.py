"""GPU tests of vramkit's offload (CTest label gpu): exact gradients with activation offload under
amp-bf16, a capped run that runs out of memory without offload and completes with it, and
OffloadedAdamW against torch.optim.AdamW with pinned state and copy streams."""

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

from _skip import need_cuda  # noqa: E402

if __name__ == "__main__" and "--capped-child" not in sys.argv:
    need_cuda()

import torch  # noqa: E402

import vramkit  # noqa: E402
from _models import LlamaLike, TinyLM, forward, grads  # noqa: E402


def step(model, tokens, ctx=None):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = forward(model, tokens, ctx)
    loss.backward()
    return loss.detach(), grads(model)


def capped_child():
    """Measures peaks, caps between them, and reports what ran out of memory (one JSON line)."""
    torch.manual_seed(0)
    model = TinyLM(vocab=512, d=512, ffn=1536, layers=8).cuda()
    tokens = torch.randint(0, 512, (32, 512), device="cuda")
    mix = ["offload"] * 8
    out = {}
    for name, make in (("plain", lambda: None),
                       ("offload", lambda: vramkit.offload_activations(model, mix=mix, min_bytes=1 << 16))):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        ctx = make()
        step(model, tokens, ctx)
        if ctx is not None:
            ctx.wait()
        out[name + "_peak"] = torch.cuda.max_memory_allocated()
    cap = (out["plain_peak"] + out["offload_peak"]) // 2
    out["cap"] = cap
    total = torch.cuda.get_device_properties(0).total_memory
    for name, make in (("plain", lambda: None),
                       ("offload", lambda: vramkit.offload_activations(model, mix=mix, min_bytes=1 << 16))):
        torch.cuda.empty_cache()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        # The cap applies to this process's whole pool: the model's own memory counts against it.
        torch.cuda.set_per_process_memory_fraction(cap / total)
        try:
            loss, _ = step(model, tokens, make())
            out[name] = "ok"
            out[name + "_loss"] = loss.item()
        except torch.cuda.OutOfMemoryError:
            out[name] = "oom"
        finally:
            torch.cuda.set_per_process_memory_fraction(1.0)
        out[name + "_base"] = base
    print("RESULT " + json.dumps(out))


class OffloadGpu(unittest.TestCase):
    def assert_steps_equal(self, model, tokens, ctx, ref):
        """Two steps inside ctx (the second reuses the pool's buffers) give ref's loss and
        gradients bit for bit."""
        for _ in range(2):
            got = step(model, tokens, ctx)
            ctx.wait()
            self.assertTrue(torch.equal(ref[0], got[0]))
            for a, b in zip(ref[1], got[1]):
                self.assertTrue(torch.equal(a, b))

    def test_gradients_bitwise_equal_with_offload(self):
        torch.manual_seed(0)
        model = TinyLM(vocab=256, d=256, ffn=768, layers=6).cuda()
        tokens = torch.randint(0, 256, (8, 256), device="cuda")
        ref = step(model, tokens)
        for mix, prefetch, ahead, lead in ((["offload"] * 6, 1, 0, 0), (["offload", "checkpoint", "keep"] * 2, 2, 0, 0),
                                           (["offload"] * 6, 0, 0, 1), (["offload", "checkpoint", "keep"] * 2, 0, 3, 2),
                                           (["offload"] * 2 + ["checkpoint"] * 3 + ["keep"], 1, 4, 0),
                                           (["checkpoint-offload"] * 3 + ["checkpoint", "offload", "keep"], 1, 0, 0),
                                           (["checkpoint-offload"] * 5 + ["keep"], 0, 2, 2)):
            with self.subTest(mix=mix, prefetch=prefetch, prefetch_blocks=ahead, host_lead_blocks=lead):
                ctx = vramkit.offload_activations(model, mix=mix, min_bytes=4096, prefetch=prefetch,
                                                  prefetch_blocks=ahead, max_inflight_bytes=1 << 20,
                                                  host_lead_blocks=lead)
                self.assert_steps_equal(model, tokens, ctx, ref)
                s = ctx.stats()
                # The host waited at every block start from block d on, and at the last block's end.
                self.assertEqual(s["lead_waits"], 2 * (6 - lead + 1) if lead else 0)
                self.assertGreater(s["offloaded"], 0)
                self.assertGreater(s["fetched"], 0)
                self.assertEqual(s["live_records"], 0)
                self.assertEqual(ctx.pool.stats()["in_use_bytes"], 0)
                self.assertTrue(ctx.pool.pin)

    def test_selective_gradients_bitwise_equal(self):
        # Selective checkpointing runs the same kernels again on the same inputs and returns the
        # kept GEMM/attention outputs themselves: the loss and every gradient equal the run
        # without it bit for bit, with the kept outputs on the device or copied to the host and
        # back (eager attention's matmuls in TinyLM, SDPA in LlamaLike).
        # SDPA's backward may accumulate in a varying order over key blocks: one key block (128
        # tokens) keeps it deterministic, and the plain run is repeated to check that.
        for make, seq in ((lambda: TinyLM(vocab=256, d=256, ffn=768, layers=6), 256),
                          (lambda: LlamaLike(vocab=256, d=256, ffn=768, layers=6, heads=4), 128)):
            torch.manual_seed(0)
            model = make().cuda()
            tokens = torch.randint(0, 256, (8, seq), device="cuda")
            ref = step(model, tokens)
            again = step(model, tokens)
            if not all(torch.equal(a, b) for a, b in zip(ref[1], again[1])):
                self.skipTest("the plain %s run does not repeat bit for bit on this GPU" % type(model).__name__)
            for mix, ahead in ((["selective"] * 6, 0), (["selective-offload"] * 6, 0),
                               (["selective-offload", "selective", "checkpoint", "offload", "keep", "selective-offload"], 2),
                               (["checkpoint-offload"] * 5 + ["selective"], 2)):
                with self.subTest(model=type(model).__name__, mix=mix, prefetch_blocks=ahead):
                    ctx = vramkit.offload_activations(model, mix=mix, min_bytes=4096, prefetch_blocks=ahead,
                                                      max_inflight_bytes=1 << 20)
                    self.assert_steps_equal(model, tokens, ctx, ref)
                    s = ctx.stats()
                    self.assertGreater(s["selective_saved"], 0)
                    if "selective-offload" in mix or "checkpoint-offload" in mix:
                        self.assertGreater(s["offloaded"], 0)
                    self.assertEqual(s["live_records"], 0)
                    self.assertEqual(ctx.pool.stats()["in_use_bytes"], 0)

    def test_selective_keeps_less_than_keep_and_more_than_checkpoint(self):
        torch.manual_seed(0)
        model = LlamaLike(vocab=256, d=512, ffn=1536, layers=4, heads=8).cuda()
        tokens = torch.randint(0, 256, (8, 512), device="cuda")
        held = {}
        for policy in ("keep", "selective", "selective-offload", "checkpoint"):
            ctx = vramkit.offload_activations(model, mix=[policy] * 4, min_bytes=4096, max_inflight_bytes=0)
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = forward(model, tokens, ctx)
            torch.cuda.synchronize()
            ctx._release_copied()  # noqa: SLF001 - the copies out have completed
            held[policy] = torch.cuda.memory_allocated() - base
            loss.backward()
            ctx.wait()
        self.assertLess(held["selective"], held["keep"])
        self.assertLess(held["checkpoint"], held["selective"])
        self.assertLess(held["selective-offload"], held["selective"])

    def test_capped_run_needs_offload(self):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--capped-child"],
                           capture_output=True, text=True, timeout=240)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        self.assertTrue(line, p.stderr[-2000:])
        r = json.loads(line[0][7:])
        print(r)
        self.assertLess(r["offload_peak"], r["plain_peak"])
        self.assertEqual(r["plain"], "oom")
        self.assertEqual(r["offload"], "ok")

    def test_offloaded_adamw_matches_adamw(self):
        from test_offloaded_adamw import OffloadedAdamWTest

        t = OffloadedAdamWTest()
        for chunk in (4096, 1 << 20):
            opt = t.compare("cuda", chunk)
            st = next(iter(opt.state.values()))
            self.assertEqual(st["exp_avg"].device.type, "cpu")
            self.assertTrue(st["exp_avg"].is_pinned())


if __name__ == "__main__":
    if "--capped-child" in sys.argv:
        capped_child()
    else:
        unittest.main()
