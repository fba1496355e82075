#!/usr/bin/env python3
"""The offload bench without a GPU: the orchestrator against fake workers (one that dies in the
middle of a configuration and is restarted for the rest, one that overruns the budget and is cut
off: the JSON and summary keep every result and say what happened); the derived figures
(overlap, ratios, planner against measured, order) from a complete synthetic result; the
planner's mixes read from the real CLI; the built-in model and the saved-bytes census on the CPU."""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import offload_bench as ob  # noqa: E402

GiB = 1 << 30


def result(config, step, reserved=20 * GiB, allocated=18 * GiB, **kw):
    r = {"config": config, "ok": True, "losses": [10.0, 9.9, 9.8],
         "step_time_s": {"median": step, "min": step, "max": step, "n": 3},
         "peak_reserved_bytes": reserved, "peak_allocated_bytes": allocated}
    r.update(kw)
    return r


FAKE_WORKER = textwrap.dedent("""
    import json, sys, time, os
    args = sys.argv[1:]
    skip = set(args[args.index("--skip") + 1].split(",")) if "--skip" in args else set()
    mode = os.environ["FAKE_MODE"]
    def emit(k, d):
        print(k, json.dumps(d), flush=True)
    emit("MODEL", {"kind": "builtin", "parameters": 1000, "device": "fake", "torch": "0"})
    def res(c, s):
        return {"config": c, "ok": True, "losses": [1.0, 0.9], "peak_reserved_bytes": 10, "peak_allocated_bytes": 9,
                "step_time_s": {"median": s, "min": s, "max": s, "n": 2}}
    if "reference" not in skip:
        emit("BEGIN", {"config": "reference"})
        emit("RESULT", res("reference", 1.0))
        emit("PLAN", {"cap_bytes": 5, "plans": {}, "mixes": {"vramkit-act": ["checkpoint", "keep"]},
                      "block_forward_s": 0.01, "link_bytes_per_s": {"d2h": 5e10, "h2d": 5e10}})
    if "vramkit-act" not in skip:
        emit("BEGIN", {"config": "vramkit-act"})
        if mode == "crash":
            print("Segmentation fault (fake)", file=sys.stderr, flush=True)
            sys.exit(139)
        if mode == "slow":
            time.sleep(30)
    emit("BEGIN", {"config": "full-checkpoint"})
    emit("RESULT", res("full-checkpoint", 1.3))
    emit("DONE", {})
""")


class Orchestration(unittest.TestCase):
    def run_fake(self, mode, budget):
        with tempfile.TemporaryDirectory() as tmp:
            worker = os.path.join(tmp, "worker.py")
            with open(worker, "w") as f:
                f.write(FAKE_WORKER)
            out, summ = os.path.join(tmp, "o.json"), os.path.join(tmp, "o.md")

            def spawn(args, name, deadline, state_path, skip, env):
                cmd = [sys.executable, worker] + (["--skip", ",".join(sorted(skip))] if skip else [])
                return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                                        env=dict(env, FAKE_MODE=mode))

            saved = ob.spawn_worker
            ob.spawn_worker = spawn
            try:
                args = ob.argparse.Namespace(shapes="1b", out=out, summary=summ, steps=5, warmup=2, budget_s=budget,
                                             cap_fraction=0.5, out_dir=tmp, first_share=0.55, fast_pinning=0,
                                             model="builtin", probe=None, compress_shape="1b")
                rc = ob.orchestrate(args)
            finally:
                ob.spawn_worker = saved
            with open(out) as f:
                res = json.load(f)
            with open(summ) as f:
                text = f.read()
        return rc, res["shapes"]["1b"], text

    def test_a_dead_worker_loses_only_its_configuration(self):
        rc, e, text = self.run_fake("crash", 60)
        self.assertEqual(rc, 0)
        by = {c["config"]: c for c in e["configs"]}
        self.assertTrue(by["reference"]["ok"])
        self.assertIn("worker died", by["vramkit-act"]["error"])
        self.assertIn("Segmentation fault", by["vramkit-act"]["error"])
        self.assertTrue(by["full-checkpoint"]["ok"])  # the restarted worker ran the rest
        self.assertEqual([c["config"] for c in e["configs"]].count("reference"), 1)
        self.assertIn("| full-checkpoint | 1.300", text)
        self.assertIn("mix of vramkit-act (o offload, c checkpoint, k keep, s selective, h selective-offload, x checkpoint-offload): ck (vramkit plan --fit)", text)

    def test_a_cut_off_run_keeps_what_it_measured(self):
        rc, e, text = self.run_fake("slow", 1)
        by = {c["config"]: c for c in e["configs"]}
        self.assertTrue(by["reference"]["ok"])
        self.assertIn("cut off", by["vramkit-act"]["error"])
        self.assertIn("CUT OFF", text)
        self.assertIn("| reference | 1.000", text)


