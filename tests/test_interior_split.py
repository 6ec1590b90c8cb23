"""Index-set splitting of innermost loops (backends/llvm/interior.py): padded and shifted
reads run their interior without clamps or range checks; the edges keep them."""
import numpy as np
import pytest

import graphc as gc
from graphc.backends.llvm import interior
from graphc.kernels import index as ix
from graphc.kernels import kernel as K


def test_interval_of_a_stencils_guards():
    j = ix.var("j", 128)
    left = ix.clamp(ix.add(j, ix.const(-1)), 0, 127)      # p[j - 1]
    right = ix.clamp(ix.add(j, ix.const(1)), 0, 127)      # p[j + 1]
    check = K.InRange("bool", ix.add(j, ix.const(-1)), 0, 128)
    buf = K.Buffer(0, (128,), "float32", "input")
    exprs = [K.Prim("float32", "select", (check, K.Load("float32", buf, (left,)),
                                          K.Load("float32", buf, (right,))))]
    gs = interior.guards(exprs)
    assert set(gs) == {"j"} and len(gs["j"]) == 3
    assert interior.interval(j, gs["j"]) == (1, 127)
    # strided: clamp(2j + 1, 0, 99) holds for j in [0, 49]
    s = ix.clamp(ix.add(ix.mul(j, 2), ix.const(1)), 0, 99)
    assert interior.interval(j, [s]) == (0, 50)
    # too short an interior: not split
    short = ix.var("k", 6)
    assert interior.interval(short, [ix.clamp(ix.add(short, ix.const(-1)), 0, 5)]) is None


def test_interval_with_fixed_variables():
    """A phase plane's read 2*j + r - 1 (r the plane's column parity, unrolled by a
    layout nest): filed under j only when r is fixed, its interval exact for each r."""
    j, r = ix.var("j", 17), ix.var("r", 2)
    x = ix.add(ix.add(ix.mul(j, 2), r), ix.const(-1))
    check = K.InRange("bool", x, 0, 32)
    assert interior.guards([check]) == {}                 # two free variables
    gs = interior.guards([check], fixed=frozenset({"r"}))
    assert set(gs) == {"j"}
    assert interior.interval(j, gs["j"], {"r": 0}) == (1, 17)     # 16 whole columns
    assert interior.interval(j, gs["j"], {"r": 1}) == (0, 16)


def _laplacian(u):
    p = gc.pad(u, ((1, 1), (1, 1)))
    return 4.0 * u - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]


def _laplacian_np(u):
    p = np.pad(u, 1)
    return 4 * u - p[:-2, 1:-1] - p[2:, 1:-1] - p[1:-1, :-2] - p[1:-1, 2:]


@pytest.mark.parametrize("shape", [(3, 3), (5, 9), (9, 17), (64, 128), (3, 300)])
def test_stencils_and_their_sums_match_numpy(shape):
    u0 = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with gc.Graph("stencil"):
        u = gc.placeholder(shape, name="u")
        lap = _laplacian(u)
        exe = gc.compile([lap, (u * lap).sum(), (lap * lap).sum(axis=1)])
    lap_np = _laplacian_np(u0.astype(np.float64))
    got = exe(u=u0)
    np.testing.assert_allclose(got[0], lap_np, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], (u0 * lap_np).sum(), rtol=1e-4)
    np.testing.assert_allclose(got[2], (lap_np ** 2).sum(axis=1), rtol=1e-4)


@pytest.mark.parametrize("threads", [2, 3])
def test_split_loops_keep_their_bits_across_threads(threads):
    """A 1-D padded window (the innermost loop is also the threads' loop), a 2-D
    stencil, a strided read of a padded array, a padded crop, a shifted
    read under tanh."""
    x0 = np.random.default_rng(1).standard_normal(100_000).astype(np.float32)
    m0 = np.random.default_rng(2).standard_normal((300, 301)).astype(np.float32)

    def build(n):
        with gc.Graph("windows"):
            x = gc.placeholder(x0.shape, name="x")
            m = gc.placeholder(m0.shape, name="m")
            p = gc.pad(x, ((2, 3),))
            window = p[:-5] + 2.0 * p[2:-3] - p[4:-1] * p[5:]
            strided = gc.pad(m, ((0, 0), (1, 1)))[:, ::2]
            crop = gc.pad(m, ((0, 2), (3, 0)))[1:, :-2]
            inner = gc.tanh(gc.pad(m, ((1, 1), (1, 1)))[1:-1, 2:] + m)
            return gc.compile([window, _laplacian(m), strided, crop, inner], num_threads=n)
    one = build(1)(x=x0, m=m0)
    many = build(threads)(x=x0, m=m0)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)
    p = np.pad(x0.astype(np.float64), (2, 3))
    np.testing.assert_allclose(one[0], p[:-5] + 2 * p[2:-3] - p[4:-1] * p[5:], atol=1e-5)
    np.testing.assert_allclose(one[1], _laplacian_np(m0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(one[2], np.pad(m0, ((0, 0), (1, 1)))[:, ::2])
    np.testing.assert_array_equal(one[3], np.pad(m0, ((0, 2), (3, 0)))[1:, :-2])
    np.testing.assert_allclose(one[4], np.tanh(np.pad(m0, 1)[1:-1, 2:] + m0), rtol=1e-6)


def test_the_interior_vectorizes_without_gathers():
    """The stencil's interior loads are contiguous: fewer gathers than without the split
    (the edge loops may still gather)."""
    def gathers(split):
        saved = interior.MIN_INTERIOR
        interior.MIN_INTERIOR = 8 if split else 1 << 30
        try:
            with gc.Graph("s"):
                u = gc.placeholder((128, 128), name="u")
                asm = gc.compile(_laplacian(u), num_threads=1).dump("asm")
        finally:
            interior.MIN_INTERIOR = saved
        return asm.count("gather")
    from graphc_runtime.cpu import host_features
    if "+avx2" not in host_features().split(","):
        pytest.skip("gathers are an AVX2 / AVX-512 instruction")
    assert gathers(split=True) < gathers(split=False)
