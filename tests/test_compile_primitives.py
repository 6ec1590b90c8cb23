"""Every primitive compiled for the CPU equals the reference interpreter."""
import numpy as np
import pytest

import graphc as gc
from graphc.api import bind

from compiled import check_compiled
from conftest import random_array
from test_primitives import UNARY_NUMPY, POSITIVE_ONLY

SHAPES = [(), (1,), (0,), (7,), (3, 5), (2, 1, 33)]


@pytest.mark.parametrize("op", sorted(UNARY_NUMPY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary(graph, rng, op, dtype):
    low = 0.1 if op in POSITIVE_ONLY else -0.9 if op == "log1p" else -4.0
    for k, shape in enumerate(SHAPES):
        p = gc.placeholder(shape, dtype, name=f"x{k}")
        check_compiled(bind(op, p), {f"x{k}": random_array(rng, shape, dtype, low=low, high=4)})


def test_unary_special_values(graph):
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, 88.0, -104.0, 1e-8, -30.0, 30.0],
                 np.float32)
    p = gc.placeholder(x.shape, name="x")
    for op in ("exp", "tanh", "logistic", "abs", "erf", "sign", "floor", "round", "neg",
               "expm1", "sin", "cos"):
        check_compiled(bind(op, p), {"x": x})


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision(graph, rng, dtype):
    x = random_array(rng, (5, 6), dtype)
    y = random_array(rng, (5, 6), dtype, low=0.5)
    a, b = gc.placeholder((5, 6), dtype, name="a"), gc.placeholder((5, 6), dtype, name="b")
    check_compiled([a * b + a, a / b, gc.exp(a), a.sum(axis=1), gc.cast(a, "float32"),
                    gc.cast(gc.cast(a, "float32") * 3, dtype), gc.maximum(a, b)],
                   {"a": x, "b": y})


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "max", "min", "rem"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_binary_float(graph, rng, op, dtype):
    for k, shape in enumerate([(), (0,), (9,), (4, 17)]):
        a, b = gc.placeholder(shape, dtype, name=f"a{k}"), gc.placeholder(shape, dtype, name=f"b{k}")
        check_compiled(bind(op, a, b), {f"a{k}": random_array(rng, shape, dtype, low=0.5 if op == "pow" else -3),
                                        f"b{k}": random_array(rng, shape, dtype, low=0.5)})


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_int_ops(graph, rng, dtype):
    info = np.iinfo(dtype)
    x = np.concatenate([random_array(rng, (40,), dtype, low=-50, high=50),
                        np.array([info.min, info.max, 7, -7, 0, 5], dtype)])
    y = np.concatenate([random_array(rng, (40,), dtype, low=-6, high=6),
                        np.array([-1, -1, 0, 2, 3, -2], dtype)])
    a, b = gc.placeholder(x.shape, dtype, name="a"), gc.placeholder(x.shape, dtype, name="b")
    outs = [bind(op, a, b) for op in ("add", "sub", "mul", "div", "rem", "max", "min", "and",
                                      "or", "xor")]
    outs += [bind(op, a) for op in ("neg", "abs", "sign", "not")]
    outs += [bind("compare", a, b, direction=d) for d in ("eq", "ne", "lt", "le", "gt", "ge")]
    outs += [a // b, a % b, gc.cast(a, "float32"), gc.cast(a, "bool"), gc.cast(a, "int64")]
    check_compiled(outs, {"a": x, "b": y})


def test_bool_ops(graph, rng):
    x, y = random_array(rng, (33,), "bool"), random_array(rng, (33,), "bool")
    a, b = gc.placeholder((33,), "bool", name="a"), gc.placeholder((33,), "bool", name="b")
    outs = [a & b, a | b, a ^ b, ~a, a == b, a < b, gc.cast(a, "float32"), gc.cast(a, "int32"),
            gc.where(a, 1.5, -2.0), gc.max(a), gc.min(a, 0) if False else gc.max(a, axis=0)]
    check_compiled(outs, {"a": x, "b": y})


def test_convert_edge_cases(graph):
    x = np.array([np.nan, np.inf, -np.inf, 3e10, -2.7, 2.7, 0.5, -0.0], np.float32)
    p = gc.placeholder(x.shape, name="x")
    check_compiled([gc.cast(p, d) for d in ("int32", "int64", "bool", "float64", "float16",
                                            "bfloat16")], {"x": x})


def test_views(graph, rng):
    x = random_array(rng, (4, 6, 5))
    p = gc.placeholder(x.shape, name="x")
    outs = [
        bind("broadcast_in_dim", p, shape=(2, 4, 6, 5), broadcast_dimensions=(1, 2, 3)),
        gc.broadcast_to(p[:, :1], (4, 6, 5)),
        p.reshape(24, 5), p.reshape(4, 30), p.reshape(120), p.reshape(2, 2, 3, 10),
        p.transpose(2, 0, 1), p[1:3, ::2, ::-1], p[..., 3], p[:, None, 2],
        bind("slice", p, start_indices=(1, 0, 2), limit_indices=(4, 6, 5), strides=(2, 4, 1)),
        bind("pad", p, low=(1, -1, 0), high=(0, 2, 3), interior=(1, 0, 2), value=-7.0),
        gc.concatenate([p, p[:, :2] * 2, p[:, 5:]], axis=1), gc.flip(p, (0, 2)),
        gc.stack([p[0], p[1]], -1), gc.pad(p, 1),
    ]
    check_compiled(outs, {"x": x})


def test_iota_constants(graph):
    c = np.arange(12, dtype=np.float32).reshape(3, 4)
    check_compiled([gc.iota((3, 4), 1, "float32") + gc.constant(c), gc.arange(2, 20, 3),
                    gc.constant(np.int64(5)) + gc.zeros((2,), "int64"), gc.full((2, 2), 1.5)], {})


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_max", "reduce_min", "reduce_prod"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_reductions(graph, rng, op, dtype):
    x = random_array(rng, (3, 4, 5), dtype, low=0.5 if op == "reduce_prod" else -3,
                     high=1.5 if op == "reduce_prod" else 3)
    p = gc.placeholder(x.shape, dtype, name="x")
    outs = [bind(op, p, axes=a) for a in [(0,), (1,), (2,), (0, 2), (0, 1, 2)]]
    check_compiled(outs, {"x": x})


def test_arg_reductions_and_nan(graph):
    x = np.array([[1, 5, 5, 0], [2, 2, 2, 2], [-1, np.nan, -7, np.nan], [-np.inf] * 4], np.float32)
    p = gc.placeholder(x.shape, name="x")
    outs = [gc.argmax(p, 1), gc.argmin(p, 1), gc.argmax(p, 0), gc.argmin(p), p.max(axis=1),
            p.min(axis=0), p.sum(axis=1)]
    check_compiled(outs, {"x": x})


def test_empty_reductions(graph):
    p = gc.placeholder((3, 0), name="x")
    check_compiled([p.sum(axis=1), p.prod(axis=1), p.sum(axis=0)], {"x": np.zeros((3, 0), np.float32)})


@pytest.mark.parametrize("lshape,rshape,lc,rc,lb,rb", [
    ((3, 4), (4, 5), (1,), (0,), (), ()),
    ((4, 3), (4, 5), (0,), (0,), (), ()),
    ((2, 3, 4), (2, 4, 5), (2,), (1,), (0,), (0,)),
    ((3, 2, 4), (4, 5, 2), (2,), (0,), (1,), (2,)),
    ((2, 3, 4, 6), (6, 4, 7), (2, 3), (1, 0), (), ()),
    ((3, 0), (0, 2), (1,), (0,), (), ()),
    ((5,), (5,), (0,), (0,), (), ()),
    ((33, 70), (70, 19), (1,), (0,), (), ()),
])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_dot_general(graph, rng, lshape, rshape, lc, rc, lb, rb, dtype):
    a, b = random_array(rng, lshape, dtype), random_array(rng, rshape, dtype)
    pa, pb = gc.placeholder(lshape, dtype, name="a"), gc.placeholder(rshape, dtype, name="b")
    check_compiled(bind("dot_general", pa, pb, lhs_contracting=lc, rhs_contracting=rc,
                        lhs_batch=lb, rhs_batch=rb), {"a": a, "b": b})


def test_dot_with_views_and_epilogue(graph, rng):
    a, b, c = random_array(rng, (6, 5)), random_array(rng, (7, 6)), random_array(rng, (7,))
    pa, pb, pc = (gc.placeholder(v.shape, name=n) for v, n in ((a, "a"), (b, "b"), (c, "c")))
    check_compiled([gc.relu(pa.T @ pb.T + pc), pa[:, ::-1].T @ pb[:, :6].T], {"a": a, "b": b, "c": c})


@pytest.mark.parametrize("xshape,wshape,stride,pad,ldil,rdil,groups", [
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1),
    ((1, 2, 8, 8), (3, 2, 3, 2), (2, 3), ((1, 2), (0, 1)), (1, 1), (1, 1), 1),
    ((2, 4, 9, 9), (6, 2, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (2, 2), 2),
    ((1, 2, 5, 5), (2, 2, 2, 2), (1, 1), ((1, 1), (-1, 0)), (2, 2), (1, 1), 1),
    # depthwise (one channel per group): rewritten as a window sum of slices
    ((2, 4, 9, 8), (4, 1, 3, 2), (2, 1), ((1, 2), (0, 1)), (1, 1), (2, 1), 4),
    ((1, 3, 6, 6), (3, 1, 2, 2), (1, 1), ((1, -1), (0, 0)), (1, 1), (1, 1), 3),
    # strided depthwise windows run over the input's phases (unit-stride reads)
    ((2, 4, 9, 9), (4, 1, 3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), (1, 1), 4),
    ((1, 3, 11, 10), (3, 1, 3, 3), (2, 3), ((1, 0), (2, 1)), (1, 1), (1, 1), 3),
    ((1, 2, 10, 12), (2, 1, 5, 2), (3, 2), ((2, -1), (0, 0)), (1, 1), (1, 1), 2),
    ((2, 5, 8, 8), (5, 1, 2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), (1, 1), 5),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv(graph, rng, xshape, wshape, stride, pad, ldil, rdil, groups, dtype):
    x, w = random_array(rng, xshape, dtype), random_array(rng, wshape, dtype)
    px, pw = gc.placeholder(xshape, dtype, name="x"), gc.placeholder(wshape, dtype, name="w")
    y = bind("conv", px, pw, window_strides=stride, padding=pad, lhs_dilation=ldil,
             rhs_dilation=rdil, feature_group_count=groups)
    check_compiled([y, gc.relu(y + 1.0)], {"x": x, "w": w})


def test_gather_scatter(graph, rng):
    x = random_array(rng, (4, 5, 3))
    idx = np.array([[4, 0], [2, 2], [1, 9]], np.int32)
    upd = random_array(rng, (4, 3, 2, 3))
    px, pi, pu = (gc.placeholder(v.shape, str(v.dtype), name=n) for v, n in
                  ((x, "x"), (idx, "i"), (upd, "u")))
    check_compiled([bind("gather", px, pi, axis=1), bind("scatter_add", px, pi, pu, axis=1),
                    px[pi[0]], gc.take(px, pi, axis=2) * 2],
                   {"x": x, "i": idx, "u": upd})


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_rng(graph, dtype):
    k = gc.random.key(11)
    check_compiled([gc.random.uniform(k, (1000,), dtype), gc.random.normal(k, (3, 333), dtype),
                    gc.random.bits(k, (50,)), gc.random.split(k, 4)], {})


def test_collectives_single_process(graph, rng):
    x = random_array(rng, (3, 4))
    p = gc.placeholder(x.shape, name="x")
    check_compiled([bind("all_reduce", p, op="sum", axis_size=1),
                    bind("all_gather", p, axis=0, axis_size=1) * 2,
                    bind("reduce_scatter", p, axis=1, axis_size=1)], {"x": x})


def test_collective_over_processes_needs_that_many_processes(graph):
    p = gc.placeholder((4,), name="x")
    exe = gc.compile(bind("all_reduce", p * 2, op="sum", axis_size=2))
    with pytest.raises(gc.GraphcError, match="compiled for 2 processes, but this run has 1|need MPI"):
        exe(x=np.ones(4, np.float32))


def test_outputs_that_are_inputs_variables_or_repeated(graph, rng):
    x = random_array(rng, (3,))
    p = gc.placeholder((3,), name="x")
    v = gc.variable(np.ones(3, np.float32), name="v")
    y = p * 2
    exe = gc.compile({"p": p, "v": v, "y": y, "y2": y, "c": gc.constant(np.arange(3.0))})
    out = exe(x=x)
    np.testing.assert_array_equal(out["p"], x)
    np.testing.assert_array_equal(out["v"], np.ones(3))
    np.testing.assert_array_equal(out["y"], x * 2)
    np.testing.assert_array_equal(out["y2"], x * 2)
    assert out["y"] is not out["y2"]
    np.testing.assert_array_equal(out["c"], np.arange(3.0))
