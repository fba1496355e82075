"""Small LLaMA-shaped models for the Python tests (CPU or GPU)."""

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


def grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]
