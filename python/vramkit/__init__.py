"""vramkit for PyTorch: the pool as CUDA allocator, activation and optimizer-state offload to
pinned host memory, and the memory planner.

    import vramkit
    ctx = vramkit.offload_activations(model, mix=["offload"] * 8 + ["checkpoint"] * 8)
    opt = vramkit.OffloadedAdamW(model.parameters(), lr=1e-4)
    print(vramkit.plan("llama-3-8b", precision="amp-bf16", gpu="h200")["device_peak_bytes"])

torch is imported only by the pieces that need it.
"""

from .planner import PlanError, find_cli, plan  # noqa: F401

__version__ = "0.1.0"


def __getattr__(name):
    if name in ("offload_activations", "find_blocks"):
        from . import activation_offload

        return getattr(activation_offload, name)
    if name == "OffloadedAdamW":
        from .offloaded_adamw import OffloadedAdamW

        return OffloadedAdamW
    if name == "PinnedPool":
        from .pinned_pool import PinnedPool

        return PinnedPool
    if name in ("use_vramkit_allocator", "memory_summary", "memory_stats", "reset_peak_memory_stats",
                "empty_cache", "find_library"):
        from . import allocator

        return getattr(allocator, name)
    raise AttributeError("module 'vramkit' has no attribute %r" % (name,))
