"""Activation compression: selected tensors autograd saves for backward are stored as fp8 with one
scale per block of 128 elements (vramkit/fp8_codec.py), and restored when backward unpacks them.

    comp = vramkit.compress_activations(model, modules=("mlp", "attn", "norm"))
    with comp:
        loss = model(x).float().pow(2).mean()
    loss.backward()

Combined with offload, the offload engine stores the fp8 payload in pinned host memory:
`vramkit.offload_activations(model, compress=vramkit.compress_activations(model))`; with the
CUDA kernels the encode writes it there directly (no fp8 copy on the device, half the bytes over
the link).

Selection (per block, the model's longest nn.ModuleList):
- "mlp": every floating tensor saved inside a child module whose name contains "mlp",
  "feed_forward" or "ffn" (the MLP input, gate/up projections' outputs, the activation's input,
  the product);
- "attn": the inputs of nn.Linear modules inside a child whose name contains "attn" or
  "attention" (the q/k/v and output projections' inputs). The attention kernel's own saved
  tensors (q/k/v in head layout, its output, the softmax statistics) are never compressed;
- "norm": the tensors normalization layers save (LayerNorm/RMSNorm inputs and normalized
  outputs: in amp the fp32 residual stream, the largest saved tensors of a LLaMA block); the
  input as bf16 (norm_inputs="bf16", the default), the normalized output as fp8.
- Parameters and their casts (autocast's bf16 weights: backward needs them for the input's
  gradient), statistics per row (a last dimension of 1: a norm's rsqrt, a softmax's log-sum-exp),
  integer/bool tensors, tensors under `min_bytes` and everything outside the selected modules
  stay as they are; `keep_ends=True` leaves the first and last blocks alone.
- A tensor whose memory another op saved uncompressed in the same forward (the o_proj input is
  a view of the attention output the attention kernel keeps) stays as it is: compressing it
  would add bytes, not remove them ("aliased" in stats()).
- Saves of several views of one tensor (q, k and v projections reading one input, the gate and
  up halves of one product) share one compressed copy of the whole tensor; so do the casts of
  one source to one dtype (under autocast each of q/k/v and gate/up casts the norm's fp32 output
  to bf16 itself: one compressed copy instead of three and two).

Error: e4m3 keeps 3 mantissa bits, so a restored element x' satisfies |x' - x| <= 2^-4 |x| for
|x| >= scale * 2^-6 within its block, and |x' - x| <= scale * 2^-10 below it (subnormals), with
scale = amax/448; e5m2 keeps 2 bits (2^-3 relative) and a wider range. docs/offload.md,
"Compression".
"""

import functools
import weakref

import torch

from . import fp8_codec

BLOCK = fp8_codec.BLOCK
FORMATS = {k: (fp8_codec.TORCH_DTYPES[k], fp8_codec.FMAX[k]) for k in fp8_codec.FMAX}
MODULES = ("mlp", "attn", "norm")
BACKENDS = ("auto", "cuda", "torch", "host")
NORM_INPUTS = ("exact", "bf16", "fp8")
_MLP_NAMES = ("mlp", "feed_forward", "ffn")
_ATTN_NAMES = ("attn", "attention")


def _root(t):
    b = t._base
    return t if b is None else b


def _cast_key(base):
    """What identifies `base` when it is a dtype cast (autocast casts a Linear's input once per
    Linear: q/k/v, gate/up): its source's autograd node and output, its dtype and geometry; None
    otherwise. An in-place change of the source gives the source a new node, so two casts with
    one key hold the same values."""
    fn = base.grad_fn
    if fn is None or type(fn).__name__ != "ToCopyBackward0":
        return None
    nxt = fn.next_functions
    if len(nxt) != 1 or nxt[0][0] is None:
        return None
    return (nxt[0][0], nxt[0][1], base.dtype, tuple(base.shape), base.stride())


def _is_constant(base):
    """True for a weight's cast (autocast's bf16 copy of a parameter, which backward needs for
    the input's gradient) and for a tensor of at most 2 dimensions outside autograd (a frozen
    weight or its cast): weights, not activations."""
    fn = base.grad_fn
    if fn is None:
        return not base.requires_grad and base.dim() <= 2
    if type(fn).__name__ != "ToCopyBackward0":
        return False
    nxt = fn.next_functions
    return len(nxt) == 1 and nxt[0][0] is not None and type(nxt[0][0]).__name__ == "AccumulateGrad"


def _is_norm(name, module):
    cls = type(module).__name__
    return "Norm" in cls or "norm" in name.rsplit(".", 1)[-1].lower()


