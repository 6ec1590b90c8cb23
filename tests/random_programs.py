"""A generator of random differentiable programs that mix control flow (cond, scan,
while_loop) with views (flip, negative-step slices, size-1 axes), reductions over axis
tuples, broadcasting, concatenate and pad; each program's outputs and its gradient are
compiled and compared with the reference interpreter (`check`).

Programs are drawn from a seed alone, so a failure is reproduced by its seed:
`python -c "import random_programs as r; r.check(SEED)"` from tests/.
"""
from __future__ import annotations

import numpy as np

import graphc as gc

from compiled import TOL

MAX_SIZE = 512          # elements a value may have; larger results are dropped

UNARY = [gc.tanh, gc.sin, gc.sigmoid, lambda a: a * a, lambda a: a * 0.5 - 1.0,
         lambda a: gc.exp(-a * a), lambda a: gc.log(a * a + 1.0), gc.relu, gc.abs]
BINARY = [gc.add, gc.subtract, gc.multiply, gc.maximum, gc.minimum,
          lambda a, b: a / (b * b + 1.0)]
REDUCE = [gc.sum, gc.mean, gc.max, gc.min]


def _axes(rng, a) -> tuple:
    k = int(rng.integers(1, a.ndim + 1))
    return tuple(sorted(rng.choice(a.ndim, size=k, replace=False).tolist()))


def _slice(rng, n: int) -> slice:
    step = int(rng.choice([-1, -2, 1, 2, -3]))
    start = int(rng.integers(0, n))
    if step < 0:
        return slice(start if rng.random() < 0.5 else None, None, step)
    return slice(None if rng.random() < 0.5 else start, None, step)


def _step(rng, vals: list, depth: int):
    a = vals[int(rng.integers(len(vals)))]
    kind = rng.choice(["unary", "binary", "reduce", "flip", "slice", "expand", "squeeze",
                       "broadcast", "transpose", "concat", "pad", "softmax", "cond",
                       "scan", "while", "reshape"])
    if kind == "unary":
        return UNARY[int(rng.integers(len(UNARY)))](a)
    if kind == "binary":
        b = vals[int(rng.integers(len(vals)))]
        f = BINARY[int(rng.integers(len(BINARY)))]
        try:
            return f(a, b)
        except gc.ShapeError:
            return f(a, b.sum() if rng.random() < 0.5 else b.max())
    if not a.ndim:
        return gc.reshape(a, (1,)) * 1.5
    if kind == "reduce":
        return REDUCE[int(rng.integers(len(REDUCE)))](a, axis=_axes(rng, a),
                                                      keepdims=bool(rng.random() < 0.5))
    if kind == "flip":
        return gc.flip(a, axis=int(rng.integers(-a.ndim, a.ndim)))
    if kind == "slice":
        return a[tuple(_slice(rng, n) for n in a.shape)]
    if kind == "expand":
        return gc.expand_dims(a, int(rng.integers(0, a.ndim + 1)))
    if kind == "squeeze":
        ones = [k for k, n in enumerate(a.shape) if n == 1]
        return gc.squeeze(a, axis=ones[0]) if ones else a[..., :1]
    if kind == "broadcast":
        return gc.broadcast_to(a, (int(rng.integers(1, 4)),) + a.shape)
    if kind == "transpose":
        return gc.transpose(a, tuple(rng.permutation(a.ndim).tolist()))
    if kind == "concat":
        ax = int(rng.integers(a.ndim))
        return gc.concatenate([a, gc.flip(a, axis=ax) * 2.0], axis=ax)
    if kind == "pad":
        return gc.pad(a, int(rng.integers(0, 3)), constant_values=0.25)
    if kind == "softmax":
        return gc.softmax(a, axis=int(rng.integers(a.ndim)))
    if kind == "reshape":
        return a.reshape(-1)
    if depth > 1:
        return gc.flip(a, axis=-1)
    body_ops = [lambda t: _body(rng, t, depth + 1) for _ in range(2)]
    if kind == "cond":
        pred = a.sum() > float(rng.uniform(-1, 1))
        return gc.cond(pred, body_ops[0], body_ops[1], a)
    if kind == "scan":
        if a.ndim < 2 or a.shape[0] > 6:
            return gc.flip(a, axis=0)
        h0 = a[0] * 0.0

        def step(h, x):
            h = gc.tanh(h * 0.5 + body_ops[0](x))
            return h, h * x
        h, ys = gc.scan(step, h0, a, reverse=bool(rng.random() < 0.5))
        return ys if rng.random() < 0.5 else h
    # a while loop of a data-independent trip count (a fori_loop with Tensor bounds is not
    # differentiable; an int-bounded one is a scan)
    trips = int(rng.integers(1, 4))
    return gc.fori_loop(0, trips, lambda i, s: gc.tanh(body_ops[0](s)) * 0.9, a)


