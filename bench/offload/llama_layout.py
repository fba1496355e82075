"""transformers' LlamaForCausalLM layout in plain torch, the one home of the pieces the offload
bench's built-in model (used when transformers is not importable) and the Python tests' small
models share: RMSNorm in fp32, rotary embeddings, separate q/k/v and gate/up projections, SDPA
(an explicit causal softmax on torch < 2.0), the loss on upcast logits with shifted labels."""

import torch


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        return self.weight * x.to(dt)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(torch.nn.Module):
    """Causal multi-head attention; rotary embeddings when cos and sin are given."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = torch.nn.Linear(d, d, bias=False)
        self.k_proj = torch.nn.Linear(d, d, bias=False)
        self.v_proj = torch.nn.Linear(d, d, bias=False)
        self.o_proj = torch.nn.Linear(d, d, bias=False)

    def forward(self, x, cos=None, sin=None):
        b, s, d = x.shape
        h = self.heads

        def split(t):
            return t.view(b, s, h, d // h).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        if cos is not None:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0 (the CPU tests)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            att = (q @ k.transpose(-1, -2) / (d // h) ** 0.5).masked_fill(mask, float("-inf"))
            a = torch.softmax(att, dim=-1) @ v
        return self.o_proj(a.transpose(1, 2).reshape(b, s, d))


class MLP(torch.nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, d, ffn):
        super().__init__()
        self.gate_proj = torch.nn.Linear(d, ffn, bias=False)
        self.up_proj = torch.nn.Linear(d, ffn, bias=False)
        self.down_proj = torch.nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(torch.nn.Module):
    """Named like transformers' LlamaDecoderLayer (self_attn, mlp, two norms); `norm` makes the
    norms (RMSNorm by default)."""

    def __init__(self, d, heads, ffn, norm=RMSNorm):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = norm(d), norm(d)
        self.self_attn = Attention(d, heads)
        self.mlp = MLP(d, ffn)

    def forward(self, x, cos=None, sin=None):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class CausalLM(torch.nn.Module):
    """Embedding, `layers` (an nn.ModuleList of blocks), final norm and head; the forward returns
    the next-token loss on fp32 logits. With `rotary_heads` the blocks get rotary cos/sin for that
    many heads of d."""

    def __init__(self, vocab, d, layers, norm=RMSNorm, rotary_heads=None):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(layers)
        self.norm = norm(d)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)
        self.rotary = rotary_heads is not None
        if self.rotary:
            hd = d // rotary_heads
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd)), persistent=False)

    def forward(self, tokens):
        extra = ()
        if self.rotary:
            s = tokens.shape[1]
            with torch.autocast(tokens.device.type, enabled=False):
                f = torch.outer(torch.arange(s, device=tokens.device).float(), self.inv_freq)
                emb = torch.cat((f, f), dim=-1)
                extra = (emb.cos()[None, None], emb.sin()[None, None])
        x = self.embed_tokens(tokens)
        for layer in self.layers:
            x = layer(x, *extra)
        logits = self.lm_head(self.norm(x)).float()
        labels = torch.nn.functional.pad(tokens, (0, 1), value=-100)[:, 1:]
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=-100)
