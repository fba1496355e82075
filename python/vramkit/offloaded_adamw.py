"""AdamW whose moments (and optionally fp32 master weights) live in pinned host memory.

step() streams the state to the GPU in chunks through two device slots (double buffering): while
chunk k is updated on the compute stream, chunk k+1 comes in on one copy stream and chunk k-1
goes back on another. Not thread-safe (like torch.optim optimizers).
"""

import inspect
import math

import torch

from .pinned_pool import PinnedPool


def _reference_uses_lerp():
    # torch.optim.AdamW's single-tensor path updates the first moment with lerp_ in recent
    # releases and with mul_().add_() in older ones; follow the installed one to match its bits.
    # Newer releases implement AdamW through Adam's single-tensor function.
    for module, fn in (("adamw", "_single_tensor_adamw"), ("adam", "_single_tensor_adam")):
        try:
            mod = __import__("torch.optim." + module, fromlist=[fn])
            return "lerp_" in inspect.getsource(getattr(mod, fn))
        except (ImportError, AttributeError, OSError, TypeError):
            continue
    return True


_USE_LERP = _reference_uses_lerp()


class _NoStream:
    """Stands in for a CUDA stream on the CPU, where every operation completes in order."""

    def record(self):
        return None

    def wait_event(self, ev):
        pass

    def wait_stream(self, s):
        pass


class _CudaStream:
    """A CUDA stream with record() returning a fresh event and waits that accept None."""

    def __init__(self, stream):
        self.stream = stream

    def record(self):
        ev = torch.cuda.Event()
        ev.record(self.stream)
        return ev

    def wait_event(self, ev):
        if ev is not None:
            self.stream.wait_event(ev)

    def wait_stream(self, s):
        self.stream.wait_stream(s.stream)


def _on(s):
    import contextlib

    return torch.cuda.stream(s.stream) if isinstance(s, _CudaStream) else contextlib.nullcontext()


class OffloadedAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW's update (decoupled weight decay, bias correction, no amsgrad) with its
    state in host memory.

    - `chunk_bytes`: fp32 bytes of one state tensor streamed per chunk (default 64 MiB); device
      memory used by the step is about 2 slots x (2 or 3 state tensors) x chunk_bytes.
    - Moments are fp32 whatever the parameter dtype; a low-precision parameter without master
      weights is updated in fp32 and rounded once per step.
    - `master_weights=True` keeps an fp32 copy of each low-precision parameter on the host, updates
      it, and writes the rounded result into the parameter (the fp32-master recipe of mixed
      precision); fp32 parameters need none and ignore it.
    - Parameters on the CPU take the same chunked path with no streams: this is what the CPU
      tests compare with torch.optim.AdamW.

    Matches torch.optim.AdamW(foreach=False) on the same device to within floating-point rounding
    of the same operations (tests: max relative difference below 1e-6 after several steps).
    State tensors are readable after `synchronize()`.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 master_weights=False, chunk_bytes=64 << 20, pool=None):
        if not 0.0 <= lr:
            raise ValueError("OffloadedAdamW: invalid lr %r" % (lr,))
        if not 0.0 <= eps:
            raise ValueError("OffloadedAdamW: invalid eps %r" % (eps,))
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError("OffloadedAdamW: invalid betas %r" % (betas,))
        if int(chunk_bytes) < 4096:
            raise ValueError("OffloadedAdamW: chunk_bytes must be at least 4096")
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.master_weights = bool(master_weights)
        self.chunk_elems = int(chunk_bytes) // 4
        self.pool = pool if pool is not None else PinnedPool()
        self._slots = {}
        self._streams = {}
        self._done = {}  # device -> event after the last copy back of the last step

    # -- state --------------------------------------------------------------------------------
    def _host_tensor(self, n):
        buf = self.pool.get(4 * n)
        return buf[: 4 * n].view(torch.float32)

    def _init_state(self, p):
        st = self.state[p]
        if "step" in st:
            return st
        n = p.numel()
        st["step"] = 0
        st["exp_avg"] = self._host_tensor(n).zero_()
        st["exp_avg_sq"] = self._host_tensor(n).zero_()
        if self.master_weights and p.dtype != torch.float32:
            st["master"] = self._host_tensor(n).copy_(p.detach().reshape(-1))
        return st

    def host_state_bytes(self):
        """Host bytes held by the optimizer state (moments and master weights)."""
        return sum(t.numel() * t.element_size() for st in self.state.values()
                   for k, t in st.items() if k != "step")

    # -- math ---------------------------------------------------------------------------------
    @staticmethod
    def _update(w, g, m, v, lr, beta1, beta2, eps, wd, step):
        """AdamW on flat fp32 (or parameter-dtype) slices, in torch.optim.AdamW's op order."""
        w.mul_(1 - lr * wd)
        if _USE_LERP:
            m.lerp_(g, 1 - beta1)
        else:
            m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)
        w.addcdiv_(m, denom, value=-step_size)

    # -- step ---------------------------------------------------------------------------------
    def _chunks(self, items):
        for p, st, hp in items:
            n = p.numel()
            for s in range(0, n, self.chunk_elems):
                yield p, st, hp, s, min(n, s + self.chunk_elems)

    def _device_slots(self, device, with_master):
        key = (device, with_master)
        slots = self._slots.get(key)
        if slots is None:
            k = 3 if with_master else 2
            slots = [[torch.empty(self.chunk_elems, dtype=torch.float32, device=device) for _ in range(k)]
                     for _ in range(2)]
            self._slots[key] = slots
        return slots

    def _device_streams(self, device):
        s = self._streams.get(device)
        if s is None:
            s = self._streams[device] = (_CudaStream(torch.cuda.Stream(device)),
                                         _CudaStream(torch.cuda.Stream(device)))
        return s

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        by_device = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("OffloadedAdamW does not support sparse gradients")
                if not p.is_contiguous() or not p.grad.is_contiguous():
                    raise RuntimeError("OffloadedAdamW needs contiguous parameters and gradients")
                st = self._init_state(p)
                st["step"] += 1
                by_device.setdefault(p.device, []).append((p, st, group))
        for device, items in by_device.items():
            self._step_device(device, items)
        return loss

    def _step_device(self, device, items):
        cuda = device.type == "cuda"
        compute = _CudaStream(torch.cuda.current_stream(device)) if cuda else _NoStream()
        h2d, d2h = self._device_streams(device) if cuda else (_NoStream(), _NoStream())
        with_master = any("master" in st for _, st, _ in items)
        slots = self._device_slots(device, with_master)
        # Host state must not be read before last step's copies back have landed.
        prev = self._done.get(device)
        h2d.wait_event(prev)
        h2d.wait_stream(compute)  # gradients and parameters are ready
        chunks = list(self._chunks(items))
        ev_in = [None] * len(chunks)
        ev_out = [None, None]  # per slot: last copy back out of it

        def load(k):
            p, st, g, s, e = chunks[k]
            slot = slots[k % 2]
            with _on(h2d):
                h2d.wait_event(ev_out[k % 2])  # the slot's previous chunk is back on the host
                n = e - s
                slot[0][:n].copy_(st["exp_avg"][s:e], non_blocking=True)
                slot[1][:n].copy_(st["exp_avg_sq"][s:e], non_blocking=True)
                if "master" in st:
                    slot[2][:n].copy_(st["master"][s:e], non_blocking=True)
                ev_in[k] = h2d.record()

        if chunks:
            load(0)
        for k, (p, st, g, s, e) in enumerate(chunks):
            if k + 1 < len(chunks):
                load(k + 1)
            slot, n = slots[k % 2], e - s
            compute.wait_event(ev_in[k])
            b1, b2 = g["betas"]
            m, v = slot[0][:n], slot[1][:n]
            grad = p.grad.view(-1)[s:e]
            if "master" in st:
                w = slot[2][:n]
                self._update(w, grad.float(), m, v, g["lr"], b1, b2, g["eps"], g["weight_decay"], st["step"])
                p.view(-1)[s:e].copy_(w)
            else:
                w = p.view(-1)[s:e]
                if w.dtype == torch.float32:
                    self._update(w, grad.float(), m, v, g["lr"], b1, b2, g["eps"], g["weight_decay"], st["step"])
                else:
                    # Low precision without master weights: update in fp32, round once.
                    w32 = w.float()
                    self._update(w32, grad.float(), m, v, g["lr"], b1, b2, g["eps"], g["weight_decay"], st["step"])
                    w.copy_(w32)
            done = compute.record()
            with _on(d2h):
                d2h.wait_event(done)
                st["exp_avg"][s:e].copy_(m, non_blocking=True)
                st["exp_avg_sq"][s:e].copy_(v, non_blocking=True)
                if "master" in st:
                    st["master"][s:e].copy_(slot[2][:n], non_blocking=True)
                ev_out[k % 2] = d2h.record()
        # The next step's copies in wait for this (the host state must have landed); the
        # compute stream need not, so the next forward overlaps the last copies out.
        self._done[device] = d2h.record()

    def synchronize(self):
        """Blocks until the last step's state is back in host memory."""
        for ev in self._done.values():
            if ev is not None:
                ev.synchronize()

    def state_dict(self):
        self.synchronize()
        return super().state_dict()