def _body(rng, t, depth: int):
    """A small traced body: a few steps over `t`, of `t`'s shape and dtype."""
    vals = [t]
    for _ in range(int(rng.integers(1, 4))):
        out = _step(rng, vals, depth)
        if out.shape == t.shape and out.dtype == t.dtype:
            vals.append(out)
    last = vals[-1]
    return last + gc.flip(t, axis=-1) * 0.5 if t.ndim else last + t * 0.5


def build(seed: int):
    """(shape, dtype, x placeholder, outputs, gradient) of program `seed`, in the current
    graph."""
    rng = np.random.default_rng(seed)
    rank = int(rng.integers(1, 4))
    shape = tuple(int(n) for n in rng.integers(1, 5, size=rank))
    dtype = "float64" if rng.random() < 0.6 else "float32"
    x = gc.placeholder(shape, dtype, name="x")
    vals = [x]
    for _ in range(int(rng.integers(2, 8))):
        out = _step(rng, vals, 0)
        if out.size <= MAX_SIZE and out.dtype == x.dtype:
            vals.append(out)
    outs = vals[-int(rng.integers(1, 3)):]
    loss = sum((o * o).sum() if o.ndim else o * o for o in outs)
    (gx,) = gc.grad(loss, [x])
    if rng.random() < 0.4:
        # a while_loop (not differentiable: its trip count is data) as an extra output,
        # read through views
        v = vals[int(rng.integers(len(vals)))]
        trips = int(rng.integers(0, 4))
        _, w = gc.while_loop(lambda s: s[0] < trips,
                             lambda s: (s[0] + 1, gc.tanh(_body(rng, s[1], 1)) * 0.9),
                             (0, v))
        outs = outs + [_view(rng, w)]
    if rng.random() < 0.3:
        # the same value returned twice, once through a view that simplifies away
        outs = outs + [_identity_view(outs[int(rng.integers(len(outs)))])]
    return shape, dtype, x, outs, gx


def _identity_view(a):
    ones = [k for k, n in enumerate(a.shape) if n == 1]
    if ones:
        return gc.flip(a, axis=ones[0])
    return a.reshape(a.shape)


def _view(rng, a):
    if not a.ndim:
        return a
    kind = rng.choice(["flip", "slice", "expand"])
    if kind == "flip":
        return gc.flip(a, axis=int(rng.integers(-a.ndim, a.ndim)))
    if kind == "slice":
        return a[tuple(_slice(rng, n) for n in a.shape)]
    return gc.expand_dims(a, 0)[..., ::-1]


def check(seed: int, grad: bool = True) -> None:
    """Compile program `seed` (its outputs and d(loss)/dx) and compare each with the
    reference interpreter on fresh random inputs."""
    with gc.Graph(f"random{seed}"):
        shape, dtype, x, outs, gx = build(seed)
        targets = outs + ([gx] if grad else [])
        exe = gc.compile(targets)
        data = np.random.default_rng(seed + 1).uniform(-2, 2, shape).astype(dtype)
        got = exe(x=data)
        want = gc.evaluate(targets, {"x": data})
    for k, (o, a, b) in enumerate(zip(targets, got, want)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (seed, k, a.shape, b.shape)
        # errors relative to the output's magnitude, and to 1: a value that cancels to
        # about 1e-17 is rounding noise in both
        finite = np.abs(b[np.isfinite(b)])
        scale = max(float(finite.max()) if finite.size else 1.0, 1.0)
        rtol = TOL[o.dtype]
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, equal_nan=True,
                                   err_msg=f"program {seed}, output {k}")
