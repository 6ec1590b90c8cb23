"""Every primitive's reference implementation against numpy's own result."""
import math

import numpy as np
import pytest

import graphc as gc
from graphc.api import bind
from graphc.ir import REGISTRY
from graphc.ir.ops.rng import threefry2x32

from conftest import random_array

UNARY_NUMPY = {
    "neg": np.negative, "exp": np.exp, "log": np.log, "log1p": np.log1p, "expm1": np.expm1,
    "tanh": np.tanh, "logistic": lambda x: 1 / (1 + np.exp(-x)), "sqrt": np.sqrt,
    "rsqrt": lambda x: 1 / np.sqrt(x), "abs": np.abs, "sign": np.sign, "sin": np.sin,
    "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
}
POSITIVE_ONLY = {"log", "sqrt", "rsqrt"}
SHAPES = [(), (1,), (0,), (5,), (3, 4), (2, 1, 3), (2, 0, 4)]


def run(out, feeds):
    return gc.evaluate(out, feeds)


@pytest.mark.parametrize("op", sorted(UNARY_NUMPY))
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary_float(graph, rng, op, shape, dtype):
    low = 0.1 if op in POSITIVE_ONLY else -0.9 if op == "log1p" else -3.0
    x = random_array(rng, shape, dtype, low=low)
    p = gc.placeholder(shape, dtype, name="x")
    got = run(bind(op, p), {"x": x})
    want = UNARY_NUMPY[op](x.astype(np.float64)).astype(dtype)
    assert got.dtype == np.dtype(dtype) and got.shape == shape
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == "float32" else 1e-14, atol=1e-30)


def test_unary_half_precision_computes_in_float32(graph, rng):
    for dtype in ("float16", "bfloat16"):
        x = random_array(rng, (64,), dtype)
        p = gc.placeholder((64,), dtype, name=f"x{dtype}")
        got = run(bind("exp", p), {f"x{dtype}": x})
        assert got.dtype == x.dtype
        want = np.exp(x.astype(np.float32)).astype(x.dtype)
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_unary_int(graph, rng, dtype):
    x = random_array(rng, (4, 5), dtype)
    p = gc.placeholder((4, 5), dtype, name="x")
    np.testing.assert_array_equal(run(bind("neg", p), {"x": x}), -x)
    np.testing.assert_array_equal(run(bind("abs", p), {"x": x}), np.abs(x))
    np.testing.assert_array_equal(run(bind("sign", p), {"x": x}), np.sign(x))
    np.testing.assert_array_equal(run(bind("not", p), {"x": x}), ~x)


def test_not_bool(graph, rng):
    x = random_array(rng, (7,), "bool")
    p = gc.placeholder((7,), "bool", name="x")
    np.testing.assert_array_equal(run(bind("not", p), {"x": x}), ~x)


def test_special_float_values(graph):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, 88.0, -104.0], np.float32)
    p = gc.placeholder(x.shape, "float32", name="x")
    for op in ("exp", "tanh", "logistic", "abs", "erf", "sign"):
        got = run(bind(op, p), {"x": x})
        with np.errstate(all="ignore"):
            want = UNARY_NUMPY[op](x.astype(np.float64)).astype(np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-6)


BINARY_NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
    "min": np.minimum, "pow": np.power,
}