class Derived(unittest.TestCase):
    def test_figures_from_a_complete_result(self):
        fit = {"fits": [
            {"micro_batch": 12, "activation_mix": ["offload", "checkpoint", "keep"], "optimizer_offload": False,
             "compress_activations": "none", "step_time_s": 1.08, "allocated_peak_bytes": 17 * GiB},
            {"micro_batch": 12, "activation_mix": ["offload", "offload", "keep"], "optimizer_offload": True,
             "compress_activations": "none", "step_time_s": 1.5, "allocated_peak_bytes": 15 * GiB}]}
        shape = dict(ob.SHAPES["1b"])
        entry = {"shape": shape, "cap_bytes": 30 * GiB, "link_bytes_per_s": {"d2h": 5e10, "h2d": 5e10},
                 "block_forward_s": 0.006, "mixes": {"vramkit-act": ["offload", "checkpoint", "keep"]},
                 "plans": {"fit": {"json": fit},
                           "reference": {"json": {"allocated_peak_bytes": 40 * GiB,
                                                  "offload": {"step_time_s": 0.95, "block_forward_s": 0.005,
                                                              "kernel_rates": "probe"}}},
                           "full-checkpoint": {"json": {"allocated_peak_bytes": 19 * GiB,
                                                        "offload": {"step_time_s": 1.25}}}},
                 "configs": [
                     result("reference", 1.0, 60 * GiB, 41 * GiB, census={"total": 100, "blocks": 90, "by_where": {"mlp": 50}}),
                     result("vramkit-act", 1.1, 29 * GiB, 17 * GiB, copy_s={"d2h": 0.2, "h2d": 0.2},
                            mix=["offload", "checkpoint", "keep"]),
                     result("vramkit-compute-only", 1.05, mix=["keep", "checkpoint", "keep"]),
                     result("vramkit-act+opt", 1.4),
                     result("vramkit-act+compress", 1.0, mix=["offload", "checkpoint", "keep"]),
                     result("full-checkpoint", 1.3),
                     result("save-on-cpu", 2.2),
                     {"config": "none-capped", "ok": False, "error": "out of memory"}]}
        res = {"date": "d", "cap_fraction": 0.5, "budget_s": 1, "shapes": {"1b": entry}}
        ob.derive(res)
        d = entry["derived"]
        self.assertAlmostEqual(d["overlap"]["overlap"], (1.05 + 0.4 - 1.1) / 0.4)
        self.assertAlmostEqual(d["overlap"]["t_hidden_s"], 1.05 + 0.4 - 1.1)
        self.assertFalse(d["overlap"]["forced"])
        self.assertAlmostEqual(d["targets"]["act_vs_full-checkpoint"], 1.1 / 1.3)
        self.assertAlmostEqual(d["targets"]["act_vs_save-on-cpu"], 1.1 / 2.2)
        self.assertTrue(d["targets"]["act_fits_cap"])
        self.assertEqual(d["targets"]["act_compress_vs"], "vramkit-act")  # the same mix
        rows = {r["config"]: r for r in d["planner_vs_measured"]}
        self.assertAlmostEqual(rows["vramkit-act"]["peak_error"], 0.0)
        self.assertAlmostEqual(rows["full-checkpoint"]["step_error"], 1.25 / 1.3 - 1)
        self.assertAlmostEqual(rows["reference"]["step_error"], -0.05)
        self.assertAlmostEqual(rows["reference"]["peak_error"], 40 / 41 - 1)  # the plain plan's peak
        self.assertEqual(d["ranking"]["measured"], ["reference", "vramkit-act", "full-checkpoint", "vramkit-act+opt"])
        self.assertTrue(d["ranking"]["same_order"])
        self.assertTrue(d["ranking"]["same_order_with_ties"])
        text = ob.summarize(res)
        for needle in ("overlap (vramkit-act, ock; the planner's mix): 0.350 s of 0.400 s copy time hidden, 87.5%",
                       "(strict: same order; with ties: same order)", "vramkit-act+compress", "0.909x",
                       "| none-capped | out of memory", "vramkit-act / save-on-cpu step time: 0.500x",
                       "planner's block forward 5.00 ms", "against 6.00 ms measured (-16.7%)"):
            self.assertIn(needle, text)


