#!/usr/bin/env python3
"""Tests of the ground-truth script's torch-free logic (plain python3): python3 bench/plan/test_measure_ground_truth.py"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import measure_ground_truth as gt  # noqa: E402


class Cases(unittest.TestCase):
    def test_enough_cases_with_unique_names(self):
        names = [c["name"] for c in gt.CASES]
        self.assertEqual(len(names), len(set(names)))
        self.assertGreaterEqual(sum(c["mode"] == "train" for c in gt.CASES), 14)
        self.assertGreaterEqual(sum(c["mode"] == "infer" for c in gt.CASES), 5)

    def test_every_hf_case_has_a_committed_config_matching_the_script(self):
        for c in gt.CASES:
            rel = gt.config_relpath(c["model"])
            if c["model"] in gt.TORCHVISION_MODELS:
                self.assertIsNone(rel)
                continue
            with open(os.path.join(gt.DATA_DIR, rel)) as f:
                self.assertEqual(json.load(f), gt.PRESET_CONFIGS[c["model"]], rel)

    def test_fields_use_the_documented_vocabulary(self):
        for c in gt.CASES:
            self.assertIn(c["precision"], ("fp32", "amp-bf16", "amp-fp16", "bf16"))
            self.assertIn(c["optimizer"], ("adamw", "adam", "sgd", "sgd-momentum", "adamw-fused", "adamw-8bit", None))
            self.assertIn(c["group"], ("base", "new"))
            if c["lora_rank"]:
                self.assertIn(c["lora_targets"], gt.LORA_MODULES)
            self.assertIn(c["checkpointing"], ("none", "full"))
            self.assertIn(c["attention"], ("sdpa", "eager"))
            self.assertLessEqual(c["est_gib"], 120)


    def test_new_group_covers_every_new_family_and_fine_tuning_method(self):
        new = [c for c in gt.CASES if c["group"] == "new"]
        types = {gt.PRESET_CONFIGS[c["model"]]["model_type"] for c in new}
        for t in ("gemma2", "gemma3_text", "falcon", "roberta", "vit", "t5", "mixtral", "qwen2_moe", "deepseek_v3"):
            self.assertIn(t, types)
        for mode in ("train", "infer"):
            for fam in ("gemma2", "falcon", "roberta", "vit", "t5"):
                self.assertTrue(any(c["mode"] == mode and gt.PRESET_CONFIGS[c["model"]]["model_type"] == fam
                                    for c in new), (mode, fam))
        self.assertTrue(any(c["lora_rank"] and c["quant"] == "none" for c in new))
        self.assertTrue(any(c["quant"] == "nf4" for c in new))
        self.assertTrue(any(c["optimizer_in_backward"] for c in new))
        self.assertTrue(any(c["optimizer"] == "adamw-8bit" for c in new))
        self.assertTrue(any(c["optimizer"] == "adamw-fused" for c in new))


class Helpers(unittest.TestCase):
    def test_parse_compute_apps(self):
        text = "1234, 5000\n4321, 812\n"
        self.assertEqual(gt.parse_compute_apps(text, 4321), (812 * gt.MIB, None))
        value, why = gt.parse_compute_apps(text, 99)
        self.assertIsNone(value)
        self.assertIn("pid 99 not among", why)
        value, why = gt.parse_compute_apps("", 99)
        self.assertIsNone(value)
        self.assertIn("no compute processes", why)
        value, why = gt.parse_compute_apps("99, [N/A]\n", 99)
        self.assertIsNone(value)
        self.assertIn("N/A", why)

    def test_case_record_shape(self):
        case = gt.CASES[0]
        rec = gt.case_record(case, {"params": 124439808, "max_allocated_bytes": 10, "max_reserved_bytes": 12,
                                    "nvidia_smi_used_bytes": None, "context_bytes": None, "loss": 10.9,
                                    "step_time_s": 0.5, "error": None, "notes": ["x"]})
        self.assertEqual(list(rec), gt.OUTPUT_KEYS)
        self.assertEqual(rec["config"], "configs/gpt2.json")
        self.assertEqual(rec["steps"], 3)
        self.assertEqual(rec["quant"], "none")
        self.assertIsNone(rec["error"])
        missing = gt.case_record(case, {"error": None})
        self.assertEqual(missing["error"], "no measurement recorded")

    def test_schedule_respects_jobs_and_budget(self):
        pending = [{"est_gib": 50}, {"est_gib": 30}, {"est_gib": 10}]
        self.assertEqual(gt.schedule_next(pending, [], 4, 60), 0)
        self.assertEqual(gt.schedule_next(pending, [50], 4, 60), 2)
        self.assertIsNone(gt.schedule_next(pending, [55], 4, 60))
        self.assertIsNone(gt.schedule_next(pending, [1, 1], 2, 60))
        # A case larger than the budget still runs, alone.
        self.assertEqual(gt.schedule_next([{"est_gib": 500}], [], 4, 60), 0)

    def test_first_cases_start_before_the_others(self):
        cases = [{"name": "a", "est_gib": 50}, {"name": "b", "est_gib": 5, "first": True},
                 {"name": "c", "est_gib": 9, "first": True}, {"name": "d", "est_gib": 70}]
        self.assertEqual([c["name"] for c in gt.start_order(cases)], ["c", "b", "d", "a"])
        new = [c for c in gt.CASES if c["group"] == "new"]
        ordered = gt.start_order(new)
        firsts = sum(c["first"] for c in new)
        self.assertGreater(firsts, 0)
        self.assertTrue(all(c["first"] for c in ordered[:firsts]))

    def test_reruns_name_their_cases_after_a_measured_twin(self):
        reruns = [c for c in gt.CASES if c["rerun"]]
        self.assertTrue(reruns)
        for c in reruns:
            self.assertTrue(c["name"].endswith("-rerun%d" % c["rerun"]))
            self.assertIn(c["name"][: -len("-rerun%d" % c["rerun"])], [o["name"] for o in gt.CASES])

    def test_seeds_name_their_cases_and_reach_the_record(self):
        seeded = [c for c in gt.CASES if c["seed"]]
        self.assertTrue(seeded)
        for c in seeded:
            self.assertTrue(c["name"].endswith("-seed%d" % c["seed"]))
            twin = c["name"][: -len("-seed%d" % c["seed"])]
            self.assertIn(twin, [o["name"] for o in gt.CASES if not o["seed"]])
        self.assertEqual(gt.case_record(seeded[0], {"error": None})["seed"], seeded[0]["seed"])

    def test_output_holds_the_cases_finished_so_far_in_case_order(self):
        cases = gt.CASES[:3]
        done = {cases[2]["name"]: {"max_allocated_bytes": 5, "max_reserved_bytes": 6, "error": None},
                cases[0]["name"]: {"error": "not run: total time limit of 9 s reached"}}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "out.json")
            gt.write_output(path, {"gpu": "G"}, cases, done)
            with open(path) as f:
                doc = json.load(f)
            self.assertEqual(doc["gpu"], "G")
            self.assertEqual([c["name"] for c in doc["cases"]], [cases[0]["name"], cases[2]["name"]])
            self.assertEqual(os.listdir(d), ["out.json"])

    def test_oom_detection(self):
        self.assertTrue(gt.is_oom("OutOfMemoryError: CUDA out of memory. Tried to allocate"))
        self.assertFalse(gt.is_oom("RuntimeError: shape mismatch"))
        self.assertFalse(gt.is_oom(None))

    def test_write_configs_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            paths = gt.write_configs(d)
            self.assertEqual(len(paths), len(gt.PRESET_CONFIGS))
            with open(os.path.join(d, "gpt2.json")) as f:
                self.assertEqual(json.load(f)["n_embd"], 768)


class PeakTrace(unittest.TestCase):
    """peak_live_blocks on a recorded allocator trace of the shape torch.cuda.memory._snapshot() gives."""

    def test_live_blocks_at_the_allocated_peak(self):
        def ev(action, addr, size, fn="f"):
            # Packages inside an environment under a folder named torch, as on run J's machine.
            env = "/opt/torch/.venv/lib/python3.12/site-packages/"
            return {"action": action, "addr": addr, "size": size,
                    "frames": [{"filename": env + "torch/cuda/memory.py", "line": 1, "name": "inner"},
                               {"filename": env + "torch/nn/modules/module.py", "line": 2, "name": "_call_impl"},
                               {"filename": env + "transformers/models/m.py", "line": 7, "name": fn}]}
        trace = [ev("segment_alloc", 0, 2 << 20), ev("alloc", 1, 100, "a"), ev("alloc", 2, 300, "b"),
                 ev("free_requested", 1, 100),
                 ev("free_completed", 1, 100), ev("alloc", 3, 50, "c"), ev("alloc", 4, 10, "d"),
                 ev("free_completed", 2, 300), ev("alloc", 5, 20, "e")]

        class FakeMemory:
            @staticmethod
            def _snapshot():
                return {"device_traces": [trace]}

        class FakeTorch:
            class cuda:
                memory = FakeMemory

        out = gt.peak_live_blocks(FakeTorch)
        # Peak 400 after the second alloc (100 + 300); 360 later never exceeds it.
        self.assertEqual(out["peak_bytes_since_trace"], 400)
        self.assertEqual([b["size"] for b in out["largest"]], [300, 100])
        self.assertEqual(out["largest"][0]["frames"], ["models/m.py:7:b"])
        self.assertEqual(out["largest"][0]["event"], 2)
        self.assertEqual(out["peak_event"], 2)
        self.assertEqual(out["large_events"], [[0, "segment_alloc", 2 << 20, "models/m.py:7:f"]])
        self.assertEqual(out["segments_allocated"], [{"size": 2 << 20, "request": 100, "event": 0,
                                                      "allocated": 0, "frames": ["models/m.py:7:a"]}])

    def test_compact_trace_keeps_every_event_and_the_segments(self):
        snap = {"device_traces": [[{"action": "segment_alloc", "addr": 0, "size": 2 << 20, "frames": []},
                                   {"action": "alloc", "addr": 0, "size": 512, "frames": [{"filename": "x"}]},
                                   {"action": "free_completed", "addr": 0, "size": 512}]],
                "segments": [{"address": 0, "total_size": 2 << 20,
                              "blocks": [{"size": 2 << 20, "state": "inactive"}]}]}

        class FakeTorch:
            class cuda:
                class memory:
                    @staticmethod
                    def _snapshot():
                        return snap

        out = gt.compact_trace(FakeTorch)
        self.assertEqual(out["events"], [["segment_alloc", 0, 2 << 20], ["alloc", 0, 512],
                                         ["free_completed", 0, 512]])
        self.assertEqual(out["segments"], [[0, 2 << 20, [[2 << 20, "inactive"]]]])


if __name__ == "__main__":
    unittest.main()