@pytest.mark.parametrize("op", sorted(BINARY_NUMPY) + ["div", "rem"])
@pytest.mark.parametrize("shape", [(), (0,), (1,), (3, 4), (2, 3, 5)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_binary_float(graph, rng, op, shape, dtype):
    x = random_array(rng, shape, dtype, low=0.5 if op == "pow" else -3)
    y = random_array(rng, shape, dtype, low=0.5)
    a, b = gc.placeholder(shape, dtype, name="a"), gc.placeholder(shape, dtype, name="b")
    got = run(bind(op, a, b), {"a": x, "b": y})
    fn = BINARY_NUMPY.get(op) or {"div": np.true_divide, "rem": np.fmod}[op]
    np.testing.assert_allclose(got, fn(x, y), rtol=1e-6 if dtype == "float32" else 1e-15)
    assert got.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_binary_int(graph, rng, dtype):
    x = random_array(rng, (50,), dtype, low=-20, high=20)
    y = random_array(rng, (50,), dtype, low=-5, high=5)
    y[0], x[1], y[1] = 0, -7, 2
    a, b = gc.placeholder((50,), dtype, name="a"), gc.placeholder((50,), dtype, name="b")
    feeds = {"a": x, "b": y}
    for op, fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                   ("max", np.maximum), ("min", np.minimum), ("and", np.bitwise_and),
                   ("or", np.bitwise_or), ("xor", np.bitwise_xor)):
        np.testing.assert_array_equal(run(bind(op, a, b), feeds), fn(x, y), err_msg=op)
    safe = np.where(y == 0, 1, y)
    trunc = (np.trunc(x / safe)).astype(dtype)
    np.testing.assert_array_equal(run(bind("div", a, b), feeds), np.where(y == 0, 0, trunc))
    np.testing.assert_array_equal(run(bind("rem", a, b), feeds),
                                  np.where(y == 0, x, np.fmod(x, safe)))
    assert run(bind("div", a, b), feeds)[1] == -3          # truncation toward zero


def test_logical_bool(graph, rng):
    x, y = random_array(rng, (9,), "bool"), random_array(rng, (9,), "bool")
    a, b = gc.placeholder((9,), "bool", name="a"), gc.placeholder((9,), "bool", name="b")
    for op, fn in (("and", np.logical_and), ("or", np.logical_or), ("xor", np.logical_xor)):
        np.testing.assert_array_equal(run(bind(op, a, b), {"a": x, "b": y}), fn(x, y))


@pytest.mark.parametrize("direction,fn", [("eq", np.equal), ("ne", np.not_equal),
                                          ("lt", np.less), ("le", np.less_equal),
                                          ("gt", np.greater), ("ge", np.greater_equal)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_compare(graph, rng, direction, fn, dtype):
    x, y = random_array(rng, (4, 6), dtype), random_array(rng, (4, 6), dtype)
    y[0] = x[0]
    a, b = gc.placeholder((4, 6), dtype, name="a"), gc.placeholder((4, 6), dtype, name="b")
    got = run(bind("compare", a, b, direction=direction), {"a": x, "b": y})
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, fn(x, y))


def test_select(graph, rng):
    c = random_array(rng, (3, 5), "bool")
    x, y = random_array(rng, (3, 5)), random_array(rng, (3, 5))
    pc, px, py = (gc.placeholder((3, 5), d, name=n) for d, n in
                  (("bool", "c"), ("float32", "x"), ("float32", "y")))
    np.testing.assert_array_equal(run(bind("select", pc, px, py), {"c": c, "x": x, "y": y}),
                                  np.where(c, x, y))


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("float64", "float32"),
                                     ("int32", "float64"), ("int64", "int32"),
                                     ("float32", "bool"), ("bool", "float32"),
                                     ("float32", "bfloat16"), ("float16", "float32"),
                                     ("bfloat16", "float64"), ("int32", "float16")])
def test_convert(graph, rng, src, dst):
    from graphc.ir import dtypes
    x = random_array(rng, (20,), src, low=-50, high=50)
    p = gc.placeholder((20,), src, name="x")
    got = run(bind("convert", p, new_dtype=dst), {"x": x})
    want = x.astype(np.float32).astype(dtypes.to_numpy(dst)) if src == "bfloat16" \
        else x.astype(dtypes.to_numpy(dst))
    assert got.dtype == dtypes.to_numpy(dst)
    np.testing.assert_array_equal(got, want)


