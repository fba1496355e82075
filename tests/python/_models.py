"""Small LLaMA-shaped models for the Python tests (CPU or GPU); the LLaMA layout itself lives in
bench/offload/llama_layout.py (the offload bench's built-in model)."""

import os
import sys

import contextlib

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "offload"))
from llama_layout import MLP, Attention, CausalLM  # noqa: E402,F401 - re-exported to the tests
from llama_layout import Block as LlamaBlock  # noqa: E402


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


class TinyLM(CausalLM):
    """Blocks with a fused qkv and full (non-causal) softmax attention, LayerNorms."""

    def __init__(self, vocab=64, d=32, ffn=48, layers=4):
        super().__init__(vocab, d, [Block(d, ffn) for _ in range(layers)], norm=torch.nn.LayerNorm)


class LlamaLike(CausalLM):
    """Named like transformers' LlamaForCausalLM (self_attn, mlp, two norms a block), with
    LayerNorms and without rotary embeddings."""

    def __init__(self, vocab=64, d=64, ffn=128, layers=4, heads=4):
        blocks = [LlamaBlock(d, heads, ffn, norm=torch.nn.LayerNorm) for _ in range(layers)]
        super().__init__(vocab, d, blocks, norm=torch.nn.LayerNorm)


def loss_in(model, tokens, ctx=None, amp=None):
    """model(tokens), run inside `ctx` when given and under autocast to `amp` (a dtype) on the
    tokens' device when given."""
    cast = torch.autocast(tokens.device.type, dtype=amp) if amp is not None else contextlib.nullcontext()
    with cast, (ctx if ctx is not None else contextlib.nullcontext()):
        return model(tokens)


def grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def forward(model, tokens, ctx=None):
    """The model's loss, inside ctx when one is given."""
    if ctx is None:
        return model(tokens)
    with ctx:
        return model(tokens)