class Order(unittest.TestCase):
    @staticmethod
    def row(cfg, predicted, measured):
        return {"config": cfg, "predicted_step_s": predicted, "measured_step_s": measured}

    def test_ties_within_one_percent_or_the_spread(self):
        a, b = self.row("a", 1.0, 0.510), self.row("b", 0.9, 0.514)  # 0.8% apart
        self.assertTrue(ob.measured_tie(a, b))
        c = self.row("c", 1.0, 0.530)  # 3.9% from a, apart without a spread
        self.assertFalse(ob.measured_tie(a, c))
        self.assertTrue(ob.measured_tie(a, c, {"c": (0.505, 0.535)}))  # a's median inside c's min-max
        self.assertFalse(ob.measured_tie(a, c, {"a": (0.508, 0.512), "c": (0.525, 0.535)}))

    def test_strict_and_tie_aware_verdicts(self):
        # a and b tie (measured 0.4% apart) and are predicted the other way round: the strict
        # order differs, the tie-aware one agrees.
        rows = [self.row("ref", 0.45, 0.41), self.row("a", 0.56, 0.512), self.row("b", 0.55, 0.510),
                self.row("ck", 0.58, 0.527)]
        v = ob.order_verdict(rows)
        self.assertEqual(v["predicted"], ["ref", "b", "a", "ck"])
        self.assertEqual(v["measured"], ["ref", "b", "a", "ck"])
        rows[1]["predicted_step_s"], rows[2]["predicted_step_s"] = 0.55, 0.56
        v = ob.order_verdict(rows)
        self.assertFalse(v["same_order"])
        self.assertTrue(v["same_order_with_ties"])
        self.assertEqual(v["ties"], [["a", "b"]])
        self.assertEqual(v["discordant"], [])
        # A pair 3% apart predicted the other way round fails both verdicts, and is named.
        rows[3]["predicted_step_s"] = 0.50
        v = ob.order_verdict(rows)
        self.assertFalse(v["same_order"])
        self.assertFalse(v["same_order_with_ties"])
        self.assertEqual(v["discordant"], [["a", "ck"], ["b", "ck"]])
        line = ob.order_line("order", v)
        self.assertIn("strict: DIFFERENT order; with ties: DIFFERENT order", line)
        self.assertIn("a = b", line)
        self.assertIn("a / ck", line)


