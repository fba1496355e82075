"""fp8 with one fp32 scale per block of 128 elements, for torch tensors.

Backends (all give the same bits for blocks without NaN or infinity):
- "cuda": libvramkit_compress.so's kernels on CUDA tensors, enqueued on the current stream; the
  payload and scales may be written straight into pinned host memory (the copy to the host fused
  into the encode, what offload uses);
- "host": the same library's host reference on CPU tensors (any torch, float8 dtypes or not);
- "torch": torch operations on torch.float8_e4m3fn/e5m2 (PyTorch >= 2.1), optionally compiled.

Per block: s = amax * (1 / fmax), scale = 1 if s is zero or subnormal else s, q = fp8(x * r)
with r = 1 / scale rounded to float, to nearest-even, saturated at +-fmax; a block holding NaN or
infinity decodes to NaN. The payload is
ceil(n/128)*128 bytes (the last block padded with zeros), the scales ceil(n/128) floats.
"""

import ctypes
import glob
import os

import torch

BLOCK = 128
FORMAT_CODES = {"e4m3": 0, "e5m2": 1}
FMAX = {"e4m3": 448.0, "e5m2": 57344.0}
TORCH_DTYPES = {"e4m3": getattr(torch, "float8_e4m3fn", None), "e5m2": getattr(torch, "float8_e5m2", None)}
_FLT_MIN = 2.0 ** -126  # float32's smallest normal
_ELEMENT_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
BACKENDS = ("cuda", "host", "torch")

_LIB = None
_LIB_ERROR = None


def scale_count(n):
    return (int(n) + BLOCK - 1) // BLOCK


def payload_bytes(n):
    return scale_count(n) * BLOCK


def find_library(path=None):
    """Path of libvramkit_compress.so: `path`, $VRAMKIT_COMPRESS_LIB, the copy beside this
    package, then a build folder of the source tree (build*/). Raises FileNotFoundError naming
    where it looked."""
    candidates = [c for c in (path, os.environ.get("VRAMKIT_COMPRESS_LIB")) if c]
    here = os.path.dirname(os.path.abspath(__file__))
    candidates.append(os.path.join(here, "libvramkit_compress.so"))
    root = os.path.dirname(os.path.dirname(here))
    candidates.extend(sorted(glob.glob(os.path.join(root, "build*", "libvramkit_compress.so"))))
    for c in candidates:
        if os.path.isfile(c):
            return os.path.abspath(c)
    raise FileNotFoundError("libvramkit_compress.so not found (looked at: %s); build vramkit or set "
                            "VRAMKIT_COMPRESS_LIB" % ", ".join(candidates))


def library():
    """The loaded codec library, or None (library_error() says why; VRAMKIT_NO_COMPRESS_LIB=1
    keeps it unloaded)."""
    global _LIB, _LIB_ERROR
    if _LIB is None and _LIB_ERROR is None and os.environ.get("VRAMKIT_NO_COMPRESS_LIB"):
        _LIB_ERROR = "not loaded: VRAMKIT_NO_COMPRESS_LIB is set"
    if _LIB is None and _LIB_ERROR is None:
        try:
            lib = ctypes.CDLL(find_library())
            vp, u64, i = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int
            lib.vramkit_fp8_encode.restype = i
            lib.vramkit_fp8_encode.argtypes = [vp, i, u64, i, vp, vp, i, vp, i]
            lib.vramkit_fp8_decode.restype = i
            lib.vramkit_fp8_decode.argtypes = [vp, vp, u64, i, vp, i, i, vp, i]
            lib.vramkit_fp8_decode_swiglu.restype = i
            lib.vramkit_fp8_decode_swiglu.argtypes = [ctypes.POINTER(vp), u64, i, ctypes.POINTER(vp), i, i, vp, i]
            lib.vramkit_fp8_has_cuda.restype = i
            lib.vramkit_fp8_has_cuda.argtypes = []
            lib.vramkit_fp8_last_error.restype = ctypes.c_size_t
            lib.vramkit_fp8_last_error.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
            _LIB = lib
        except (OSError, AttributeError) as e:
            _LIB_ERROR = str(e)
    return _LIB


def library_error():
    library()
    return _LIB_ERROR


def cuda_kernels_available():
    lib = library()
    return lib is not None and lib.vramkit_fp8_has_cuda() == 1 and torch.cuda.is_available()


def torch_fp8_available():
    return TORCH_DTYPES["e4m3"] is not None


