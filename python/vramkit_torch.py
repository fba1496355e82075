"""Use vramkit's stream-ordered caching pool as PyTorch's CUDA allocator.

    import vramkit_torch
    vramkit_torch.use_vramkit_allocator()          # before the first CUDA tensor
    ...
    print(vramkit_torch.memory_summary())          # torch.cuda.memory_summary() does not work
    stats = vramkit_torch.memory_stats()           # with a pluggable allocator; these do

The shared library is found at `path`, else $VRAMKIT_TORCH_LIB, else next to this file or in a
build folder of the repository (build*/libvramkit_torch.so). Pool options come from environment
variables read at the first allocation on each device (docs/torch-allocator.md).
"""

import ctypes
import glob
import json
import os

_LIB = None
_LIB_PATH = None


def find_library(path=None):
    """Returns the path of libvramkit_torch.so; raises FileNotFoundError naming where it looked."""
    candidates = []
    if path:
        candidates.append(path)
    if os.environ.get("VRAMKIT_TORCH_LIB"):
        candidates.append(os.environ["VRAMKIT_TORCH_LIB"])
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "libvramkit_torch.so"))
    root = os.path.dirname(here)
    candidates.extend(sorted(glob.glob(os.path.join(root, "build*", "libvramkit_torch.so"))))
    for c in candidates:
        if os.path.isfile(c):
            return os.path.abspath(c)
    raise FileNotFoundError(
        "libvramkit_torch.so not found (looked at: %s); build vramkit with CUDA or set "
        "VRAMKIT_TORCH_LIB" % ", ".join(candidates))


def _load(path=None):
    global _LIB, _LIB_PATH
    if _LIB is None:
        _LIB_PATH = find_library(path)
        lib = ctypes.CDLL(_LIB_PATH)
        lib.vramkit_memory_summary.restype = ctypes.c_size_t
        lib.vramkit_memory_summary.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.vramkit_memory_stats_json.restype = ctypes.c_size_t
        lib.vramkit_memory_stats_json.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.vramkit_reset_peak.restype = None
        lib.vramkit_reset_peak.argtypes = [ctypes.c_int]
        lib.vramkit_trim.restype = ctypes.c_int
        lib.vramkit_trim.argtypes = [ctypes.c_int]
        lib.vramkit_memory_snapshot_json.restype = ctypes.c_size_t
        lib.vramkit_memory_snapshot_json.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
        lib.vramkit_last_error.restype = ctypes.c_size_t
        lib.vramkit_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _LIB = lib
    return _LIB


def use_vramkit_allocator(path=None):
    """Makes vramkit's pool PyTorch's CUDA allocator; must run before any CUDA allocation.

    Returns the torch.cuda.memory.CUDAPluggableAllocator. Raises RuntimeError (from PyTorch) when
    the native allocator was already used in this process. Past the pool's limit
    (set_pool_maximum) or the device's memory, an allocation raises torch.OutOfMemoryError whose
    message holds the pool's summary (last_error() keeps the text).
    """
    import torch

    lib_path = find_library(path)
    _load(lib_path)
    # vramkit_torch_malloc throws on failure (PyTorch would keep a NULL as the tensor's data).
    allocator = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "vramkit_torch_malloc", "vramkit_free")
    torch.cuda.memory.change_current_allocator(allocator)
    return allocator


