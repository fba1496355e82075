"""Small LLaMA-shaped models for the Python tests (CPU or GPU)."""

import contextlib

import torch


class Block(torch.nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
        self.proj = torch.nn.Linear(d, d, bias=False)
        self.norm2 = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        att = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5, dim=-1)
        x = x + self.proj(att @ v)
        g, u = self.up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(torch.nn.functional.silu(g) * u)


class TinyLM(torch.nn.Module):
    def __init__(self, vocab=64, d=32, ffn=48, layers=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(Block(d, ffn) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x))
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                                 tokens[:, 1:].reshape(-1))


def loss_in(model, tokens, ctx=None, amp=None):
    """model(tokens), run inside `ctx` when given and under autocast to `amp` (a dtype) on the
    tokens' device when given."""
    cast = torch.autocast(tokens.device.type, dtype=amp) if amp is not None else contextlib.nullcontext()
    with cast, (ctx if ctx is not None else contextlib.nullcontext()):
        return model(tokens)


def grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


class Attention(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q_proj = torch.nn.Linear(d, d, bias=False)
        self.k_proj = torch.nn.Linear(d, d, bias=False)
        self.v_proj = torch.nn.Linear(d, d, bias=False)
        self.o_proj = torch.nn.Linear(d, d, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads

        def split(t):
            return t.view(b, s, h, d // h).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            att = (q @ k.transpose(-1, -2) / (d // h) ** 0.5).masked_fill(mask, float("-inf"))
            o = torch.softmax(att, dim=-1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(b, s, d))


class MLP(torch.nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.gate_proj = torch.nn.Linear(d, ffn, bias=False)
        self.up_proj = torch.nn.Linear(d, ffn, bias=False)
        self.down_proj = torch.nn.Linear(ffn, d, bias=False)

    def forward(self, x):
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(torch.nn.Module):
    """Named like transformers' LlamaDecoderLayer (self_attn, mlp, two norms)."""

    def __init__(self, d, ffn, heads):
        super().__init__()
        self.input_layernorm = torch.nn.LayerNorm(d)
        self.self_attn = Attention(d, heads)
        self.post_attention_layernorm = torch.nn.LayerNorm(d)
        self.mlp = MLP(d, ffn)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaLike(torch.nn.Module):
    def __init__(self, vocab=64, d=64, ffn=128, layers=4, heads=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList(LlamaBlock(d, ffn, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.norm(x))
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                                 tokens[:, 1:].reshape(-1))
