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


SHARDED = ("qkv", "proj", "fc", "fc_b", "out")     # per block, split by tensor parallelism


def add_arguments(parser, **defaults) -> None:
    """--layers --hidden --heads --seq --vocab on an argparse parser (Config's fields;
    `defaults` override Config's)."""
    for name in ("layers", "hidden", "heads", "seq", "vocab"):
        parser.add_argument(f"--{name}", type=int,
                            default=defaults.get(name, getattr(Config, name)))


def config_of(args) -> Config:
    return Config(args.vocab, args.seq, args.hidden, args.heads, args.layers)


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


def tp_shard(params: dict, cfg: Config, tp: int, index: int) -> dict:
    """Tensor-parallel shard `index` of `tp` of full parameters: each block's attention
    heads (qkv columns, proj rows) and MLP columns (fc, fc_b columns, out rows)."""
    d, h = cfg.hidden, cfg.heads
    if h % tp or (4 * d) % tp:
        raise ValueError(f"{h} heads and {4 * d} MLP columns must divide by tp={tp}")
    hl, fl = h // tp, 4 * d // tp
    heads = slice(index * hl, (index + 1) * hl)
    cols = slice(index * fl, (index + 1) * fl)
    out = dict(params)
    for k in range(cfg.layers):
        out[f"b{k}/qkv"] = params[f"b{k}/qkv"].reshape(d, 3, h, d // h)[:, :, heads] \
            .reshape(d, -1)
        out[f"b{k}/proj"] = params[f"b{k}/proj"].reshape(h, d // h, d)[heads].reshape(-1, d)
        out[f"b{k}/fc"] = params[f"b{k}/fc"][:, cols]
        out[f"b{k}/fc_b"] = params[f"b{k}/fc_b"][cols]
        out[f"b{k}/out"] = params[f"b{k}/out"][cols]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def attention(x, wqkv, wproj, heads: int, group=None):
    """Causal multi-head self-attention of x (batch, seq, hidden) over the `heads` whose
    columns wqkv holds (all of them, or a tensor-parallel group's share: then the
    output projection's partial products are summed over `group`)."""
    b, s, d = x.shape
    hd = wqkv.shape[1] // (3 * heads)
    qkv = gc.reshape(x @ wqkv, (b, s, 3, heads, hd))
    q, k, v = (gc.transpose(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3))
    scores = (q @ gc.swapaxes(k, 2, 3)) * float(1.0 / np.sqrt(hd))
    mask = np.triu(np.full((s, s), -1e9, np.dtype(x.dtype)), 1)
    att = gc.softmax(scores + gc.constant(mask), axis=-1)
    out = gc.reshape(gc.transpose(att @ v, (0, 2, 1, 3)), (b, s, heads * hd))
    return _rows(out, wproj, None, group)


def _rows(x, w, b, group):
    if group is not None and len(group) > 1:
        return gc.nn.row_parallel_linear(x, w, b, group=group)
    y = x @ w
    return y if b is None else y + b


def block(x, p: dict, k: int, heads: int, group=None):
    """One pre-norm block; with a tensor-parallel `group`, p holds this process's shard
    of the attention heads and MLP columns (init_params(tp=...))."""
    tp = len(group) if group is not None else 1
    h = gc.nn.layer_norm(x, p[f"b{k}/ln1_g"], p[f"b{k}/ln1_b"])
    x = x + attention(h, p[f"b{k}/qkv"], p[f"b{k}/proj"], heads // tp, group)
    h = gc.nn.layer_norm(x, p[f"b{k}/ln2_g"], p[f"b{k}/ln2_b"])
    h = gc.gelu(h @ p[f"b{k}/fc"] + p[f"b{k}/fc_b"])
    return x + _rows(h, p[f"b{k}/out"], p[f"b{k}/out_b"], group)


def loss_fn(tokens, targets, p: dict, cfg: Config, checkpoint: bool = False,
            stages: int = 1, group=None):
    """Mean next-token cross entropy. checkpoint=True recomputes each block's values in
    the backward pass (gc.checkpoint); stages > 1 marks pipeline stage boundaries between
    equal runs of blocks; `group`: the tensor-parallel ranks sharing p's blocks."""
    if cfg.layers % stages:
        raise ValueError(f"{cfg.layers} layers do not split into {stages} stages")
    x = gc.take(p["embed"], tokens, axis=0) + p["pos"]
    per = cfg.layers // stages
    for k in range(cfg.layers):
        def run(x, k=k):
            return block(x, p, k, cfg.heads, group)
        x = gc.checkpoint(run)(x) if checkpoint else run(x)
        if (k + 1) % per == 0 and k < cfg.layers - 1:
            x = gc.distributed.stage_boundary(x)
    x = gc.nn.layer_norm(x, p["lnf_g"], p["lnf_b"])
    logits = x @ p["head"]
    return gc.nn.softmax_cross_entropy(logits, targets).mean()


def batch(cfg: Config, size: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab, (size, cfg.seq + 1)).astype(np.int32)
    return tokens[:, :-1], tokens[:, 1:]
