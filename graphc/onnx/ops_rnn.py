"""RNN, GRU and LSTM, unrolled over their (static) sequence length: the input projection of
all steps is one matrix product, each step one recurrent product plus its gates. Directions
forward, reverse and bidirectional; sequence_lens, initial states, peepholes, clip,
input_forget, linear_before_reset, layout and every ONNX activation."""
from __future__ import annotations

import numpy as np

import graphc as gc

from .registry import op

DEFAULTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
# activations taking (alpha, beta), with their defaults
PARAMS = {"Affine": (1.0, 0.0), "LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None),
          "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None)}


def _activation(ctx, name, alpha, beta):
    c = lambda v, like: ctx.tensor(np.asarray(v), like.dtype)  # noqa: E731
    fns = {
        "Relu": gc.relu, "Tanh": gc.tanh, "Sigmoid": gc.sigmoid,
        "Affine": lambda x: x * c(alpha, x) + c(beta, x),
        "LeakyRelu": lambda x: gc.where(x >= c(0, x), x, x * c(alpha, x)),
        "ThresholdedRelu": lambda x: gc.where(x >= c(alpha, x), x, c(0, x)),
        "ScaledTanh": lambda x: c(alpha, x) * gc.tanh(c(beta, x) * x),
        "HardSigmoid": lambda x: gc.clip(x * c(alpha, x) + c(beta, x), 0.0, 1.0),
        "Elu": lambda x: gc.where(x >= c(0, x), x, c(alpha, x) * (gc.exp(x) - c(1, x))),
        "Softsign": lambda x: x / (c(1, x) + gc.abs(x)),
        "Softplus": lambda x: gc.log(c(1, x) + gc.exp(x)),
    }
    key = next((k for k in fns if k.lower() == name.lower()), None)
    if key is None:
        raise ctx.unsupported(f"activation {name!r}")
    return fns[key]


def _activations(ctx, kind, at, dirs):
    names = list(at.get("activations", DEFAULTS[kind] * dirs))
    alphas, betas = list(at.get("activation_alpha", [])), list(at.get("activation_beta", []))
    out = []
    for name in names:
        key = next((k for k in PARAMS if k.lower() == name.lower()), None)
        alpha = beta = None
        if key is not None:
            alpha = alphas.pop(0) if alphas else PARAMS[key][0]
            if PARAMS[key][1] is not None:
                beta = betas.pop(0) if betas else PARAMS[key][1]
        out.append(_activation(ctx, name, alpha, beta))
    per = len(DEFAULTS[kind])
    if len(out) != per * dirs:
        raise ctx.unsupported(f"{len(out)} activations for {dirs} direction(s) (expected "
                              f"{per * dirs})")
    return [out[d * per:(d + 1) * per] for d in range(dirs)]


def _recurrent(kind):
    def convert(ctx, a, at):
        a = list(a) + [None] * (8 - len(a))
        x, w, r = ctx.tensor(a[0]), ctx.tensor(a[1]), ctx.tensor(a[2])
        layout = at.get("layout", 0)
        if layout:
            x = gc.transpose(x, (1, 0, 2))                         # -> [seq, batch, in]
        seq, batch, _ = x.shape
        direction = at.get("direction", "forward")
        dirs = 2 if direction == "bidirectional" else 1
        hidden = at.get("hidden_size", r.shape[-1])
        g = GATES[kind]
        acts = _activations(ctx, kind, at, dirs)
        clip = at.get("clip")
        lens = a[4]
        lens_static = ctx.static(lens, "sequence_lens") if lens is not None and \
            not isinstance(lens, gc.Tensor) else None
        full = lens is None or (lens_static is not None and np.all(lens_static == seq))
        if not full and direction != "forward":
            raise ctx.unsupported("sequence_lens shorter than the sequence with reverse or "
                                  "bidirectional direction")
        mask = None
        if not full:
            steps = ctx.tensor(np.arange(seq, dtype=np.int64).reshape(seq, 1, 1))
            mask = steps < gc.reshape(gc.cast(ctx.tensor(lens), "int64"), (1, batch, 1))
        ys, hs, cs = [], [], []
        for d in range(dirs):
            reverse = direction == "reverse" or d == 1
            wd, rd = w[d], r[d]                                     # [g*H, in], [g*H, H]
            bias = ctx.tensor(a[3])[d] if a[3] is not None else None
            h0 = ctx.tensor(a[5])[d] if a[5] is not None else None
            c0 = ctx.tensor(a[6])[d] if kind == "LSTM" and a[6] is not None else None
            p = ctx.tensor(a[7])[d] if kind == "LSTM" and a[7] is not None else None
            if layout:
                h0 = ctx.tensor(a[5])[:, d] if a[5] is not None else None
                c0 = ctx.tensor(a[6])[:, d] if kind == "LSTM" and a[6] is not None else None
            zero = ctx.tensor(np.zeros((batch, hidden), gc.ir.dtypes.to_numpy(x.dtype)))
            h = h0 if h0 is not None else zero
            c = c0 if c0 is not None else zero
            xw = gc.matmul(x, gc.transpose(wd, (1, 0)))               # [seq, batch, g*H]
            wb = bias[:g * hidden] if bias is not None else None
            rb = bias[g * hidden:] if bias is not None else None
            if wb is not None:
                xw = xw + wb
            order = range(seq - 1, -1, -1) if reverse else range(seq)
            out = [None] * seq
            for t in order:
                h_new, c_new = _step(ctx, kind, at, xw[t], h, c, rd, rb, p, acts[d], hidden,
                                     clip)
                if mask is not None:
                    keep = mask[t]
                    h_new = gc.where(keep, h_new, h)
                    if c_new is not None:
                        c_new = gc.where(keep, c_new, c)
                    out[t] = gc.where(keep, h_new, zero)
                else:
                    out[t] = h_new
                h, c = h_new, c_new
            ys.append(gc.stack(out, 0))                               # [seq, batch, H]
            hs.append(h)
            cs.append(c)
        y = gc.stack(ys, 1)                                           # [seq, dirs, batch, H]
        y_h, y_c = gc.stack(hs, 0), gc.stack(cs, 0) if kind == "LSTM" else None
        if layout:
            y = gc.transpose(y, (2, 0, 1, 3))
            y_h = gc.transpose(y_h, (1, 0, 2))
            y_c = gc.transpose(y_c, (1, 0, 2)) if y_c is not None else None
        return [y, y_h] + ([y_c] if kind == "LSTM" else [])
    return convert


def _clip(ctx, v, clip):
    return v if clip is None else gc.clip(v, -float(clip), float(clip))


def _step(ctx, kind, at, xw, h, c, r, rb, p, act, hidden, clip):
    """One time step: (new hidden state, new cell state or None)."""
    hr = gc.matmul(h, gc.transpose(r, (1, 0)))                        # [batch, g*H]
    if kind == "RNN":
        pre = xw + hr + (rb if rb is not None else 0.0)
        return act[0](_clip(ctx, pre, clip)), None
    part = lambda v, k: v[:, k * hidden:(k + 1) * hidden]  # noqa: E731
    rbp = (lambda k: rb[k * hidden:(k + 1) * hidden]) if rb is not None else (lambda k: 0.0)
    if kind == "GRU":
        f, g = act
        z = f(_clip(ctx, part(xw, 0) + part(hr, 0) + rbp(0), clip))
        rt = f(_clip(ctx, part(xw, 1) + part(hr, 1) + rbp(1), clip))
        if at.get("linear_before_reset", 0):
            cand = part(xw, 2) + rt * (part(hr, 2) + rbp(2))
        else:
            cand = part(xw, 2) + gc.matmul(rt * h, gc.transpose(r[2 * hidden:], (1, 0))) + \
                rbp(2)
        ht = g(_clip(ctx, cand, clip))
        one = ctx.tensor(np.ones((), gc.ir.dtypes.to_numpy(h.dtype)))
        return (one - z) * ht + z * h, None
    f, g, hf = act
    pre = [part(xw, k) + part(hr, k) + rbp(k) for k in range(4)]     # i, o, f, c
    pi, po, pf = (p[k * hidden:(k + 1) * hidden] for k in range(3)) if p is not None else \
        (None, None, None)
    i = f(_clip(ctx, pre[0] + (pi * c if pi is not None else 0.0), clip))
    if at.get("input_forget", 0):
        one = ctx.tensor(np.ones((), gc.ir.dtypes.to_numpy(h.dtype)))
        fg = one - i
    else:
        fg = f(_clip(ctx, pre[2] + (pf * c if pf is not None else 0.0), clip))
    cc = g(_clip(ctx, pre[3], clip))
    c_new = fg * c + i * cc
    o = f(_clip(ctx, pre[1] + (po * c_new if po is not None else 0.0), clip))
    return o * hf(c_new), c_new


op("RNN")(_recurrent("RNN"))
op("GRU")(_recurrent("GRU"))
op("LSTM")(_recurrent("LSTM"))
