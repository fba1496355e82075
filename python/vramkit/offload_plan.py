"""The offload time and peak model, and the choice of a per-block offload/checkpoint/keep mix.

The same model as the planner's C++ `vramkit::plan::offload_model` (src/plan/offload_model.cpp);
tests/data/offload/model_cases.json holds cases both must answer alike. Pure functions.

Model (docs/offload.md):
- Forward: block i runs t_f; an offloaded block's saved bytes A stream out on the copy-out
  stream while it runs (no earlier than the link is free); the forward stalls only while more
  than `window` bytes are still waiting to be copied.
- Backward: block i runs t_b (+ t_f when checkpointed, the recompute); entering an offloaded block
  prefetches the next `prefetch` offloaded blocks below it on the copy-in stream, and with
  `prefetch_blocks` = d > 0 the start of block i's backward fetches the offloaded blocks among
  i .. i-d; a block waits for its own copy in.
- Device peak: other + kept blocks' A + checkpointed blocks' inputs + the largest transient (a
  recomputed block's A, or (1 + prefetch) offloaded blocks, or the copy-out window); with
  prefetch_blocks > 0, the blocks fetched back at once plus the recomputed block beside them, and
  what is still being copied out when the forward ends (at most the window), instead of the last
  two.
"""

POLICIES = ("offload", "checkpoint", "keep")


def simulate(mix, block_bytes, input_bytes, t_fwd, t_bwd, d2h_bytes_per_s, h2d_bytes_per_s,
             other_bytes=0, other_time_s=0.0, window_bytes=512 << 20, prefetch=1, prefetch_blocks=0):
    """Step time and device/host bytes of one mix (a list of policies, one per block, forward
    order). Returns a dict: step_time_s, compute_s, copy_s, exposed_copy_s, overlap,
    device_peak_bytes, host_pinned_bytes."""
    for p in mix:
        if p not in POLICIES:
            raise ValueError("offload mix entry %r is not one of %s" % (p, ", ".join(POLICIES)))
    n = len(mix)
    a, t_f, t_b = float(block_bytes), float(t_fwd), float(t_bwd)
    copy_out, copy_in = a / d2h_bytes_per_s, a / h2d_bytes_per_s
    # Forward. A block's tensors are produced, and copied out, while it runs: its copy starts
    # with the block (or when the link frees up) and ends no earlier than the block. The forward
    # stalls while more than `window` bytes wait for the link.
    t = 0.0
    link = 0.0  # when the copy-out stream is free
    stall = 0.0
    outs = {}
    for i, p in enumerate(mix):
        start = t
        t += t_f
        if p == "offload":
            link = max(max(link, start) + copy_out, t)
            outs[i] = link
            behind = (link - t) * d2h_bytes_per_s
            if behind > window_bytes:
                wait_s = (behind - window_bytes) / d2h_bytes_per_s
                stall += wait_s
                t += wait_s
    t_forward = t
    # Backward, top block first. A copy in may start once the block's copy out has finished.
    off = [i for i, p in enumerate(mix) if p == "offload"]
    ready = {}
    link_in = 0.0
    t = t_forward
    wait = 0.0

    def fetch(j, now):
        nonlocal link_in
        if j in ready:
            return
        if outs[j] > now and j == off[-1]:
            ready[j] = now  # still on the device in the copy-out window: used as is
            return
        link_in = max(link_in, now, outs[j]) + copy_in
        ready[j] = link_in

    held = 0.0  # most bytes fetched back and not yet through their backward, with a recompute
    for i in reversed(range(n)):
        if prefetch_blocks > 0:
            for j in range(i, max(0, i - prefetch_blocks) - 1, -1):
                if mix[j] == "offload":
                    fetch(j, t)
        if mix[i] == "offload":
            fetch(i, t)
            k = off.index(i)
            for j in reversed(off[max(0, k - prefetch):k]):
                fetch(j, t)
            if ready[i] > t:
                wait += ready[i] - t
                t = ready[i]
        held = max(held, (sum(1 for j in ready if j <= i) + (mix[i] == "checkpoint")) * a)
        t += t_b + (t_f if mix[i] == "checkpoint" else 0.0)
    compute = n * (t_f + t_b) + mix.count("checkpoint") * t_f + other_time_s
    step = t + other_time_s
    copies = len(off) * (copy_out + copy_in)
    exposed = stall + wait
    kept = mix.count("keep") * a + mix.count("checkpoint") * float(input_bytes)
    transient = 0.0
    if "checkpoint" in mix:
        transient = max(transient, a)
    if off and prefetch_blocks > 0:
        # What is still to be copied out when the forward ends (where the forward peaks).
        behind = sum(a * min(1.0, max(0.0, (done - t_forward) / copy_out)) for done in outs.values())
        transient = max(transient, held, min(window_bytes, behind))
    elif off:
        transient = max(transient, min(len(off), 1 + prefetch) * a, min(window_bytes, len(off) * a))
    return {
        "step_time_s": step,
        "compute_s": compute,
        "copy_s": copies,
        "exposed_copy_s": exposed,
        "overlap": 1.0 - exposed / copies if copies > 0 else 1.0,
        "device_peak_bytes": int(other_bytes + kept + transient),
        "host_pinned_bytes": int(len(off) * a),
    }


