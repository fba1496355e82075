"""A caching pool of (pinned) host buffers for offloaded tensors and optimizer chunks.

Buffers are byte tensors reused by size class, so a training loop that saves the same shapes each
step allocates host memory (cudaHostAlloc, slow) only in its first step. Thread-safe: autograd
runs unpack hooks and frees saved tensors on its own thread.
"""

import threading


def _round_up(n, granule):
    return (n + granule - 1) // granule * granule


class PinnedPool:
    """Host buffers by size class; `pin=True` pins them (needs CUDA), `pin=False` gives plain
    pageable memory (used on machines without a GPU and in tests).

    `get(nbytes)` returns a uint8 tensor of at least nbytes; `put(buf, event)` gives it back once
    `event` (a torch.cuda.Event or None) has completed, so a copy still reading or writing the
    buffer is never overtaken by its next user.
    """

    #: Sizes are rounded up to this granule (64 KiB) so that slightly different shapes share a class.
    granule = 64 << 10

    def __init__(self, pin=None, limit_bytes=None):
        import torch

        self._torch = torch
        self.pin = torch.cuda.is_available() if pin is None else bool(pin)
        self.limit_bytes = limit_bytes
        self._lock = threading.Lock()
        self._free = {}  # size class -> [buffers]
        self._pending = []  # (buffer, event) waiting for their copy to finish
        self.reserved_bytes = 0
        self.in_use_bytes = 0
        self.peak_in_use_bytes = 0
        self.peak_reserved_bytes = 0
        self.host_allocations = 0

    def _reclaim(self, wait):
        keep = []
        for buf, ev in self._pending:
            if ev is None or wait or ev.query():
                if ev is not None and wait:
                    ev.synchronize()
                self._free.setdefault(buf.numel(), []).append(buf)
                self.in_use_bytes -= buf.numel()
            else:
                keep.append((buf, ev))
        self._pending = keep

    def get(self, nbytes):
        """A buffer of at least nbytes (a cached one when a free one of its class exists).

        Raises MemoryError when limit_bytes would be exceeded even after reclaiming finished
        buffers and dropping free ones of other classes.
        """
        size = _round_up(max(int(nbytes), 1), self.granule)
        with self._lock:
            self._reclaim(wait=False)
            bucket = self._free.get(size)
            if bucket:
                buf = bucket.pop()
            else:
                if self.limit_bytes is not None and self.reserved_bytes + size > self.limit_bytes:
                    self._trim_locked()
                    if self.reserved_bytes + size > self.limit_bytes:
                        raise MemoryError(
                            "vramkit pinned pool: %d bytes requested, %d of %d bytes in use"
                            % (size, self.reserved_bytes, self.limit_bytes))
                buf = self._torch.empty(size, dtype=self._torch.uint8, pin_memory=self.pin)
                self.reserved_bytes += size
                self.host_allocations += 1
                self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
            self.in_use_bytes += size
            self.peak_in_use_bytes = max(self.peak_in_use_bytes, self.in_use_bytes)
            return buf

    def put(self, buf, event=None):
        """Returns buf to the pool; it is reused only after `event` has completed."""
        with self._lock:
            self._pending.append((buf, event))
            if event is None:
                self._reclaim(wait=False)

    def wait_all(self):
        """Blocks until every returned buffer's copy has completed and makes them reusable."""
        with self._lock:
            self._reclaim(wait=True)

    def _trim_locked(self):
        for bucket in self._free.values():
            for buf in bucket:
                self.reserved_bytes -= buf.numel()
        self._free = {}

    def trim(self):
        """Frees every cached (not in use) buffer back to the system."""
        with self._lock:
            self._reclaim(wait=True)
            self._trim_locked()

    def stats(self):
        """Bytes reserved (cached + in use), in use, their peaks and the host allocations made."""
        with self._lock:
            return {
                "pinned": self.pin,
                "reserved_bytes": self.reserved_bytes,
                "in_use_bytes": self.in_use_bytes,
                "peak_in_use_bytes": self.peak_in_use_bytes,
                "peak_reserved_bytes": self.peak_reserved_bytes,
                "host_allocations": self.host_allocations,
                "pending_buffers": len(self._pending),
            }