def test_convert_float_to_int_edge_cases(graph):
    x = np.array([np.nan, np.inf, -np.inf, 3e10, -2.7, 2.7], np.float32)
    p = gc.placeholder((6,), "float32", name="x")
    got = run(bind("convert", p, new_dtype="int32"), {"x": x})
    np.testing.assert_array_equal(got, [0, 2**31 - 1, -2**31, 2**31 - 1, -2, 2])


def test_iota_and_constant(graph):
    np.testing.assert_array_equal(run(gc.iota((3, 4), 1), {}),
                                  np.broadcast_to(np.arange(4), (3, 4)))
    np.testing.assert_array_equal(run(gc.iota((3, 4), 0, "float32"), {}),
                                  np.broadcast_to(np.arange(3.0)[:, None], (3, 4)))
    c = np.arange(6, dtype=np.int64).reshape(2, 3)
    np.testing.assert_array_equal(run(gc.constant(c), {}), c)


def test_parameter_and_variable(graph, rng):
    x = random_array(rng, (2, 3))
    v = gc.variable(x * 2, name="v")
    p = gc.placeholder((2, 3), name="p")
    got_p, got_v = run([p, v], {"p": x})
    np.testing.assert_array_equal(got_p, x)
    np.testing.assert_array_equal(got_v, x * 2)


@pytest.mark.parametrize("shape,target,dims", [((3,), (2, 3), (1,)), ((3, 1), (3, 4), (0, 1)),
                                               ((), (2, 2), ()), ((1,), (0, 1), (1,)),
                                               ((4,), (4, 2, 3), (0,))])
def test_broadcast_in_dim(graph, rng, shape, target, dims):
    x = random_array(rng, shape)
    p = gc.placeholder(shape, name="x")
    got = run(bind("broadcast_in_dim", p, shape=target, broadcast_dimensions=dims), {"x": x})
    expanded = [1] * len(target)
    for i, d in enumerate(dims):
        expanded[d] = shape[i]
    np.testing.assert_array_equal(got, np.broadcast_to(x.reshape(expanded), target))


def test_reshape_transpose_reverse(graph, rng):
    x = random_array(rng, (2, 3, 4))
    p = gc.placeholder((2, 3, 4), name="x")
    np.testing.assert_array_equal(run(bind("reshape", p, new_sizes=(6, 4)), {"x": x}),
                                  x.reshape(6, 4))
    np.testing.assert_array_equal(run(bind("transpose", p, permutation=(2, 0, 1)), {"x": x}),
                                  x.transpose(2, 0, 1))
    np.testing.assert_array_equal(run(bind("reverse", p, dimensions=(0, 2)), {"x": x}),
                                  x[::-1, :, ::-1])


def test_slice_with_strides(graph, rng):
    x = random_array(rng, (7, 9))
    p = gc.placeholder((7, 9), name="x")
    got = run(bind("slice", p, start_indices=(1, 0), limit_indices=(7, 9), strides=(2, 3)),
              {"x": x})
    np.testing.assert_array_equal(got, x[1:7:2, 0:9:3])
    empty = run(bind("slice", p, start_indices=(3, 0), limit_indices=(3, 9), strides=(1, 1)),
                {"x": x})
    assert empty.shape == (0, 9)


def test_pad_low_high_interior_negative(graph, rng):
    x = random_array(rng, (3, 4))
    p = gc.placeholder((3, 4), name="x")
    got = run(bind("pad", p, low=(1, 0), high=(2, 1), interior=(1, 0), value=-1.0), {"x": x})
    want = np.full((1 + 3 + 2 + 2, 5), -1.0, np.float32)
    want[1:6:2, 0:4] = x
    np.testing.assert_array_equal(got, want)
    cropped = run(bind("pad", p, low=(-1, 2), high=(0, -3), interior=(0, 0), value=0.0), {"x": x})
    np.testing.assert_array_equal(cropped, np.pad(x, ((0, 0), (2, 0)))[1:, :3])


