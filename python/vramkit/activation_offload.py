"""Activation offload: tensors autograd saves for backward move to pinned host memory during the
forward and come back, prefetched in reverse block order, during the backward.

One `offload_activations` object serves many steps; enter it around each forward. Pack hooks run
on the thread of the forward, unpack hooks and frees on autograd's thread; the shared state is
either per-step (written in forward, read in backward) or behind the pool's lock.
"""

import bisect
import functools
import itertools
import weakref

import torch

from .pinned_pool import PinnedPool

#: Block policies accepted in `mix`.
from .offload_plan import POLICIES  # noqa: F401 - one list of the policies (and their letters there)
#: Policies whose block tensors that reach the hooks go to the host: all of them, or (a checkpointed
#: block) the input that torch.utils.checkpoint saves for the recompute.
_OFFLOADED = ("offload", "checkpoint-offload")

#: aten ops whose outputs selective checkpointing keeps: GEMMs and fused attention kernels.
SELECTIVE_GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm", "_scaled_mm")
SELECTIVE_ATTENTION_OPS = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                           "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
                           "_flash_attention_forward", "_efficient_attention_forward")
SELECTIVE_SAVED_OPS = SELECTIVE_GEMM_OPS + SELECTIVE_ATTENTION_OPS


def _storage_ptr(t):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage().data_ptr()
    return t.storage().data_ptr()


def _is_parameter(t):
    return isinstance(t, torch.nn.Parameter) or isinstance(getattr(t, "_base", None), torch.nn.Parameter)


def find_blocks(model):
    """The model's repeated blocks: its longest nn.ModuleList (e.g. a LLaMA's `layers`).

    Raises ValueError when the model has none.
    """
    best = None
    for _, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and (best is None or len(m) > len(best)):
            best = m
    if best is None or len(best) == 0:
        raise ValueError("offload_activations: the model has no nn.ModuleList of blocks; pass blocks=")
    return list(best)


def _resolve(spec, blocks, what):
    """Block indices named by spec: "all", None, an int count is NOT accepted (ambiguous); a
    sequence of indices or of modules from blocks."""
    if spec is None:
        return set()
    if isinstance(spec, str):
        if spec == "all":
            return set(range(len(blocks)))
        raise ValueError("offload_activations: %s=%r: use 'all', indices or modules" % (what, spec))
    out = set()
    for s in spec:
        if isinstance(s, int) and not isinstance(s, bool):
            if not -len(blocks) <= s < len(blocks):
                raise ValueError("offload_activations: %s index %d is out of range (%d blocks)"
                                 % (what, s, len(blocks)))
            out.add(s % len(blocks))
        elif isinstance(s, torch.nn.Module):
            idx = [i for i, b in enumerate(blocks) if b is s]
            if not idx:
                raise ValueError("offload_activations: a module in %s= is not one of the blocks" % what)
            out.add(idx[0])
        else:
            raise ValueError("offload_activations: %s= holds %r: use indices or modules" % (what, s))
    return out


def _checkpointed(forward, *args, **kwargs):
    from torch.utils.checkpoint import checkpoint

    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


_op_kinds = None


def _selective_kind(func):
    """"gemm" or "attention" when selective checkpointing keeps the outputs of the aten op
    `func` (SELECTIVE_GEMM_OPS, SELECTIVE_ATTENTION_OPS), else None."""
    global _op_kinds
    if _op_kinds is None:
        _op_kinds = {getattr(torch.ops.aten, n): kind for names, kind in ((SELECTIVE_GEMM_OPS, "gemm"),
                                                                          (SELECTIVE_ATTENTION_OPS, "attention"))
                     for n in names if hasattr(torch.ops.aten, n)}
    return _op_kinds.get(func.overloadpacket)


def _selective_saved(func):
    """Whether selective checkpointing keeps the outputs of the aten op `func`."""
    return _selective_kind(func) is not None


def _detached(x):
    """x detached as selective checkpointing caches it (a view the graph does not track)."""
    if not isinstance(x, torch.Tensor):
        return x
    guard = getattr(torch._C, "_SetExcludeDispatchKeyGuard", None)
    if guard is None:
        return x.detach()
    with guard(torch._C.DispatchKey.ADInplaceOrView, False):
        return x.detach()


