#!/usr/bin/env python3
"""Unit tests of trace_tools on synthetic traces (plain python3, no torch): python3 bench/mr/test_trace_tools.py"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trace_tools as tt  # noqa: E402

GOOD = """# vramkit-trace v1
# source: synthetic test
a 1 1000 0 0
a 2 4096 0 10
f 1 1000 0 20
a 3 3000 1 30
f 2 4096 0 40
a 4 512 0 40
""".splitlines()


class ParseTrace(unittest.TestCase):
    def test_parses_events_and_comments(self):
        comments, events = tt.parse_trace(GOOD)
        self.assertEqual(comments, ["# vramkit-trace v1", "# source: synthetic test"])
        self.assertEqual(events[0], ("a", 1, 1000, 0, 0))
        self.assertEqual(events[2], ("f", 1, 1000, 0, 20))
        self.assertEqual(len(events), 6)

    def test_rejects_bad_input_naming_the_line(self):
        cases = {
            "missing magic": (["a 1 10 0 0"], "line 1"),
            "field count": (GOOD[:2] + ["a 1 10 0"], "line 3"),
            "kind": (GOOD[:2] + ["x 1 10 0 0"], "line 3"),
            "non-integer": (GOOD[:2] + ["a 1 ten 0 0"], "non-integer"),
            "negative": (GOOD[:2] + ["a 1 -5 0 0"], "negative"),
            "time back": (GOOD[:2] + ["a 1 10 0 5", "a 2 10 0 4"], "goes back"),
            "double alloc": (GOOD[:2] + ["a 1 10 0 0", "a 1 10 0 1"], "still live"),
            "unknown free": (GOOD[:2] + ["f 7 10 0 0"], "not live"),
            "size mismatch": (GOOD[:2] + ["a 1 10 0 0", "f 1 11 0 1"], "different size"),
            "late comment": (GOOD[:3] + ["# late"], "comment after"),
        }
        for what, (lines, needle) in cases.items():
            with self.subTest(what):
                with self.assertRaises(tt.trace_error) as cm:
                    tt.parse_trace(lines)
                self.assertIn(needle, str(cm.exception))

    def test_id_may_be_reused_after_free(self):
        _, events = tt.parse_trace(GOOD[:2] + ["a 1 10 0 0", "f 1 10 0 1", "a 1 20 0 2"])
        self.assertEqual(len(events), 3)


class TraceStats(unittest.TestCase):
    def test_peak_count_and_histogram(self):
        _, events = tt.parse_trace(GOOD)
        s = tt.trace_stats(events)
        # live: 1000, 5096, 4096, 7096 (peak, at event 3), 3000, 3512
        self.assertEqual(s["peak_live_bytes"], 7096)
        self.assertEqual(s["peak_event_index"], 3)
        self.assertEqual(s["events"], 6)
        self.assertEqual((s["allocs"], s["frees"]), (4, 2))
        self.assertEqual(s["live_at_end"], 2)
        self.assertEqual(s["live_bytes_at_end"], 3512)
        self.assertEqual(s["streams"], [0, 1])
        self.assertEqual(s["size_histogram"], {"512": 1, "1024": 1, "4096": 2})

    def test_bucket_edges(self):
        self.assertEqual(tt.size_bucket(0), 0)
        self.assertEqual(tt.size_bucket(1), 1)
        self.assertEqual(tt.size_bucket(512), 512)
        self.assertEqual(tt.size_bucket(513), 1024)

    def test_file_round_trip(self):
        _, events = tt.parse_trace(GOOD)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.trace")
            tt.write_trace(path, events, "synthetic round trip", notes=["note one"])
            comments, again = tt.read_trace(path)
        self.assertEqual(again, events)
        self.assertEqual(comments[1], "# source: synthetic round trip")
        self.assertEqual(comments[2], "# note one")


def entry(action, addr, size, stream=0, t=None):
    e = {"action": action, "addr": addr, "size": size, "stream": stream}
    if t is not None:
        e["time_us"] = t
    return e


class SnapshotConversion(unittest.TestCase):
    TRACE = [
        entry("free_requested", 0x900, 64, 0, 100),  # block from before recording
        entry("free_completed", 0x900, 64, 0, 100),
        entry("segment_alloc", 0x1000, 2 << 20, 0, 101),
        entry("alloc", 0x1000, 1000, 0, 101),
        entry("alloc", 0x2000, 5000, 0x55aa, 102),
        entry("free_requested", 0x1000, 1000, 0, 103),
        entry("free_completed", 0x1000, 1000, 0, 104),
        entry("alloc", 0x1000, 700, 0x77bb, 105),  # same address again: a fresh id
        entry("free_requested", 0x2000, 5000, 0x55aa, 106),
        entry("free_completed", 0x2000, 5000, 0x55aa, 109),
    ]

    def test_free_completed_events(self):
        events, info = tt.snapshot_to_events(self.TRACE)
        self.assertEqual(events, [
            ("a", 1, 1000, 0, 0),
            ("a", 2, 5000, 1, 1000),
            ("f", 1, 1000, 0, 3000),
            ("a", 3, 700, 2, 4000),
            ("f", 2, 5000, 1, 8000),
        ])
        self.assertEqual(info["dropped_frees"], 1)
        self.assertEqual(info["streams"], 3)
        # The converted events form a valid trace.
        tt.parse_trace([tt.MAGIC, "# source: test"] + tt.format_events(events).splitlines())

    def test_free_requested_variant_uses_request_times(self):
        events, _ = tt.snapshot_to_events(self.TRACE, free_action="free_requested")
        self.assertEqual([e[4] for e in events if e[0] == "f"], [2000, 5000])

    def test_index_time_when_time_us_absent(self):
        trace = [dict(e) for e in self.TRACE]
        for e in trace:
            e.pop("time_us")
        events, _ = tt.snapshot_to_events(trace)
        self.assertEqual([e[4] for e in events], [0, 1000, 3000, 4000, 6000])

    def test_start_time_emits_live_blocks_first(self):
        events, info = tt.snapshot_to_events(self.TRACE, start_time_us=105)
        self.assertEqual(info["live_at_start"], 1)
        self.assertEqual(events, [("a", 2, 5000, 1, 0), ("a", 3, 700, 2, 0), ("f", 2, 5000, 1, 4000)])

    def test_rejects_unknown_free_action(self):
        with self.assertRaises(ValueError):
            tt.snapshot_to_events(self.TRACE, free_action="free")


if __name__ == "__main__":
    unittest.main()