class Packed:
    """One compressed tensor (contiguous, `shape`): the payload and scales on the device, or the
    offload record holding them in pinned memory (`record`)."""

    __slots__ = ("q", "scale", "record", "shape", "dtype", "numel", "fmt", "backend", "compile",
                 "decoded", "event", "ahead", "__weakref__")

    def __init__(self, q, scale, shape, dtype, numel, fmt, backend, compile=False, record=None):
        self.q, self.scale, self.record = q, scale, record
        self.shape, self.dtype, self.numel, self.fmt = shape, dtype, numel, fmt
        self.backend, self.compile = backend, compile
        # The restored tensor, held from its first restore for as long as this Packed lives (as
        # long as a saved view of it is still to be unpacked): the views of one tensor (q/k/v's
        # input, gate/up's, a product's factors) are decoded once, not once each.
        self.decoded = None
        self.event = None  # the encode's completion when it ran on a side stream
        self.ahead = None  # (restored tensor, its decode's event or None), decoded ahead of use

    @property
    def nbytes(self):
        if self.fmt == "recipe":
            return 0
        if self.fmt == "kept":
            return self.numel * self.q.element_size()
        if self.fmt == "bf16":
            return 2 * self.numel
        return fp8_codec.payload_bytes(self.numel) + 4 * fp8_codec.scale_count(self.numel)


class PackedView:
    """What the graph keeps for one saved tensor: its compressed base and its own geometry."""

    __slots__ = ("packed", "shape", "stride", "offset")

    def __init__(self, packed, t=None, base=None):
        self.packed = packed
        if t is None:
            self.shape, self.stride, self.offset = None, None, 0
        else:
            self.shape, self.stride = t.shape, t.stride()
            self.offset = t.storage_offset() - (base.storage_offset() if base is not None else 0)


def _backend_for(backend, device):
    b = fp8_codec.default_backend(device) if backend == "auto" else backend
    if b is None:
        raise RuntimeError("compress_activations: no fp8 backend for %s tensors: this torch has no float8 "
                           "dtypes and libvramkit_compress.so is not loadable (%s)"
                           % (device.type, fp8_codec.library_error()))
    return b


def pack_tensor(t, fmt="e4m3", compile=False, backend="auto"):
    """Compresses `t` (floating point; a contiguous copy of it) into a Packed."""
    if fmt not in FORMATS:
        raise ValueError("compress_activations: fmt=%r: use e4m3 or e5m2" % (fmt,))
    x = t.detach()
    if not x.is_contiguous():
        x = x.contiguous()
    b = _backend_for(backend, x.device)
    q, scale = fp8_codec.encode(x, fmt, b, compile=compile)
    return Packed(q, scale, t.shape, t.dtype, t.numel(), fmt, b, compile)


def unpack_tensor(p, q=None, scale=None):
    """The tensor `p` holds, in its dtype and shape (contiguous). `q`/`scale`: the payload and
    scales when they were moved meanwhile (offload)."""
    q = p.q if q is None else q
    scale = p.scale if scale is None else scale
    if p.fmt == "bf16":  # a norm's fp32 input kept as bf16
        return q.to(p.dtype).view(p.shape)
    if p.fmt == "kept":  # a cast kept as it is (casts="kept")
        return q.view(p.shape)
    if p.fmt == "recipe":  # recomputed from the tensors saved beside it (p.backend: the op)
        args = [restore(f) if isinstance(f, PackedView) else f for f in q]
        return _RECIPE_OPS[p.backend](*args).view(p.shape)
    if p.event is not None:
        torch.cuda.current_stream(q.device).wait_event(p.event)  # the side stream's encode
    out = fp8_codec.decode(q, scale, p.numel, p.fmt, p.dtype, p.backend, compile=p.compile)
    return out.view(p.shape)


# What a recipe recomputes (its Packed's backend names the op), and the same into `out`.
_RECIPE_OPS = {"mul": torch.mul, "silu": torch.nn.functional.silu}
_RECIPE_OUT = {"mul": lambda a, b, out: torch.mul(a, b, out=out),
               "silu": lambda a, out: torch.ops.aten.silu.out(a, out=out)}
_RECIPE_NODES = {"MulBackward0": ("mul", 2), "SiluBackward0": ("silu", 1)}


def restore(view, q=None, scale=None):
    """The saved tensor a PackedView stands for (its base restored once while it is alive)."""
    p = view.packed
    base = p.decoded
    if base is None and p.ahead is not None:
        base, ev = p.ahead
        p.ahead = None
        if ev is not None:
            torch.cuda.current_stream(base.device).wait_event(ev)
        p.decoded = base
    if base is None:
        base = unpack_tensor(p, q, scale)
        p.decoded = base
    if p.record is None and isinstance(p.q, (torch.Tensor, tuple)):
        p.q = p.scale = None  # restored for good: the payload (a recipe's factors) can go
    if view.shape is None:
        return base
    return base.as_strided(view.shape, view.stride, view.offset)


def _contiguous_strides(shape):
    out, step = [], 1
    for n in reversed(tuple(shape)):
        out.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(out))


def _find_blocks(model):
    from .activation_offload import find_blocks

    return find_blocks(model)