def arrange(n_blocks, n_offload, n_checkpoint):
    """The mix with these counts the model favours: offloaded blocks spread evenly from the first
    block (their copies drain during the blocks between), checkpointed blocks next, the last
    blocks kept (their tensors are needed first in backward, with nothing to hide a copy)."""
    if n_offload < 0 or n_checkpoint < 0 or n_offload + n_checkpoint > n_blocks:
        raise ValueError("offload mix: %d offloaded + %d checkpointed blocks exceed %d blocks"
                         % (n_offload, n_checkpoint, n_blocks))
    mix = [None] * n_blocks
    span = n_offload + n_checkpoint
    if n_offload:
        for k in range(n_offload):
            mix[(k * span) // n_offload] = "offload"
    for i in range(span):
        if mix[i] is None:
            mix[i] = "checkpoint"
    for i in range(span, n_blocks):
        mix[i] = "keep"
    return mix


def choose_mix(n_blocks, capacity_bytes, allow_offload=True, **model):
    """The fastest mix under capacity_bytes by the model (ties: fewer host bytes), or None when
    none fits. Returns (mix, simulate(mix)). `model` are simulate()'s other arguments."""
    best = None
    for n_off in range(n_blocks + 1 if allow_offload else 1):
        for n_ck in range(n_blocks - n_off + 1):
            mix = arrange(n_blocks, n_off, n_ck)
            r = simulate(mix, **model)
            if r["device_peak_bytes"] > capacity_bytes:
                continue
            key = (r["step_time_s"], r["host_pinned_bytes"])
            if best is None or key < best[0]:
                best = (key, mix, r)
    return (best[1], best[2]) if best else None


def optimizer_offload(parameters, master_weights=False, d2h_bytes_per_s=50e9, h2d_bytes_per_s=50e9,
                      chunk_bytes=64 << 20):
    """Optimizer-state offload as OffloadedAdamW runs it: host bytes of the moments (and fp32
    master weights), device bytes saved, the device chunk slots, and the step time (the slower
    copy direction, plus one chunk that overlaps nothing)."""
    if d2h_bytes_per_s <= 0 or h2d_bytes_per_s <= 0:
        raise ValueError("optimizer offload: the link rates must be positive")
    tensors = 3 if master_weights else 2
    host = parameters * 4 * tensors
    chunk = float(min(chunk_bytes * tensors, host))
    return {
        "host_bytes": host,
        "device_bytes_saved": parameters * 8,
        "device_buffer_bytes": 2 * tensors * chunk_bytes,
        "step_time_s": max(host / h2d_bytes_per_s, host / d2h_bytes_per_s)
        + min(chunk / h2d_bytes_per_s, chunk / d2h_bytes_per_s),
    }
