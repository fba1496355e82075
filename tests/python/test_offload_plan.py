"""vramkit.offload_plan: the policies' names and letters, and that the planner (the one offload
model, reached through vramkit.plan) reads every letter the Python side writes. The model's
arithmetic is tested in C++ (plan_offload_model_test, with the cases of
tests/data/offload/model_cases.json)."""

import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from vramkit import offload_plan as om  # noqa: E402
from vramkit import planner  # noqa: E402

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 512,
         "intermediate_size": 1376, "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 8,
         "vocab_size": 1024, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu",
         "tie_word_embeddings": False, "torch_dtype": "float32"}


class Spelling(unittest.TestCase):
    def test_letters_round_trip_and_are_distinct(self):
        mix = list(om.POLICIES)
        self.assertEqual(om.letters(mix), "ockshx")
        self.assertEqual(om.from_letters(om.letters(mix)), mix)
        self.assertEqual(len(set(om.LETTERS.values())), len(om.POLICIES))
        with self.assertRaisesRegex(ValueError, "'z'"):
            om.from_letters("ocz")

    def test_without_copies_keeps_the_recompute(self):
        self.assertEqual(om.without_copies(om.from_letters("ockshx")),
                         ["keep", "checkpoint", "keep", "selective", "selective", "checkpoint"])
        self.assertEqual(set(om.TO_HOST), {"offload", "selective-offload", "checkpoint-offload"})

    def test_the_engine_takes_the_same_policies(self):
        try:
            from vramkit import activation_offload
        except ImportError as e:  # torch missing
            self.skipTest(str(e))
        self.assertIs(activation_offload.POLICIES, om.POLICIES)


class ThroughThePlanner(unittest.TestCase):
    def setUp(self):
        try:
            planner.find_cli()
        except (OSError, RuntimeError, FileNotFoundError) as e:
            self.skipTest("no vramkit command: %s" % e)
        fd, self.config = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(LLAMA, f)

    def tearDown(self):
        os.unlink(self.config)

    def offload(self, mix):
        return planner.plan(self.config, precision="amp-bf16", batch=4, seq=1024, gpu="h200",
                            offload="activations:" + om.letters(mix), compress_activations="none")["offload"]

    def test_every_letter_is_read_back(self):
        mix = om.from_letters("ockshx")
        self.assertEqual(self.offload(mix)["mix"], mix)

    def test_copying_policies_hold_host_bytes_and_the_rest_none(self):
        for p in om.POLICIES:
            with self.subTest(policy=p):
                host = self.offload([p] * 6)["host_pinned_bytes"]
                if p in om.TO_HOST:
                    self.assertGreater(host, 0)
                else:
                    self.assertEqual(host, 0)

    def test_inputs_on_the_host_lower_the_peak_of_full_checkpointing(self):
        ck = self.offload(["checkpoint"] * 6)
        x = self.offload(["checkpoint-offload"] * 6)
        self.assertLess(x["allocated_peak_bytes"], ck["allocated_peak_bytes"])
        self.assertAlmostEqual(x["compute_s"], ck["compute_s"], places=9)
        self.assertEqual(om.without_copies(x["mix"]), ck["mix"])


if __name__ == "__main__":
    unittest.main()