def default_backend(device):
    """The backend "auto" picks for tensors on `device`, or None when none can run there."""
    if device.type == "cuda":
        if cuda_kernels_available():
            return "cuda"
        return "torch" if torch_fp8_available() else None
    if torch_fp8_available():
        return "torch"
    return "host" if library() is not None else None


def _loaded():
    """The codec library, or RuntimeError saying why it is not loadable."""
    lib = library()
    if lib is None:
        raise RuntimeError("fp8 codec: libvramkit_compress.so is not loadable: %s" % library_error())
    return lib


def _check(rc):
    if rc != 0:
        buf = ctypes.create_string_buffer(512)
        _LIB.vramkit_fp8_last_error(buf, len(buf))
        raise RuntimeError(buf.value.decode(errors="replace"))


def _element_code(dtype):
    code = _ELEMENT_CODES.get(dtype)
    if code is None:
        raise ValueError("fp8 codec: dtype %s is not float32, bfloat16 or float16" % (dtype,))
    return code


def _stream_handle(device, stream):
    s = stream if stream is not None else torch.cuda.current_stream(device)
    return s.cuda_stream


# -- torch operations --------------------------------------------------------------------------
def _pack_ops(x2d, fmax_inv, dtype8):
    xf = x2d.float()
    amax = xf.abs().amax(dim=1, keepdim=True)
    s = amax * fmax_inv
    # block_scale: zero or subnormal s gives 1 (NaN compares false and stays NaN).
    scale = torch.where(s < _FLT_MIN, torch.ones_like(s), s)
    return (xf * scale.reciprocal()).to(dtype8), scale


def _unpack_ops(q8, scale, dtype):
    return (q8.float() * scale).to(dtype)


_COMPILED = {}


def _compiled(fn):
    """torch.compile(fn) once; fn itself when compiling is impossible here (then or later)."""
    got = _COMPILED.get(fn)
    if got is None:
        try:
            got = torch.compile(fn, dynamic=True)
        except Exception:  # noqa: BLE001 - no compiler in this torch: eager
            got = fn
        _COMPILED[fn] = got
    return got


def _run(fn, compile, *args):
    if not compile:
        return fn(*args)
    c = _compiled(fn)
    if c is fn:
        return fn(*args)
    try:
        return c(*args)
    except Exception:  # noqa: BLE001 - compilation failed at the first call: eager from now on
        _COMPILED[fn] = fn
        return fn(*args)


def compiled_in_use():
    """{"pack": bool, "unpack": bool}: whether compiled torch kernels are in use (after a call)."""
    return {k: _COMPILED.get(f) not in (None, f) for k, f in (("pack", _pack_ops), ("unpack", _unpack_ops))}


# -- encode / decode ---------------------------------------------------------------------------
def encode(x, fmt="e4m3", backend="cuda", q=None, scales=None, stream=None, max_ctas=0, compile=False):
    """Encodes the contiguous floating tensor `x` (any shape); returns (q, scales): uint8
    payload of payload_bytes(n) and float32 scales of scale_count(n). With the library backends,
    `q`/`scales` may be given (e.g. views of a pinned host buffer: the cuda backend writes them
    over the link from a kernel on `stream`, default the current one)."""
    if fmt not in FORMAT_CODES:
        raise ValueError("fp8 codec: fmt=%r: use e4m3 or e5m2" % (fmt,))
    if not x.is_contiguous():
        raise ValueError("fp8 codec: encode needs a contiguous tensor")
    n = x.numel()
    if backend == "torch":
        dtype8 = TORCH_DTYPES[fmt]
        if dtype8 is None:
            raise RuntimeError("fp8 codec: this torch has no float8 dtypes (backend='torch')")
        flat = x.reshape(-1)
        pad = (-n) % BLOCK
        if pad:
            flat = torch.nn.functional.pad(flat, (0, pad))
        q8, sc = _run(_pack_ops, compile and x.is_cuda, flat.view(-1, BLOCK), 1.0 / FMAX[fmt], dtype8)
        got_q, got_s = q8.view(torch.uint8).reshape(-1), sc.reshape(-1)
        if q is not None:
            q.copy_(got_q)
            scales.copy_(got_s)
            return q, scales
        return got_q, got_s
    if backend not in ("cuda", "host"):
        raise ValueError("fp8 codec: backend=%r: use cuda, host or torch" % (backend,))
    lib = _loaded()
    on_gpu = backend == "cuda"
    if on_gpu != x.is_cuda:
        raise ValueError("fp8 codec: backend %r cannot encode a tensor on %s" % (backend, x.device))
    if q is None:
        q = torch.empty(payload_bytes(n), dtype=torch.uint8, device=x.device)
        scales = torch.empty(scale_count(n), dtype=torch.float32, device=x.device)
    if q.numel() < payload_bytes(n) or scales.numel() < scale_count(n) or q.dtype != torch.uint8 \
            or scales.dtype != torch.float32:
        raise ValueError("fp8 codec: q needs %d uint8 and scales %d float32 elements" % (payload_bytes(n), scale_count(n)))
    handle = _stream_handle(x.device, stream) if on_gpu else None
    _check(lib.vramkit_fp8_encode(x.data_ptr(), _element_code(x.dtype), n, FORMAT_CODES[fmt], q.data_ptr(),
                                  scales.data_ptr(), int(on_gpu), handle, int(max_ctas)))
    return q, scales