class OverlapFromFullCheckpointing(unittest.TestCase):
    def test_a_mix_of_inputs_on_the_host_takes_t_compute_from_full_checkpointing(self):
        mix = ["checkpoint-offload"] * 3
        entry = {"shape": dict(ob.SHAPES["tiny"], layers=3), "mixes": {ob.TRY + "xxx": mix},
                 "configs": [result("reference", 0.5), result(ob.TRY + "xxx", 0.81, copy_s={"d2h": 0.02, "h2d": 0.02},
                                                            mix=mix),
                             {"config": "vramkit-compute-only", "ok": False, "error": "not run: ..."},
                             result("full-checkpoint", 0.80)]}
        res = {"date": "d", "cap_fraction": 0.5, "budget_s": 1, "shapes": {"tiny": entry}}
        ob.derive(res)
        o = entry["derived"]["overlap"]
        self.assertEqual(o["t_compute_from"], "full-checkpoint")
        self.assertAlmostEqual(o["overlap"], (0.80 + 0.04 - 0.81) / 0.04)
        self.assertTrue(o["forced"])
        text = ob.summarize(res)
        self.assertIn("under the cap, full checkpointing's run", text)
        # The candidate is the fastest vramkit mix measured (there is no vramkit-act here).
        self.assertNotIn("best_vramkit", entry["derived"]["targets"])  # not among the planner's candidates
        entry["candidates"] = {"chosen": ["xxx"], "reason": "r", "asked": 1,
                               "estimates": {"xxx": {"step_time_s": 0.8, "device_peak_bytes": 1}}}
        ob.derive(res)
        bv = entry["derived"]["targets"]["best_vramkit"]
        self.assertEqual(bv["config"], ob.TRY + "xxx")
        self.assertAlmostEqual(bv["vs_full-checkpoint"], 0.81 / 0.80)
        self.assertIn("picked after measuring): vramkit-try-xxx (xxx): 1.012x full-checkpoint", ob.summarize(res))
        self.assertIn("a copying mix measured beside the planner's, not its choice", text)


class Calibration(unittest.TestCase):
    def test_memory_rate_makes_the_block_forward_the_measured_one(self):
        # Planner: 31.1 ms a block, 11.3 ms of it memory-bound at 2547 GB/s; measured 29.1 ms:
        # the memory-bound part gets 29.1 - 19.8 = 9.3 ms, so the rate rises by 11.3 / 9.3.
        rate = ob.calibrated_memory_rate(0.0311, 0.0113, 0.0291, 2547e9)
        self.assertAlmostEqual(rate / (2547e9 * 0.0113 / (0.0291 - 0.0198)), 1.0)
        # The planner's block at that rate: the GEMM and attention part plus the memory part.
        self.assertAlmostEqual((0.0311 - 0.0113) + 0.0113 * 2547e9 / rate, 0.0291)
        self.assertLess(ob.calibrated_memory_rate(0.0311, 0.0113, 0.0331, 2547e9), 2547e9)  # slower: lower
        self.assertIsNone(ob.calibrated_memory_rate(0.0311, 0.0113, 0.0190, 2547e9))  # no time left
        self.assertIsNone(ob.calibrated_memory_rate(None, 0.0113, 0.0291, 2547e9))

    @unittest.skipUnless(os.environ.get("VRAMKIT_CLI"), "needs the vramkit CLI (VRAMKIT_CLI)")
    def test_the_planner_then_predicts_the_measured_block(self):
        shape = dict(ob.SHAPES["1b"])
        kp = {"gemm_flops": 700e12, "attention_flops": 380e12, "memory_bytes_per_s": 2.4e12}
        with tempfile.TemporaryDirectory() as tmp:
            probe = ob.write_probe(os.path.join(tmp, "p.json"), kp, {"h2d": 55e9})
            got = ob.calibrate_probe(shape, probe, kp, {"h2d": 55e9}, 0.0075, tmp)
            self.assertIn("calibrated", got, got.get("error"))
            plans = ob.planner_runs(shape, 34 << 30, tmp, probe)
        fwd = plans["reference"]["json"]["offload"]["block_forward_s"]
        self.assertAlmostEqual(fwd, 0.0075, delta=1e-5)


