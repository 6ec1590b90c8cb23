"""The numpy-like API against numpy itself."""
import numpy as np
import pytest

import graphc as gc

from conftest import random_array


def ev(out, **feeds):
    return gc.evaluate(out, feeds)


@pytest.fixture
def x34(graph, rng):
    v = random_array(rng, (3, 4), "float64")
    return gc.placeholder((3, 4), "float64", name="x"), v


def softmax_np(v, axis=-1):
    e = np.exp(v - v.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("name,fn", [
    ("sum0", lambda m, x: m.sum(x, axis=0)),
    ("sumk", lambda m, x: m.sum(x, axis=-1, keepdims=True)),
    ("mean", lambda m, x: m.mean(x)),
    ("meank", lambda m, x: m.mean(x, axis=(0, 1), keepdims=True)),
    ("max", lambda m, x: m.max(x, axis=1)),
    ("min", lambda m, x: m.min(x, axis=-2, keepdims=True)),
    ("var", lambda m, x: m.var(x, axis=1)),
    ("prod", lambda m, x: m.prod(x, axis=0)),
    ("argmax", lambda m, x: m.argmax(x, axis=1)),
    ("argmax_flat", lambda m, x: m.argmax(x)),
    ("argmin", lambda m, x: m.argmin(x, axis=0)),
    ("exp", lambda m, x: m.exp(x)),
    ("log_abs", lambda m, x: m.log(m.abs(x) + 1)),
    ("tanh", lambda m, x: m.tanh(x)),
    ("sqrt", lambda m, x: m.sqrt(m.abs(x))),
    ("sin_cos", lambda m, x: m.sin(x) * m.cos(x)),
    ("maximum", lambda m, x: m.maximum(x, 0.5)),
    ("minimum", lambda m, x: m.minimum(x, x[0])),
    ("where", lambda m, x: m.where(x > 0, x, -x * 2)),
    ("reshape", lambda m, x: m.reshape(x, (2, -1))),
    ("transpose", lambda m, x: m.transpose(x)),
    ("broadcast_to", lambda m, x: m.broadcast_to(x[0], (5, 4))),
    ("concatenate", lambda m, x: m.concatenate([x, x * 2], axis=-1)),
    ("stack", lambda m, x: m.stack([x, x + 1], axis=1)),
    ("pad", lambda m, x: m.pad(x, ((1, 0), (2, 3)))),
    ("pad_value", lambda m, x: m.pad(x, 1, constant_values=7.0)),
    ("take", lambda m, x: m.take(x, np.array([3, 0, -1]), axis=1)),
    ("take_flat", lambda m, x: m.take(x, np.array([[11, 0]]))),
    ("matmul", lambda m, x: m.matmul(x, x.T)),
    ("matvec", lambda m, x: m.matmul(x, x[0])),
    ("vecmat", lambda m, x: m.matmul(x[:, 0], x)),
    ("floordiv", lambda m, x: x // 0.7),
    ("mod", lambda m, x: x % 0.7),
    ("pow", lambda m, x: m.abs(x) ** 1.5),
    ("square", lambda m, x: x ** 2),
    ("neg_rsub", lambda m, x: 1 - (-x)),
    ("rdiv", lambda m, x: 2 / (m.abs(x) + 1)),
    ("expand", lambda m, x: m.expand_dims(x, 1)),
    ("squeeze", lambda m, x: m.squeeze(m.expand_dims(x, 0))),
    ("flip", lambda m, x: m.flip(x, 1)),
    ("clip", lambda m, x: m.clip(x, -1, 1)),
])
def test_functions_match_numpy(x34, name, fn):
    p, v = x34
    got = ev(fn(gc, p), x=v)
    want = fn(np, v)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_softmax_family(x34):
    p, v = x34
    v = v * 30
    s, ls, lse = ev([gc.softmax(p), gc.log_softmax(p, 0), gc.logsumexp(p, 1)], x=v)
    np.testing.assert_allclose(s, softmax_np(v), rtol=1e-12)
    np.testing.assert_allclose(ls, np.log(softmax_np(v, 0)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse, np.log(np.exp(v).sum(1)), rtol=1e-12)


def test_logsumexp_of_minus_infinity_rows(graph):
    p = gc.placeholder((2, 3), name="x")
    v = np.array([[-np.inf] * 3, [0.0, 1.0, 2.0]], np.float32)
    got = ev(gc.logsumexp(p, 1), x=v)
    assert got[0] == -np.inf and np.isclose(got[1], np.log(np.exp([0, 1, 2]).sum()))


def test_gelu(graph, rng):
    import math
    p = gc.placeholder((50,), "float64", name="x")
    v = random_array(rng, (50,), "float64")
    exact, approx = ev([gc.gelu(p), gc.gelu(p, approximate=True)], x=v)
    erf = np.vectorize(math.erf)
    np.testing.assert_allclose(exact, 0.5 * v * (1 + erf(v / np.sqrt(2))), rtol=1e-12)
    np.testing.assert_allclose(approx, 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) *
                                                              (v + 0.044715 * v ** 3))), rtol=1e-12)