class compress_activations:
    """Context manager (or the `compress=` argument of offload_activations) that stores the
    selected saved tensors in fp8; see the module's documentation for the selection.

    - `backend`: "auto" (the CUDA kernels for CUDA tensors when libvramkit_compress.so is
      loadable, else torch's float8 operations; on the CPU torch's, else the library's host
      code), or one of "cuda", "torch", "host" (refused when it cannot run here).
    - `compile=True` compiles the torch operations (torch backend only).
    - `side_stream=True` (CUDA kernels only; default False) runs each encode on a stream of its
      own, after the work that produced the tensor, so that it may overlap the forward's next
      kernels; the tensor's memory is reused only once the encode has read it, and the decode in
      backward waits for it. Measured on an H200 (1B LLaMA shape): no faster (forward 162 ms
      either way) and 71 GiB reserved against 45 (the memory of tensors still being encoded is
      held back from the allocator): off by default.
    - `norm_inputs` ("bf16", default, "fp8" or "exact"): with "norm" selected, a norm's input (in amp
      the fp32 residual stream, which the norm's backward differentiates through) is stored as
      bf16 (a norm's 16-bit input is left as it is) and its other tensors in `fmt`; "fp8" stores
      the input in `fmt` too, "exact" keeps it as it is. Offloaded blocks copy that bf16 copy out.
    - `recompute=True` (standalone use only; default False): a saved product of two tensors
      saved in the same forward (RMSNorm's normalized output x * rsqrt, the gated MLP's
      silu(gate) * up) and a saved silu(gate) whose input was saved are not stored: backward
      recomputes them from those (exact when they were kept as they are; a product of a
      recomputed silu too). With norm_inputs="exact" a norm's input is kept as it is, so its
      normalized output is recomputed exactly. With decode_ahead, they are recomputed ahead
      with the decodes, on the side stream. The planner models it with norm_inputs="exact"
      (`vramkit plan --compress-activations fp8:MODULES:recompute`).
    - `decode_ahead=d` (default 1): when the backward of block i begins, the tensors of blocks
      i-1 .. i-d are decoded (on a side stream for CUDA tensors), so their decode overlaps
      block i's backward; those decoded tensors occupy the device from then until their use.
      0 decodes each tensor when backward asks for it.
    - `fuse_swiglu` (default None: on with recompute and decode_ahead >= 1, off otherwise; True
      without them is refused): a gated MLP's saved tensors (gate and
      up stored as fp8, silu(gate) and silu(gate) * up recomputed) are restored ahead together;
      with the CUDA kernels by one kernel that decodes gate and up and computes the other two
      from them (the values of torch's silu and mul on the decoded tensors, up to expf's last
      bit), instead of two decodes and two torch kernels: the decoded gate and up are not read
      back. False keeps the separate kernels.
    - `side_ctas` (default 0: as many as fill the GPU once): at most this many thread blocks for
      each decode ahead on the side stream, to leave the SMs to backward's kernels beside it
      (> 0 with decode_ahead=0 is refused: nothing is decoded ahead).
    - `casts` ("fp8", default, or "kept"; standalone use): an nn.Linear input inside the attn
      and mlp scopes that is autocast's cast of a tensor (q/k/v's and gate/up's casts of the
      norm's output) is stored as fp8, one copy shared by the casts of one source; "kept" keeps
      that one copy as it is (no encode or decode, twice the bytes of fp8), still shared, so the
      other casts' memory is freed (stats()["casts_kept"]).
    """

    def __init__(self, model=None, *, blocks=None, modules=("mlp", "attn"), fmt="e4m3", keep_ends=False,
                 min_bytes=1 << 16, compile=False, backend="auto", side_stream=False, decode_ahead=1,
                 norm_inputs="bf16", recompute=False, fuse_swiglu=None, side_ctas=0, casts="fp8"):
        if fmt not in FORMATS:
            raise ValueError("compress_activations: fmt=%r: use e4m3 or e5m2" % (fmt,))
        if norm_inputs not in NORM_INPUTS:
            raise ValueError("compress_activations: norm_inputs=%r: use %s" % (norm_inputs, " or ".join(NORM_INPUTS)))
        if isinstance(modules, str):
            modules = tuple(m for m in modules.split(",") if m)
        modules = tuple(modules)
        if not modules:
            raise ValueError("compress_activations: modules= is empty: name mlp, attn and/or norm")
        for m in modules:
            if m not in MODULES:
                raise ValueError("compress_activations: module %r is not one of %s" % (m, ", ".join(MODULES)))
        if casts not in ("fp8", "kept"):
            raise ValueError("compress_activations: casts=%r: use fp8 or kept" % (casts,))
        if int(min_bytes) < 0 or int(decode_ahead) < 0 or int(side_ctas) < 0:
            raise ValueError("compress_activations: min_bytes, decode_ahead and side_ctas must be >= 0")
        if fuse_swiglu and not (recompute and int(decode_ahead) > 0):
            raise ValueError("compress_activations: fuse_swiglu=True needs recompute=True and decode_ahead >= 1")
        if int(side_ctas) > 0 and int(decode_ahead) == 0:
            raise ValueError("compress_activations: side_ctas bounds the decodes ahead: it needs decode_ahead >= 1")
        if backend not in BACKENDS:
            raise ValueError("compress_activations: backend=%r: use %s" % (backend, ", ".join(BACKENDS)))
        if backend == "cuda" and not fp8_codec.cuda_kernels_available():
            raise RuntimeError("compress_activations: backend='cuda' needs a CUDA device and libvramkit_compress.so "
                               "with kernels (%s)" % (fp8_codec.library_error() or "built without CUDA"))
        if backend == "torch" and not fp8_codec.torch_fp8_available():
            raise RuntimeError("compress_activations: backend='torch' needs torch >= 2.1 (float8 dtypes)")
        if backend == "host" and fp8_codec.library() is None:
            raise RuntimeError("compress_activations: backend='host' needs libvramkit_compress.so (%s)"
                               % fp8_codec.library_error())
        if compile and backend in ("cuda", "host"):
            raise ValueError("compress_activations: compile=True applies to the torch backend, not %r" % backend)
        if blocks is None and model is not None:
            blocks = _find_blocks(model)
        if not blocks:
            raise ValueError("compress_activations: needs a model with blocks or blocks=")
        self.blocks = list(blocks)
        self.modules = modules
        self.fmt = fmt
        self.norm_inputs = norm_inputs
        self.recompute = bool(recompute)
        self.keep_ends = bool(keep_ends)
        self.min_bytes = int(min_bytes)
        self.compile = bool(compile)
        self.backend = backend
        self.side_stream = bool(side_stream)
        self.decode_ahead = int(decode_ahead)
        self.fuse_swiglu = bool(recompute and int(decode_ahead) > 0) if fuse_swiglu is None else bool(fuse_swiglu)
        self.side_ctas = int(side_ctas)
        self.casts = casts
        self._block = []  # the blocks being run (innermost last)
        self._inputs = []  # the scopes' inputs, beside _kinds
        self._by_block = {}  # this forward's block index -> [weakref(Packed)]
        self._side_streams = {}
        self.scopes = self._scopes()
        if not self.scopes:
            raise ValueError("compress_activations: no module of the blocks matches %s" % (", ".join(modules),))
        self._kinds = []
        self._handles = []
        self._armed = False
        self._active = False
        self._new_forward()
        self.reset_stats()

    def _scopes(self):
        """(module, kind) pairs inside which saved tensors are compressed."""
        out = []
        n = len(self.blocks)
        for i, b in enumerate(self.blocks):
            if self.keep_ends and (i == 0 or i == n - 1):
                continue
            for name, child in b.named_modules():
                if not name:
                    continue
                leaf = name.rsplit(".", 1)[-1].lower()
                # A norm first: "post_attention_layernorm" names attention but is a norm.
                if _is_norm(name, child):
                    kind = "norm"
                elif any(k in leaf for k in _MLP_NAMES):
                    kind = "mlp"
                elif any(k in leaf for k in _ATTN_NAMES):
                    kind = "attn"
                else:
                    continue
                if kind not in self.modules:
                    continue
                if kind == "attn":
                    out.extend((m, "attn") for m in child.modules() if isinstance(m, torch.nn.Linear))
                else:
                    out.append((child, kind))
        # A module inside another scope would be counted twice: keep the outermost ones.
        inner = set()
        for s, _ in out:
            for m in s.modules():
                if m is not s:
                    inner.add(id(m))
        seen, kept = set(), []
        for s, k in out:
            if id(s) not in inner and id(s) not in seen:
                seen.add(id(s))
                kept.append((s, k))
        return kept

    # -- statistics ---------------------------------------------------------------------------
    def reset_stats(self):
        self._stats = {"compressed": 0, "input_bytes": 0, "stored_bytes": 0, "skipped": 0, "decoded_ahead": 0,
                       "deduplicated": 0, "aliased": 0, "aliased_bytes": 0, "cast_shared": 0, "cast_shared_bytes": 0,
                       "norm_inputs_bf16": 0, "recomputed": 0, "recomputed_bytes": 0, "swiglu_fused": 0, "casts_kept": 0,
                       "selective_outputs": 0,
                       "by_module": {k: {"compressed": 0, "input_bytes": 0, "stored_bytes": 0} for k in MODULES}}

    def stats(self):
        """Tensors compressed, their bytes before and after (payload + scales), per module kind;
        tensors seen in a scope but left alone (small, integer, parameters), saves of a view of a
        tensor already compressed (deduplicated), and tensors left alone because their memory was
        saved uncompressed already (aliased, and their bytes); casts of a source another cast of
        which was compressed already, sharing its copy (cast_shared, and their bytes); tensors
        decoded ahead of use; GEMM outputs of selectively checkpointed blocks compressed through
        offload_activations (selective_outputs, also counted in compressed)."""
        s = dict(self._stats)
        s["by_module"] = {k: dict(v) for k, v in self._stats["by_module"].items()}
        return s

    # -- selection ----------------------------------------------------------------------------
    def _new_forward(self):
        self._packed = {}  # id(base) -> (weakref(base), version, weakref(Packed))
        self._casts = {}  # _cast_key(base) -> weakref(Packed): casts of one source share a copy
        self._nodes = {}  # (grad_fn, output_nr) -> what the standalone hooks saved for that tensor
        self._kept = {}  # id(base) -> (weakref(base), version): saved uncompressed
        self._by_block = {}  # a new one each forward: the backward hooks of the last one hold theirs

    def _arm(self):
        if self._armed:
            return
        for s, kind in self.scopes:
            self._handles.append(s.register_forward_pre_hook(functools.partial(self._enter, kind)))
            self._handles.append(s.register_forward_hook(self._leave))
        if self.decode_ahead > 0:
            for i, b in enumerate(self.blocks):
                self._handles.append(b.register_forward_pre_hook(lambda m, a, i=i: self._block.append(i)))
                self._handles.append(b.register_forward_hook(functools.partial(self._leave_block, i)))
        self._armed = True
        self._new_forward()

    def _disarm(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        self._armed = False
        self._kinds = []
        self._inputs = []
        self._block = []
        self._new_forward()

    def _leave_block(self, i, module, args, output):
        if self._block and self._block[-1] == i:
            self._block.pop()
        if not torch.is_grad_enabled():
            return
        out = output
        while isinstance(out, (tuple, list)) and out:
            out = out[0]
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(functools.partial(_decode_ahead_hook, weakref.ref(self), self._by_block, i))

    def _decode_blocks(self, by_block, i):
        """The backward of block i begins: decodes the tensors of blocks i-1 .. i-decode_ahead."""
        for j in range(i - 1, max(-1, i - 1 - self.decode_ahead), -1):
            refs = by_block.pop(j, ())
            if self.fuse_swiglu:
                for ref in refs:
                    p = ref()
                    if p is not None and p.fmt == "recipe" and p.ahead is None and p.decoded is None:
                        self._swiglu_ahead(p)
            for ref in refs:
                p = ref()
                if p is None or p.ahead is not None or p.decoded is not None or p.record is not None \
                        or p.fmt == "kept":
                    continue  # freed, restored already, its payload offloaded (the engine's), or kept
                if p.fmt == "recipe" and isinstance(p.q, tuple):
                    p.ahead = self._recompute_now(p)
                elif isinstance(p.q, torch.Tensor):
                    p.ahead = self._decode_now(p)
                else:
                    continue  # its payload moved (offload record)
                self._stats["decoded_ahead"] += 1

    @staticmethod
    def _whole_fp8(f):
        """The Packed behind the recipe factor `f` when it is a whole fp8 copy held here (not
        offloaded), not restored or decoded ahead yet (else None)."""
        if not isinstance(f, PackedView):
            return None
        p = f.packed
        if f.shape is not None and (tuple(f.shape) != tuple(p.shape) or f.offset != 0
                                    or tuple(f.stride) != _contiguous_strides(p.shape)):
            return None
        ok = (p.fmt in FORMATS and p.record is None and isinstance(p.q, torch.Tensor)
              and p.ahead is None and p.decoded is None and p.event is None)
        return p if ok else None

    def _swiglu_ahead(self, p):
        """When the recipe `p` is silu(gate) * up with gate and up whole fp8 copies of one format,
        size and dtype (the gated MLP's product): restores gate, up, silu(gate) and the product
        in one kernel on the side stream and marks each decoded ahead. True when it did."""
        if p.backend != "mul" or not isinstance(p.q, tuple) or len(p.q) != 2:
            return False

        def silu_recipe(f):
            q = f.packed if isinstance(f, PackedView) else None
            whole = q is not None and (f.shape is None or tuple(f.shape) == tuple(q.shape))
            return whole and q.fmt == "recipe" and q.backend == "silu" and isinstance(q.q, tuple) \
                and q.ahead is None and q.decoded is None

        a, up = p.q if silu_recipe(p.q[0]) else p.q[::-1]  # silu(gate) * up or up * silu(gate)
        if not silu_recipe(a):
            return False
        act = a.packed
        g, u = self._whole_fp8(act.q[0]), self._whole_fp8(up)
        if g is None or u is None or g is u or g.fmt != u.fmt or g.numel != u.numel or g.dtype != u.dtype \
                or g.numel != p.numel or act.numel != p.numel or g.dtype != p.dtype or g.q.device != u.q.device \
                or g.backend != u.backend:
            return False
        self._stats["swiglu_fused"] += 1
        self._stats["decoded_ahead"] += 4
        if g.backend != "cuda":
            # Another backend: the two decodes and torch's silu and mul, in line (the same values
            # as restoring each at use).
            dg = fp8_codec.decode(g.q, g.scale, g.numel, g.fmt, g.dtype, g.backend, compile=g.compile)
            du = fp8_codec.decode(u.q, u.scale, u.numel, u.fmt, u.dtype, u.backend, compile=u.compile)
            da = torch.nn.functional.silu(dg)
            outs = (dg, du, da, da * du) if p.q[0] is a else (dg, du, da, du * da)
            for q, o in zip((g, u, act, p), outs):
                q.ahead = (o.view(q.shape), None)
            return True
        dev = g.q.device
        compute = torch.cuda.current_stream(dev)
        side = self._side(dev)
        outs = tuple(torch.empty(g.numel, dtype=g.dtype, device=dev) for _ in range(4))  # the compute stream's pool
        side.wait_stream(compute)
        fp8_codec.decode_swiglu((g.q, g.scale), (u.q, u.scale), g.numel, g.fmt, g.dtype, "cuda", out=outs,
                                stream=side, max_ctas=self.side_ctas)
        for t in (*outs, g.q, g.scale, u.q, u.scale):
            t.record_stream(side)
        ev = torch.cuda.Event()
        ev.record(side)
        for q, o in zip((g, u, act, p), outs):
            q.ahead = (o.view(q.shape), ev)
        return True

    def _factor_ahead(self, f):
        """The tensor the recipe factor `f` stands for, for a product computed on the side stream:
        f itself (kept as it is), or its Packed's restored or decoded-ahead tensor (decoding it
        ahead now when it is not yet), in f's geometry; None when it is not a CUDA tensor."""
        if not isinstance(f, PackedView):
            return f if f.is_cuda else None
        fp = f.packed
        base = fp.decoded
        if base is None:
            if fp.ahead is None:
                if fp.fmt == "recipe" and isinstance(fp.q, tuple):
                    fp.ahead = self._recompute_now(fp)
                elif fp.backend != "cuda" or not isinstance(fp.q, torch.Tensor):
                    return None
                else:
                    fp.ahead = self._decode_now(fp)
                self._stats["decoded_ahead"] += 1
            base = fp.ahead[0]  # written on the side stream: ordered before the product
        if not base.is_cuda:
            return None
        return base if f.shape is None else base.as_strided(f.shape, f.stride, f.offset)

    def _recompute_now(self, p):
        """A recipe's product computed ahead of use, on the side stream for CUDA factors (on the
        current stream otherwise): (tensor, event or None)."""
        factors = [self._factor_ahead(f) for f in p.q]
        if any(t is None for t in factors):
            return unpack_tensor(p), None
        dev = factors[0].device
        compute = torch.cuda.current_stream(dev)
        side = self._side(dev)
        out = torch.empty(p.shape, dtype=p.dtype, device=dev)  # from the compute stream's pool
        side.wait_stream(compute)
        with torch.cuda.stream(side):
            _RECIPE_OUT[p.backend](*factors, out=out)
        for t in (out, *factors):
            t.record_stream(side)
        ev = torch.cuda.Event()
        ev.record(side)
        return out, ev

    def _decode_now(self, p):
        if p.backend != "cuda":
            return unpack_tensor(p), None
        compute = torch.cuda.current_stream(p.q.device)
        side = self._side(p.q.device)
        out = torch.empty(p.numel, dtype=p.dtype, device=p.q.device)  # from the compute stream's pool
        side.wait_stream(compute)
        fp8_codec.decode(p.q, p.scale, p.numel, p.fmt, p.dtype, "cuda", out=out, stream=side, max_ctas=self.side_ctas)
        out.record_stream(side)
        for t in (p.q, p.scale):
            t.record_stream(side)
        ev = torch.cuda.Event()
        ev.record(side)
        return out.view(p.shape), ev

    def _side(self, device):
        side = self._side_streams.get(device)
        if side is None:
            side = self._side_streams[device] = torch.cuda.Stream(device)
        return side

    def _enter(self, kind, module, args):
        self._kinds.append(kind)
        x = args[0] if args else None
        self._inputs.append(x if isinstance(x, torch.Tensor) else None)

    def _leave(self, module, args, output):
        if self._kinds:
            self._kinds.pop()
            self._inputs.pop()

    def _is_scope_input(self, base):
        """True when `base` is the current scope's input or a dtype cast of it (RMSNorm's
        upcast of a bf16 input)."""
        x = self._inputs[-1] if self._inputs else None
        if x is None:
            return False
        if base.data_ptr() == x.data_ptr() and base.dtype == x.dtype and base.shape == x.shape:
            return True
        fn = base.grad_fn
        return (fn is not None and x.grad_fn is not None and type(fn).__name__ == "ToCopyBackward0"
                and len(fn.next_functions) == 1 and fn.next_functions[0][0] is x.grad_fn)

    def selects(self, t):
        """True when `t`, saved now, is to be compressed."""
        if not self._kinds or not t.is_floating_point() or t.element_size() < 2:
            return False
        if isinstance(t, torch.nn.Parameter) or isinstance(getattr(t, "_base", None), torch.nn.Parameter):
            return False
        if t.requires_grad and t.is_leaf:
            return False
        if t.dim() > 0 and t.shape[-1] == 1:
            return False  # a statistic per row (a norm's rsqrt, a softmax's log-sum-exp)
        if _is_constant(_root(t)):
            return False
        return t.numel() * t.element_size() >= self.min_bytes

    def output_kind(self, x):
        """The scope ("mlp", "attn" or "norm") in which `x`, the output of a GEMM that a
        selectively checkpointed block keeps (offload_activations' selective policies), is being
        computed, when it is to be compressed; None when it stays as it is: outside the selected
        modules (with keep_ends, in the first and last blocks), not floating point of at least 16
        bits, not contiguous, under min_bytes, a statistic per row or a parameter."""
        if not self._kinds or not isinstance(x, torch.Tensor) or isinstance(x, torch.nn.Parameter):
            return None
        if not x.is_floating_point() or x.element_size() < 2 or not x.is_contiguous():
            return None
        if x.dim() > 0 and x.shape[-1] == 1:
            return None
        return self._kinds[-1] if x.numel() * x.element_size() >= self.min_bytes else None

    def pack_output(self, x, kind, store=None):
        """A Packed of the contiguous GEMM output x that output_kind selected as `kind`: its payload
        on the device, or what `store(x, comp)` makes of it (offload: the payload in pinned
        memory). Counted in stats() under `kind`; the recompute in backward restores it whole (no
        decode ahead)."""
        x = x.detach()
        p = store(x, self) if store is not None else self.pack_contiguous(x)
        st, mod = self._stats, self._stats["by_module"][kind]
        for d in (st, mod):
            d["compressed"] += 1
            d["input_bytes"] += x.numel() * x.element_size()
            d["stored_bytes"] += p.nbytes
        st["selective_outputs"] += 1
        return p

    @staticmethod
    def _valid(entry, base):
        ref, version = entry[0], entry[1]
        return ref() is base and base._version == version

    def note_kept(self, t):
        """Records that `t` was saved uncompressed in this forward (its base's memory stays)."""
        if t.is_floating_point() and t.numel() * t.element_size() >= self.min_bytes:
            base = _root(t)
            self._kept[id(base)] = (weakref.ref(base), base._version)

    def pack(self, t, store=None, standalone=False):
        """A PackedView of `t` (already selected), or None when t must stay as it is (its memory
        is saved uncompressed anyway). `store(x, comp)`, given, compresses the contiguous tensor
        x into a Packed its own way (offload: into pinned memory)."""
        base = _root(t)
        key = id(base)
        hit = self._packed.get(key)
        if hit is not None and self._valid(hit, base):
            p = hit[2]()
            if p is not None:
                self._stats["deduplicated"] += 1
                return PackedView(p, t, base)
        kept = self._kept.get(key)
        if kept is not None and self._valid(kept, base):
            self._stats["aliased"] += 1
            self._stats["aliased_bytes"] += t.numel() * t.element_size()
            return None
        kind = self._kinds[-1] if self._kinds else "mlp"
        if standalone and self.recompute and base.is_contiguous() and base.dtype == t.dtype:
            r = self._recipe(base)
            if r is not None:
                self._stats["recomputed"] += 1
                self._stats["recomputed_bytes"] += base.numel() * base.element_size()
                return self._record(r, base.detach(), t, base, key, kind, True, None)
        if kind == "norm" and self._is_scope_input(base) and self.norm_inputs != "fp8":
            if self.norm_inputs == "exact":
                return None  # kept as it is: its normalized output is recomputed from it
        if kind == "norm" and self.norm_inputs == "bf16" and self._is_scope_input(base):
            if base.dtype != torch.float32:
                return None  # already 16-bit: nothing to gain
            return self._pack_bf16(t, base, key, kind, store)
        whole = base.is_contiguous() and base.dtype == t.dtype and base.is_floating_point()
        ck = _cast_key(base) if whole else None
        if ck is not None:
            got = self._casts.get(ck)
            p = got() if got is not None else None
            if p is not None:
                st = self._stats
                st["cast_shared"] += 1
                st["cast_shared_bytes"] += base.numel() * base.element_size()
                self._packed[key] = (weakref.ref(base), base._version, weakref.ref(p))
                return PackedView(p, t, base)
        x = base.detach() if whole else t.detach().contiguous()
        if ck is not None and self.casts == "kept" and store is None and kind in ("attn", "mlp"):
            # One copy of the cast as it is, shared by the other casts of its source.
            self._stats["casts_kept"] += 1
            return self._record(Packed(x, None, x.shape, x.dtype, x.numel(), "kept", "kept"), x, t, base, key, kind,
                                whole, ck)
        p = store(x, self) if store is not None else self.pack_contiguous(x)
        return self._record(p, x, t, base, key, kind, whole, ck)

    def _pack_bf16(self, t, base, key, kind, store=None):
        """A norm's fp32 input kept as bf16: on the device, or (`store`, offload) its bf16 copy
        moved by the engine as it is (`store(x, comp, exact=True)` returns what the engine's
        unpack fetches)."""
        whole = base.is_contiguous() and base.dtype == t.dtype
        x = base.detach() if whole else t.detach().contiguous()
        low = x.to(torch.bfloat16)
        if store is not None:
            low = store(low, self, exact=True)
        p = Packed(low, None, x.shape, x.dtype, x.numel(), "bf16", "cast")
        self._stats["norm_inputs_bf16"] += 1
        return self._record(p, x, t, base, key, kind, whole, None)

    def _record(self, p, x, t, base, key, kind, whole, ck):
        """Counts the new Packed p (of x) and returns the view of it `t` is."""
        st, mod = self._stats, self._stats["by_module"][kind]
        for d in (st, mod):
            d["compressed"] += 1
            d["input_bytes"] += x.numel() * x.element_size()
            d["stored_bytes"] += p.nbytes
        if self._block and self.decode_ahead > 0:
            self._by_block.setdefault(self._block[-1], []).append(weakref.ref(p))
        if whole:
            self._packed[key] = (weakref.ref(base), base._version, weakref.ref(p))
            if ck is not None:
                self._casts[ck] = weakref.ref(p)
            return PackedView(p, t, base)
        return PackedView(p)

    def backend_for(self, device):
        return _backend_for(self.backend, device)

    def pack_contiguous(self, x, side=True):
        """Packed of the contiguous tensor x, payload on x's device; `side=False` encodes on the
        current stream even with side_stream=True (the caller orders what follows)."""
        b = self.backend_for(x.device)
        if b == "cuda" and side and self.side_stream:
            return self._pack_on_side_stream(x)
        q, scale = fp8_codec.encode(x, self.fmt, b, compile=self.compile and b == "torch")
        return Packed(q, scale, x.shape, x.dtype, x.numel(), self.fmt, b, self.compile and b == "torch")

    def _pack_on_side_stream(self, x):
        compute = torch.cuda.current_stream(x.device)
        side = self._side(x.device)
        n = x.numel()
        # Allocated on the compute stream (whose pool their memory returns to), written on the
        # side stream, which first waits for the producer of x.
        q = torch.empty(fp8_codec.payload_bytes(n), dtype=torch.uint8, device=x.device)
        scale = torch.empty(fp8_codec.scale_count(n), dtype=torch.float32, device=x.device)
        side.wait_stream(compute)
        fp8_codec.encode(x, self.fmt, "cuda", q=q, scales=scale, stream=side)
        for t in (x, q, scale):
            t.record_stream(side)  # not reused before the encode is done with it
        p = Packed(q, scale, x.shape, x.dtype, n, self.fmt, "cuda")
        p.event = torch.cuda.Event()
        p.event.record(side)
        return p

    # -- standalone use -----------------------------------------------------------------------
    def _pack_hook(self, t):
        if self.selects(t):
            v = self.pack(t, standalone=True)
            if v is not None:
                self._note_node(t, v)
                return v
        elif self._kinds:
            self._stats["skipped"] += 1
        if t.device.type != "meta":
            self.note_kept(t)
        d = t.detach()
        self._note_node(t, d)
        return d

    def _note_node(self, t, saved):
        """Remembers what was saved for `t` (a tensor as it is, or a PackedView of all of it), so
        that a product of saved tensors can be recomputed from them (recipes)."""
        if self.recompute and t.grad_fn is not None and t._base is None:
            self._nodes[(t.grad_fn, t.output_nr)] = (saved, t._version, tuple(t.shape))

    def _recipe(self, base):
        """A Packed recomputing `base` in backward from what this forward saved beside it (kept
        as it is, compressed whole, or recomputed itself), else None: a * b (RMSNorm's
        x * rsqrt, the gated MLP's silu(gate) * up) or silu(gate). Exact when the factors were
        kept."""
        fn = base.grad_fn
        op = _RECIPE_NODES.get(type(fn).__name__) if fn is not None else None
        if op is None or len(fn.next_functions) != op[1]:
            return None
        factors = []
        for node, nr in fn.next_functions:
            got = self._nodes.get((node, nr)) if node is not None else None
            if got is None:
                return None
            saved, version, shape = got
            if isinstance(saved, PackedView):
                if saved.shape is not None and tuple(saved.shape) != tuple(saved.packed.shape):
                    return None  # a view of a larger tensor
            elif saved._version != version:
                return None  # changed in place since it was saved
            factors.append(saved)
        if tuple(torch.broadcast_shapes(*(self._nodes[(n, nr)][2] for n, nr in fn.next_functions))) \
                != tuple(base.shape):
            return None
        return Packed(tuple(factors), None, base.shape, base.dtype, base.numel(), "recipe", op[0])

    @staticmethod
    def _unpack_hook(x):
        return restore(x) if isinstance(x, PackedView) else x

    def __enter__(self):
        if self._active:
            raise RuntimeError("compress_activations: already entered")
        self._active = True
        self._arm()
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack_hook, self._unpack_hook)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)
        self._disarm()
        self._active = False
        return False


def _decode_ahead_hook(comp_ref, by_block, i, grad):
    """Gradient hook on block i's output (decode_ahead > 0); changes no gradient."""
    comp = comp_ref()
    if comp is not None:
        comp._decode_blocks(by_block, i)  # noqa: SLF001
