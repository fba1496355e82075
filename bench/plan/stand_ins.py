"""Pure-PyTorch stand-ins for the bitsandbytes pieces the ground-truth machine lacks.

They allocate the buffers bitsandbytes allocates, in the same dtypes and at the same points, so
that torch.cuda's peak statistics see what they would see with bitsandbytes; the arithmetic is
done in chunks of at most 2**18 elements (temporaries of at most 1 MiB, from the allocator's small
pool) where bitsandbytes' fused CUDA kernels need none. Measurements made with them are marked
"stand_in" in the ground-truth files.

- NF4Linear: Linear4bit's storage with compress_statistics (double quantisation) and blocksize 64:
  the packed 4-bit weight (uint8, n/2), the 8-bit quantised absmax of each block (uint8, n/64),
  the fp32 scale of each 256 absmax blocks; forward and backward dequantise into a transient
  16-bit weight (after a transient fp32 absmax), as MatMul4Bit does, and save nothing of x.
- LoraNF4: PEFT's bnb Linear4bit LoRA wrapper (clone of the base output; adapters in fp32; the
  adapter output cast back before the sum when autocast is off).
- AdamW8bit: bitsandbytes' Optimizer2State layout for optim_bits 8, block_wise: two uint8 states
  and two fp32 absmax vectors (blocks of 256) per parameter of at least 4096 elements, two fp32
  states below that.
"""

import math

CHUNK = 1 << 18

# The NF4 code book (QLoRA paper, appendix E).
NF4_CODE = [
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
]


