"""Hypothesis: random graphs (elementwise, broadcast, views, reductions, dot) compiled
for the CPU agree with the reference interpreter."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphc as gc

from compiled import assert_matches

UNARY = [gc.exp, gc.tanh, gc.negative, gc.abs, gc.sin, lambda a: a * a, gc.sigmoid,
         lambda a: gc.log(gc.abs(a) + 1.0), gc.relu, lambda a: gc.gelu(a, True)]
BINARY = [gc.add, gc.subtract, gc.multiply, gc.maximum, gc.minimum,
          lambda a, b: a / (b * b + 1.0)]


def step(kind, seed, vals):
    a = vals[seed % len(vals)]
    if kind == "unary":
        return UNARY[seed % len(UNARY)](a)
    if kind == "binary":
        b = vals[(seed // 7) % len(vals)]
        try:
            return BINARY[seed % len(BINARY)](a, b)
        except gc.ShapeError:
            return BINARY[seed % len(BINARY)](a, gc.mean(b))
    if kind == "reduce" and a.ndim:
        axis = seed % a.ndim
        fn = [gc.sum, gc.max, gc.mean, gc.min][seed % 4]
        return fn(a, axis=axis, keepdims=bool(seed & 4))
    if kind == "softmax" and a.ndim:
        return gc.softmax(a, axis=seed % a.ndim)
    if kind == "reshape":
        return a.reshape(-1)
    if kind == "transpose":
        return a.T
    if kind == "slice" and a.ndim and a.shape[0] > 1:
        return a[::-1][seed % a.shape[0]:]
    if kind == "broadcast":
        return gc.broadcast_to(a, (2,) + a.shape)
    if kind == "dot" and a.ndim >= 1:
        b = vals[(seed // 3) % len(vals)]
        if b.ndim in (1, 2) and b.shape[-1] == a.shape[-1]:
            return gc.matmul(a, b.T)
        return gc.matmul(a, gc.ones((a.shape[-1], 3)))
    if kind == "concat" and a.ndim:
        return gc.concatenate([a, a * 2], axis=seed % a.ndim)
    if kind == "pad" and a.ndim:
        return gc.pad(a, 1, constant_values=0.5)
    return a


@st.composite
def programs(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    kinds = st.sampled_from(["unary", "binary", "reduce", "softmax", "reshape", "transpose",
                             "slice", "broadcast", "dot", "concat", "pad"])
    steps = draw(st.lists(st.tuples(kinds, st.integers(0, 10**6)), min_size=1, max_size=7))
    outputs = draw(st.integers(1, 3))
    return shape, steps, outputs


@settings(max_examples=int(__import__("os").environ.get("GRAPHC_HYPOTHESIS_EXAMPLES", 40)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(), st.integers(0, 2**31 - 1), st.sampled_from(["float32", "float64"]))
def test_compiled_random_graph_matches_reference(program, seed, dtype):
    shape, steps, n_out = program
    data = np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype)
    with gc.Graph("random"):
        x = gc.placeholder(shape, dtype, name="x")
        vals = [x]
        for kind, s in steps:
            out = step(kind, s, vals)
            if out.size > 4096:
                out = vals[-1]
            vals.append(out)
        outs = vals[-n_out:]
        exe = gc.compile(outs)
        got = exe(x=data)
        want = gc.evaluate(outs, {"x": data})
    for o, a, b in zip(outs, got, want):
        assert_matches(a, b, o.dtype)
