"""CPU tests of what compress_bench.py and compress_accuracy.py judge by: the round trip's bound
(an element outside it is counted, one inside is not), the accuracy verdict against bf16's own
reruns (a curve that differs more than they do is outside, one that differs less is within, the
window statistic keeps per-step noise out), and the summaries of cut-short runs."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import compress_accuracy as ca  # noqa: E402
import compress_bench as cb  # noqa: E402
import compress_offload as co  # noqa: E402

try:
    import torch
except ImportError:  # the accuracy logic needs no torch; the bound test does
    torch = None


def curve(n, shift=0.0, wiggle=0.0):
    """A falling loss curve, moved by `shift` and alternating by `wiggle` each step."""
    return [2.0 + 5.0 * 0.98 ** i + shift + (wiggle if i % 2 else -wiggle) for i in range(n)]


class AccuracyVerdict(unittest.TestCase):
    def runs(self, fp8_shift, fp8_wiggle=0.0):
        return {ca.REFERENCE: {"losses": curve(100)},
                ca.DATA_ORDER: {"losses": curve(100, 0.01, 0.05)},
                ca.INIT: {"losses": curve(100, 0.02)},
                "fp8 mlp,attn": {"losses": curve(100, fp8_shift, fp8_wiggle), "grad_rel_error_per_block": [0.01]}}

    def test_within_and_outside_bf16s_variation(self):
        res, text = ca.report(self.runs(0.015), 100, 1.0, ca.SHAPE)
        self.assertAlmostEqual(res["tolerance"]["final_mean_abs_diff"], 0.02)
        self.assertTrue(res["runs"]["fp8 mlp,attn"]["within_tolerance"])
        self.assertIn("within bf16's variation", text)
        res, text = ca.report(self.runs(0.03), 100, 1.0, ca.SHAPE)
        self.assertFalse(res["runs"]["fp8 mlp,attn"]["within_tolerance"])
        self.assertIn("OUTSIDE", text)
        # The bf16 reruns are not judged against themselves.
        self.assertNotIn("within_tolerance", res["runs"][ca.DATA_ORDER])

    def test_per_step_noise_averages_out_in_the_windows(self):
        # Alternating +-0.04 a step: a per-step max of 0.04, window means unmoved.
        res, _ = ca.report(self.runs(0.0, 0.04), 100, 1.0, ca.SHAPE)
        r = res["runs"]["fp8 mlp,attn"]
        self.assertAlmostEqual(r["step_max_abs_diff"], 0.04)
        self.assertLess(r["window_max_abs_diff"], 1e-9)
        self.assertLess(r["tail_window_max_abs_diff"], 1e-9)

    def test_the_steep_first_half_is_not_judged(self):
        # A large difference early only (a shift of the fall) leaves the verdict to the rest.
        runs = self.runs(0.0)
        runs["fp8 mlp,attn"]["losses"] = [x + (0.3 if i < 30 else 0.0) for i, x in enumerate(curve(100))]
        res, _ = ca.report(runs, 100, 1.0, ca.SHAPE)
        r = res["runs"]["fp8 mlp,attn"]
        self.assertAlmostEqual(r["window_max_abs_diff"], 0.3)
        self.assertTrue(r["within_tolerance"])
        self.assertTrue(r["within_tolerance"])

    def test_no_reference_no_verdict(self):
        res, text = ca.report({"fp8 mlp,attn": {"error": "exit 1: boom"}}, 0, 1.0, ca.SHAPE)
        self.assertIn("no bf16 run finished", text)
        self.assertIn("boom", text)


@unittest.skipIf(torch is None, "needs torch")
class RoundTripBound(unittest.TestCase):
    def test_counts_only_elements_outside_the_bound(self):
        x = torch.tensor([1.0, 2.0, -4.0, 0.5] * 32)
        scales = torch.tensor([4.0 / 448])
        ok = x * (1 + 2.0 ** -5)  # within 2^-4 relative
        self.assertEqual(cb.roundtrip_violations(x, ok, scales), 0)
        bad = ok.clone()
        bad[3] = 0.5 * (1 + 2.0 ** -3)  # twice the bound
        bad[7] = -0.5
        self.assertEqual(cb.roundtrip_violations(x, bad, scales), 2)


class Summaries(unittest.TestCase):
    def test_cut_short_bench_summary(self):
        res = {"configs": [{"config": "bf16", "skipped": "time budget spent (3 s left, ~9 s needed)"}],
               "kernels": {"error": "CUDA kernels not loadable: none"}, "planner": {"error": "no CLI"}}
        text = cb.summarize(res)
        self.assertIn("time budget spent", text)
        self.assertIn("kernels: CUDA kernels not loadable", text)
        self.assertIn("planner: no CLI", text)


class OffloadSummary(unittest.TestCase):
    def run_of(self, name, step, mix="ococ", ok=True):
        r = {"config": name, "ok": ok, "mix": [{"o": "offload", "c": "checkpoint"}[c] for c in mix],
             "peak_allocated_bytes": 30 << 30, "peak_reserved_bytes": 32 << 30,
             "plan": {"allocated_peak_bytes": 29 << 30, "step_time_s": 0.5}}
        if ok:
            r.update({"step_time_s": {"median": step, "n": 2}, "losses": [10.0, 9.0]})
        else:
            r.update({"error": "out of memory", "failed_at": {"step": 1, "phase": "backward"}})
        return r

    def test_ratio_and_verdict(self):
        res = {"cap_bytes": 33 << 30, "cap_fraction": 0.5, "planner_capacity_bytes": 34 << 30,
               "outside_bytes": 1 << 30, "budget_s": 22, "wall_s": 10,
               "configs": [self.run_of("vramkit-act", 0.5), self.run_of("vramkit-act+compress", 0.45)]}
        text = co.summarize(res)
        self.assertIn("0.900x (target < 1: met)", text)
        self.assertIn("| vramkit-act | ococ | 0.500 (2) | 30.00 | 29.00 | -3.3% |", text)
        res["configs"][1] = self.run_of("vramkit-act+compress", 0.55)
        self.assertIn("1.100x (target < 1: NOT met)", co.summarize(res))

    def test_failed_configuration_is_reported(self):
        res = {"configs": [self.run_of("vramkit-act", 0.5), self.run_of("vramkit-act+compress", 0, ok=False)]}
        text = co.summarize(res)
        self.assertIn("out of memory (at step 1, backward)", text)
        self.assertIn("not measured (a configuration did not run)", text)
        self.assertIn("not measured: no cap", co.summarize({"error": "no cap", "configs": []}))


if __name__ == "__main__":
    unittest.main()