class Candidates(unittest.TestCase):
    def test_family(self):
        fam = [ob.offload_plan.letters(m) for m in ob.candidate_family(6)]
        for m in ("xxxxxx", "xxxxxs", "hxxxxs", "hhhxxx", "cccccc", "hccccs"):
            self.assertIn(m, fam)
        self.assertEqual(len(fam), len(set(fam)))
        self.assertTrue(all(len(m) == 6 for m in fam))

    def test_the_fastest_that_fit_and_beat_full_checkpointing(self):
        gib = 1 << 30
        est = {"cccccc": {"step_time_s": 0.85, "device_peak_bytes": 37 * gib},
               "xxxxxx": {"step_time_s": 0.86, "device_peak_bytes": 36 * gib},
               "xxxxxs": {"step_time_s": 0.84, "device_peak_bytes": 38 * gib},
               "hxxxxs": {"step_time_s": 0.82, "device_peak_bytes": 39 * gib},
               "hhxxxs": {"step_time_s": 0.80, "device_peak_bytes": 41 * gib}}  # over the cap
        got = [m for m, _ in ob.candidate_mixes(est, 40 * gib, 0.85, k=2)]
        self.assertEqual(got, ["hxxxxs", "xxxxxs"])
        self.assertEqual([m for m, _ in ob.candidate_mixes(est, 40 * gib, 0.85)], ["hxxxxs"])  # k=1
        self.assertEqual([m for m, _ in ob.candidate_mixes(est, 40 * gib, 0.85, act="hxxxxs")], ["xxxxxs"])
        # The fastest copies nothing: the fastest fitting mix that copies comes after it.
        est["cccccs"] = {"step_time_s": 0.81, "device_peak_bytes": 37 * gib}
        self.assertEqual([m for m, _ in ob.candidate_mixes(est, 40 * gib, 0.85)], ["cccccs", "hxxxxs"])
        # None that copies beats full checkpointing: the fastest that fits, slower.
        est["xxxxxs"]["device_peak_bytes"] = 45 * gib
        self.assertEqual([m for m, _ in ob.candidate_mixes(est, 38 * gib, 0.85)], ["cccccs", "xxxxxx"])
        del est["cccccs"]
        self.assertEqual([m for m, _ in ob.candidate_mixes(est, 38 * gib, 0.85)], ["xxxxxx"])
        self.assertEqual(ob.candidate_mixes(est, 30 * gib, 0.85), [])

    def test_plan_mixes_adds_them_only_when_the_gain_is_small(self):
        gib = 1 << 30
        shape = dict(ob.SHAPES["3b-wide"])

        def run(shape, cap, out_dir, probe, mixes=None):
            if mixes is None:  # the fit: no mix for vramkit-act; full checkpointing at 0.85 s
                return {"fit": {"json": {"fits": []}},
                        "full-checkpoint": {"json": {"allocated_peak_bytes": 30 * gib, "offload": {"step_time_s": 0.85}}}}
            out = {}
            for cfg, (mix, _, _) in mixes.items():
                letters = ob.offload_plan.letters(mix)
                step = 0.85 - 0.01 * letters.count("s") - 0.012 * letters.count("h")
                peak = (30 + 3 * letters.count("s") + 2 * letters.count("h")) * gib
                out["mix:" + cfg] = {"json": {"offload": {"mix": mix, "step_time_s": step, "device_peak_bytes": peak,
                                                          "allocated_peak_bytes": peak - gib,
                                                          "max_inflight_bytes": gib, "prefetch_blocks": 2,
                                                          "host_lead_blocks": 2}}}
            return out

        got = ob.plan_mixes(shape, 35 * gib, "/nonexistent", None, run=run)
        self.assertEqual(sorted(got["mixes"]), [ob.TRY + "hhxxxx"])
        tried = sorted(c for c in got["mixes"] if c.startswith(ob.TRY))
        # Within 35 GiB the fastest is two h blocks (0.826 s at 34 GiB; one of each: 0.828 s at
        # 35), inputs on the host (listed first among equal estimates); it copies.
        self.assertEqual(tried, [ob.TRY + "hhxxxx"])
        self.assertEqual(got["plan_settings"][ob.TRY + "hhxxxx"],
                         {"max_inflight_bytes": gib, "prefetch_blocks": 2, "host_lead_blocks": 2})
        # The engine runs them with the planner's settings, its host lead bound included.
        w = {"plan_settings": got["plan_settings"]}
        self.assertEqual(ob.offload_tuning(w, got["mixes"][ob.TRY + "hhxxxx"], ob.TRY + "hhxxxx"),
                         {"max_inflight_bytes": gib, "prefetch_blocks": 2, "host_lead_blocks": 2})
        self.assertIn("mix:" + ob.TRY + "hhxxxx", got["plans"])
        self.assertIn("nothing (it found none)", got["extra"]["candidates"]["reason"])
        # Their overlap is measured (they copy) and the planner's rows include them.
        self.assertTrue(ob.overlap_mix(got["mixes"])[0].startswith(ob.TRY))
        rows = ob.planner_choices(got["plans"], shape)
        self.assertAlmostEqual(rows[ob.TRY + "hhxxxx"]["step_time_s"], 0.85 - 0.024)

        # A --fit mix that gains under 2% (every block checkpointed, 0.85 s): the candidates run
        # instead of the mixes derived from it, since one of them copies.
        def run_fit(shape, cap, out_dir, probe, mixes=None):
            out = run(shape, cap, out_dir, probe, mixes)
            if mixes is None:
                out["fit"]["json"]["fits"] = [{"micro_batch": 16, "activation_mix": ["checkpoint"] * 6,
                                               "optimizer_offload": False, "step_time_s": 0.85,
                                               "allocated_peak_bytes": 30 * gib}]
            return out

        got = ob.plan_mixes(shape, 35 * gib, "/nonexistent", None, run=run_fit)
        self.assertEqual(got["mixes"]["vramkit-act"], ["checkpoint"] * 6)
        self.assertIn(ob.TRY + "hhxxxx", got["mixes"])
        self.assertFalse(set(ob.DERIVED) & set(got["mixes"]))
        self.assertIn("0.0%", got["extra"]["candidates"]["reason"])