def decode(q, scales, n, fmt, dtype, backend="cuda", out=None, stream=None, compile=False, max_ctas=0):
    """The n decoded elements as a flat tensor of `dtype` (written into `out` when given), on
    q's device (or out's). `max_ctas` > 0 bounds the cuda backend's thread blocks (a decode on a
    side stream beside other kernels)."""
    if fmt not in FORMAT_CODES:
        raise ValueError("fp8 codec: fmt=%r: use e4m3 or e5m2" % (fmt,))
    if backend == "torch":
        q8 = q[: payload_bytes(n)].view(TORCH_DTYPES[fmt]).view(-1, BLOCK)
        got = _run(_unpack_ops, compile and q.is_cuda, q8, scales[: scale_count(n)].view(-1, 1), dtype).reshape(-1)[:n]
        if out is not None:
            out.copy_(got)
            return out
        return got
    lib = _loaded()
    on_gpu = backend == "cuda"
    if out is None:
        out = torch.empty(n, dtype=dtype, device=q.device if on_gpu or not q.is_cuda else "cpu")
    handle = _stream_handle(out.device, stream) if on_gpu else None
    _check(lib.vramkit_fp8_decode(q.data_ptr(), scales.data_ptr(), n, FORMAT_CODES[fmt], out.data_ptr(),
                                  _element_code(out.dtype), int(on_gpu), handle, int(max_ctas)))
    return out


def decode_swiglu(gate, up, n, fmt, dtype, backend="cuda", out=None, stream=None, max_ctas=0):
    """A gated MLP's saved tensors from the fp8 copies of its gate and up projections' outputs
    (`gate`, `up`: (payload, scales) pairs of n elements each): (g, u, silu(g), silu(g) * u), flat
    tensors of `dtype` (into `out`, four tensors, when given). One kernel (cuda) or the host
    reference (host) for the library backends; torch operations on the decoded tensors for
    "torch". The same values as decoding g and u and applying torch's silu and mul to them."""
    if fmt not in FORMAT_CODES:
        raise ValueError("fp8 codec: fmt=%r: use e4m3 or e5m2" % (fmt,))
    if backend == "torch":
        g = decode(gate[0], gate[1], n, fmt, dtype, "torch")
        u = decode(up[0], up[1], n, fmt, dtype, "torch")
        a = torch.nn.functional.silu(g)
        got = (g, u, a, a * u)
        if out is not None:
            for o, t in zip(out, got):
                o.copy_(t)
            return tuple(out)
        return got
    lib = _loaded()
    on_gpu = backend == "cuda"
    if out is None:
        dev = gate[0].device if on_gpu or not gate[0].is_cuda else "cpu"
        out = tuple(torch.empty(n, dtype=dtype, device=dev) for _ in range(4))
    if len(out) != 4 or any(o.numel() < n or o.dtype != out[0].dtype for o in out):
        raise ValueError("fp8 codec: decode_swiglu needs four outputs of %d elements of one dtype" % n)
    for p, s in (gate, up):
        if p.numel() < payload_bytes(n) or s.numel() < scale_count(n):
            raise ValueError("fp8 codec: decode_swiglu: a payload or its scales are shorter than %d elements" % n)
    handle = _stream_handle(out[0].device, stream) if on_gpu else None
    vp = ctypes.c_void_p
    ins = (vp * 4)(gate[0].data_ptr(), gate[1].data_ptr(), up[0].data_ptr(), up[1].data_ptr())
    outs = (vp * 4)(*(o.data_ptr() for o in out))
    _check(lib.vramkit_fp8_decode_swiglu(ins, n, FORMAT_CODES[fmt], outs, _element_code(out[0].dtype), int(on_gpu),
                                         handle, int(max_ctas)))
    return tuple(out)
