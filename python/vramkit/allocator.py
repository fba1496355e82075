"""vramkit's pool as PyTorch's CUDA allocator, and its statistics.

The code lives in the top-level module `vramkit_torch` (kept importable as it was); this module
re-exports it so that `vramkit.use_vramkit_allocator()` and `import vramkit_torch` are one thing.
"""

from vramkit_torch import (  # noqa: F401
    empty_cache,
    find_library,
    memory_stats,
    memory_summary,
    reset_peak_memory_stats,
    use_vramkit_allocator,
)