def _read(fn, device):
    n = fn(device, None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    fn(device, buf, n + 1)
    return buf.value.decode()


def last_error():
    """The message of the process's most recent failed vramkit allocation (with the pool's summary
    for an out-of-memory error), or "" if none failed."""
    lib = _load()
    n = lib.vramkit_last_error(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.vramkit_last_error(buf, n + 1)
    return buf.value.decode()


def _device_index(device):
    if device is None:
        import torch

        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)
    return 0 if index is None else index


def memory_summary(device=None):
    """The 75-column summary table of the device's vramkit pool."""
    return _read(_load().vramkit_memory_summary, _device_index(device))


def memory_stats(device=None):
    """The pool's figures as a dict with torch.cuda.memory_stats()-style keys
    ("allocated_bytes.all.peak", "reserved_bytes.all.current", ...)."""
    return json.loads(_read(_load().vramkit_memory_stats_json, _device_index(device)))


def _snapshot_from_json(text):
    """torch.cuda.memory._snapshot()'s structure from vramkit_memory_snapshot_json's text (the
    segment_pool_id pairs become tuples, as PyTorch returns them)."""
    snap = json.loads(text)
    if "error" in snap:
        raise RuntimeError("vramkit memory snapshot: %s" % snap["error"])
    for seg in snap["segments"]:
        seg["segment_pool_id"] = tuple(seg["segment_pool_id"])
    return snap


def memory_snapshot(device=None):
    """The device's vramkit pool in the structure of torch.cuda.memory._snapshot() (which does not
    work with a pluggable allocator): {"segments": [...with "blocks"...], "device_traces": [...],
    "allocator_settings": {}}, so torch.cuda._memory_viz draws it, e.g.
    open("pool.html", "w").write(torch.cuda._memory_viz.segment_plot(vramkit_torch.memory_snapshot())).
    Segments are the pool's chunks (pool) or runs of mapped granules (vmm); no stack frames. The
    device trace holds every allocation and free when VRAMKIT_TRACE_FILE was set before the first
    allocation (time_us counts from the pool's start), else it is empty."""
    import torch

    index = _device_index(device)
    count = torch.cuda.device_count()
    lib = _load()
    n = lib.vramkit_memory_snapshot_json(index, count, None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.vramkit_memory_snapshot_json(index, count, buf, n + 1)
    return _snapshot_from_json(buf.value.decode())


def reset_peak_memory_stats(device=None):
    """Sets the pool's peak figures to their current values."""
    _load().vramkit_reset_peak(_device_index(device))


def empty_cache(device=None):
    """Returns the pool's wholly free cached memory to the driver (torch.cuda.empty_cache() does
    not reach a pluggable allocator)."""
    if _load().vramkit_trim(_device_index(device)) != 0:
        raise RuntimeError("vramkit_trim failed (see stderr)")


_POOL_KINDS = ("pool", "vmm")


def _before_first_allocation(what):
    if _LIB is not None and _LIB.vramkit_memory_stats_json(0, None, 0) > 0:
        stats = memory_stats(0)
        if stats.get("pools"):
            raise RuntimeError("%s must be set before vramkit's pool serves its first allocation" % what)


def set_pool_maximum(max_bytes):
    """Caps the bytes vramkit's pool reserves on each device (VRAMKIT_POOL_MAXIMUM); past it an
    allocation fails and PyTorch raises its out-of-memory error. Must run before the first CUDA
    allocation. A size as an int of bytes or a string such as "40GiB"."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, str)):
        raise TypeError("set_pool_maximum takes bytes as an int or a size string such as '40GiB'")
    if isinstance(max_bytes, int) and max_bytes <= 0:
        raise ValueError("set_pool_maximum: the maximum must be positive (got %d)" % max_bytes)
    _before_first_allocation("set_pool_maximum")
    os.environ["VRAMKIT_POOL_MAXIMUM"] = str(max_bytes)


def set_pool_kind(kind):
    """Chooses the pool (VRAMKIT_POOL_KIND): "vmm" (virtual-memory segments that grow in place and
    remap free granules; the default where the GPU supports virtual memory management) or "pool"
    (chunks from cudaMallocAsync, the default where it does not). Must run before the first CUDA
    allocation."""
    if kind not in _POOL_KINDS:
        raise ValueError("set_pool_kind: kind must be one of %s (got %r)" % (", ".join(_POOL_KINDS), kind))
    _before_first_allocation("set_pool_kind")
    os.environ["VRAMKIT_POOL_KIND"] = kind
