"""Within one program a node has one value: where fusion computes a node in several
kernels or loops, every copy is computed by the same operations in the same order.

The classic casualty is a normalization after a reduction at large magnitudes: softmax's
x - max(x) must be exactly 0 at the maximum, layer norm's x - mean(x) exactly 0 for a
constant row. Were one copy of x rounded differently (a product fused into the
subtraction that reads it as one multiply-add in one loop and not in the other), the
difference would be hundreds instead of 0 at 7e9, and softmax would give 0 or NaN.
"""
import numpy as np
import pytest

import graphc as gc

from compiled import assert_matches

REDUCE = {"sum": gc.sum, "mean": gc.mean, "max": gc.max, "min": gc.min,
          "var": gc.var, "logsumexp": gc.logsumexp}


def _softmax_by_hand(r):
    e = gc.exp(r - r.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layer_norm(r):
    mu = r.mean(axis=1, keepdims=True)
    d = r - mu
    return d * gc.rsqrt((d * d).mean(axis=1, keepdims=True) + 1e-5)


HEADS = {"softmax_by_hand": _softmax_by_hand,
         "softmax": lambda r: gc.softmax(r, axis=1),
         "log_softmax": lambda r: gc.log_softmax(r, axis=1),
         "layer_norm": _layer_norm}


def _program(reduce, head, shape, dtype):
    x = gc.placeholder(shape, dtype, name="x")
    r = REDUCE[reduce](gc.relu(x) * 1.5, axis=(2, 3), keepdims=True).reshape(shape[:2])
    return x, HEADS[head](r)


def _check_head(head, y, constant_rows: bool):
    """What holds for the head's output whatever order a sum is taken in, unless a
    value used twice differs between its uses."""
    y = np.asarray(y, np.float64)
    c = y.shape[1]
    assert np.isfinite(y).all()
    if head.startswith("softmax"):
        # x - max(x) is 0 at the maximum: that element is 1 / sum(exp(...)) >= 1/C
        np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)
        assert (y.max(axis=1) >= (1 - 1e-5) / c).all()
        if constant_rows:
            np.testing.assert_allclose(y, 1.0 / c, rtol=1e-5)
    elif head == "log_softmax":
        assert (y.max(axis=1) <= 1e-5).all() and (y.max(axis=1) >= -np.log(c) - 1e-4).all()
        if constant_rows:
            np.testing.assert_allclose(y, -np.log(c), rtol=1e-5)
    else:
        # layer norm: the sum of squares of a row is C var / (var + eps) <= C, when the
        # deviations it divides are the ones its variance was taken of
        assert ((y * y).sum(axis=1) <= c * (1 + 1e-4)).all()
        if constant_rows:
            assert (y == y[:, :1]).all()


@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("reduce", sorted(REDUCE))
def test_normalization_after_reduction_at_large_magnitude(reduce, head):
    """Every channel's window the same constant: the reduced rows are constant."""
    shape = (2, 100, 13, 13)
    with gc.Graph("one_value"):
        x, y = _program(reduce, head, shape, "float32")
        exe = gc.compile(y)
        for value in (6.77e9, 3.1e7, -2.0, 0.7):
            data = np.full(shape, value, np.float32)
            data[1] *= 0.5
            _check_head(head, exe(x=data), constant_rows=True)


@pytest.mark.parametrize("head", sorted(HEADS))
def test_normalization_after_a_product_reduction(head):
    """reduce_prod, at values whose product stays finite."""
    shape = (2, 50, 4, 4)
    with gc.Graph("one_value"):
        x = gc.placeholder(shape, "float32", name="x")
        r = gc.prod(x * 1.5, axis=(2, 3), keepdims=True).reshape(shape[:2])
        exe = gc.compile(HEADS[head](r))
        for value in (1.01, 0.6, -0.9):
            _check_head(head, exe(x=np.full(shape, value, np.float32)), constant_rows=True)
        rng = np.random.default_rng(3)
        data = (0.7 + 0.01 * rng.standard_normal(shape)).astype(np.float32)
        _check_head(head, exe(x=data), constant_rows=False)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("head", sorted(HEADS))
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "var"])
def test_normalization_after_reduction_random_large(reduce, head, dtype):
    shape = (3, 40, 5, 7)
    rng = np.random.default_rng(7)
    with gc.Graph("one_value"):
        x, y = _program(reduce, head, shape, dtype)
        exe = gc.compile(y)
        for scale in (1e9, 1e4):
            data = (scale * (1 + 1e-3 * rng.standard_normal(shape))).astype(dtype)
            _check_head(head, exe(x=data), constant_rows=False)


def test_reported_global_pool_softmax_is_not_nan():
    """The reported ONNX CNN tail: GlobalAveragePool -> Softmax over 1,000 classes."""
    with gc.Graph("pool_softmax"):
        x = gc.placeholder((1, 1000, 13, 13), "float32", name="x")
        r = gc.relu(x).mean(axis=(2, 3), keepdims=True).reshape((1, 1000))
        y = _softmax_by_hand(r)
        got = gc.compile(y)(x=np.full((1, 1000, 13, 13), 6.77e9, np.float32))
    np.testing.assert_allclose(got, np.full((1, 1000), 1e-3), rtol=1e-5)


def test_elementwise_code_has_no_contraction():
    """The rule as the code generator keeps it: no float op carries LLVM's `contract` or
    fast-math flags (which let LLVM fuse in one loop and not in another); a fused
    multiply-add is an explicit llvm.fma (graphc/kernels/products.py)."""
    with gc.Graph("contract"):
        a = gc.placeholder((64,), "float32", name="a")
        b = gc.placeholder((64,), "float32", name="b")
        y = a * b - a
        ir = gc.compile([y, y.sum()]).dump("llvm")
    assert " contract " not in ir and "fast " not in ir


def _llvm(outputs):
    return gc.compile(outputs).dump("llvm")


def test_product_fuses_only_into_its_one_use():
    with gc.Graph("fma"):
        a = gc.placeholder((256,), "float32", name="a")
        b = gc.placeholder((256,), "float32", name="b")
        assert "@llvm.fma" in _llvm(a * b + 1.0)            # one use: one rounding
        assert "@llvm.fma" in _llvm(2.0 - a * b)
        p = a * b                                           # two uses: rounded once,
        assert "@llvm.fma" not in _llvm([p + 1.0, p.max()])   # the same value in both
        q = a * b                                           # read twice by its one user
        assert "@llvm.fma" not in _llvm(q + q[::-1])
        r = a * b                                           # an output itself
        assert "@llvm.fma" not in _llvm([r, r + 1.0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_products_match_the_reference(dtype):
    rng = np.random.default_rng(5)
    with gc.Graph("fma_values"):
        a = gc.placeholder((3, 70), dtype, name="a")
        b = gc.placeholder((70,), dtype, name="b")
        outs = [a * b + 1.0, 1.0 - a * b, a * b - b, gc.tanh(a * 0.5 + b) * b - a]
        exe = gc.compile(outs)
        feeds = {"a": rng.standard_normal((3, 70)).astype(dtype),
                 "b": rng.standard_normal(70).astype(dtype)}
        for got, want in zip(exe(**feeds), gc.evaluate(outs, feeds)):
            assert_matches(got, want, dtype)
