"""CPU tests of what compress_bench.py, compress_accuracy.py and compress_offload.py judge by: the
round trip's bound (an element outside it is counted, one inside is not), the accuracy verdict
against bf16's own reruns (a curve that differs more than they do is outside, one that differs
less is within, the window statistic keeps per-step noise out), the interleaved steps' order and
speed verdict, the forced offloading mix and the planner's pick of it, and the summaries of
cut-short runs."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import compress_accuracy as ca  # noqa: E402
import compress_bench as cb  # noqa: E402
import collect_measured as cm  # noqa: E402
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


class Interleaved(unittest.TestCase):
    def test_order_flips_every_other_round(self):
        self.assertEqual(cb.interleave_order(4), [0, 1, 1, 0, 0, 1, 1, 0])
        self.assertEqual(cb.interleave_order(2, 3), [0, 1, 2, 2, 1, 0])

    def test_ratio_of_medians_and_per_round_spread(self):
        st = cb.interleaved_stats([0.42, 0.43, 0.41, 0.60], [0.43, 0.44, 0.42, 0.44])
        self.assertAlmostEqual(st["ratio_of_medians"], 0.435 / 0.425)
        self.assertEqual(st["pairs"], 4)
        # The slow bf16 step (0.60) moves neither median much, the per-round ratio spread shows it.
        self.assertLess(st["pair_ratio_quartiles"][0], 1.0)
        self.assertAlmostEqual(st["bf16_s"]["max"], 0.60)

    def test_verdict_line(self):
        st = cb.interleaved_stats([0.42] * 4, [0.4284] * 4)
        line = cb.interleaved_line(dict(st, config=cb.INTERLEAVED, variants={
            cb.INTERLEAVED: st, "other": cb.interleaved_stats([0.42] * 4, [0.45] * 4)}))
        self.assertIn("**1.020x** (target <= 1.05x: met; aim <= 1.03x: yes)", line)
        self.assertIn("not judged: other step 0.4500 s median: 1.071x", line)
        st = cb.interleaved_stats([0.42] * 4, [0.45] * 4)
        self.assertIn("NOT met", cb.interleaved_line(dict(st, config=cb.INTERLEAVED)))
        self.assertIn("time budget spent", cb.interleaved_line({"config": "x", "skipped": "time budget spent"}))


class ForcedMix(unittest.TestCase):
    BASE = ["keep", "checkpoint", "selective", "checkpoint", "checkpoint"]

    def test_first_checkpointed_blocks_offloaded(self):
        self.assertEqual(co.forced_mix(self.BASE, 2), ["keep", "offload", "selective", "offload", "checkpoint"])
        self.assertIsNone(co.forced_mix(self.BASE, 4))
        # A checkpointed block with its input on the host is one too; copying only that input
        # is not an offloading mix (compression does not shrink it).
        base = ["checkpoint-offload", "keep", "checkpoint"]
        self.assertEqual(co.forced_mix(base, 2), ["offload", "keep", "offload"])
        self.assertFalse(co.copies(base))
        self.assertTrue(co.copies(["keep", "selective-offload"]))

    def test_the_planners_picks(self):
        base = self.BASE + ["checkpoint"] * 3

        def estimates(mixes, plain_floor=0, exposed_from=3):
            # Faster with more blocks offloaded; within the cap's margin (0.97 x 20 = 19.4)
            # compressed up to 4 blocks, uncompressed up to 3 (or never: plain_floor); the
            # uncompressed copies exposed from `exposed_from` blocks on.
            out = {}
            for key, (mix, comp) in mixes.items():
                k = mix.count("offload")
                peak = (10 + 2 * k) if comp else max(plain_floor, 10 + 3 * k)
                out[key] = {"allocated_peak_bytes": peak, "step_time_s": 1.0 - 0.1 * k,
                            "exposed_copy_s": 0.0 if comp or k < exposed_from else 0.05}
            return out

        # The fewest blocks whose uncompressed copies are exposed, and offload alone's fastest.
        k, mix, kp, plain_mix, table = co.choose_forced(base, 20, estimates)
        self.assertEqual((k, kp), (3, 3))
        self.assertEqual((mix.count("offload"), plain_mix.count("offload")), (3, 3))
        self.assertEqual(sorted(table), [1, 2, 3, 4, 6])  # only ks the mix has room for
        # Exposed only where the compressed mix no longer fits: the fastest that fits.
        k, _, kp, _, _ = co.choose_forced(base, 20, lambda m: estimates(m, exposed_from=6))
        self.assertEqual((k, kp), (4, 3))
        k, _, kp, plain_mix, _ = co.choose_forced(base, 20, lambda m: estimates(m, plain_floor=100))
        # None fits uncompressed, so no pair shows the copies halved: fp8's fastest that fits.
        self.assertEqual((k, kp, plain_mix), (4, None, None))
        k, _, kp, _, _ = co.choose_forced(base, 5, estimates)  # nothing fits: the smallest
        self.assertEqual((k, kp), (1, None))
        self.assertEqual(co.choose_forced(["keep"], 5, estimates), (None, None, None, None, {}))


class PlanRuns(unittest.TestCase):
    L, P = ["checkpoint", "keep"], ["checkpoint", "selective"]
    F, PF = ["offload", "selective"], ["offload", "checkpoint"]
    CAP = 100

    def estimates(self, plain_peak):
        def of(mixes):
            # Every estimate 90 (within 0.97 x 100) but the forced mix uncompressed: plain_peak.
            return {k: {"mix": m, "allocated_peak_bytes": plain_peak if (m == self.F and not c) else 90,
                        "step_time_s": 0.4 + 0.01 * int(k), "max_inflight_bytes": 7, "prefetch_blocks": 2}
                    for k, (m, c) in mixes.items()}
        return of

    def test_order_estimates_and_the_uncompressed_mix_over_the_cap(self):
        runs, pairs, not_run = co.plan_runs({"mix": self.L, "step_time_s": 9}, {"mix": self.P},
                                            (2, self.F, 1, self.PF, {}), self.CAP, self.estimates(120))
        self.assertEqual([r[0] for r in runs], ["planner lossy fit", "planner plain fit",
                                                "offload alone's best forced mix", "offloading mix + fp8"])
        self.assertEqual([r[4] for r in runs], [True, False, False, True])
        self.assertEqual([r[1] for r in runs],
                         ["vramkit-act+compress", "vramkit-act", "vramkit-act", "vramkit-act+compress"])
        # The planner's estimate of the mix as given, not the fit's own figures.
        self.assertEqual(runs[0][3]["step_time_s"], 0.4)
        self.assertEqual(runs[3][3]["prefetch_blocks"], 2)
        self.assertEqual(len(not_run), 1)
        self.assertEqual(not_run[0]["label"], "offloading mix")
        self.assertIn("not run: the planner expects 0.00 GiB allocated, over 0.97 of the cap", not_run[0]["error"])
        self.assertEqual(pairs, {"fits": ("planner lossy fit", "planner plain fit", "cs"),
                                 "best forced": ("offloading mix + fp8", "offload alone's best forced mix", "oc")})

    def test_same_mix_both_ways_when_it_fits_and_repeats_run_once(self):
        runs, pairs, not_run = co.plan_runs({"mix": self.F}, {"mix": self.P}, (2, self.F, 1, self.PF, {}),
                                            self.CAP, self.estimates(90))
        labels = [r[0] for r in runs]
        self.assertNotIn("offloading mix + fp8", labels)  # the lossy fit's mix: measured once
        self.assertIn("offloading mix", labels)
        self.assertEqual(not_run, [])
        self.assertEqual(pairs["same mix"], ("planner lossy fit", "offloading mix", "os"))
        self.assertEqual(pairs["best forced"][0], "planner lossy fit")

    def test_no_fit(self):
        runs, pairs, not_run = co.plan_runs(None, {"mix": self.P}, None, self.CAP, self.estimates(90))
        self.assertEqual([r[0] for r in runs], ["planner plain fit"])
        self.assertEqual(not_run[0]["error"], "the planner found no mix for it under the cap")
        self.assertEqual(pairs, {})


class CompressedMix(unittest.TestCase):
    """--compressed-mix: the forced compressed mix, validated, run right after the lossy fit."""

    def test_parsed_and_validated(self):
        self.assertEqual(co.parse_compressed_mix("csh", 3), ["checkpoint", "selective", "selective-offload"])
        with self.assertRaisesRegex(ValueError, r"^--compressed-mix cs: 2 letters for a shape of 3 blocks$"):
            co.parse_compressed_mix("cs", 3)
        with self.assertRaisesRegex(ValueError, r"^--compressed-mix csq: offload mix letter 'q' is not one of"):
            co.parse_compressed_mix("csq", 3)

    def test_runs_compressed_after_the_lossy_fit(self):
        est = PlanRuns().estimates(90)
        given = ["selective", "selective-offload"]
        runs, _, _ = co.plan_runs({"mix": PlanRuns.L}, {"mix": PlanRuns.P}, None, PlanRuns.CAP, est, [given])
        self.assertEqual([r[0] for r in runs[:3]], ["planner lossy fit", "--compressed-mix sh", "planner plain fit"])
        self.assertEqual(runs[1][1:3], ("vramkit-act+compress", given))
        self.assertTrue(runs[1][4])
        # The lossy fit's mix given again runs once.
        runs, _, _ = co.plan_runs({"mix": PlanRuns.L}, {"mix": PlanRuns.P}, None, PlanRuns.CAP, est, [PlanRuns.L])
        self.assertNotIn("--compressed-mix ck", [r[0] for r in runs])

    def test_several_of_each_side_in_order(self):
        est = PlanRuns().estimates(90)
        kk, ok = ["keep", "keep"], ["offload", "keep"]
        runs, _, _ = co.plan_runs({"mix": PlanRuns.L}, {"mix": PlanRuns.P}, None, PlanRuns.CAP, est,
                                  [kk, ok], [kk, ["checkpoint", "checkpoint"]])
        self.assertEqual([(r[0], r[4]) for r in runs],
                         [("planner lossy fit", True), ("--compressed-mix kk", True), ("--compressed-mix ok", True),
                          ("planner plain fit", False), ("--plain-mix kk", False), ("--plain-mix cc", False)])
        self.assertEqual([r[1] for r in runs[3:]], ["vramkit-act"] * 3)
        # The same mix given on both sides runs both ways.
        self.assertEqual(runs[1][2], runs[4][2])

    def test_command_line_errors_are_one_line(self):
        import subprocess

        for option in (co.GIVEN, co.GIVEN_PLAIN):
            for mix, why in (("ccc", "3 letters for a shape of 16 blocks"), ("c" * 15 + "z", "letter 'z'")):
                # A valid mix before the bad one: every repeat is checked.
                proc = subprocess.run([sys.executable, os.path.join(HERE, "compress_offload.py"), "--cap-from",
                                       "x.json", option, "c" * 16, option, mix],
                                      capture_output=True, text=True, check=False)
                self.assertEqual(proc.returncode, 2)
                self.assertIn(why, proc.stderr.strip().splitlines()[-1])
                self.assertIn("error: %s %s" % (option, mix), proc.stderr.strip().splitlines()[-1])


class PickOffloading(unittest.TestCase):
    PLAIN = {"mix": ["checkpoint", "checkpoint", "selective"]}
    COPYING = {"mix": ["offload", "checkpoint", "keep"]}

    @staticmethod
    def estimates(mixes):
        return {k: {"allocated_peak_bytes": 10, "step_time_s": 1.0 - 0.1 * m.count("offload"),
                    "exposed_copy_s": 0.0} for k, (m, _) in mixes.items()}

    def test_a_copying_fit_is_the_offloading_mix(self):
        forced, info = co.pick_offloading(self.COPYING, self.PLAIN, 0, 100, self.estimates)
        self.assertEqual(forced[1], self.COPYING["mix"])
        self.assertEqual(info["offloading_mix"], "the planner's lossy fit (ock)")

    def test_forced_when_no_fit_copies_or_when_asked(self):
        forced, info = co.pick_offloading(None, self.PLAIN, 0, 100, self.estimates)
        self.assertEqual(forced[1], ["offload", "offload", "selective"])  # the fastest fitting k
        self.assertIn("FORCED, not the planner's: its plain fit's first 2 checkpointed blocks offloaded (oos): "
                      "neither fit copies", info["offloading_mix"])
        forced, info = co.pick_offloading(self.COPYING, self.PLAIN, 1, 100, self.estimates)
        self.assertEqual(forced[1], ["offload", "checkpoint", "selective"])  # whatever the fits copy
        self.assertTrue(info["offloading_mix"].endswith("(ocs): --forced-blocks"))
        forced, info = co.pick_offloading(None, self.PLAIN, 3, 100, self.estimates)
        self.assertIsNone(forced)
        self.assertIn("--forced-blocks 3: the fit's mix (ccs) has fewer checkpointed blocks; nothing forced",
                      info["offloading_mix"])
        self.assertEqual(co.pick_offloading(None, None, 0, 100, self.estimates), (None, {}))


class OffloadSummary(unittest.TestCase):
    def run_of(self, label, step, mix="ococ", ok=True, compressed=False, name=None):
        r = {"config": name or ("vramkit-act+compress" if compressed else "vramkit-act"), "label": label, "ok": ok,
             "compressed": compressed, "mix": [{"o": "offload", "c": "checkpoint"}[c] for c in mix],
             "peak_allocated_bytes": 30 << 30, "peak_reserved_bytes": 32 << 30,
             "plan": {"allocated_peak_bytes": 29 << 30, "step_time_s": 0.5}}
        if ok:
            r.update({"step_time_s": {"median": step, "n": 2}, "losses": [10.0, 9.0],
                      "copy_bytes": {"d2h": 3 << 30, "h2d": 3 << 30}})
        else:
            r.update({"error": "out of memory", "failed_at": {"step": 1, "phase": "backward"}})
        return r

    def res(self, *runs, pairs=None):
        return {"cap_bytes": 33 << 30, "cap_fraction": 0.5, "planner_capacity_bytes": 34 << 30,
                "outside_bytes": 1 << 30, "budget_s": 22, "wall_s": 10, "configs": list(runs),
                "offloading_mix": "FORCED, not the planner's: ...",
                "pairs": pairs or {"same mix": ["offloading mix + fp8", "offloading mix", "ococ"],
                                   "fits": ["planner lossy fit", "planner plain fit"]}}

    def test_ratios_and_verdicts(self):
        res = self.res(self.run_of("offloading mix + fp8", 0.45, compressed=True), self.run_of("offloading mix", 0.5),
                       self.run_of("planner lossy fit", 0.52, "cccc", compressed=True),
                       self.run_of("planner plain fit", 0.48, "cccc"))
        text = co.summarize(res)
        self.assertIn("the offloading mix (ococ) with fp8 / without, under the cap: 0.900x (target < 1: met)", text)
        self.assertIn("lossy fit / its plain fit, under the cap: 1.083x (target < 1: NOT met)", text)
        self.assertIn("| offloading mix | ococ | 0.500 (2) | 30.00 | 29.00 | -3.3% | 32.00 | 3.00+3.00 |", text)
        self.assertIn("planner peak for offloading mix + fp8: -3.3% (target within 5%: met)", text)
        # The bar: each side at its fastest measured mix.
        self.assertIn("offload + fp8 at its fastest measured mix (offloading mix + fp8, ococ) / offload alone at its "
                      "fastest (planner plain fit, cccc), under the cap: 0.938x (target < 1: met)", text)
        self.assertNotIn("planner peak for offloading mix:", text)  # only the compressed ones are judged
        self.assertIn("FORCED, not the planner's", text)
        slow = co.summarize(self.res(self.run_of("planner lossy fit", 0.52, "cccc", compressed=True),
                                     self.run_of("planner plain fit", 0.5, "cccc"),
                                     self.run_of("offload alone's best forced mix", 0.49)))
        self.assertIn("(planner lossy fit, cccc) / offload alone at its fastest (offload alone's best forced mix, "
                      "ococ), under the cap: 1.061x (target < 1: NOT met)", slow)
        one_side = co.summarize(self.res(self.run_of("planner plain fit", 0.5, "cccc")))
        self.assertIn("offload alone at its fastest, under the cap: not measured (no run of one side)", one_side)

    def test_a_tie_is_not_met(self):
        # Run T's figures: 0.5237 s against 0.5240 s, each inside the other's range; printed 1.000x.
        res = self.res(self.run_of("planner lossy fit", 0.5237, "cccc", compressed=True),
                       self.run_of("offload alone's best forced mix", 0.5240))
        res["configs"][0]["step_time_s"].update({"min": 0.5138, "max": 0.5336})
        res["configs"][1]["step_time_s"].update({"min": 0.5190, "max": 0.5290})
        text = co.summarize(res)
        self.assertIn("under the cap: 0.999x (target < 1: NOT met: a tie, within the runs' noise", text)
        self.assertNotIn("target < 1: met", text)
        # Beyond 1% and outside each other's ranges it is a verdict again.
        self.assertTrue(co._within_noise({"median": 1.0}, {"median": 1.009}))
        self.assertFalse(co._within_noise({"median": 0.95, "min": 0.94, "max": 0.96},
                                          {"median": 1.0, "min": 0.99, "max": 1.01}))

    def test_failed_configuration_is_reported(self):
        res = self.res(self.run_of("offloading mix + fp8", 0, ok=False, compressed=True),
                       self.run_of("offloading mix", 0.5))
        text = co.summarize(res)
        self.assertIn("out of memory (at step 1, backward)", text)
        self.assertIn("with fp8 / without, under the cap: not measured", text)
        self.assertIn("not measured: no cap", co.summarize({"error": "no cap", "configs": []}))


class CollectMeasured(unittest.TestCase):
    """collect_measured.py: the newest run's figures per mix and compression; no failed runs."""

    SHAPE = {"name": "1b", "batch": 12, "seq": 2048}

    def run_of(self, *configs, cap=100):
        return {"shape": self.SHAPE, "cap_bytes": cap, "configs": list(configs)}

    @staticmethod
    def config(mix, comp, alloc, ok=True):
        return {"ok": ok, "mix": mix, "compressed": comp, "peak_allocated_bytes": alloc,
                "peak_reserved_bytes": alloc + 1, "step_time_s": {"median": 0.51234, "n": 6}}

    def test_newest_wins_and_failures_are_left_out(self):
        ck = ["checkpoint", "keep"]
        _, cap, cases = cm.collect([
            ("A", self.run_of(self.config(ck, True, 10), self.config(ck, False, 20))),
            ("B", self.run_of(self.config(ck, True, 11), self.config(["offload", "keep"], True, 5, ok=False)))])
        self.assertEqual(cap, 100)
        self.assertEqual([(c["name"], c["run"], c["max_allocated_bytes"]) for c in cases],
                         [("ck-fp8", "B", 11), ("ck-bf16", "A", 20)])
        self.assertEqual([c["compress_activations"] for c in cases], ["fp8:mlp,attn,norm", "none"])
        self.assertEqual(cases[0]["step_time_s"], 0.5123)

    def test_runs_of_another_cap_are_refused(self):
        with self.assertRaisesRegex(ValueError, "run B: .* differ from the first run's"):
            cm.collect([("A", self.run_of()), ("B", self.run_of(cap=99))])


if __name__ == "__main__":
    unittest.main()
