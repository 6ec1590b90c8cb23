"""The vectorized float32 math (exp, log, tanh, sigmoid, erf) against float64, in ulps,
over the whole range including inf, nan, zeros and denormals."""
import numpy as np
import pytest

import graphc as gc


def samples():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -1e-45, 1e-40, 1.17549435e-38,
                        88.72, 88.73, -87.33, -103.97, -104.5, 3.4e38, -3.4e38, 0.625, -0.625,
                        1e-8, 20.0, -20.0, 9.0], np.float32)
    return np.concatenate([bits, rng.uniform(-30, 30, 100000).astype(np.float32),
                           rng.standard_normal(100000).astype(np.float32), special])


def ulp_error(got, exact):
    with np.errstate(over="ignore"):
        want = exact.astype(np.float32)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    spacing = np.spacing(np.abs(want)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(got.astype(np.float64) - exact) / spacing
    return np.where(same, 0.0, np.nan_to_num(err, nan=np.inf))


@pytest.mark.parametrize("name,fn,exact,max_ulp", [
    ("exp", gc.exp, np.exp, 2),
    ("log", lambda p: gc.log(p), np.log, 2),
    ("tanh", gc.tanh, np.tanh, 3),
    ("sigmoid", gc.sigmoid, lambda x: 1 / (1 + np.exp(-x)), 4),
    ("erf", gc.erf, np.vectorize(__import__("math").erf, otypes=[np.float64]), 6),
])
def test_float32_math_is_within_a_few_ulp(graph, name, fn, exact, max_ulp):
    x = samples()
    if name == "log":
        x = np.abs(x)
    p = gc.placeholder(x.shape, name="x")
    got = gc.compile(fn(p))(x=x)
    with np.errstate(all="ignore"):
        truth = exact(x.astype(np.float64))
    err = ulp_error(got, truth)
    worst = int(np.argmax(err))
    assert err.max() <= max_ulp, (x[worst], got[worst], truth[worst])
    # inf/nan/zero results count as 0 ulp only when identical (see ulp_error), so the
    # bound above also checks the special values; and nan appears exactly where it should
    with np.errstate(over="ignore"):
        assert np.array_equal(np.isnan(got), np.isnan(truth.astype(np.float32)))


@pytest.mark.parametrize("name,fn", [("exp", gc.exp), ("sigmoid", gc.sigmoid),
                                     ("tanh", gc.tanh), ("erf", gc.erf)])
def test_the_scale_by_exponent_bits_gives_vscalefs_bits(monkeypatch, name, fn):
    """exp's y * 2**n: AVX-512's vscalefps where the host has it (backends/cpu/scalef.py),
    else two exponent-bit multiplies (CUDA, other CPUs): the same bits everywhere."""
    from graphc.backends.cpu import scalef
    from graphc_runtime.cpu import host_features
    host_has = scalef.available(host_features().split(","))
    x = samples()
    results = {}
    for on in (True, False):
        if not on:
            monkeypatch.setattr(scalef, "available", lambda features: False)
        with gc.Graph():
            p = gc.placeholder(x.shape, name="x")
            exe = gc.compile(fn(p))
        assert ("graphc_scalef" in exe.dump("llvm")) == (on and host_has)
        results[on] = exe(x=x)
    np.testing.assert_array_equal(results[True], results[False])
