"""vramkit.offload_plan: the offload time and peak model and the mix it chooses. The cases in
tests/data/offload/model_cases.json are answered by the C++ model too (offload_model_test)."""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from vramkit import offload_plan as om  # noqa: E402

GiB = 1 << 30
BASE = dict(block_bytes=2 * GiB, input_bytes=GiB // 8, t_fwd=0.02, t_bwd=0.04,
            d2h_bytes_per_s=50e9, h2d_bytes_per_s=50e9, other_bytes=20 * GiB, other_time_s=0.05)


def sim(mix, **kw):
    args = dict(BASE)
    args.update(kw)
    return om.simulate(mix, **args)


class OffloadModel(unittest.TestCase):
    def test_prefetch_blocks_hides_a_copy_longer_than_a_block(self):
        # One block's copy (2 GiB at 12 GB/s: 179 ms) takes several blocks' backward (40 ms +
        # 20 ms recompute): fetched when the offloaded block's backward starts it is exposed,
        # fetched five blocks ahead it is hidden.
        mix = ["offload", "offload"] + ["checkpoint"] * 6
        slow = dict(d2h_bytes_per_s=12e9, h2d_bytes_per_s=12e9, window_bytes=4 * GiB)
        near = sim(mix, **slow)
        ahead = sim(mix, prefetch_blocks=5, **slow)
        self.assertGreater(near["exposed_copy_s"], 0.1)
        self.assertLess(ahead["exposed_copy_s"], 1e-9)
        self.assertLess(ahead["step_time_s"], near["step_time_s"])
        # The peak counts the blocks fetched back beside the block being recomputed (less what
        # the blocks above it, through their backward, kept: here inputs alone). (With a copy-out
        # window of one block, so that the forward's end stays below.)
        spread = ["offload", "checkpoint", "checkpoint", "checkpoint", "offload", "checkpoint", "checkpoint", "checkpoint"]
        drained = dict(slow, d2h_bytes_per_s=50e9, window_bytes=2 * GiB)
        two = sim(spread, prefetch_blocks=5, **drained)
        one = sim(spread, prefetch_blocks=2, **drained)
        # Fetched five blocks ahead, block 0 is back when block 4's is recomputed, against block 1's
        # with two ahead: a block more, less the inputs of blocks 3 and 2, freed between them.
        self.assertEqual(two["device_peak_bytes"] - one["device_peak_bytes"], 2 * GiB - 2 * (GiB // 8))

    def test_blocks_above_free_what_they_kept_before_a_recompute_below(self):
        # A kept block on top is through its backward when the offloaded block below it is
        # fetched back and the block beside it recomputed: its bytes are not counted there.
        drained = dict(window_bytes=2 * GiB, prefetch_blocks=2)
        top_kept = sim(["offload", "checkpoint", "keep"], **drained)
        top_ck = sim(["offload", "checkpoint", "checkpoint"], **drained)
        # At the loss: 2 GiB kept against an input; in backward the same fetched block and
        # recompute, less the 2 GiB (kept) or 1/8 GiB (an input) freed above.
        self.assertEqual(top_kept["device_peak_bytes"] - top_ck["device_peak_bytes"], 2 * GiB - GiB // 8)

    def test_keep_everything_costs_compute_only(self):
        r = sim(["keep"] * 8)
        self.assertAlmostEqual(r["step_time_s"], 8 * 0.06 + 0.05)
        self.assertEqual(r["device_peak_bytes"], 20 * GiB + 16 * GiB)
        self.assertEqual(r["host_pinned_bytes"], 0)
        self.assertEqual(r["copy_s"], 0)

    def test_checkpoint_costs_one_forward_and_keeps_inputs(self):
        r = sim(["checkpoint"] * 8)
        self.assertAlmostEqual(r["step_time_s"], 8 * 0.08 + 0.05)
        self.assertEqual(r["device_peak_bytes"], 20 * GiB + GiB + 2 * GiB)

    def test_offload_moves_bytes_to_the_host(self):
        r = sim(["offload"] * 8)
        self.assertEqual(r["host_pinned_bytes"], 16 * GiB)
        self.assertLess(r["device_peak_bytes"], sim(["keep"] * 8)["device_peak_bytes"])
        self.assertAlmostEqual(r["copy_s"], 8 * 2 * (2 * GiB / 50e9))

    def test_fast_link_hides_copies(self):
        r = sim(["offload"] * 8, d2h_bytes_per_s=1e15, h2d_bytes_per_s=1e15)
        self.assertAlmostEqual(r["step_time_s"], 8 * 0.06 + 0.05, places=4)
        # Only the first copy back of the backward has nothing to hide behind.
        self.assertAlmostEqual(r["overlap"], 15 / 16, places=3)

    def test_slow_link_is_exposed_and_time_grows_with_offloaded_blocks(self):
        times = [sim(om.arrange(8, n, 0), d2h_bytes_per_s=5e9, h2d_bytes_per_s=5e9)["step_time_s"]
                 for n in range(9)]
        self.assertEqual(times, sorted(times))
        self.assertLess(sim(["offload"] * 8, d2h_bytes_per_s=5e9)["overlap"], 0.5)

    def test_arrange_spreads_offloaded_blocks(self):
        self.assertEqual(om.arrange(6, 2, 2), ["offload", "checkpoint", "offload", "checkpoint", "keep", "keep"])
        self.assertEqual(om.arrange(4, 0, 0), ["keep"] * 4)
        with self.assertRaises(ValueError):
            om.arrange(4, 3, 2)
        with self.assertRaises(ValueError):
            sim(["offload", "bogus"])

    def test_choose_keeps_everything_when_it_fits(self):
        mix, r = om.choose_mix(8, 100 * GiB, **BASE)
        self.assertEqual(mix, ["keep"] * 8)

    def test_choose_offloads_only_when_it_beats_checkpointing(self):
        cap = 28 * GiB
        fast = dict(BASE, d2h_bytes_per_s=100e9, h2d_bytes_per_s=100e9)  # a copy ~ a block's forward
        mix, r = om.choose_mix(8, cap, **fast)
        self.assertIn("offload", mix)
        self.assertLessEqual(r["device_peak_bytes"], cap)
        no_off = om.choose_mix(8, cap, allow_offload=False, **fast)
        self.assertLess(r["step_time_s"], no_off[1]["step_time_s"])
        # A link so slow that checkpointing wins: no block offloaded.
        slow = dict(BASE, d2h_bytes_per_s=1e8, h2d_bytes_per_s=1e8)
        mix, _ = om.choose_mix(8, cap, **slow)
        self.assertNotIn("offload", mix)

    def test_nothing_fits(self):
        self.assertIsNone(om.choose_mix(8, 10 * GiB, **BASE))

    def test_shared_cases(self):
        path = os.path.join(HERE, "..", "data", "offload", "model_cases.json")
        with open(path) as f:
            cases = json.load(f)
        self.assertGreater(len(cases), 3)
        for c in cases:
            with self.subTest(name=c["name"]):
                r = om.simulate(c["mix"], **c["inputs"])
                for k, v in c["expect"].items():
                    self.assertAlmostEqual(r[k], v, delta=1e-9 * max(1.0, abs(v)), msg=k)


if __name__ == "__main__":
    unittest.main()
