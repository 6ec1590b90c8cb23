"""Central finite differences in float64 against graphc's symbolic gradients."""
import numpy as np

import graphc as gc


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        hi = f()
        flat[i] = old - eps
        lo = f()
        flat[i] = old
        gflat[i] = (hi - lo) / (2 * eps)
    return g


def rel_error(a, b):
    scale = max(np.linalg.norm(a), np.linalg.norm(b), 1e-12)
    return np.linalg.norm(a - b) / scale


def check_grad(build, inputs, wrt=None, seed=0, tol=1e-6, extra_feeds=None):
    """build(*placeholders) -> Tensor; checks d<out, r>/d input for inputs named in wrt."""
    extra_feeds = extra_feeds or {}
    inputs = {k: np.array(v, dtype=np.float64) for k, v in inputs.items()}
    wrt = list(inputs) if wrt is None else wrt
    rng = np.random.default_rng(seed)
    with gc.Graph("gradcheck"):
        ps = {k: gc.placeholder(v.shape, str(v.dtype), name=k) for k, v in inputs.items()}
        extra = {k: gc.placeholder(v.shape, str(v.dtype), name=k) for k, v in extra_feeds.items()}
        out = build(**ps, **extra)
        r = gc.constant(rng.uniform(0.5, 1.5, out.shape).astype(out.dtype))
        y = (out * r).sum()
        grads = gc.grad(y, [ps[k] for k in wrt])
        feeds = dict(inputs, **extra_feeds)
        symbolic = gc.evaluate(grads, feeds)
        for name, g in zip(wrt, symbolic):
            x = inputs[name]
            fd = numeric_grad(lambda: float(gc.evaluate(y, feeds)), x)
            err = rel_error(g, fd)
            assert err < tol, f"gradient of {name}: relative error {err:.2e}\n{g}\n{fd}"
    return symbolic
