"""A character-level LSTM language model with gc.scan, then greedy sampling with
gc.while_loop: `python examples/char_rnn.py [--steps N] [--out model.gcx]`.

The text is the source of a few standard-library modules (read with `inspect`, so it
ships with Python). Training compiles one step (embedding, LSTM over a window of T
characters as one scan, softmax cross-entropy, gradients through the scan, Adam); the
sampler compiles one while_loop that feeds each predicted character back in until it has
produced `length` characters or a blank line.
"""
from __future__ import annotations

import argparse
import inspect
import json
import time

import numpy as np

import graphc as gc


def corpus() -> str:
    import argparse as m1
    import json.decoder as m2
    import textwrap as m3
    return "\n".join(inspect.getsource(m) for m in (m1, m2, m3))


def build_step(V, E, H, T, B, seed=0):
    rng = np.random.default_rng(seed)
    s = 1 / np.sqrt(H)
    with gc.Graph("char_rnn") as g:
        x = gc.placeholder((T, B), "int32", name="x")
        y = gc.placeholder((T, B), "int32", name="y")
        emb = gc.variable(rng.normal(0, 0.1, (V, E)).astype("float32"), name="emb")
        w_ih = gc.variable(rng.uniform(-s, s, (E, 4 * H)).astype("float32"), name="w_ih")
        w_hh = gc.variable(rng.uniform(-s, s, (H, 4 * H)).astype("float32"), name="w_hh")
        b = gc.variable(np.zeros(4 * H, "float32"), name="b")
        w_out = gc.variable(rng.normal(0, 0.1, (H, V)).astype("float32"), name="w_out")
        b_out = gc.variable(np.zeros(V, "float32"), name="b_out")
        params = [emb, w_ih, w_hh, b, w_out, b_out]
        xs = gc.take(emb, x, axis=0)                          # (T, B, E)
        hs, _ = gc.nn.lstm(xs, w_ih, w_hh, b)                 # (T, B, H)
        logits = hs.reshape((T * B, H)) @ w_out + b_out
        loss = gc.nn.softmax_cross_entropy(logits, y.reshape((T * B,))).mean()
        step = gc.compile({"loss": loss}, updates=gc.optim.adam(loss, params, lr=3e-3))
    return g, step, params


def build_sampler(step, V, E, H, length):
    """Greedy generation with the trained weights: one while_loop, one native call."""
    w = step.variables
    with gc.Graph("sample"):
        start = gc.placeholder((), "int32", name="start")
        emb, w_ih, w_hh = (gc.constant(w[k]) for k in ("emb", "w_ih", "w_hh"))
        b, w_out, b_out = (gc.constant(w[k]) for k in ("b", "w_out", "b_out"))
        newline = 10

        def cond(s):
            i, ch, prev, h, c, out = s
            return (i < length) & ~((ch == newline) & (prev == newline))

        def body(s):
            i, ch, prev, h, c, out = s
            z = gc.take(emb, ch.reshape((1,)), axis=0) @ w_ih + b + h @ w_hh
            gi, gf = gc.sigmoid(z[:, :H]), gc.sigmoid(z[:, H:2 * H])
            gg, go = gc.tanh(z[:, 2 * H:3 * H]), gc.sigmoid(z[:, 3 * H:])
            c = gf * c + gi * gg
            h = go * gc.tanh(c)
            nxt = gc.argmax((h @ w_out + b_out).reshape((V,)), axis=0).astype("int32")
            out = gc.where(gc.arange(length) == i, nxt, out)
            return i + 1, nxt, ch, h, c, out
        zeros = gc.zeros((1, H))
        n, *_, text = gc.while_loop(cond, body, (0, start, start, zeros, zeros,
                                                 gc.zeros((length,), "int32")))
        return gc.compile({"n": n, "text": text})


def reference_sample(step, V, H, start: int, length: int) -> list:
    """The greedy sampler in numpy (what build_sampler must compute)."""
    w = step.variables
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    h = c = np.zeros((1, H), np.float32)
    ch = prev = start
    out = []
    while len(out) < length and not (ch == 10 and prev == 10):
        z = w["emb"][[ch]] @ w["w_ih"] + w["b"] + h @ w["w_hh"]
        c = sig(z[:, H:2 * H]) * c + sig(z[:, :H]) * np.tanh(z[:, 2 * H:3 * H])
        h = sig(z[:, 3 * H:]) * np.tanh(c)
        prev, ch = ch, int(np.argmax(h @ w["w_out"] + w["b_out"]))
        out.append(ch)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--out", default=None, help="save the trained step as an artifact")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    text = corpus()
    chars = sorted(set(text))
    index = {ch: i for i, ch in enumerate(chars)}
    data = np.array([index[ch] for ch in text], np.int32)
    V, E, H, T, B = len(chars), 32, 128, 32, 32
    print(f"corpus: {len(text)} characters, {V} distinct; LSTM H={H}, windows T={T} B={B}")
    t0 = time.perf_counter()
    _, step, _ = build_step(V, E, H, T, B, args.seed)
    print(f"compiled the training step in {time.perf_counter() - t0:.2f} s "
          f"({step.stats['kernels']} kernels)")
    rng = np.random.default_rng(args.seed)
    losses = []
    t0 = time.perf_counter()
    for k in range(args.steps):
        starts = rng.integers(0, len(data) - T - 1, B)
        win = np.stack([data[s:s + T + 1] for s in starts], axis=1)    # (T+1, B)
        loss = float(step(x=win[:-1], y=win[1:])["loss"])
        losses.append(loss)
        if k % 25 == 0 or k == args.steps - 1:
            print(f"step {k:4d}  loss {loss:.3f}")
    seconds = time.perf_counter() - t0
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    print(f"{args.steps} steps in {seconds:.1f} s; loss {first:.3f} -> {last:.3f} "
          f"(uniform guess: {np.log(V):.3f})")
    sampler = build_sampler(step, V, E, H, length=120)
    out = sampler(start=np.int32(index["d"]))
    sample = "d" + "".join(chars[i] for i in out["text"][:int(out["n"])])
    print("greedy sample:\n" + sample)
    if args.out:
        step.save(args.out)
        print(f"wrote {args.out}")
    print(json.dumps({"first_loss": float(first), "last_loss": float(last),
                      "sampled": int(out["n"])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