def test_concatenate(graph, rng):
    xs = [random_array(rng, (2, n)) for n in (1, 0, 3)]
    ps = [gc.placeholder(x.shape, name=f"x{i}") for i, x in enumerate(xs)]
    got = run(bind("concatenate", *ps, dimension=1), {f"x{i}": x for i, x in enumerate(xs)})
    np.testing.assert_array_equal(got, np.concatenate(xs, 1))


@pytest.mark.parametrize("op,fn", [("reduce_sum", np.sum), ("reduce_max", np.max),
                                   ("reduce_min", np.min), ("reduce_prod", np.prod)])
@pytest.mark.parametrize("shape,axes", [((5,), (0,)), ((3, 4), (1,)), ((3, 4), (0, 1)),
                                        ((2, 3, 4), (0, 2)), ((2, 1, 3), (1,)),
                                        ((3, 4), ())])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_reductions(graph, rng, op, fn, shape, axes, dtype):
    x = random_array(rng, shape, dtype, low=0.5 if op == "reduce_prod" else -3,
                     high=1.5 if op == "reduce_prod" else 3)
    p = gc.placeholder(shape, dtype, name="x")
    got = run(bind(op, p, axes=axes), {"x": x})
    want = fn(x.astype(np.float64) if dtype != "int32" else x, axis=axes).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == "float32" else 1e-14)


def test_reduce_sum_over_empty_axis(graph):
    p = gc.placeholder((3, 0), name="x")
    np.testing.assert_array_equal(run(bind("reduce_sum", p, axes=(1,)),
                                      {"x": np.zeros((3, 0), np.float32)}), np.zeros(3))


@pytest.mark.parametrize("op,fn", [("argmax", np.argmax), ("argmin", np.argmin)])
def test_arg_reductions_first_index_on_ties(graph, op, fn):
    x = np.array([[1, 5, 5, 0], [2, 2, 2, 2], [-1, 3, -7, -7]], np.float32)
    p = gc.placeholder(x.shape, name="x")
    for axis in (0, 1):
        got = run(bind(op, p, axis=axis, index_dtype="int32"), {"x": x})
        np.testing.assert_array_equal(got, fn(x, axis=axis))
        assert got.dtype == np.int32


@pytest.mark.parametrize("lshape,rshape,lc,rc,lb,rb", [
    ((3, 4), (4, 5), (1,), (0,), (), ()),
    ((4, 3), (4, 5), (0,), (0,), (), ()),
    ((2, 3, 4), (2, 4, 5), (2,), (1,), (0,), (0,)),
    ((3, 2, 4), (4, 5, 2), (2,), (0,), (1,), (2,)),
    ((2, 3, 4, 6), (6, 4, 7), (2, 3), (1, 0), (), ()),
    ((3, 0), (0, 2), (1,), (0,), (), ()),
    ((5,), (5,), (0,), (0,), (), ()),
])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_dot_general(graph, rng, lshape, rshape, lc, rc, lb, rb, dtype):
    a, b = random_array(rng, lshape, dtype), random_array(rng, rshape, dtype)
    pa, pb = gc.placeholder(lshape, dtype, name="a"), gc.placeholder(rshape, dtype, name="b")
    got = run(bind("dot_general", pa, pb, lhs_contracting=lc, rhs_contracting=rc,
                   lhs_batch=lb, rhs_batch=rb), {"a": a, "b": b})
    letters = "abcdefgh"
    la = [letters[i] for i in range(len(lshape))]
    ra = ["_"] * len(rshape)
    nxt = iter("pqrstuvw")
    for i, j in zip(lc + lb, rc + rb):
        ra[j] = la[i]
    ra = [c if c != "_" else next(nxt) for c in ra]
    out = [la[i] for i in lb] + [la[i] for i in range(len(lshape)) if i not in lc + lb] + \
        [ra[j] for j in range(len(rshape)) if j not in rc + rb]
    want = np.einsum(f"{''.join(la)},{''.join(ra)}->{''.join(out)}",
                     a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-13)


