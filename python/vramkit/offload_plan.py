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

import math

POLICIES = ("offload", "checkpoint", "keep", "selective", "selective-offload", "checkpoint-offload")
#: Policies that copy a block's saved tensors (all, the selective ones, or a checkpointed block's
#: input) to pinned host memory.
TO_HOST = ("offload", "selective-offload", "checkpoint-offload")
#: The one-letter spelling of each policy (`vramkit plan --offload activations:MIX`).
LETTERS = {"offload": "o", "checkpoint": "c", "keep": "k", "selective": "s", "selective-offload": "h",
           "checkpoint-offload": "x"}


def letters(mix):
    """The mix spelt as `vramkit plan --offload activations:MIX` takes it, e.g. "ocshk"."""
    return "".join(LETTERS[p] for p in mix)


def from_letters(text):
    """The mix a string of letters names; ValueError naming the first unknown letter."""
    names = {v: k for k, v in LETTERS.items()}
    for ch in text:
        if ch not in names:
            raise ValueError("offload mix letter %r is not one of %s" % (ch, ", ".join(names)))
    return [names[ch] for ch in text]


def without_copies(mix):
    """The mix with nothing copied to the host: offloaded blocks kept, selective-offload ones
    selective, checkpoint-offload ones checkpointed (what the copies cost is the difference in
    step time)."""
    return [{"offload": "keep", "selective-offload": "selective", "checkpoint-offload": "checkpoint"}.get(p, p)
            for p in mix]


def simulate(mix, block_bytes, input_bytes, t_fwd, t_bwd, d2h_bytes_per_s, h2d_bytes_per_s,
             other_bytes=0, other_time_s=0.0, window_bytes=512 << 20, prefetch=1, prefetch_blocks=0,
             selective_bytes=0, t_selective=0.0, windows_per_mix=False, loss_bytes=0):
    """Step time and device/host bytes of one mix (a list of policies, one per block, forward
    order). `selective_bytes`: what a selective block keeps besides its input (its GEMMs' and
    attention's outputs); `t_selective`: its recompute (the memory-bound ops); `loss_bytes`: what
    the head and the loss add beside the kept blocks when the forward ends (beyond other_bytes);
    `windows_per_mix`: window_bytes and prefetch_blocks follow the mix's largest copy. Returns a
    dict:
    step_time_s, compute_s, copy_s, exposed_copy_s, overlap, device_peak_bytes,
    host_pinned_bytes, window_bytes, prefetch_blocks."""
    for p in mix:
        if p not in POLICIES:
            raise ValueError("offload mix entry %r is not one of %s" % (p, ", ".join(POLICIES)))
    n = len(mix)
    a, sel, t_f, t_b = float(block_bytes), float(selective_bytes), float(t_fwd), float(t_bwd)
    moved = [a if p == "offload" else sel if p == "selective-offload" else float(input_bytes)
             if p == "checkpoint-offload" else 0.0 for p in mix]
    recomputed = ("checkpoint", "checkpoint-offload")
    off = [i for i, p in enumerate(mix) if p in TO_HOST]
    if off and (d2h_bytes_per_s <= 0 or h2d_bytes_per_s <= 0):
        raise ValueError("offload model: the link rates must be positive to offload")
    if windows_per_mix and off:
        # The engine settings the plan prints for this mix: two of its largest copies out in
        # flight, copies back started as many blocks ahead as one takes backward passes, plus one.
        largest = max(moved)
        window_bytes = 2 * largest if largest / d2h_bytes_per_s > t_f else largest
        ahead = math.ceil(largest / h2d_bytes_per_s / t_b) + 1 if t_b > 0 else n
        prefetch_blocks = int(min(max(ahead, 1), n))

    def recompute(i):
        return t_f if mix[i] in recomputed else float(t_selective) if mix[i].startswith("selective") else 0.0

    def regrown(i):
        return a if mix[i] in recomputed else a - sel if mix[i].startswith("selective") else 0.0

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
        if p in TO_HOST:
            link = max(max(link, start) + moved[i] / d2h_bytes_per_s, t)
            outs[i] = link
            behind = (link - t) * d2h_bytes_per_s
            if behind > window_bytes:
                wait_s = (behind - window_bytes) / d2h_bytes_per_s
                stall += wait_s
                t += wait_s
    t_forward = t
    # Backward, top block first. A copy in may start once the block's copy out has finished.
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
        link_in = max(link_in, now, outs[j]) + moved[j] / h2d_bytes_per_s
        ready[j] = link_in

    def resident(i):
        # What a block keeps on the device from its forward to its backward.
        p = mix[i]
        return (a if p == "keep" else float(input_bytes) if p in ("checkpoint", "selective-offload")
                else sel + float(input_bytes) if p == "selective" else 0.0)

    held = 0.0  # most bytes fetched back and not yet through their backward, with a recompute
    freed = 0.0  # what the blocks above, through their backward, kept on the device
    for i in reversed(range(n)):
        if prefetch_blocks > 0:
            for j in range(i, max(0, i - prefetch_blocks) - 1, -1):
                if mix[j] in TO_HOST:
                    fetch(j, t)
        if mix[i] in TO_HOST:
            fetch(i, t)
            k = off.index(i)
            for j in reversed(off[max(0, k - prefetch):k]):
                fetch(j, t)
            if ready[i] > t:
                wait += ready[i] - t
                t = ready[i]
        held = max(held, sum(moved[j] for j in ready if j <= i) + regrown(i) - freed)
        freed += resident(i)
        t += t_b + recompute(i)
    n_sel = sum(1 for p in mix if p.startswith("selective"))
    n_ck = mix.count("checkpoint") + mix.count("checkpoint-offload")
    compute = n * (t_f + t_b) + n_ck * t_f + n_sel * float(t_selective) + other_time_s
    step = t + other_time_s
    copies = sum(moved[j] / d2h_bytes_per_s + moved[j] / h2d_bytes_per_s for j in off)
    exposed = stall + wait
    kept = (mix.count("keep") * a + mix.count("checkpoint") * float(input_bytes)
            + mix.count("selective") * (sel + float(input_bytes)) + mix.count("selective-offload") * float(input_bytes))
    # The largest recompute (which also stands for what the head and the loss add when the
    # forward ends, where other_bytes is anchored), and beside it, what the copy-out window still
    # holds on the device then.
    base = max([regrown(i) for i in range(n) if mix[i] not in TO_HOST] + [float(loss_bytes)])
    transient = base
    if off and prefetch_blocks > 0:
        # The allocator counts on the host, which runs ahead of the device: when the head and the
        # loss allocate, the engine has not yet seen the last copies out complete and holds up to
        # its window of them.
        transient = max(base + min(window_bytes, sum(moved)), held)
    elif off:
        # A block fetched with the `prefetch` offloaded blocks below it, beside what it regrows.
        for k in range(len(off)):
            transient = max(transient, regrown(off[k]) + sum(moved[off[j]] for j in range(max(0, k - prefetch), k + 1)))
        transient = max(transient, base + min(window_bytes, sum(moved)))
    return {
        "step_time_s": step,
        "compute_s": compute,
        "copy_s": copies,
        "exposed_copy_s": exposed,
        "overlap": 1.0 - exposed / copies if copies > 0 else 1.0,
        "device_peak_bytes": int(other_bytes + kept + transient),
        "host_pinned_bytes": int(sum(moved)),
        "window_bytes": int(window_bytes),
        "prefetch_blocks": prefetch_blocks,
    }