def make_nf4_linear(torch, linear, compute_dtype):
    """An NF4Linear holding `linear`'s weight quantised (the fp32/bf16 original is dropped)."""

    class NF4Linear(torch.nn.Module):
        def __init__(self, weight):
            super().__init__()
            out_f, in_f = weight.shape
            n = weight.numel()
            if n % (64 * 256) != 0:
                raise ValueError("NF4 stand-in needs a multiple of 16384 weights, got %d" % n)
            self.in_features, self.out_features = in_f, out_f
            self.compute_dtype = compute_dtype
            dev = weight.device
            self.register_buffer("packed", torch.empty((n // 2, 1), dtype=torch.uint8, device=dev))
            self.register_buffer("absmax_q", torch.empty(n // 64, dtype=torch.uint8, device=dev))
            self.register_buffer("absmax2", torch.empty(n // 64 // 256, dtype=torch.float32, device=dev))
            self.register_buffer("code", torch.tensor(NF4_CODE, dtype=torch.float32, device=dev))
            self._quantize(weight.detach())

        @torch.no_grad()
        def _quantize(self, weight):
            flat = weight.reshape(-1)
            code = self.code
            for a in range(0, flat.numel(), CHUNK):
                w = flat[a:a + CHUNK].float().view(-1, 64)
                amax = w.abs().amax(dim=1).clamp_min(1e-12)
                blk = a // 64
                groups = amax.view(-1, 256)
                scale = groups.amax(dim=1)
                self.absmax2[blk // 256:blk // 256 + groups.shape[0]] = scale
                self.absmax_q[blk:blk + amax.numel()] = (groups / scale[:, None] * 255).round().view(-1).to(torch.uint8)
                q = (w / amax[:, None]).view(-1, 1)
                idx = (q - code.view(1, -1)).abs().argmin(dim=1).to(torch.uint8)
                self.packed.view(-1)[a // 2:(a + w.numel()) // 2] = (idx[0::2] << 4) | idx[1::2]

        def dequantize(self):
            # dequantize_blockwise of the nested absmax (fp32, n/64), then the 16-bit weight.
            absmax = self.absmax_q.to(torch.float32)
            absmax.view(-1, 256).mul_(self.absmax2.view(-1, 1) / 255)
            out = torch.empty((self.out_features, self.in_features), dtype=self.compute_dtype,
                              device=self.packed.device)
            flat = out.view(-1)
            packed = self.packed.view(-1)
            for a in range(0, flat.numel(), CHUNK):
                p = packed[a // 2:(a + CHUNK) // 2]
                idx = torch.stack((p >> 4, p & 15), dim=1).view(-1).int()
                # index_select takes int32 indices (1 MiB here; int64 would leave the small pool).
                vals = torch.index_select(self.code, 0, idx).view(-1, 64)
                vals.mul_(absmax[a // 64:(a + CHUNK) // 64].view(-1, 1))
                flat[a:a + vals.numel()].copy_(vals.view(-1))
            del absmax
            return out

        def forward(self, x):
            return _NF4Matmul.apply(x.to(self.compute_dtype), self)

    class _NF4Matmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, module):
            ctx.module = module
            return torch.nn.functional.linear(x, module.dequantize())

        @staticmethod
        def backward(ctx, grad):
            return torch.matmul(grad, ctx.module.dequantize()), None

    return NF4Linear(linear.weight)


def make_lora_nf4(torch, base, r, alpha, dropout):
    """PEFT's LoRA wrapper for bitsandbytes 4-bit layers, around an NF4Linear."""

    class LoraNF4(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.base_layer = base
            dev = base.packed.device
            self.lora_A = torch.nn.Linear(base.in_features, r, bias=False, device=dev, dtype=torch.float32)
            self.lora_B = torch.nn.Linear(r, base.out_features, bias=False, device=dev, dtype=torch.float32)
            torch.nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
            torch.nn.init.zeros_(self.lora_B.weight)
            self.lora_dropout = torch.nn.Dropout(dropout) if dropout > 0 else torch.nn.Identity()
            self.scaling = alpha / r

        def forward(self, x):
            result = self.base_layer(x)
            result = result.clone()
            requires_conversion = not torch.is_autocast_enabled()
            if requires_conversion:
                expected_dtype = result.dtype
                if x.dtype != self.lora_A.weight.dtype:
                    x = x.to(self.lora_A.weight.dtype)
            output = self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling
            if requires_conversion:
                output = output.to(expected_dtype)
            return result + output

    return LoraNF4()


def make_adamw_8bit(torch, params, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
    """An optimizer with bitsandbytes AdamW8bit's state buffers (blockwise, blocksize 256)."""

    class AdamW8bit(torch.optim.Optimizer):
        def __init__(self):
            super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

        @torch.no_grad()
        def step(self):
            for group in self.param_groups:
                b1, b2 = group["betas"]
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    st = self.state[p]
                    n = p.numel()
                    if not st:
                        st["step"] = 0
                        if n < 4096:
                            st["state1"] = torch.zeros_like(p, dtype=torch.float32)
                            st["state2"] = torch.zeros_like(p, dtype=torch.float32)
                        else:
                            blocks = (n + 255) // 256
                            st["state1"] = torch.zeros_like(p, dtype=torch.uint8)
                            st["state2"] = torch.zeros_like(p, dtype=torch.uint8)
                            st["absmax1"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                            st["absmax2"] = torch.zeros(blocks, dtype=torch.float32, device=p.device)
                    st["step"] += 1
                    t = st["step"]
                    c1, c2 = 1 - b1 ** t, 1 - b2 ** t
                    flat, g_all = p.view(-1), p.grad.view(-1)
                    flat.mul_(1 - group["lr"] * group["weight_decay"])
                    for a in range(0, n, CHUNK):
                        g = g_all[a:a + CHUNK].float()
                        if n < 4096:
                            m, v = st["state1"].view(-1), st["state2"].view(-1)
                            m.mul_(b1).add_(g, alpha=1 - b1)
                            v.mul_(b2).addcmul_(g, g, value=1 - b2)
                            upd = (m / c1) / ((v / c2).sqrt() + group["eps"])
                        else:
                            s1 = st["state1"].view(-1)[a:a + CHUNK]
                            s2 = st["state2"].view(-1)[a:a + CHUNK]
                            a1 = st["absmax1"][a // 256:(a + g.numel() + 255) // 256]
                            a2 = st["absmax2"][a // 256:(a + g.numel() + 255) // 256]
                            m = ((s1.float() - 127.0) / 127.0).view(-1, 256) * a1.view(-1, 1)
                            v = (s2.float() / 255.0).view(-1, 256) * a2.view(-1, 1)
                            gv = g.view(-1, 256)
                            m.mul_(b1).add_(gv, alpha=1 - b1)
                            v.mul_(b2).addcmul_(gv, gv, value=1 - b2)
                            a1.copy_(m.abs().amax(dim=1).clamp_min(1e-12))
                            a2.copy_(v.amax(dim=1).clamp_min(1e-12))
                            upd = ((m / c1) / ((v / c2).sqrt() + group["eps"])).view(-1)
                            s1.copy_((m / a1.view(-1, 1) * 127.0 + 127.0).round().view(-1))
                            s2.copy_((v / a2.view(-1, 1) * 255.0).round().view(-1))
                        flat[a:a + upd.numel()].add_(upd.to(p.dtype), alpha=-group["lr"])

    return AdamW8bit()