@unittest.skipUnless(os.environ.get("VRAMKIT_CLI"), "needs the vramkit CLI (VRAMKIT_CLI)")
class Planner(unittest.TestCase):
    def test_mixes_from_the_cli(self):
        shape = dict(ob.SHAPES["1b"])
        with tempfile.TemporaryDirectory() as tmp:
            # The kernel probe's file: the capped fit (a bare capacity) and the plans for the H200
            # then price work at the same rates.
            probe = ob.write_probe(os.path.join(tmp, "probe.json"),
                                   {"gemm_flops": 650e12, "attention_flops": 340e12, "memory_bytes_per_s": 4.0e12},
                                   {"h2d": 55e9})
            plans = ob.planner_runs(shape, 34 << 30, tmp, probe)
        for key in ("fit", "fit-lossy", "reference", "full-checkpoint"):
            self.assertIn("json", plans[key], plans[key].get("error"))
        ch = ob.planner_choices(plans, shape)
        self.assertIn("reference", ch)
        self.assertIn("full-checkpoint", ch)
        self.assertEqual(len(ch["vramkit-act"]["mix"]), shape["layers"])
        self.assertLess(ch["vramkit-act"]["allocated_peak_bytes"], 34 << 30)
        self.assertLess(ch["full-checkpoint"]["allocated_peak_bytes"], ch["reference"]["allocated_peak_bytes"])
        # Every predicted time from the offload model: checkpointing every block costs more than
        # keeping them, and the planner's mix lies between.
        self.assertLess(ch["reference"]["step_time_s"], ch["full-checkpoint"]["step_time_s"])
        self.assertLessEqual(ch["vramkit-act"]["step_time_s"], ch["full-checkpoint"]["step_time_s"] * 1.001)


