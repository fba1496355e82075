"""Activation compression: selected tensors autograd saves for backward are stored as fp8 with one
scale per block of 128 elements, and restored (to their dtype, shape and strides' contiguous
layout) when backward unpacks them.

    comp = vramkit.compress_activations(model, modules=("mlp", "attn"))
    with comp:
        loss = model(x).float().pow(2).mean()
    loss.backward()

Combined with offload, the offload engine stores the fp8 payload in pinned host memory:
`vramkit.offload_activations(model, compress=vramkit.compress_activations(model))` (half the bytes
over the link).

Selection (per block, the model's longest nn.ModuleList):
- "mlp": every floating tensor saved inside a child module whose name contains "mlp",
  "feed_forward" or "ffn" (the MLP input, gate/up projections, the activation's input, the
  product: elementwise and GEMM inputs only);
- "attn": the inputs of nn.Linear modules inside a child whose name contains "attn" or
  "attention" (the q/k/v and output projections' inputs). The attention kernel's own saved
  tensors (its softmax statistics, q/k/v/output) are never compressed.
- Parameters, integer/bool tensors, tensors under `min_bytes` and everything outside the
  selected modules stay as they are; `keep_ends=True` leaves the first and last blocks alone.

Error: e4m3 keeps 3 mantissa bits, so a restored element x' satisfies |x' - x| <= 2^-4 |x| for
|x| >= amax/448 * 2^-6 within its block, and |x' - x| <= amax/448 * 2^-10 below it (subnormals;
docs/offload.md, "Compression"); e5m2 keeps 2 bits (2^-3 relative) and a wider
range. This first version packs with torch operations on torch.float8_e4m3fn (one fused kernel
each way when `compile=True` and torch.compile works, else a few elementwise kernels).
"""

import weakref

import torch

BLOCK = 128
FORMATS = {"e4m3": (getattr(torch, "float8_e4m3fn", None), 448.0),
           "e5m2": (getattr(torch, "float8_e5m2", None), 57344.0)}
MODULES = ("mlp", "attn")
_MLP_NAMES = ("mlp", "feed_forward", "ffn")
_ATTN_NAMES = ("attn", "attention")


def _pack_eager(x, fmax, dtype8):
    """x: 2-D (blocks, BLOCK) float -> (q fp8, scale fp32 (blocks, 1))."""
    xf = x.float()
    amax = xf.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / fmax, torch.ones_like(amax))
    q = (xf / scale).to(dtype8)
    return q, scale


def _unpack_eager(q, scale, dtype):
    return (q.float() * scale).to(dtype)


_COMPILED = {}


def _run(kind, *args):
    """The compiled pack/unpack when torch.compile works here, else the eager one (a failure to
    compile, which torch reports at the first call, switches to eager for good)."""
    eager = _pack_eager if kind == "pack" else _unpack_eager
    fn = _COMPILED.get(kind)
    if fn is None:
        try:
            fn = torch.compile(eager, dynamic=True)
        except Exception:  # noqa: BLE001 - no compiler: eager
            fn = eager
        _COMPILED[kind] = fn
    if fn is eager:
        return eager(*args)
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - compilation failed at run time: eager from now on
        _COMPILED[kind] = eager
        return eager(*args)


def compiled_in_use():
    """{"pack": bool, "unpack": bool}: whether the compiled kernels are in use (after a call)."""
    return {k: _COMPILED.get(k) not in (None, _pack_eager, _unpack_eager) for k in ("pack", "unpack")}


class Packed:
    """A compressed saved tensor: fp8 payload (or the offload record holding it), scales, shape."""

    __slots__ = ("q", "scale", "shape", "dtype", "numel", "_compile", "__weakref__")

    def __init__(self, q, scale, shape, dtype, numel):
        self.q, self.scale, self.shape, self.dtype, self.numel = q, scale, shape, dtype, numel
        self._compile = False

    @property
    def nbytes(self):
        return self.numel + self.scale.numel() * 4


def pack_tensor(t, fmt="e4m3", compile=False):
    """Compresses `t` (floating point) into a Packed; the payload is 1 byte per element plus one
    fp32 scale per BLOCK elements."""
    dtype8, fmax = FORMATS[fmt]
    if dtype8 is None:
        raise RuntimeError("compress_activations: this torch has no float8 dtypes")
    flat = t.detach().reshape(-1)
    n = flat.numel()
    pad = (-n) % BLOCK
    if pad:
        flat = torch.nn.functional.pad(flat, (0, pad))
    x = flat.view(-1, BLOCK)
    q, scale = _run("pack", x, fmax, dtype8) if compile and t.is_cuda else _pack_eager(x, fmax, dtype8)
    return Packed(q, scale, t.shape, t.dtype, n)


def unpack_tensor(p, q=None):
    """The tensor `p` holds, in its dtype and shape (contiguous). `q`: the payload when it was
    moved elsewhere meanwhile (offload)."""
    q = p.q if q is None else q
    if q.is_cuda and p._compile:
        out = _run("unpack", q, p.scale, p.dtype).reshape(-1)
    else:
        out = _unpack_eager(q, p.scale, p.dtype).reshape(-1)
    return out[: p.numel].view(p.shape)