def test_integer_division_and_modulo_follow_numpy(graph):
    a = np.array([7, -7, 7, -7, 0, 5], np.int32)
    b = np.array([2, 2, -2, -2, 3, 1], np.int32)
    pa, pb = gc.placeholder((6,), "int32", name="a"), gc.placeholder((6,), "int32", name="b")
    fd, md, td = ev([pa // pb, pa % pb, pa / pb], a=a, b=b)
    np.testing.assert_array_equal(fd, a // b)
    np.testing.assert_array_equal(md, a % b)
    np.testing.assert_allclose(td, a / b, rtol=1e-7)
    np.testing.assert_array_equal(ev(pa ** 3, a=a, b=b), a ** 3)


def test_creation(graph):
    np.testing.assert_array_equal(ev(gc.zeros((2, 3))), np.zeros((2, 3)))
    np.testing.assert_array_equal(ev(gc.ones((2,), "int64")), np.ones(2, np.int64))
    np.testing.assert_array_equal(ev(gc.full((2, 2), 7.5)), np.full((2, 2), 7.5))
    np.testing.assert_array_equal(ev(gc.arange(5)), np.arange(5))
    np.testing.assert_allclose(ev(gc.arange(1.0, 2.0, 0.25)), np.arange(1.0, 2.0, 0.25))
    np.testing.assert_array_equal(ev(gc.arange(10, 0, -3)), np.arange(10, 0, -3))
    assert gc.arange(5).dtype == "int32" and gc.arange(0.5).dtype == "float32"


def test_one_hot(graph):
    p = gc.placeholder((4,), "int32", name="y")
    got = ev(gc.one_hot(p, 3), y=np.array([0, 2, 1, 5], np.int32))
    np.testing.assert_array_equal(got, [[1, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 0]])


INDEX_CASES = [
    (1,), (-1,), (slice(1, None),), (slice(None, None, -1),), (slice(None, None, 2),),
    (slice(4, 0, -2),), (Ellipsis, 1), (None, 1), (1, None, slice(None)), (slice(None), None),
    (Ellipsis, None), (1, 2, 3), (-2, Ellipsis, slice(None, None, -1)),
    (slice(10, 20),), (slice(-100, 100),),
    ([0, 2],), (np.array([[1, 0], [2, 2]]),), (slice(None), [3, 0]),
    ([0, 1], [1, 2]), ([0, 1], slice(None), [3, 2]), (1, slice(None), [0, 3]),
    (slice(None), [[0], [2]], [1, 4]), (Ellipsis, [-1, 0]), (np.array([-3, 2]), 0),
]


@pytest.mark.parametrize("key", INDEX_CASES, ids=[repr(k) for k in INDEX_CASES])
def test_indexing_matches_numpy(graph, rng, key):
    v = random_array(rng, (3, 4, 5))
    p = gc.placeholder((3, 4, 5), name="x")
    got = ev(p[key], x=v)
    want = v[key]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_indexing_with_tensor_indices(graph, rng):
    v = random_array(rng, (6, 3))
    p = gc.placeholder((6, 3), name="x")
    i = gc.placeholder((4,), "int32", name="i")
    idx = np.array([5, -1, 0, 2], np.int32)
    np.testing.assert_array_equal(ev(p[i], x=v, i=idx), v[idx])
    np.testing.assert_array_equal(ev(p[i, 1:], x=v, i=idx), v[idx, 1:])


def test_indexing_errors(graph):
    p = gc.placeholder((3, 4), name="x")
    with pytest.raises(gc.ShapeError, match="index 3 is out of bounds for axis 0 with size 3"):
        p[3]
    with pytest.raises(gc.ShapeError, match="too many indices"):
        p[0, 0, 0]
    with pytest.raises(gc.ShapeError, match="out of bounds for axis 1"):
        p[:, [0, 4]]
    with pytest.raises(gc.DTypeError, match="boolean mask"):
        p[np.array([True, False, True])]
    with pytest.raises(gc.GraphcError, match="immutable"):
        p[0] = 1


def test_tensor_properties(graph):
    p = gc.placeholder((3, 4), "float16", name="x")
    assert p.shape == (3, 4) and p.dtype == "float16" and p.ndim == 2 and p.name == "x"
    assert p.T.shape == (4, 3) and p.reshape(12).shape == (12,)
    assert p.transpose(1, 0).shape == (4, 3) and p.astype("float32").dtype == "float32"
    assert len(p) == 3 and len(list(p)) == 3
    assert "x" in repr(p) and "f16[3,4]" in repr(p)


def test_tensors_are_hashable_dict_keys(graph):
    a = gc.variable(np.zeros(2), name="a")
    b = gc.variable(np.zeros(2), name="b")
    d = {a: 1, b: 2}
    assert d[a] == 1 and d[b] == 2


def test_evaluate_structures_and_updates(graph):
    w = gc.variable(np.array([1.0, 2.0], np.float32), name="w")
    x = gc.placeholder((2,), name="x")
    out = gc.evaluate({"y": w * x, "s": [w.sum()]}, {"x": np.ones(2, np.float32)},
                      updates={w: w * 2})
    assert set(out) == {"y", "s"} and isinstance(out["s"], list)
    np.testing.assert_array_equal(out["y"], [1, 2])
    np.testing.assert_array_equal(graph.variables["w"], [2, 4])


def test_default_graph_and_context(rng):
    gc.reset_default_graph()
    a = gc.constant(np.float32(2))
    g = gc.Graph("mine")
    with g:
        b = gc.constant(np.float32(3))
    assert a.graph is not g and b.graph is g
    assert ev(a * 2) == 4 and ev(b * 2) == 6


def test_random_module(graph):
    k = gc.random.key(3)
    b = gc.random.bernoulli(k, 0.3, (10000,))
    assert b.dtype == "bool"
    assert abs(ev(b).mean() - 0.3) < 0.02
    assert ev(gc.random.uniform(k, (100,), minval=2.0, maxval=3.0)).min() >= 2.0


def test_integer_power_zero_is_one_everywhere():
    x = np.array([[2.0, -3.0, np.inf], [np.nan, 0.0, 1.5]], np.float32)
    with gc.Graph():
        p = gc.placeholder(x.shape, name="x")
        y = p ** 0
        assert y.shape == x.shape and y.dtype == "float32"
        np.testing.assert_array_equal(gc.evaluate(y, {"x": x}), np.ones_like(x))
        np.testing.assert_array_equal(gc.compile(y)(x), np.ones_like(x))
        np.testing.assert_array_equal(gc.evaluate(gc.ones_like(p) + gc.zeros_like(p)),
                                      np.ones_like(x))


def test_constants_copy_what_can_change_and_keep_what_cannot(graph):
    """gc.constant copies a writable array (changing it later changes nothing) but keeps
    a read-only view of a bytes object (an ONNX initializer's raw data) as it is."""
    writable = np.arange(6, dtype=np.float32)
    c = gc.constant(writable)
    writable[0] = 100.0
    assert gc.evaluate(c)[0] == 0.0
    frozen = np.frombuffer(np.arange(6, dtype=np.float32).tobytes(), np.float32)
    assert not frozen.flags.writeable
    kept = gc.constant(frozen).node.attrs["value"]
    assert np.shares_memory(kept, frozen) == (frozen.ctypes.data % 16 == 0)
    view = np.arange(6, dtype=np.float32)
    view.setflags(write=False)           # read-only, but its owner could make it writable
    assert not np.shares_memory(gc.constant(view).node.attrs["value"], view)
    np.testing.assert_array_equal(gc.evaluate(gc.constant(frozen)), np.arange(6))
