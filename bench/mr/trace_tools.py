#!/usr/bin/env python3
"""Reads, writes and summarises vramkit's compact allocation-trace format (plain Python, no torch).

Format (one event per line, '#' lines are comments and may only precede the events):

    # vramkit-trace v1
    # source: <producer> <version> <description>
    a <id> <bytes> <stream> <time_ns>
    f <id> <bytes> <stream> <time_ns>

`a` allocates `bytes` on `stream` and names the block `id` (unique among live blocks); `f` frees
the live block `id` (bytes and stream repeat the allocation's). time_ns never decreases. Blocks
still live at the end are legal: a replayer frees them after the last event.

Also converts a PyTorch memory snapshot's device trace (torch.cuda.memory._snapshot()
["device_traces"][device]) into events, so the conversion is testable without torch.

Usage: python3 bench/mr/trace_tools.py FILE.trace   # prints the summary as JSON
"""

import json
import sys

MAGIC = "# vramkit-trace v1"


class trace_error(ValueError):
    """A malformed trace; the message names the line and what is wrong."""


def parse_trace(lines):
    """Parses trace text lines; returns (comment lines, [(kind, id, bytes, stream, time_ns), ...]).

    Raises trace_error naming the first bad line: wrong magic, wrong field count, non-integer or
    negative field, decreasing time, allocation of a live id, free of an unknown id, or a free whose
    bytes differ from the allocation's.
    """
    comments, events = [], []
    live = {}
    last_time = 0
    for n, raw in enumerate(lines, 1):
        line = raw.strip()
        if n == 1 and line != MAGIC:
            raise trace_error("line 1: expected %r, got %r" % (MAGIC, line[:40]))
        if not line:
            continue
        if line.startswith("#"):
            if events:
                raise trace_error("line %d: comment after the first event" % n)
            comments.append(line)
            continue
        fields = line.split()
        if len(fields) != 5 or fields[0] not in ("a", "f"):
            raise trace_error("line %d: expected 'a|f id bytes stream time_ns', got %r" % (n, line[:60]))
        try:
            ident, size, stream, t = (int(x) for x in fields[1:])
        except ValueError:
            raise trace_error("line %d: non-integer field in %r" % (n, line[:60])) from None
        if min(ident, size, stream, t) < 0:
            raise trace_error("line %d: negative field in %r" % (n, line[:60]))
        if t < last_time:
            raise trace_error("line %d: time %d goes back from %d" % (n, t, last_time))
        last_time = t
        if fields[0] == "a":
            if ident in live:
                raise trace_error("line %d: id %d allocated while still live" % (n, ident))
            live[ident] = size
        else:
            if ident not in live:
                raise trace_error("line %d: free of id %d that is not live" % (n, ident))
            if live.pop(ident) != size:
                raise trace_error("line %d: free of id %d with %d bytes, allocated with a different size" % (n, ident, size))
        events.append((fields[0], ident, size, stream, t))
    if not lines:
        raise trace_error("empty trace (no %r line)" % MAGIC)
    return comments, events


def read_trace(path):
    """Parses the trace file at path; see parse_trace."""
    with open(path) as f:
        try:
            return parse_trace(f.read().splitlines())
        except trace_error as e:
            raise trace_error("%s: %s" % (path, e)) from None


def size_bucket(size):
    """Upper bound of the power-of-two histogram bucket holding size (0 stays 0)."""
    return 0 if size <= 0 else 1 << (size - 1).bit_length()


def trace_stats(events):
    """Summary of parsed events: counts, peak live bytes (and the event index where it is reached),
    bytes still live at the end, streams, and a power-of-two histogram of allocation sizes."""
    live = {}
    cur = peak = 0
    peak_index = -1
    allocs = frees = 0
    hist = {}
    streams = set()
    for i, (kind, ident, size, stream, _t) in enumerate(events):
        streams.add(stream)
        if kind == "a":
            allocs += 1
            live[ident] = size
            cur += size
            b = size_bucket(size)
            hist[b] = hist.get(b, 0) + 1
            if cur > peak:
                peak, peak_index = cur, i
        else:
            frees += 1
            cur -= live.pop(ident)
    return {
        "events": len(events),
        "allocs": allocs,
        "frees": frees,
        "peak_live_bytes": peak,
        "peak_event_index": peak_index,
        "live_at_end": len(live),
        "live_bytes_at_end": cur,
        "streams": sorted(streams),
        "duration_ns": events[-1][4] if events else 0,
        "size_histogram": {str(k): hist[k] for k in sorted(hist)},
    }


