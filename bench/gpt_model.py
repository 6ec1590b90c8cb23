"""A GPT-style causal decoder built with graphc's API, for training benchmarks and the
parallel-training example: token + position embeddings, pre-norm blocks of causal
multi-head attention and a 4x GELU MLP, a final norm and a tied-free output layer."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import graphc as gc


@dataclass(frozen=True)
class Config:
    vocab: int = 2048
    seq: int = 128
    hidden: int = 256
    heads: int = 4
    layers: int = 4


def init_params(cfg: Config, seed: int = 0, dtype: str = "float32") -> dict:
    """name -> numpy array, in a fixed order (the model's parameters)."""
    rng = np.random.default_rng(seed)
    d = cfg.hidden

    def normal(*shape, scale=0.02):
        return (rng.standard_normal(shape) * scale).astype(dtype)

    p = {"embed": normal(cfg.vocab, d), "pos": normal(cfg.seq, d)}
    for k in range(cfg.layers):
        p.update({f"b{k}/ln1_g": np.ones(d, dtype), f"b{k}/ln1_b": np.zeros(d, dtype),
                  f"b{k}/qkv": normal(d, 3 * d), f"b{k}/proj": normal(d, d),
                  f"b{k}/ln2_g": np.ones(d, dtype), f"b{k}/ln2_b": np.zeros(d, dtype),
                  f"b{k}/fc": normal(d, 4 * d), f"b{k}/fc_b": np.zeros(4 * d, dtype),
                  f"b{k}/out": normal(4 * d, d), f"b{k}/out_b": np.zeros(d, dtype)})
    p.update({"lnf_g": np.ones(d, dtype), "lnf_b": np.zeros(d, dtype),
              "head": normal(d, cfg.vocab)})
    return p


def attention(x, wqkv, wproj, heads: int):
    """Causal multi-head self-attention of x (batch, seq, hidden)."""
    b, s, d = x.shape
    qkv = gc.reshape(x @ wqkv, (b, s, 3, heads, d // heads))
    q, k, v = (gc.transpose(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3))
    scores = (q @ gc.swapaxes(k, 2, 3)) * float(1.0 / np.sqrt(d // heads))
    mask = np.triu(np.full((s, s), -1e9, np.dtype(x.dtype)), 1)
    att = gc.softmax(scores + gc.constant(mask), axis=-1)
    out = gc.reshape(gc.transpose(att @ v, (0, 2, 1, 3)), (b, s, d))
    return out @ wproj


def block(x, p: dict, k: int, heads: int):
    h = gc.nn.layer_norm(x, p[f"b{k}/ln1_g"], p[f"b{k}/ln1_b"])
    x = x + attention(h, p[f"b{k}/qkv"], p[f"b{k}/proj"], heads)
    h = gc.nn.layer_norm(x, p[f"b{k}/ln2_g"], p[f"b{k}/ln2_b"])
    h = gc.gelu(h @ p[f"b{k}/fc"] + p[f"b{k}/fc_b"])
    return x + h @ p[f"b{k}/out"] + p[f"b{k}/out_b"]


def loss_fn(tokens, targets, p: dict, cfg: Config, checkpoint: bool = False):
    """Mean next-token cross entropy; checkpoint=True recomputes each block's values in
    the backward pass (gc.checkpoint)."""
    x = gc.take(p["embed"], tokens, axis=0) + p["pos"]
    for k in range(cfg.layers):
        def run(x, k=k):
            return block(x, p, k, cfg.heads)
        x = gc.checkpoint(run)(x) if checkpoint else run(x)
    x = gc.nn.layer_norm(x, p["lnf_g"], p["lnf_b"])
    logits = x @ p["head"]
    return gc.nn.softmax_cross_entropy(logits, targets).mean()


def batch(cfg: Config, size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab, (size, cfg.seq + 1)).astype(np.int32)
    return tokens[:, :-1], tokens[:, 1:]