def conv_reference(x, w, stride, pad, ldil, rdil, groups):
    """Direct nested-loop convolution in float64 (independent of the implementation)."""
    x = x.astype(np.float64)
    if ldil != (1, 1):
        xd = np.zeros((x.shape[0], x.shape[1], (x.shape[2] - 1) * ldil[0] + 1,
                       (x.shape[3] - 1) * ldil[1] + 1))
        xd[:, :, ::ldil[0], ::ldil[1]] = x
        x = xd
    x = np.pad(x, ((0, 0), (0, 0), (max(pad[0][0], 0), max(pad[0][1], 0)),
                   (max(pad[1][0], 0), max(pad[1][1], 0))))
    x = x[:, :, max(-pad[0][0], 0): x.shape[2] - max(-pad[0][1], 0),
          max(-pad[1][0], 0): x.shape[3] - max(-pad[1][1], 0)]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - (kh - 1) * rdil[0] - 1) // stride[0] + 1
    ow = (wd - (kw - 1) * rdil[1] - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = x[:, g * cg:(g + 1) * cg,
                          i * stride[0]: i * stride[0] + (kh - 1) * rdil[0] + 1: rdil[0],
                          j * stride[1]: j * stride[1] + (kw - 1) * rdil[1] + 1: rdil[1]]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    return out


@pytest.mark.parametrize("xshape,wshape,stride,pad,ldil,rdil,groups", [
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1),
    ((1, 2, 8, 8), (3, 2, 3, 2), (2, 3), ((1, 2), (0, 1)), (1, 1), (1, 1), 1),
    ((2, 4, 9, 9), (6, 2, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (2, 2), 2),
    ((1, 2, 5, 5), (2, 2, 2, 2), (1, 1), ((1, 1), (-1, 0)), (2, 2), (1, 1), 1),
    ((2, 6, 5, 5), (6, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 6),
])
def test_conv(graph, rng, xshape, wshape, stride, pad, ldil, rdil, groups):
    x, w = random_array(rng, xshape, "float64"), random_array(rng, wshape, "float64")
    px, pw = gc.placeholder(xshape, "float64", name="x"), gc.placeholder(wshape, "float64", name="w")
    got = run(bind("conv", px, pw, window_strides=stride, padding=pad, lhs_dilation=ldil,
                   rhs_dilation=rdil, feature_group_count=groups), {"x": x, "w": w})
    np.testing.assert_allclose(got, conv_reference(x, w, stride, pad, ldil, rdil, groups),
                               rtol=1e-12, atol=1e-12)


def test_gather_and_scatter_add(graph, rng):
    x = random_array(rng, (4, 5, 3))
    idx = np.array([[4, 0], [2, 2], [1, 3]], np.int32)
    px, pi = gc.placeholder((4, 5, 3), name="x"), gc.placeholder((3, 2), "int32", name="i")
    got = run(bind("gather", px, pi, axis=1), {"x": x, "i": idx})
    np.testing.assert_array_equal(got, np.take(x, idx, axis=1))
    upd = random_array(rng, (4, 3, 2, 3))
    pu = gc.placeholder((4, 3, 2, 3), name="u")
    got = run(bind("scatter_add", px, pi, pu, axis=1), {"x": x, "i": idx, "u": upd})
    want = x.copy()
    np.add.at(want, (slice(None), idx), upd)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_gather_clamps_out_of_range(graph):
    x = np.arange(5, dtype=np.float32)
    px, pi = gc.placeholder((5,), name="x"), gc.placeholder((3,), "int32", name="i")
    got = run(bind("gather", px, pi, axis=0), {"x": x, "i": np.array([-3, 7, 2], np.int32)})
    np.testing.assert_array_equal(got, [0, 4, 2])


def test_threefry_known_answer():
    # Random123's known-answer vectors for Threefry-2x32-20
    x0, x1 = threefry2x32(0, 0, np.array([0], np.uint32), np.array([0], np.uint32))
    assert (int(x0[0]), int(x1[0])) == (0x6B200159, 0x99BA4EFE)
    x0, x1 = threefry2x32(0xFFFFFFFF, 0xFFFFFFFF, np.array([0xFFFFFFFF], np.uint32),
                          np.array([0xFFFFFFFF], np.uint32))
    assert (int(x0[0]), int(x1[0])) == (0x1CB996FC, 0xBB002BE7)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_rng_uniform_and_normal(graph, dtype):
    key = gc.random.key(42)
    u = gc.random.uniform(key, (20000,), dtype)
    z = gc.random.normal(key, (20000,), dtype)
    uv, zv, uv2 = run([u, z, gc.random.uniform(gc.random.key(42), (20000,), dtype)], {})
    uv, zv = uv.astype(np.float64), zv.astype(np.float64)
    assert uv.min() >= 0 and uv.max() < 1
    assert abs(uv.mean() - 0.5) < 0.01 and abs(uv.std() - 0.2887) < 0.01
    assert abs(zv.mean()) < 0.03 and abs(zv.std() - 1) < 0.03
    np.testing.assert_array_equal(uv, uv2.astype(np.float64))       # same key, same numbers
    other = run(gc.random.uniform(gc.random.key(43), (20000,), dtype), {})
    assert not np.array_equal(uv, other.astype(np.float64))


def test_rng_bits_and_split(graph):
    k = gc.random.key(7)
    keys = gc.random.split(k, 3)
    bits, ks = run([gc.random.bits(k, (1000,)), keys], {})
    assert bits.dtype == np.int32 and len(np.unique(bits)) > 990
    assert ks.shape == (3, 2) and len({tuple(r) for r in ks}) == 3


@pytest.mark.parametrize("op,attrs,shape", [("all_reduce", {"op": "sum"}, (3, 4)),
                                            ("all_reduce", {"op": "mean"}, (3, 4)),
                                            ("all_gather", {"axis": 0}, (3, 4)),
                                            ("reduce_scatter", {"axis": 1}, (3, 4))])
def test_collectives_single_process_identity(graph, rng, op, attrs, shape):
    x = random_array(rng, shape)
    p = gc.placeholder(shape, name="x")
    np.testing.assert_array_equal(run(bind(op, p, axis_size=1, **attrs), {"x": x}), x)


def test_collective_shapes_for_several_processes(graph):
    p = gc.placeholder((4, 6), name="x")
    assert bind("all_gather", p, axis=1, axis_size=3).shape == (4, 18)
    assert bind("reduce_scatter", p, axis=1, axis_size=3).shape == (4, 2)
    with pytest.raises(gc.GraphcError, match="compiled for 2 processes, but this run has 1|need MPI"):
        gc.evaluate(bind("all_reduce", p, op="sum", axis_size=2),
                    {"x": np.ones((4, 6), np.float32)})


def test_every_primitive_is_tested():
    tested = set(UNARY_NUMPY) | set(BINARY_NUMPY) | {
        "div", "rem", "and", "or", "xor", "not", "compare", "select", "convert", "iota",
        "constant", "parameter", "variable", "broadcast_in_dim", "reshape", "transpose",
        "slice", "pad", "concatenate", "reverse", "reduce_sum", "reduce_max", "reduce_min",
        "reduce_prod", "argmax", "argmin", "dot_general", "conv", "gather", "scatter_add",
        "rng", "all_reduce", "all_gather", "reduce_scatter",
        "scan", "while", "cond", "get",             # control flow: test_control_flow.py
        "dim_size",                                 # symbolic sizes: test_symbolic_dims.py
        "window_view",                              # test_conv_in_place.py
        "winograd_conv2d",                           # test_winograd.py
            "after",                                     # test_checkpoint.py
            "stop_gradient",                             # test_autodiff.py
            "send", "recv"}                              # test_point_to_point.py
    assert set(REGISTRY) == tested