def snapshot_to_events(trace, free_action="free_completed", start_time_us=None):
    """Converts a PyTorch device trace (list of dicts with action, addr, size, stream, time_us)
    into compact events.

    Allocations use action 'alloc'; frees use `free_action` only ('free_completed': the block is
    back in the allocator and reusable, which is what a replayed allocator must see; or
    'free_requested' consistently). Frees of blocks allocated before the trace began are dropped.
    With start_time_us, entries before it only establish which blocks are live at that moment;
    those blocks are emitted as allocations at time 0, then the later events follow (a shorter
    recording that starts from the live state). Streams map to 0 for the default stream (0) and
    1, 2, ... in order of appearance; ids are fresh integers per allocation; time_ns counts from
    the first emitted event (entry index when time_us is absent) and never decreases.

    Returns (events, info) where info counts dropped frees and re-used addresses.
    """
    if free_action not in ("free_completed", "free_requested"):
        raise ValueError("free_action must be free_completed or free_requested, got %r" % free_action)
    stream_ids = {0: 0}
    events = []
    live = {}  # addr -> (id, size, stream)
    next_id = 1
    info = {"dropped_frees": 0, "readdressed": 0, "live_at_start": 0}
    t0 = None
    last_t = 0
    started = start_time_us is None

    def stream_of(raw):
        raw = int(raw or 0)
        if raw not in stream_ids:
            stream_ids[raw] = len(stream_ids)
        return stream_ids[raw]

    def stamp(index, entry):
        nonlocal t0, last_t
        raw = entry.get("time_us")
        raw = index * 1000 if raw is None else int(raw) * 1000
        if t0 is None:
            t0 = raw
        last_t = max(last_t, raw - t0)
        return last_t

    for index, e in enumerate(trace):
        action = e.get("action")
        if not started and e.get("time_us") is not None and int(e["time_us"]) >= start_time_us:
            started = True
            for addr in sorted(live):
                ident, size, stream = live[addr]
                events.append(("a", ident, size, stream, 0))
            info["live_at_start"] = len(live)
            t0 = int(e["time_us"]) * 1000
        if action == "alloc":
            addr = int(e["addr"])
            if addr in live:  # its free was never traced (ring buffer wrap): close the old block
                info["readdressed"] += 1
                old = live.pop(addr)
                if started:
                    events.append(("f", old[0], old[1], old[2], stamp(index, e)))
            live[addr] = (next_id, int(e["size"]), stream_of(e.get("stream")))
            if started:
                events.append(("a", next_id, int(e["size"]), live[addr][2], stamp(index, e)))
            next_id += 1
        elif action == free_action:
            addr = int(e["addr"])
            if addr not in live:
                info["dropped_frees"] += 1
                continue
            ident, size, stream = live.pop(addr)
            if started:
                events.append(("f", ident, size, stream, stamp(index, e)))
    info["streams"] = len(stream_ids)
    return events, info


def format_events(events):
    """The event lines (with trailing newlines) of a compact trace."""
    return "".join("%s %d %d %d %d\n" % ev for ev in events)


def write_trace(path, events, source, notes=()):
    """Writes a compact trace file: magic line, '# source: ...', extra '# ' notes, then the events."""
    with open(path, "w") as f:
        f.write(MAGIC + "\n")
        f.write("# source: %s\n" % source)
        for note in notes:
            f.write("# %s\n" % note)
        f.write(format_events(events))


def main(argv):
    if len(argv) != 2:
        print("usage: trace_tools.py FILE.trace", file=sys.stderr)
        return 2
    try:
        _, events = read_trace(argv[1])
    except (OSError, trace_error) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    print(json.dumps(trace_stats(events), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
