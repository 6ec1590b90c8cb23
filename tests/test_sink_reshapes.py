"""passes/sink_reshapes.py: a linear layer over a batch of sequences ((B, T, K) @ (K, N),
run as (B*T, K) @ (K, N) and reshaped back) keeps its bias, activation and residual sum
in the product's kernel; results against the reference interpreter, gradients compiled
against the reference's, and the broadcasts the pass must leave alone."""
import numpy as np
import pytest

import graphc as gc
from graphc.passes.sink_reshapes import _whole_dims


def _dot_groups(exe) -> list:
    return [g for g in exe.dump("fused").splitlines() if g.startswith("group") and "[dot]" in g]


def test_whole_dims():
    assert _whole_dims((4, 64, 256), (256, 256)) == {2: 1}
    assert _whole_dims((6, 4), (2, 3, 4)) == {1: 2}
    assert _whole_dims((4, 6), (4, 2, 3)) == {0: 0}
    assert _whole_dims((2, 3, 5), (6, 5)) == {2: 1}
    assert _whole_dims((3, 4), (4, 3)) == {}


@pytest.mark.parametrize("threads", [1, 2])
def test_linear_over_sequences_keeps_its_epilogue(threads):
    rng = np.random.default_rng(0)
    with gc.Graph("linear3d"):
        x = gc.placeholder((3, 40, 64), name="x")
        r = gc.placeholder((3, 40, 96), name="r")
        w = gc.constant(rng.standard_normal((64, 96)).astype(np.float32) * 0.2)
        b = gc.constant(rng.standard_normal(96).astype(np.float32))
        y = gc.nn.gelu(gc.nn.linear(x, w, b)) + r
        exe = gc.compile(y, num_threads=threads)
        feeds = {"x": rng.standard_normal((3, 40, 64)).astype(np.float32),
                 "r": rng.standard_normal((3, 40, 96)).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    assert exe.stats["kernels"] == 1 and "erf" in _dot_groups(exe)[0]
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_a_broadcast_along_merged_rows_stays_after_the_reshape():
    """A scale per sequence (B, 1, 1) varies along the rows the product merged: the
    multiply stays in (B, T, N), after the reshape; still right."""
    rng = np.random.default_rng(1)
    with gc.Graph("per_batch"):
        x = gc.placeholder((4, 16, 32), name="x")
        s = gc.placeholder((4, 1, 1), name="s")
        w = gc.constant(rng.standard_normal((32, 48)).astype(np.float32))
        y = gc.relu((x @ w) * s)
        exe = gc.compile(y)
        feeds = {"x": rng.standard_normal((4, 16, 32)).astype(np.float32),
                 "s": rng.standard_normal((4, 1, 1)).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_gradients_through_a_linear_over_sequences():
    """A two-layer MLP over (B, T, K) with a layer norm between, differentiated: the
    compiled gradients against the reference's, in float64."""
    rng = np.random.default_rng(2)
    with gc.Graph("mlp3d"):
        x = gc.placeholder((2, 12, 16), "float64", name="x")
        w1 = gc.placeholder((16, 32), "float64", name="w1")
        w2 = gc.placeholder((32, 8), "float64", name="w2")
        h = gc.nn.gelu(x @ w1)
        mean = gc.mean(h, axis=-1, keepdims=True)
        h = (h - mean) / gc.sqrt(gc.mean((h - mean) ** 2, axis=-1, keepdims=True) + 1e-5)
        loss = gc.sum(gc.tanh(h @ w2) ** 2)
        grads = gc.grad(loss, [x, w1, w2])
        exe = gc.compile(grads, inputs=[x, w1, w2])
        feeds = {"x": rng.standard_normal((2, 12, 16)), "w1": rng.standard_normal((16, 32)),
                 "w2": rng.standard_normal((32, 8))}
        want = gc.evaluate(grads, feeds)
    for got, ref in zip(exe(**feeds), want):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