def arrange(n_blocks, n_offload, n_checkpoint, n_selective=0, n_selective_offload=0, from_top=False):
    """The mix with these counts the model favours: the blocks that copy to the host (offload,
    then selective-offload, each kind spread among them) spread evenly from the first block over
    the blocks not kept (their copies drain during the blocks between; `from_top`: from the last
    block not kept down), checkpointed blocks next, selective ones after them, the last blocks
    kept (their tensors are needed first in backward, with nothing to hide a copy)."""
    counts = (n_offload, n_checkpoint, n_selective, n_selective_offload)
    to_host = n_offload + n_selective_offload
    span = to_host + n_checkpoint + n_selective
    if min(counts) < 0 or span > n_blocks:
        raise ValueError("offload mix: %d offloaded + %d checkpointed + %d selective + %d selective-offload blocks "
                         "exceed %d blocks" % (counts + (n_blocks,)))
    mix = ["keep"] * n_blocks
    host = [span - 1 - (k * span) // to_host if from_top else (k * span) // to_host for k in range(to_host)]
    rest = 0
    for i in range(span):
        if i not in host:
            mix[i] = "checkpoint" if rest < n_checkpoint else "selective"
            rest += 1
    for i in host:
        mix[i] = "selective-offload"
    for k in range(n_offload):
        mix[host[(k * to_host) // n_offload]] = "offload"
    return mix


def choose_mix(n_blocks, capacity_bytes, allow_offload=True, copy_interference=0.0, **model):
    """The fastest mix under capacity_bytes by the model (ties: fewer host bytes), or None when
    none fits; the selective policies when model has selective_bytes > 0. Mixes are ranked by
    their step time plus `copy_interference` of their hidden copy time. Returns (mix,
    simulate(mix)). `model` are simulate()'s other arguments."""
    best = None
    sel = model.get("selective_bytes", 0) > 0
    for n_off in range(n_blocks + 1 if allow_offload else 1):
        for n_soff in range(n_blocks - n_off + 1 if allow_offload and sel else 1):
            left = n_blocks - n_off - n_soff
            for n_ck in range(left + 1):
                for n_sel in range(left - n_ck + 1 if sel else 1):
                    for top in ((False, True) if n_off + n_soff else (False,)):
                        mix = arrange(n_blocks, n_off, n_ck, n_sel, n_soff, from_top=top)
                        r = simulate(mix, **model)
                        if r["device_peak_bytes"] > capacity_bytes:
                            continue
                        hidden = r["copy_s"] - r["exposed_copy_s"]
                        key = (r["step_time_s"] + copy_interference * hidden, r["host_pinned_bytes"])
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
