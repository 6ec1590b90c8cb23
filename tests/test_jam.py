"""Unroll and jam of window sums (backends/llvm/jam.py): a depthwise convolution's loop
nest computes JAM output rows per pass of its innermost loop. Which loop is jammed, and
the same bits as without it, rows left over and thread splits included."""
import numpy as np
import pytest

import graphc as gc
from graphc.api import bind
from graphc.backends.llvm import jam
from graphc.kernels import index as ix
from graphc.kernels import kernel as K


def _depthwise(batch, channels, rows, cols, stride, rng):
    xs = (batch, channels, rows, cols)
    x = gc.placeholder(xs, name="x")
    w = gc.constant(rng.standard_normal((channels, 1, 3, 3)).astype(np.float32))
    y = bind("conv", x, w, window_strides=(stride, stride), padding=((1, 1), (1, 1)),
             lhs_dilation=(1, 1), rhs_dilation=(1, 1), feature_group_count=channels)
    return gc.minimum(gc.maximum(y, 0.0), 6.0), {"x": rng.standard_normal(xs).astype(np.float32)}


def test_the_row_loop_of_a_window_sum_is_jammed():
    buf = K.Buffer(0, (4, 18, 18), "float32", "temp")
    out = K.Buffer(1, (4, 16, 16), "float32", "temp")
    c, h, w = ix.var("c", 4), ix.var("h", 16), ix.var("w", 16)
    taps = [K.Load("float32", buf, (c, ix.add(h, ix.const(i)), ix.add(w, ix.const(j))))
            for i in range(3) for j in range(3)]
    total = taps[0]
    for t in taps[1:]:
        total = K.Prim("float32", "add", (total, t))
    assert jam.jam_variable([K.Store(out, total, (c, h, w))], (c, h, w)) == "h"
    # one load per element (a copy) or a short innermost loop: left alone
    assert jam.jam_variable([K.Store(out, taps[0], (c, h, w))], (c, h, w)) is None
    short = ix.var("w", 4)
    assert jam.jam_variable([K.Store(out, total, (c, h, short))], (c, h, short)) is None


@pytest.mark.parametrize("rows,cols,stride,threads", [
    (16, 16, 1, 2),      # whole passes of JAM rows
    (7, 9, 1, 2),        # 7 rows: one pass of 4, then 3 rows one at a time
    (13, 32, 2, 3),      # strided, 7 output rows, threads splitting the outer loop
])
def test_jammed_loops_give_the_same_bits(monkeypatch, rows, cols, stride, threads):
    results = []
    for min_loads in (jam.JAM_MIN_LOADS, 10 ** 9):     # jammed, then never
        monkeypatch.setattr(jam, "JAM_MIN_LOADS", min_loads)
        with gc.Graph("dw"):
            y, feeds = _depthwise(3, 5, rows, cols, stride, np.random.default_rng(rows))
            exe = gc.compile(y, num_threads=threads)
            want = gc.evaluate(y, feeds)
        assert ".jam" in exe.dump("llvm") or min_loads > 100
        results.append(exe(**feeds))
        np.testing.assert_allclose(results[-1], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(results[0], results[1])
