"""Harness: compile a graph and compare it with the reference interpreter."""
import numpy as np

import graphc as gc

TOL = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1e-2}


def assert_matches(got, want, dtype=None):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    name = dtype or str(want.dtype)
    if want.dtype.kind == "f" or name in ("bfloat16",):
        rtol = TOL.get(name, 1e-5)
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                                   atol=rtol * _scale(want), equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def check_compiled(outputs, feeds, **options):
    """Compile `outputs`, run on `feeds`, compare every output with gc.evaluate."""
    exe = gc.compile(outputs, **options)
    got = exe(**feeds)
    want = gc.evaluate(outputs, feeds)
    flat_got = got if isinstance(got, list) else [got]
    flat_want = want if isinstance(want, list) else [want]
    outs = outputs if isinstance(outputs, list) else [outputs]
    for o, a, b in zip(outs, flat_got, flat_want):
        assert_matches(a, b, o.dtype)
    return exe


def _scale(want) -> float:
    """Errors are judged relative to the output's magnitude (sums cancel)."""
    finite = np.abs(want.astype(np.float64))[np.isfinite(want.astype(np.float64))]
    return float(finite.max()) if finite.size else 1.0