class CpuModel(unittest.TestCase):
    def test_builtin_model_and_census(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        import vramkit
        from vramkit import fp8_codec
        from vramkit.activation_offload import find_blocks

        shape = dict(d=64, layers=2, heads=4, ffn=128, vocab=128, batch=4, seq=64)  # CPU BLAS may be slow
        model, loss_fn = ob.build_builtin(shape, "cpu")
        ob.init_weights(model)
        x = ob.make_tokens(shape, 1, "cpu")[0]
        census = ob.Census(model, find_blocks(model))
        with census:
            loss = loss_fn(model, x)
        loss.backward()
        r = census.result()
        self.assertGreater(r["blocks"], 0)
        self.assertEqual(sum(r["per_block"]), r["blocks"])
        self.assertTrue({"norm", "attn-linear", "attn-core", "mlp", "outside"} <= set(r["by_where"]), r["by_where"])
        if fp8_codec.default_backend(torch.device("cpu")) is None:
            return
        comp = vramkit.compress_activations(blocks=find_blocks(model), modules=ob.COMPRESS_MODULES)
        c2 = ob.Census(model, find_blocks(model), inner=comp)
        model.zero_grad()
        with c2:
            loss2 = loss_fn(model, x)
        loss2.backward()
        self.assertEqual(float(loss2), float(loss))
        r2 = c2.result()
        self.assertEqual(r2["by_where"]["attn-core"], r["by_where"]["attn-core"])  # never compressed
        self.assertLess(r2["by_where"]["mlp"], 0.35 * r["by_where"]["mlp"])  # fp32 -> fp8 here
        self.assertLess(r2["blocks"], 0.6 * r["blocks"])


class PhasePeaksCpu(unittest.TestCase):
    def test_phases_in_the_order_the_step_runs(self):
        try:
            import torch
        except ImportError:
            self.skipTest("no torch")
        from unittest import mock

        from vramkit.activation_offload import find_blocks

        shape = dict(d=32, layers=3, heads=4, ffn=64, vocab=64, batch=2, seq=16)
        model, loss_fn = ob.build_builtin(shape, "cpu")
        x = ob.make_tokens(shape, 1, "cpu")[0]
        # torch.cuda's counters stood in by one that grows with every reading: each phase's peak
        # is then the reading at its end, and the overall peak the last one.
        n = iter(range(1, 1000))
        with mock.patch.object(torch.cuda, "max_memory_allocated", side_effect=lambda: next(n)), \
                mock.patch.object(torch.cuda, "max_memory_reserved", return_value=5), \
                mock.patch.object(torch.cuda, "memory_allocated", return_value=1), \
                mock.patch.object(torch.cuda, "reset_peak_memory_stats"):
            pp = ob.PhasePeaks(find_blocks(model))
            pp.arm()
            loss = loss_fn(model, x)
            pp.disarm()
            pp.mark("head and loss backward")
            loss.backward()
            pp.mark("optimizer")
            pp.mark()
        labels = [p[0] for p in pp.result()["phases"]]
        self.assertEqual(labels, ["forward", "head and loss backward", "block 2 backward", "block 1 backward",
                                  "block 0 backward", "optimizer"])
        self.assertEqual(pp.result()["peak_phase"], "optimizer")
        self.assertEqual(pp.peak_reserved, 5)
        self.assertFalse(pp.handles)


class DerivedMixes(unittest.TestCase):
    def test_derived_mixes_copy_one_block_or_the_inputs(self):
        mix = ["checkpoint"] * 3 + ["selective", "keep"]
        self.assertEqual(ob.selective_offload_mix(mix),
                         ["selective-offload", "checkpoint", "checkpoint", "selective", "keep"])
        self.assertEqual(ob.selective_offload_mix(["keep", "selective"]), ["keep", "selective-offload"])
        self.assertIsNone(ob.selective_offload_mix(["keep", "keep"]))
        self.assertEqual(ob.inputs_offload_mix(mix), ["checkpoint-offload"] * 3 + ["selective", "keep"])
        self.assertIsNone(ob.inputs_offload_mix(["keep", "selective"]))
        self.assertEqual(ob.overlap_mix({"vramkit-act": mix}), None)
        derived = {"vramkit-act": mix, "vramkit-selective-offload": ob.selective_offload_mix(mix),
                   "vramkit-inputs-offload": ob.inputs_offload_mix(mix)}
        self.assertEqual(ob.overlap_mix(derived)[0], "vramkit-selective-offload")
        # Only among those that ran, when given.
        self.assertEqual(ob.overlap_mix(derived, {"vramkit-act", "vramkit-inputs-offload"})[0], "vramkit-inputs-offload")
        self.assertIsNone(ob.overlap_mix(derived, {"vramkit-act"}))

    def test_plan_mixes_derives_copying_mixes_and_drops_those_over_the_cap(self):
        shape = dict(ob.SHAPES["3b-wide"])
        act = ob.offload_plan.from_letters("cccccs")
        calls = []

        def run(shape_, capacity, out_dir, probe, mixes=None):
            calls.append(sorted(mixes) if mixes else None)
            if mixes is None:
                fit = {"fits": [{"micro_batch": 16, "activation_mix": act, "optimizer_offload": False,
                                 "compress_activations": "none", "step_time_s": 0.8, "allocated_peak_bytes": 30 * GiB,
                                 "max_inflight_bytes": 1, "prefetch_blocks": 1}]}
                # The fit gains 20% over full checkpointing by the planner's estimate: no candidates.
                return {"fit": {"json": fit}, "full-checkpoint": {"json": {"offload": {"step_time_s": 1.0}}}}
            # The whole-block offload does not fit; the others do.
            peaks = {"vramkit-offload1": 50 * GiB}
            return {"mix:" + k: {"json": {"offload": {"mix": m, "device_peak_bytes": peaks.get(k, 35 * GiB),
                                                      "allocated_peak_bytes": 30 * GiB, "step_time_s": 0.8,
                                                      "max_inflight_bytes": 2 * GiB, "prefetch_blocks": 3}}}
                    for k, (m, _, _) in mixes.items()}

        got = ob.plan_mixes(shape, 40 * GiB, "/nonexistent", None, ["vramkit-try-xxxxxs"], run=run)
        mixes = got["mixes"]
        self.assertEqual(ob.offload_plan.letters(mixes["vramkit-selective-offload"]), "hccccs")
        self.assertEqual(ob.offload_plan.letters(mixes["vramkit-inputs-offload"]), "xxxxxs")
        self.assertNotIn("vramkit-offload1", mixes)
        self.assertEqual(ob.offload_plan.letters(got["over_cap"]["vramkit-offload1"][0]), "occccs")
        self.assertIn("vramkit-offload1", got["extra"]["derived_over_cap"])
        # The compute-only run and the compressed mix follow the first copying mix that fits.
        self.assertEqual(ob.offload_plan.letters(mixes["vramkit-act+compress"]), "hccccs")
        self.assertEqual(calls[0], None)
        self.assertEqual(calls[1], ["vramkit-inputs-offload", "vramkit-offload1", "vramkit-selective-offload",
                                    "vramkit-try-xxxxxs"])
        self.assertEqual(calls[2], ["vramkit-act+compress", "vramkit-compute-only"])
        self.assertEqual(got["plan_settings"]["vramkit-compute-only"], {"max_inflight_bytes": 2 * GiB, "prefetch_blocks": 3})
        self.assertEqual(got["plan_settings"]["vramkit-act"], {"max_inflight_bytes": 1, "prefetch_blocks": 1})

    def test_plan_mixes_of_a_copying_plan_derives_nothing(self):
        act = ob.offload_plan.from_letters("xxxxxs")

        def run(shape_, capacity, out_dir, probe, mixes=None):
            if mixes is None:
                return {"fit": {"json": {"fits": [{"micro_batch": 16, "activation_mix": act, "optimizer_offload": False,
                                                   "compress_activations": "none", "step_time_s": 0.8}]}}}
            return {}

        got = ob.plan_mixes(dict(ob.SHAPES["3b-wide"]), 40 * GiB, "/nonexistent", None, run=run)
        self.assertEqual(sorted(got["mixes"]), ["vramkit-act", "vramkit-act+compress"])
        self.assertEqual(got["mixes"]["vramkit-act+compress"], act)
        self.assertEqual(got["over_cap"], {})

    def test_plan_mixes_records_a_planner_failure(self):
        def run(*a, **k):
            raise OSError("no vramkit command")

        got = ob.plan_mixes(dict(ob.SHAPES["1b"]), 40 * GiB, "/nonexistent", None, run=run)
        self.assertEqual(got["plans"], {"error": "no vramkit command"})
        self.assertEqual(got["mixes"], {})

    def test_try_mixes_by_shape_and_length(self):
        sh = ob.SHAPES["3b-wide"]
        self.assertEqual(ob.try_mixes("3b-wide:xxxxxs,1b:" + "c" * 16 + ",cccccc,ccc", sh), ["xxxxxs", "cccccc"])
        self.assertEqual(ob.try_mixes(None, sh), [])


if __name__ == "__main__":
    unittest.main()
