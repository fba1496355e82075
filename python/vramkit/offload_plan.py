"""How a per-block offload mix is spelt, in Python.

The offload model itself (step time, device peak and pinned host bytes of a mix, and the choice
of the fastest mix that fits) is the planner's: `vramkit::plan::offload_model`
(src/plan/offload_model.cpp), reached from Python as any plan is, through `vramkit.plan(model,
offload="activations:MIX", ...)` or `vramkit.plan(model, fit=True, ...)`, whose "offload" object
holds those figures. This module names the policies and their letters for the code that builds
mixes (`vramkit.offload_activations`, the offload bench). Pure functions.
"""

POLICIES = ("offload", "checkpoint", "keep", "selective", "selective-offload", "checkpoint-offload")
#: Policies that copy a block's saved tensors (all, the selective ones, or a checkpointed block's
#: input) to pinned host memory.
TO_HOST = ("offload", "selective-offload", "checkpoint-offload")
#: The one-letter spelling of each policy (`vramkit plan --offload activations:MIX`).
LETTERS = {"offload": "o", "checkpoint": "c", "keep": "k", "selective": "s", "selective-offload": "h",
           "checkpoint-offload": "x"}


def letters(mix):
    """The mix spelt as `vramkit plan --offload activations:MIX` takes it, e.g. "ocshkx"."""
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
