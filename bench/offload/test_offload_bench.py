#!/usr/bin/env python3
"""The bench's orchestration without a GPU: configs are faked (one runs out of memory), and the
JSON and summary must still carry every other result, the model's mix and its predictions."""

import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import offload_bench as ob  # noqa: E402

GiB = 1 << 30


def fake_spawn(args, config, shape, cap=0, mix=None, timeout=150):
    n = ob.SHAPES[shape]["layers"]
    if config in ("none-capped", "save-on-cpu"):
        return {"config": config, "shape": shape, "ok": False, "error": "out of memory"}
    step = {"reference": 1.0, "full-checkpoint": 1.3, "torchtune-style": 1.6, "vramkit-act": 1.1,
            "vramkit-compute-only": 1.05, "vramkit-act+opt": 1.4}[config]
    r = {"config": config, "shape": shape, "ok": True, "mix": mix, "losses": [10.0, 9.9, 9.8],
         "step_time_s": {"median": step, "min": step, "max": step, "n": 2},
         "forward_s": 0.3, "backward_s": 0.6, "optimizer_s": 0.1,
         "peak_reserved_bytes": 60 * GiB if config == "reference" else 29 * GiB,
         "peak_allocated_bytes": 40 * GiB if config == "reference" else 28 * GiB,
         "pinned_host_bytes": 10 * GiB, "copy_s": {"d2h": 0.2, "h2d": 0.2}}
    if config == "reference":
        r.update(block_bytes=[GiB] * n, block_forward_s=0.3 / n, block_input_bytes=GiB // 8,
                 link_bytes_per_s={"d2h": 50e9, "h2d": 50e9})
    return r


class Orchestration(unittest.TestCase):
    def test_failures_do_not_lose_other_results(self):
        ob.spawn = fake_spawn
        with tempfile.TemporaryDirectory() as tmp:
            out, summ = os.path.join(tmp, "o.json"), os.path.join(tmp, "o.md")
            sys.argv = ["offload_bench.py", "--out", out, "--summary", summ, "--shapes", "1b"]
            args = ob.argparse.Namespace(shapes="1b", out=out, summary=summ, steps=3, warmup=1,
                                         budget_s=100, cap_fraction=0.5)
            ob.orchestrate(args)
            with open(out) as f:
                res = json.load(f)
            with open(summ) as f:
                text = f.read()
        e = res["shapes"]["1b"]
        names = [c["config"] for c in e["configs"]]
        for n in ("reference", "none-capped", "full-checkpoint", "save-on-cpu", "torchtune-style"):
            self.assertIn(n, names)
        self.assertEqual(e["cap_bytes"], 30 * GiB)
        self.assertIn("FAILED: out of memory", text)
        self.assertIn("| full-checkpoint | 1.300", text)
        self.assertIn("model vs measured", text)
        self.assertTrue(e["plan"]["act"])
        for n in ("vramkit-act", "vramkit-compute-only", "vramkit-act+opt"):
            self.assertIn(n, names)
        self.assertAlmostEqual(e["overlap"]["overlap"], (1.05 + 0.4 - 1.1) / 0.4)
        self.assertIn("overlap (vramkit-act)", text)


if __name__ == "__main__":
    unittest.main()