def _find_blocks(model):
    from .activation_offload import find_blocks

    return find_blocks(model)


class compress_activations:
    """Context manager (or the `compress=` argument of offload_activations) that stores the
    selected saved tensors in fp8; see the module's documentation for the selection."""

    def __init__(self, model=None, *, blocks=None, modules=MODULES, fmt="e4m3", keep_ends=False,
                 min_bytes=1 << 16, compile=False):
        if fmt not in FORMATS:
            raise ValueError("compress_activations: fmt=%r: use e4m3 or e5m2" % (fmt,))
        if isinstance(modules, str):
            modules = tuple(m for m in modules.split(",") if m)
        modules = tuple(modules)
        if not modules:
            raise ValueError("compress_activations: modules= is empty: name mlp and/or attn")
        for m in modules:
            if m not in MODULES:
                raise ValueError("compress_activations: module %r is not one of %s" % (m, ", ".join(MODULES)))
        if int(min_bytes) < 0:
            raise ValueError("compress_activations: min_bytes must be >= 0")
        if blocks is None and model is not None:
            blocks = _find_blocks(model)
        if not blocks:
            raise ValueError("compress_activations: needs a model with blocks or blocks=")
        self.blocks = list(blocks)
        self.modules = modules
        self.fmt = fmt
        self.keep_ends = bool(keep_ends)
        self.min_bytes = int(min_bytes)
        self.compile = bool(compile)
        self.scopes = self._scopes()
        if not self.scopes:
            raise ValueError("compress_activations: no module of the blocks matches %s" % (", ".join(modules),))
        self._depth = 0
        self._handles = []
        self._armed = False
        self._active = False
        self._seen = {}
        self.reset_stats()

    def _scopes(self):
        """Modules inside which saved tensors are compressed."""
        out = []
        n = len(self.blocks)
        for i, b in enumerate(self.blocks):
            if self.keep_ends and (i == 0 or i == n - 1):
                continue
            for name, child in b.named_modules():
                leaf = name.rsplit(".", 1)[-1].lower()
                if not name:
                    continue
                if "mlp" in self.modules and any(k in leaf for k in _MLP_NAMES):
                    out.append(child)
                elif "attn" in self.modules and any(k in leaf for k in _ATTN_NAMES):
                    out.extend(m for m in child.modules() if isinstance(m, torch.nn.Linear))
        # A module inside another scope would be counted twice: keep the outermost ones.
        inner = set()
        for s in out:
            for m in s.modules():
                if m is not s:
                    inner.add(id(m))
        return [s for s in out if id(s) not in inner]

    # -- statistics ---------------------------------------------------------------------------
    def reset_stats(self):
        self._stats = {"compressed": 0, "input_bytes": 0, "stored_bytes": 0, "skipped": 0,
                       "deduplicated": 0}

    def stats(self):
        """Tensors compressed, their bytes before and after (payload + scales), tensors seen in
        a scope but left alone, and repeated saves of one tensor packed once."""
        return dict(self._stats)

    # -- selection ----------------------------------------------------------------------------
    def _arm(self):
        if self._armed:
            return
        for s in self.scopes:
            self._handles.append(s.register_forward_pre_hook(self._enter))
            self._handles.append(s.register_forward_hook(self._leave))
        self._armed = True
        self._seen = {}

    def _disarm(self):
        for h in self._handles:
            h.remove()
        self._handles = []
        self._armed = False
        self._depth = 0
        self._seen = {}

    def _enter(self, module, args):
        self._depth += 1

    def _leave(self, module, args, output):
        self._depth = max(0, self._depth - 1)

    def selects(self, t):
        """True when `t`, saved now, is to be compressed."""
        if self._depth == 0 or not t.is_floating_point() or t.element_size() < 2:
            return False
        if isinstance(t, torch.nn.Parameter) or isinstance(getattr(t, "_base", None), torch.nn.Parameter):
            return False
        if t.requires_grad and t.is_leaf:
            return False
        return t.numel() * t.element_size() >= self.min_bytes

    def pack(self, t):
        """Packs `t` (already selected) once per forward even when several ops save it."""
        seen = self._seen.get(id(t))
        if seen is not None:
            ref, version, pref = seen
            p = pref()
            if ref() is t and t._version == version and p is not None:
                self._stats["deduplicated"] += 1
                return p
        p = pack_tensor(t, self.fmt, self.compile)
        p._compile = self.compile  # noqa: SLF001 - read by unpack_tensor
        self._seen[id(t)] = (weakref.ref(t), t._version, weakref.ref(p))
        st = self._stats
        st["compressed"] += 1
        st["input_bytes"] += t.numel() * t.element_size()
        st["stored_bytes"] += p.nbytes
        return p

    # -- standalone use -----------------------------------------------------------------------
    def _pack_hook(self, t):
        if self.selects(t):
            return self.pack(t)
        if self._depth:
            self._stats["skipped"] += 1
        return t.detach()

    @staticmethod
    def _unpack_hook(x):
        return unpack_tensor(x) if isinstance(x, Packed) else x

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