def _selective_modes(engine, offload):
    """The (forward, recompute) contexts of one selectively checkpointed block: the forward keeps
    the outputs of GEMMs and attention kernels (in pinned host memory with `offload`; with the
    engine's `compress`, the GEMM outputs it selects as fp8), the recompute in backward returns
    them in the same order and runs every other op again."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_map

    store = []
    pending = []  # attention projections' outputs to compress unless an attention kernel reads them

    class Save(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            kind = _selective_kind(func)
            if kind is not None:
                if kind == "attention" and pending:
                    engine._selective_settle(pending, offload, exact=True)  # noqa: SLF001
                store.append(tree_map(lambda x: engine._selective_store(x, offload, pending), out))  # noqa: SLF001
            return out

        def __exit__(self, *exc):
            # The block's forward is over: what no attention kernel read is compressed now.
            try:
                return super().__exit__(*exc)
            finally:
                if pending and exc[0] is None:
                    engine._selective_settle(pending, offload, exact=False)  # noqa: SLF001
                pending.clear()

    class Replay(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.next = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not _selective_saved(func):
                return func(*args, **(kwargs or {}))
            if self.next >= len(store):
                raise RuntimeError("offload_activations: a selective block's recompute ran more GEMM/attention ops "
                                   "than its forward (is the block's forward deterministic?)")
            saved = store[self.next]
            store[self.next] = None  # returned once: its memory goes with the graph's use
            self.next += 1
            return tree_map(engine._selective_load, saved)  # noqa: SLF001

        def __exit__(self, *exc):
            # The recompute is over (checkpoint stops it early once backward has every tensor it
            # needs): the outputs it did not ask for go now, host buffers back to the pool, not
            # when the graph happens to be collected.
            try:
                return super().__exit__(*exc)
            finally:
                store.clear()

    return Save(), Replay()


class _Kept:
    """A GEMM/attention output a selective block keeps on the device, with its version."""

    __slots__ = ("tensor", "version")

    def __init__(self, tensor, version):
        self.tensor, self.version = tensor, version


class _Pending:
    """An attention projection's output in a selective block with compression, until it is known
    whether an attention kernel reads it (then it is kept exact) or not (compressed): `saved` is
    what _selective_store would have returned, once settled."""

    __slots__ = ("tensor", "version", "saved")

    def __init__(self, tensor, version):
        self.tensor, self.version, self.saved = tensor, version, None


def _has_context_fn():
    import inspect

    from torch.utils import checkpoint

    try:
        return "context_fn" in inspect.signature(checkpoint.checkpoint).parameters
    except (TypeError, ValueError):
        return False


def _selective(engine, offload, forward, *args, **kwargs):
    from torch.utils.checkpoint import checkpoint

    return checkpoint(forward, *args, use_reentrant=False,
                      context_fn=functools.partial(_selective_modes, engine, offload), **kwargs)


class _Step:
    """Records of one forward, by group (groups number the forward's blocks in order)."""

    def __init__(self, engine):
        self.engine = engine
        self.groups = {}  # group -> [weakref(record)]
        self.group_ids = []  # ascending
        self.entered = set()  # groups whose backward has started
        self.block_group = {}  # block index -> the group of its tensors

    def add(self, rec):
        if rec.group not in self.groups:
            self.groups[rec.group] = []
            bisect.insort(self.group_ids, rec.group)
        self.groups[rec.group].append(weakref.ref(rec))

    def alive(self, group):
        return [r for r in (w() for w in self.groups.get(group, ())) if r is not None]


class _Record:
    """One offloaded tensor (or compressed payload): its host copy, and its device copy once
    fetched back. `hold_bytes`: device bytes kept alive until the copy out completes."""

    __slots__ = ("step", "group", "shape", "stride", "dtype", "device", "nbytes", "hold_bytes", "encoded", "buf",
                 "host", "d2h_event", "gpu_ref", "device_tensor", "h2d_event", "stream_recorded",
                 "unpacked", "__weakref__")

    def __init__(self, step, group, shape, stride, dtype, device, nbytes, hold_bytes=None):
        self.step, self.group = step, group
        self.shape, self.stride, self.dtype, self.device = shape, stride, dtype, device
        self.nbytes = nbytes
        self.hold_bytes = nbytes if hold_bytes is None else hold_bytes
        self.encoded = hold_bytes is not None  # the host copy is an encoding of gpu_ref
        self.buf = self.host = None
        self.d2h_event = self.h2d_event = self.gpu_ref = self.device_tensor = None
        self.stream_recorded = self.unpacked = False
        step.engine._live_records += 1

    @classmethod
    def of(cls, step, group, t):
        return cls(step, group, t.shape, t.stride(), t.dtype, t.device, t.numel() * t.element_size())

    def __del__(self):
        buf, pool = self.buf, self.step.engine.pool
        if buf is not None:
            self.buf = None
            ev = self.h2d_event if self.h2d_event is not None else self.d2h_event
            pool.put(buf, ev)
        self.step.engine._live_records -= 1


class offload_activations:
    """Context manager: inside it, saved tensors of at least `min_bytes` go to a pinned host pool.

        ctx = vramkit.offload_activations(model, mix=["offload"] * 12 + ["checkpoint"] * 4)
        for x, y in data:
            with ctx:
                loss = model(x, y)
            loss.backward()

    - `blocks`: the model's repeated modules (default: its longest nn.ModuleList).
    - `mix`: one policy per block, "offload", "checkpoint" (torch.utils.checkpoint, non-reentrant),
      "keep", "selective", "selective-offload" or "checkpoint-offload"; or give `offload=` / `checkpoint=` as "all" or
      sequences of indices or modules (blocks in neither are kept). Default: offload every block.
    - "selective" (torch >= 2.1: checkpoint's context_fn) checkpoints the block but keeps the
      outputs of its GEMMs and fused attention kernels (SELECTIVE_SAVED_OPS; the block's input
      stays too): the backward runs only its memory-bound ops again (norms, rotary, activation,
      products, residual adds), as PyTorch's selective activation checkpointing does with such a
      policy. "selective-offload" also moves those outputs (those of at least `min_bytes`) to the
      pinned pool like an offloaded block's tensors, prefetched back the same way. The recompute
      runs the same kernels on the same inputs, so gradients equal the keep run's.
    - "checkpoint-offload" checkpoints the block and moves the one tensor the checkpoint keeps,
      the block's input (torch.utils.checkpoint saves it through these hooks), to the pinned
      pool: fetched back like an offloaded block's tensors, before its recompute.
    - `outside`: "keep" or "offload" for tensors saved outside the blocks (default "keep" with a
      model, "offload" without one, when every saved tensor is its own group).
    - Parameters, views of parameters, buffers and tensors under `min_bytes` stay where they are.
    - The forward never waits for a copy unless more than `max_inflight_bytes` of tensors are
      still being copied out; then the compute stream (not the host) waits for the oldest. Those
      bytes stay on the device meanwhile (the window the planner counts in the peak).
    - In backward, entering block g fetches its tensors and prefetches those of the next
      `prefetch` offloaded blocks (g-1, ...) on the copy-in stream, so the copies overlap block
      g's backward; every use waits on its copy's event.
    - `prefetch_blocks=d` (d > 0) also starts, when the backward of any block i begins (the
      gradient of its output is ready), the copies back of the offloaded blocks i-1 .. i-d,
      whatever their policies in between: a block whose copy takes longer than one block's
      backward gets the backward of the d blocks above it to hide behind. Those tensors occupy
      the device from then on.
    - `host_lead_blocks=d` (d > 0, mixes that copy to the host): at each block's start in the
      forward the host waits until the device has begun the block d before (at the last block's
      end, block n - d), so that the copies out the device has finished are seen done and their
      device memory is back with the allocator before the next blocks and the loss allocate.
      `vramkit plan` assumes d = 2 (its offload JSON's `host_lead_blocks`).
    - Copies out run on one stream, copies back on another (the link's two directions run at
      once); tensors fetched back are allocated on the compute stream, so the caching
      allocator reuses their memory for compute work.
    - Host buffers return to the pool when their copy back has completed, or when the graph is
      freed without a backward: nothing is held across steps (see `stats()` and `pool.stats()`).
    - `timing=True` records CUDA events around every copy; `copy_times()` sums them.
    - `offload_cpu_tensors=True` also moves CPU tensors through the pool (synchronously): it
      exercises the bookkeeping on machines without a GPU.

    - `compress`: a vramkit.compress_activations object: the tensors it selects are stored as fp8
      (offloaded blocks move the fp8 payload, kept blocks keep it on the device); lossy. The
      payload of an offloaded tensor is encoded on the device and copied out by the copy engine
      (about 11 ms a GiB of bf16 on an H200, run 7 of docs/results/2026-12-01-h200-offload.md);
      `fused_encode=True` makes the encode kernel write it straight into pinned memory instead,
      on the copy stream with at most `encode_ctas` (default 16) thread blocks: no fp8 copy on
      the device, but SM stores over PCIe ran at 23 GB/s with 16 thread blocks there (24 ms a
      GiB), against the copy engine's 50.
    Without `compress`, gradients equal the run without offload bit for bit: the copies are exact and the tensor
    comes back with its size, strides and dtype.
    """

    def __init__(self, model=None, *, blocks=None, mix=None, offload=None, checkpoint=None,
                 outside=None, min_bytes=1 << 20, prefetch=1, prefetch_blocks=0, max_inflight_bytes=512 << 20,
                 host_lead_blocks=0, pool=None,
                 offload_cpu_tensors=False, timing=False, compress=None, fused_encode=False,
                 encode_ctas=None):
        if blocks is None and model is not None:
            blocks = find_blocks(model)
        self.blocks = list(blocks) if blocks is not None else []
        n = len(self.blocks)
        if mix is not None:
            if offload is not None or checkpoint is not None:
                raise ValueError("offload_activations: give mix= or offload=/checkpoint=, not both")
            mix = list(mix)
            if len(mix) != n:
                raise ValueError("offload_activations: mix has %d entries for %d blocks" % (len(mix), n))
            for p in mix:
                if p not in POLICIES:
                    raise ValueError("offload_activations: mix entry %r is not one of %s" % (p, ", ".join(POLICIES)))
            self.mix = mix
            if any(p in ("selective", "selective-offload") for p in mix) and not _has_context_fn():
                raise ValueError("offload_activations: the selective policies need torch.utils.checkpoint's "
                                 "context_fn (torch >= 2.1); this is torch %s" % torch.__version__)
            if "checkpoint-offload" in mix and not _has_context_fn():
                # Before 2.1 the non-reentrant checkpoint holds its inputs itself, out of the
                # hooks' reach: the policy would be plain checkpointing.
                raise ValueError("offload_activations: checkpoint-offload needs the torch.utils.checkpoint of torch "
                                 ">= 2.1 (it saves the block's input through the saved-tensor hooks); this is "
                                 "torch %s" % torch.__version__)
        else:
            off = _resolve("all" if offload is None and checkpoint is None else offload, self.blocks, "offload")
            ck = _resolve(checkpoint, self.blocks, "checkpoint")
            both = off & ck
            if both:
                raise ValueError("offload_activations: block %d is both offloaded and checkpointed" % min(both))
            self.mix = ["offload" if i in off else "checkpoint" if i in ck else "keep" for i in range(n)]
        if outside is None:
            outside = "keep" if self.blocks else "offload"
        if outside not in ("keep", "offload"):
            raise ValueError("offload_activations: outside=%r: use 'keep' or 'offload'" % (outside,))
        if min(int(min_bytes), int(prefetch), int(prefetch_blocks), int(max_inflight_bytes), int(host_lead_blocks)) < 0:
            raise ValueError("offload_activations: min_bytes, prefetch, prefetch_blocks, max_inflight_bytes and "
                             "host_lead_blocks must be >= 0")
        self.model = model
        self.compress = compress
        if encode_ctas is not None and not fused_encode:
            raise ValueError("offload_activations: encode_ctas applies to fused_encode=True")
        if encode_ctas is not None and int(encode_ctas) < 1:
            raise ValueError("offload_activations: encode_ctas must be >= 1")
        if fused_encode and compress is None:
            raise ValueError("offload_activations: fused_encode=True needs compress=")
        if compress is not None and (compress.recompute or compress.casts == "kept"):
            # The engine stores what it offloads itself: those two would apply to the kept tensors
            # only, so they are refused rather than half applied.
            raise ValueError("offload_activations: compress= takes compress_activations without recompute=True or "
                             "casts='kept' (those are for compression on its own)")
        self.encode_ctas = 16 if encode_ctas is None else int(encode_ctas)
        self._fused_encode = bool(fused_encode)
        self.outside = outside
        self.min_bytes = int(min_bytes)
        self.prefetch = int(prefetch)
        self.prefetch_blocks = int(prefetch_blocks)
        self.max_inflight_bytes = int(max_inflight_bytes)
        self.host_lead_blocks = int(host_lead_blocks)
        self.timing = bool(timing)
        self._copy_events = []  # (start, end, bytes, direction) when timing
        self.offload_cpu_tensors = bool(offload_cpu_tensors)
        self.pool = pool if pool is not None else PinnedPool()
        self._copy_streams = {}  # device -> stream of the copies out
        self._in_streams = {}  # device -> stream of the copies back
        self._live_records = 0
        self._active = False
        self._reset_stats()

    # -- statistics ---------------------------------------------------------------------------
    def _reset_stats(self):
        self._stats = {
            "packed": 0, "offloaded": 0, "offloaded_bytes": 0, "deduplicated": 0,
            "kept": {"small": 0, "parameter": 0, "device": 0, "block": 0, "outside": 0},
            "fetched": 0, "fetched_bytes": 0, "from_stash": 0, "prefetched": 0,
            "forward_waits": 0, "lead_waits": 0, "fetch_order": [], "selective_saved": 0, "selective_kept_bytes": 0,
            "selective_compressed": 0, "selective_compressed_input_bytes": 0,
        }

    def stats(self):
        """Counters since construction or reset_stats(): tensors packed, offloaded (and bytes),
        kept by reason, fetched back, prefetched ahead of use, forward waits, the order in which
        groups were fetched, and `live_records` (offloaded tensors whose graph is still alive).
        Selective blocks: outputs saved (`selective_saved`), the device bytes they keep
        (`selective_kept_bytes`: with compression the fp8 payloads and scales, or the scales
        alone of those copied out), and of them those stored as fp8 (`selective_compressed`, and
        their bytes before compression)."""
        s = dict(self._stats)
        s["kept"] = dict(s["kept"])
        s["fetch_order"] = list(s["fetch_order"])
        s["live_records"] = self._live_records
        return s

    def reset_stats(self):
        self._reset_stats()

    # -- context ------------------------------------------------------------------------------
    def __enter__(self):
        if self._active:
            raise RuntimeError("offload_activations: already entered")
        self._active = True
        self._step = _Step(self)
        self._group = 0
        self._block_stack = []
        self._seen = {}
        self._inflight = []
        self._block_starts = []  # CUDA events at each block's start (host_lead_blocks)
        self._param_storages = set()
        if self.model is not None:
            for p in itertools.chain(self.model.parameters(), self.model.buffers()):
                self._param_storages.add(_storage_ptr(p))
        for b in self.blocks:
            for p in itertools.chain(b.parameters(), b.buffers()):
                self._param_storages.add(_storage_ptr(p))
        self._handles = []
        self._patched = []
        for i, b in enumerate(self.blocks):
            self._handles.append(b.register_forward_pre_hook(functools.partial(self._enter_block, i)))
            self._handles.append(b.register_forward_hook(functools.partial(self._leave_block, i)))
            if self.mix[i] in ("checkpoint", "selective", "selective-offload", "checkpoint-offload"):
                had = "forward" in b.__dict__
                self._patched.append((b, had, b.__dict__.get("forward")))
                if self.mix[i] in ("checkpoint", "checkpoint-offload"):
                    b.forward = functools.partial(_checkpointed, b.forward)
                else:
                    b.forward = functools.partial(_selective, self, self.mix[i] == "selective-offload", b.forward)
        if self.compress is not None:
            self.compress._arm()  # noqa: SLF001 - the compressor's module scopes
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        for h in self._handles:
            h.remove()
        for b, had, fwd in self._patched:
            if had:
                b.forward = fwd
            else:
                del b.forward
        self._handles, self._patched = [], []
        if self.compress is not None:
            self.compress._disarm()  # noqa: SLF001
        self._seen = {}
        self._active = False
        return False

    def _enter_block(self, i, module, args):
        self._group += 1
        self._block_stack.append(i)
        self._step.block_group[i] = self._group
        self._bound_host_lead(module, start=True)
        self._release_copied()

    def _leave_block(self, i, module, args, output):
        if self._block_stack and self._block_stack[-1] == i:
            self._block_stack.pop()
        self._group += 1
        if i == len(self.blocks) - 1 and not self._block_stack:
            self._bound_host_lead(module, start=False)
        self._release_copied()
        if self.prefetch_blocks > 0 and torch.is_grad_enabled():
            out = output
            while isinstance(out, (tuple, list)) and out:
                out = out[0]
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(functools.partial(_block_backward_hook, weakref.ref(self), self._step, i))

    def _bound_host_lead(self, module, start):
        """host_lead_blocks = d > 0, in a mix that copies to the host: at block i's start the host
        waits until the device has begun block i - d, and at the last block's end until it has
        begun block n - d; the copies out the device has finished by then are seen done and
        their device memory goes back to the allocator before the next blocks (and the head and
        the loss) allocate. Without it the host may run many blocks ahead, and the copies it has
        not yet seen finish stay held (the planner then counts the whole window at the loss)."""
        d = self.host_lead_blocks
        if d <= 0 or not any(p in ("offload", "selective-offload", "checkpoint-offload") for p in self.mix):
            return
        # The block's own device (its inputs may come as keywords, out of a pre-hook's reach).
        dev = next((p.device for p in itertools.chain(module.parameters(), module.buffers())), None)
        if dev is None or dev.type != "cuda":
            return
        if start:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(dev))
            self._block_starts.append(ev)
            k = len(self._block_starts) - 1 - d
        else:
            k = len(self._block_starts) - d
        if 0 <= k < len(self._block_starts):
            self._block_starts[k].synchronize()
            self._stats["lead_waits"] += 1

    def _block_backward(self, step, i):
        """The backward of block i begins: takes block i's tensors that are still on the device
        as they are (copy out finished or not: fetching them back would only add a copy), drops
        the device copies of the other tensors whose copy out has finished since the forward's
        last block (else they would stay on the device until their own backward), then fetches
        the offloaded blocks i-1 .. i-prefetch_blocks."""
        g = step.block_group.get(i)
        if g is not None and g not in step.entered and step.alive(g):
            step.entered.add(g)
            self._fetch_group(step, g, prefetch=False)
        self._release_copied()
        for j in range(i - 1, max(-1, i - self.prefetch_blocks - 1), -1):
            g = step.block_group.get(j)
            if g is None or g in step.entered or not step.alive(g):
                continue
            step.entered.add(g)
            self._fetch_group(step, g, prefetch=True)

    # -- pack ---------------------------------------------------------------------------------
    def _keep_reason(self, t):
        if t.device.type != "cuda" and not (self.offload_cpu_tensors and t.device.type == "cpu"):
            return "device"
        if t.numel() * t.element_size() < self.min_bytes:
            return "small"
        if _is_parameter(t) or _storage_ptr(t) in self._param_storages:
            return "parameter"
        if self._block_stack:
            # A checkpointed block's own saves go to the checkpoint's hooks; what reaches these
            # is the input the checkpoint keeps for its recompute.
            if self.mix[self._block_stack[-1]] not in _OFFLOADED:
                return "block"
        elif self.outside != "offload":
            return "outside"
        return None

    def _copy_stream(self, device):
        s = self._copy_streams.get(device)
        if s is None:
            s = self._copy_streams[device] = torch.cuda.Stream(device)
        return s

    def _in_stream(self, device):
        s = self._in_streams.get(device)
        if s is None:
            s = self._in_streams[device] = torch.cuda.Stream(device)
        return s

    def _pack(self, t):
        st = self._stats
        st["packed"] += 1
        reason = self._keep_reason(t)
        comp = self.compress
        if comp is not None and reason in (None, "block", "outside") and comp.selects(t):
            # Offloaded blocks store the fp8 payload in pinned memory, kept ones on the device.
            view = comp.pack(t, self._store_compressed if reason is None else None)
            if view is not None:
                return view
            # Its memory is saved uncompressed already (aliased): treated as any other tensor.
        if comp is not None:
            comp.note_kept(t)
        if reason is not None:
            st["kept"][reason] += 1
            # Detached: returning t itself would make an op's saved output hold the op's node
            # (a reference cycle through C++ that no collector frees). Autograd re-attaches it.
            return t.detach()
        # One record per (base tensor, geometry): ops that save distinct view objects of one
        # tensor (matmul folds a 3-D input into a new 2-D view per call) share its copy.
        base = t if t._base is None else t._base
        key = (id(base), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)
        seen = self._seen.get(key)
        if seen is not None:
            ref, version, rec_ref = seen
            rec = rec_ref()
            if ref() is base and base._version == version and rec is not None:
                st["deduplicated"] += 1
                return rec
        rec = self._offload(t)
        self._seen[key] = (weakref.ref(base), base._version, weakref.ref(rec))
        return rec

    def _offload(self, t):
        """Starts the copy of `t` to a pinned buffer; returns its record."""
        st = self._stats
        rec = _Record.of(self._step, self._group, t)
        rec.buf = self.pool.get(rec.nbytes)
        rec.host = rec.buf[: rec.nbytes].view(t.dtype).view(t.shape)
        if t.device.type == "cuda":
            compute = torch.cuda.current_stream(t.device)
            copy = self._copy_stream(t.device)
            copy.wait_stream(compute)  # the producer of t must have finished
            with torch.cuda.stream(copy):
                start = self._timing_start(copy)
                rec.host.copy_(t, non_blocking=True)
                rec.d2h_event = torch.cuda.Event(enable_timing=self.timing)
                rec.d2h_event.record(copy)
                self._timing_end(start, rec.d2h_event, rec.nbytes, "d2h")
            rec.gpu_ref = t.detach()  # t's memory must outlive the copy: see _retire
            self._inflight.append(weakref.ref(rec))  # weak: a freed graph frees its records
            self._retire(compute)
        else:
            rec.host.copy_(t)
        self._step.add(rec)
        st["offloaded"] += 1
        st["offloaded_bytes"] += rec.nbytes
        return rec

    def _store_compressed(self, x, comp, exact=False):
        """A Packed of the contiguous tensor x whose payload lives in pinned memory: encoded on
        the device and copied out like any tensor, or with fused_encode (and the CUDA kernels)
        encoded on the copy stream straight into the pinned buffer. `exact=True`: x (a norm's
        input cast to bf16) copied out as it is; returns its record."""
        from . import fp8_codec
        from .activation_compress import Packed

        if exact:
            return self._offload(x)

        backend = comp.backend_for(x.device)
        n = x.numel()
        if backend != "cuda" or not self._fused_encode:
            p = comp.pack_contiguous(x, side=False)  # the copy out follows on the copy stream
            if p.q.device.type == "cuda" or self.offload_cpu_tensors:
                p.q = self._offload(p.q)
            return p
        nq, ns = fp8_codec.payload_bytes(n), fp8_codec.scale_count(n)
        nbytes = nq + 4 * ns
        rec = _Record(self._step, self._group, (nbytes,), (1,), torch.uint8, x.device, nbytes,
                      hold_bytes=n * x.element_size())
        rec.buf = self.pool.get(nbytes)
        rec.host = rec.buf[:nbytes]
        compute = torch.cuda.current_stream(x.device)
        copy = self._copy_stream(x.device)
        copy.wait_stream(compute)
        with torch.cuda.stream(copy):
            start = self._timing_start(copy)
            try:
                fp8_codec.encode(x, comp.fmt, "cuda", q=rec.host[:nq], scales=rec.host[nq:].view(torch.float32),
                                 stream=copy, max_ctas=self.encode_ctas)
            except RuntimeError as e:
                # Pinned memory a kernel cannot reach (registered without a device mapping):
                # encode on the device and copy, from now on.
                self._fused_encode = False
                self._stats["fused_encode_refused"] = str(e)
                rec.host = None
                return self._store_compressed(x, comp)
            rec.d2h_event = torch.cuda.Event(enable_timing=self.timing)
            rec.d2h_event.record(copy)
            self._timing_end(start, rec.d2h_event, nbytes, "d2h")
        rec.gpu_ref = x  # the source must outlive the encode
        self._inflight.append(weakref.ref(rec))
        self._retire(compute)
        self._step.add(rec)
        st = self._stats
        st["offloaded"] += 1
        st["offloaded_bytes"] += nbytes
        return Packed(None, None, x.shape, x.dtype, n, comp.fmt, "cuda", record=rec)

    def _timing_start(self, stream):
        if not self.timing:
            return None
        ev = torch.cuda.Event(enable_timing=True)
        ev.record(stream)
        return ev

    def _timing_end(self, start, end, nbytes, direction):
        if start is not None:
            self._copy_events.append((start, end, nbytes, direction))

    def copy_times(self):
        """With timing=True: {"d2h": (seconds, bytes), "h2d": (seconds, bytes)} of the copies
        since the last call (synchronizes the copy streams)."""
        for s in itertools.chain(self._copy_streams.values(), self._in_streams.values()):
            s.synchronize()
        out = {"d2h": [0.0, 0], "h2d": [0.0, 0]}
        for start, end, nbytes, direction in self._copy_events:
            out[direction][0] += start.elapsed_time(end) / 1e3
            out[direction][1] += nbytes
        self._copy_events = []
        return {k: tuple(v) for k, v in out.items()}

    def _pending(self):
        """The records whose copy out is still running; drops the device references of those
        whose copy has finished (no waits)."""
        keep = []
        for ref in self._inflight:
            rec = ref()
            if rec is None or rec.gpu_ref is None:
                continue
            if rec.d2h_event.query():
                rec.gpu_ref = None
            else:
                keep.append(rec)
        return keep

    def _release_copied(self):
        """Drops the device references of tensors whose copy out has finished (no waits)."""
        if self._inflight:
            self._inflight = [weakref.ref(r) for r in self._pending()]

    def _retire(self, compute):
        """Drops device references whose copy out has finished; above max_inflight_bytes, makes
        the compute stream wait for the oldest copy (no host sync), after which its memory may be
        reused by later compute work."""
        keep = self._pending()
        while keep and sum(r.hold_bytes for r in keep) > self.max_inflight_bytes:
            oldest = keep.pop(0)
            compute.wait_event(oldest.d2h_event)
            oldest.gpu_ref = None
            self._stats["forward_waits"] += 1
        self._inflight = [weakref.ref(r) for r in keep]

    # -- selective checkpointing ---------------------------------------------------------------
    def _selective_store(self, x, offload, pending=None):
        """What a selective block keeps of one output of a GEMM or attention kernel: the tensor
        (detached), or with `offload` and at least min_bytes on the GPU, its record (the copy
        out starts now; prefetched back with the block's group like any offloaded tensor). With
        `compress`, a GEMM output it selects (compress_activations.output_kind) is stored as fp8
        instead (_selective_compress); one of an attention projection waits in `pending` for
        _selective_settle: the fused attention kernel's backward needs q, k and v as its
        forward saw them (its output and softmax statistics are kept exact), so what it reads
        stays exact."""
        if not isinstance(x, torch.Tensor):
            return x
        self._stats["selective_saved"] += 1
        kind = self.compress.output_kind(x) if self.compress is not None else None
        if kind == "attn" and pending is not None:
            p = _Pending(_detached(x), x._version)
            pending.append(p)
            return p
        if kind is not None:
            return self._selective_compress(x, offload, kind)
        return self._selective_exact(x, offload, x._version)

    def _selective_exact(self, x, offload, version):
        st = self._stats
        on_device = x.device.type == "cuda" or (self.offload_cpu_tensors and x.device.type == "cpu")
        if offload and on_device and x.numel() * x.element_size() >= self.min_bytes:
            return self._offload(x)
        st["selective_kept_bytes"] += x.numel() * x.element_size()
        return _Kept(_detached(x), version)

    def _selective_compress(self, x, offload, kind):
        """x as fp8 (a PackedView of it): its payload on the device, or with `offload` and at
        least min_bytes on the GPU, copied to pinned memory as an offloaded block's compressed
        tensors are (_store_compressed)."""
        st = self._stats
        nbytes = x.numel() * x.element_size()
        on_device = x.device.type == "cuda" or (self.offload_cpu_tensors and x.device.type == "cpu")
        moved = offload and on_device and nbytes >= self.min_bytes
        from .activation_compress import PackedView

        p = self.compress.pack_output(x, kind, self._store_compressed if moved else None)
        st["selective_compressed"] += 1
        st["selective_compressed_input_bytes"] += nbytes
        # What stays on the device: the payload and scales, or the scales alone once copied out.
        st["selective_kept_bytes"] += sum(t.numel() * t.element_size() for t in (p.q, p.scale)
                                          if isinstance(t, torch.Tensor))
        return PackedView(p)

    def _selective_settle(self, pending, offload, exact):
        """Stores the attention projections' outputs waiting in `pending`: exact (an attention
        kernel reads them), else compressed. One changed in place since its op is kept with its
        old version, which the recompute refuses."""
        for p in pending:
            t = p.tensor
            if t._version != p.version:
                p.saved = _Kept(t, p.version)
            elif exact:
                p.saved = self._selective_exact(t, offload, p.version)
            else:
                p.saved = self._selective_compress(t, offload, "attn")
            p.tensor = None
        pending.clear()

    def _selective_load(self, saved):
        """The tensor _selective_store kept, for the recompute in backward (restored to its dtype
        when it was compressed)."""
        if isinstance(saved, _Pending):
            if saved.saved is None:
                raise RuntimeError("offload_activations: a selective block's output was never stored (its forward "
                                   "failed)")
            saved = saved.saved
        if isinstance(saved, _Record):
            return self._unpack(saved)
        if isinstance(saved, _Kept):
            t = saved.tensor
            if t._version != saved.version:
                raise RuntimeError("offload_activations: a selective block's GEMM/attention output was modified in "
                                   "place after the op; keep or checkpoint that block")
            return t
        if self.compress is not None and not isinstance(saved, torch.Tensor):
            return self._unpack(saved)  # a PackedView
        return saved

    # -- unpack -------------------------------------------------------------------------------
    def _fetch(self, rec, prefetch):
        if rec.device_tensor is not None:
            return
        st = self._stats
        if rec.gpu_ref is not None and rec.encoded:
            # A compressed payload: its source is not what backward gets (that would make the
            # result depend on timing). The copy in follows the encode on the copy stream; the
            # source's memory may be reused by compute work only after the encode has read it.
            torch.cuda.current_stream(rec.device).wait_event(rec.d2h_event)
            rec.gpu_ref = None
        if rec.gpu_ref is not None:
            # Still on the device (the copy out may be in flight): use it as is.
            rec.device_tensor, rec.gpu_ref = rec.gpu_ref, None
            st["from_stash"] += 1
            return
        st["fetched"] += 1
        st["fetched_bytes"] += rec.nbytes
        if prefetch:
            st["prefetched"] += 1
        if rec.device.type == "cuda":
            # Allocated on the compute stream (its memory comes from and returns to the compute
            # stream's pool); the copy waits for the compute work queued so far, which may still
            # use that memory, and for this tensor's copy out.
            dev = torch.empty_strided(rec.shape, rec.stride, dtype=rec.dtype, device=rec.device)
            copy = self._in_stream(rec.device)
            copy.wait_stream(torch.cuda.current_stream(rec.device))
            if rec.d2h_event is not None:
                copy.wait_event(rec.d2h_event)
            with torch.cuda.stream(copy):
                start = self._timing_start(copy)
                dev.copy_(rec.host, non_blocking=True)
                rec.h2d_event = torch.cuda.Event(enable_timing=self.timing)
                rec.h2d_event.record(copy)
                self._timing_end(start, rec.h2d_event, rec.nbytes, "h2d")
            dev.record_stream(copy)  # freed unused, it is not reused before the copy is done
            rec.device_tensor = dev
            self.pool.put(rec.buf, rec.h2d_event)
        else:
            dev = torch.empty_strided(rec.shape, rec.stride, dtype=rec.dtype, device=rec.device)
            dev.copy_(rec.host)
            rec.device_tensor = dev
            self.pool.put(rec.buf, None)
        rec.buf = rec.host = None

    def _fetch_group(self, step, group, prefetch):
        recs = step.alive(group)
        if recs:
            self._stats["fetch_order"].append(group)
        for r in recs:
            self._fetch(r, prefetch)

    def _unpack(self, x):
        if self.compress is not None and not isinstance(x, (_Record, torch.Tensor)):
            from .activation_compress import PackedView, restore

            if isinstance(x, PackedView):
                p = x.packed
                if p.record is not None:
                    from . import fp8_codec

                    dev = self._unpack(p.record)
                    nq = fp8_codec.payload_bytes(p.numel)
                    return restore(x, dev[:nq], dev[nq:].view(torch.float32))
                if isinstance(p.q, _Record):
                    return restore(x, self._unpack(p.q))
                return restore(x)
        if not isinstance(x, _Record):
            return x
        rec, step = x, x.step
        if rec.group not in step.entered:
            # The group's tensors still on the device are used as they are; then the copies out
            # that finished after the forward's last block release their device memory.
            step.entered.add(rec.group)
            self._fetch_group(step, rec.group, prefetch=False)
            self._release_copied()
            # Prefetch the next blocks of the backward: lower groups with offloaded tensors.
            i = bisect.bisect_left(step.group_ids, rec.group)
            ahead = 0
            for g in reversed(step.group_ids[:i]):
                if ahead >= self.prefetch:
                    break
                if g in step.entered or not step.alive(g):
                    continue
                step.entered.add(g)
                self._fetch_group(step, g, prefetch=True)
                ahead += 1
        self._fetch(rec, prefetch=False)
        rec.unpacked = True
        dev = rec.device_tensor
        if rec.h2d_event is not None and not rec.stream_recorded:
            compute = torch.cuda.current_stream(rec.device)
            compute.wait_event(rec.h2d_event)
            rec.stream_recorded = True
        return dev

    def wait(self):
        """Blocks until every copy of this object's tensors has completed and their host
        buffers are back in the pool."""
        for s in itertools.chain(self._copy_streams.values(), self._in_streams.values()):
            s.synchronize()
        self.pool.wait_all()


def _block_backward_hook(engine_ref, step, i, grad):
    """Gradient hook on block i's output (prefetch_blocks > 0); changes no gradient."""
    engine = engine_ref()
    if engine is not None:
        engine._block_backward(step, i)  # noqa: SLF001
