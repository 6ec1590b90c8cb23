"""Every differentiable primitive and nn function: gradients vs finite differences."""
import numpy as np
import pytest

import graphc as gc
from graphc.api import bind
from graphc.autodiff import RULES

from gradcheck import check_grad, numeric_grad, rel_error

R = np.random.default_rng(7)


def arr(*shape, low=-2.0, high=2.0):
    return R.uniform(low, high, shape)


def pos(*shape):
    return R.uniform(0.5, 2.0, shape)


UNARY = {
    "neg": arr, "exp": arr, "log": pos, "log1p": pos, "expm1": arr, "tanh": arr,
    "logistic": arr, "sqrt": pos, "rsqrt": pos, "abs": lambda *s: pos(*s) * R.choice([-1, 1], s),
    "sin": arr, "cos": arr, "erf": arr,
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
def test_unary(op, shape):
    check_grad(lambda x: bind(op, x), {"x": UNARY[op](*shape)})


@pytest.mark.parametrize("op", ["sign", "floor", "ceil", "round"])
def test_piecewise_constant_have_zero_gradient(op):
    got = check_grad(lambda x: bind(op, x), {"x": arr(5) + 0.25})
    assert not np.any(got[0])


@pytest.mark.parametrize("op,make", [
    ("add", (arr, arr)), ("sub", (arr, arr)), ("mul", (arr, arr)), ("div", (arr, pos)),
    ("pow", (pos, arr)), ("max", (arr, arr)), ("min", (arr, arr)), ("rem", (pos, pos)),
])
def test_binary(op, make):
    check_grad(lambda a, b: bind(op, a, b), {"a": make[0](3, 4), "b": make[1](3, 4)})


def test_binary_max_ties_split_evenly():
    a = np.array([1.0, 2.0, 3.0])
    with gc.Graph():
        x = gc.placeholder((3,), "float64", name="x")
        y = gc.placeholder((3,), "float64", name="y")
        gx, gy = gc.grad(gc.maximum(x, y).sum(), [x, y])
        vx, vy = gc.evaluate([gx, gy], {"x": a, "y": np.array([0.0, 2.0, 4.0])})
    np.testing.assert_array_equal(vx, [1, 0.5, 0])
    np.testing.assert_array_equal(vy, [0, 0.5, 1])


def test_broadcasting_operands():
    check_grad(lambda a, b, c: a * b + c / (b * b + 1), {"a": arr(3, 1), "b": arr(4), "c": arr()})


def test_select_and_compare():
    check_grad(lambda a, b: gc.where(a > b, a * 2, b * b), {"a": arr(3, 4), "b": arr(3, 4)})


def test_convert():
    check_grad(lambda a: gc.cast(gc.cast(a, "float32"), "float64") * 0 + gc.cast(a, "float64"),
               {"a": arr(4)})


def test_convert_precision_path():
    with gc.Graph():
        x = gc.placeholder((3,), "float64", name="x")
        (g,) = gc.grad(gc.cast(x, "float32").sum(), [x])
        assert g.dtype == "float64"
        np.testing.assert_array_equal(gc.evaluate(g, {"x": arr(3)}), np.ones(3))


@pytest.mark.parametrize("build,shape", [
    (lambda x: gc.broadcast_to(x, (2, 3, 4)), (3, 1)),
    (lambda x: bind("broadcast_in_dim", x, shape=(3, 2, 4), broadcast_dimensions=(0, 2)), (3, 1)),
    (lambda x: gc.reshape(x, (4, 3)), (2, 6)),
    (lambda x: gc.transpose(x, (2, 0, 1)), (2, 3, 4)),
    (lambda x: x[1:, ::-2], (4, 5)),
    (lambda x: bind("slice", x, start_indices=(1, 0), limit_indices=(6, 7), strides=(2, 3)), (7, 7)),
    (lambda x: bind("pad", x, low=(1, -1), high=(2, 1), interior=(1, 2), value=3.0), (3, 4)),
    (lambda x: gc.concatenate([x, x * 2, x[:, :1]], axis=1), (2, 3)),
    (lambda x: gc.flip(x, (0, 1)), (3, 4)),
    (lambda x: gc.stack([x, -x], 1), (3, 2)),
])
def test_views(build, shape):
    check_grad(build, {"x": arr(*shape)})


@pytest.mark.parametrize("build", [
    lambda x: x.sum(axis=1), lambda x: x.sum(), lambda x: x.mean(axis=0, keepdims=True),
    lambda x: x.max(axis=1), lambda x: x.min(axis=(0, 1)), lambda x: x.prod(axis=1),
    lambda x: x.var(axis=0), lambda x: gc.logsumexp(x, 1), lambda x: gc.softmax(x, 0),
    lambda x: gc.log_softmax(x),
])
def test_reductions(build):
    check_grad(build, {"x": arr(3, 4)})


def test_reduce_max_ties_share_gradient():
    with gc.Graph():
        x = gc.placeholder((4,), "float64", name="x")
        (g,) = gc.grad(x.max(), [x])
        np.testing.assert_array_equal(gc.evaluate(g, {"x": np.array([1.0, 3.0, 3.0, 0.0])}),
                                      [0, 0.5, 0.5, 0])


def test_reduce_prod_with_zeros():
    for values in ([2.0, 0.0, 3.0], [0.0, 0.0, 3.0], [2.0, 5.0, 3.0]):
        x0 = np.array(values)
        with gc.Graph():
            x = gc.placeholder((3,), "float64", name="x")
            (g,) = gc.grad(x.prod(), [x])
            got = gc.evaluate(g, {"x": x0})
        fd = numeric_grad(lambda: np.prod(x0), x0)
        np.testing.assert_allclose(got, fd, atol=1e-8)


@pytest.mark.parametrize("lshape,rshape,lc,rc,lb,rb", [
    ((3, 4), (4, 5), (1,), (0,), (), ()),
    ((4, 3), (5, 4), (0,), (1,), (), ()),
    ((2, 3, 4), (2, 4, 5), (2,), (1,), (0,), (0,)),
    ((3, 2, 4), (4, 5, 2), (2,), (0,), (1,), (2,)),
    ((2, 3, 4, 2), (2, 4, 3), (2, 3), (1, 0), (), ()),
    ((4,), (4,), (0,), (0,), (), ()),
])
def test_dot_general(lshape, rshape, lc, rc, lb, rb):
    check_grad(lambda a, b: bind("dot_general", a, b, lhs_contracting=lc, rhs_contracting=rc,
                                 lhs_batch=lb, rhs_batch=rb), {"a": arr(*lshape), "b": arr(*rshape)})


@pytest.mark.parametrize("xshape,wshape,stride,pad,ldil,rdil,groups", [
    ((2, 3, 5, 5), (4, 3, 3, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1),
    ((1, 2, 7, 6), (3, 2, 3, 2), (2, 3), ((1, 2), (0, 1)), (1, 1), (1, 1), 1),
    ((2, 4, 7, 7), (6, 2, 3, 3), (2, 1), ((1, 1), (1, 1)), (1, 1), (2, 2), 2),
    ((1, 2, 4, 4), (2, 2, 2, 2), (1, 2), ((1, 1), (-1, 0)), (2, 2), (1, 1), 1),
    ((2, 3, 5, 4), (3, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 3),
])
def test_conv(xshape, wshape, stride, pad, ldil, rdil, groups):
    check_grad(lambda x, w: bind("conv", x, w, window_strides=stride, padding=pad,
                                 lhs_dilation=ldil, rhs_dilation=rdil,
                                 feature_group_count=groups),
               {"x": arr(*xshape), "w": arr(*wshape)})


def test_gather_and_scatter_add():
    idx = np.array([[2, 0], [2, 3]], np.int32)
    check_grad(lambda x, i: bind("gather", x, i, axis=1), {"x": arr(3, 4)}, ["x"],
               extra_feeds={"i": idx})
    check_grad(lambda x, u, i: bind("scatter_add", x, i, u, axis=0),
               {"x": arr(4, 3), "u": arr(2, 2, 3)}, extra_feeds={"i": idx})


def test_indexing_gradients_accumulate_duplicates():
    check_grad(lambda x: x[[0, 2, 0], 1:] * x[:, [1, 1, 0]][[1, 0, 2]], {"x": arr(3, 4)})


def test_collectives_single_process():
    check_grad(lambda x: bind("all_reduce", x, op="sum", axis_size=1) * x
               + bind("all_reduce", x, op="mean", axis_size=1)
               + bind("all_reduce", x, op="max", axis_size=1), {"x": arr(3)})
    check_grad(lambda x: bind("all_gather", x, axis=0, axis_size=1) ** 2
               + bind("reduce_scatter", x, axis=0, axis_size=1), {"x": arr(2, 3)})


def test_every_differentiable_primitive_has_a_rule_and_test():
    from graphc.ir import REGISTRY
    differentiable = {n for n, p in REGISTRY.items() if p.differentiable
                      and p.kind != "source"}
    from graphc.control_vjp import CONTROL_RULES
    # control flow (rules in graphc.control_vjp; `get` routes cotangents to its loop)
    assert differentiable == set(RULES) | set(CONTROL_RULES) | {"get"}
    tested_here = set(UNARY) | {"sign", "floor", "ceil", "round", "add", "sub", "mul", "div",
                                "pow", "max", "min", "rem", "select", "convert",
                                "broadcast_in_dim", "reshape", "transpose", "slice", "pad",
                                "concatenate", "reverse", "reduce_sum", "reduce_max",
                                "reduce_min", "reduce_prod", "dot_general", "conv", "gather",
                                "scatter_add", "all_reduce", "all_gather", "reduce_scatter",
                                "scan", "cond", "while", "get",   # in test_control_flow.py
                                "window_view",                    # test_conv_in_place.py
                                "after",                          # test_checkpoint.py
                                "send", "recv"}                   # test_point_to_point.py
    assert tested_here == differentiable


# -- nn functions ---------------------------------------------------------------------

@pytest.mark.parametrize("build,inputs", [
    (lambda x, w, b: gc.nn.linear(x, w, b), {"x": arr(3, 4), "w": arr(4, 2), "b": arr(2)}),
    (lambda x, w, b: gc.nn.conv2d(x, w, b, stride=2, padding=1),
     {"x": arr(2, 2, 5, 5), "w": arr(3, 2, 3, 3), "b": arr(3)}),
    (lambda x, w: gc.nn.conv2d(x, w, padding="same", dilation=2, groups=2),
     {"x": arr(1, 4, 5, 5), "w": arr(2, 2, 3, 3)}),
    (lambda x: gc.nn.max_pool2d(x, 2), {"x": arr(2, 2, 4, 4)}),
    (lambda x: gc.nn.max_pool2d(x, 3, stride=2), {"x": arr(1, 2, 7, 6)}),
    (lambda x: gc.nn.avg_pool2d(x, (2, 3)), {"x": arr(1, 2, 4, 6)}),
    (lambda x: gc.nn.avg_pool2d(x, 2, stride=1), {"x": arr(1, 1, 3, 4)}),
    (lambda x, g, b: gc.nn.layer_norm(x, g, b), {"x": arr(3, 5), "g": arr(5), "b": arr(5)}),
    (lambda x: gc.nn.dropout(x, 0.5, gc.random.key(3)), {"x": arr(4, 4)}),
    (lambda x: gc.relu(x) + gc.gelu(x) + gc.gelu(x, True) + gc.sigmoid(x) + gc.tanh(x),
     {"x": arr(6)}),
    (lambda x: gc.nn.softmax_cross_entropy(x, gc.constant(np.array([0, 3, 1], np.int32))),
     {"x": arr(3, 4) * 5}),
    (lambda x, t: gc.nn.mse(x, t), {"x": arr(3, 2), "t": arr(3, 2)}),
])
def test_nn_functions(build, inputs):
    check_grad(build, inputs)


# -- structure ------------------------------------------------------------------------

def test_disconnected_and_unused_wrt_get_zeros():
    with gc.Graph():
        x = gc.placeholder((3,), "float64", name="x")
        v = gc.variable(np.ones((2, 2)), name="v")
        gx, gv = gc.grad((x * 2).sum(), [x, v])
        a, b = gc.evaluate([gx, gv], {"x": arr(3)})
    np.testing.assert_array_equal(a, [2, 2, 2])
    np.testing.assert_array_equal(b, np.zeros((2, 2)))


def test_fan_out_accumulates():
    check_grad(lambda x: x * x * x + gc.exp(x) * x, {"x": arr(4)})


def test_integer_paths_get_no_gradient_and_asking_for_one_is_an_error():
    with gc.Graph():
        x = gc.placeholder((3,), "float64", name="x")
        i = gc.placeholder((3,), "int32", name="i")
        y = (x * gc.cast(i, "float64")).sum() + gc.cast(gc.argmax(x), "float64")
        (gx,) = gc.grad(y, [x])
        np.testing.assert_array_equal(gc.evaluate(gx, {"x": arr(3), "i": np.array([1, 2, 3],
                                                                              np.int32)}), [1, 2, 3])
        with pytest.raises(gc.DTypeError, match="only float tensors have gradients"):
            gc.grad(y, [i])
        with pytest.raises(gc.ShapeError, match="must be a scalar"):
            gc.grad(x * 2, [x])


def test_grad_of_grad_and_hessian_vector_product():
    x0, v0 = arr(4), arr(4)
    with gc.Graph():
        x = gc.placeholder((4,), "float64", name="x")
        v = gc.placeholder((4,), "float64", name="v")
        f = (gc.sin(x) * gc.exp(x * 0.5)).sum() + (x * x).sum() * x[0]
        (g,) = gc.grad(f, [x])
        (hv,) = gc.grad((g * v).sum(), [x])
        got = gc.evaluate(hv, {"x": x0, "v": v0})
        grad_fn = lambda: gc.evaluate(g, {"x": x0, "v": v0})
    # Hessian by finite differences of the symbolic gradient
    hess = np.zeros((4, 4))
    for j in range(4):
        e = np.zeros(4)
        e[j] = 1e-6
        x_saved = x0.copy()
        x0[:] = x_saved + e
        hi = grad_fn()
        x0[:] = x_saved - e
        lo = grad_fn()
        x0[:] = x_saved
        hess[:, j] = (hi - lo) / 2e-6
    assert rel_error(got, hess @ v0) < 1e-6


def test_third_order():
    with gc.Graph():
        x = gc.placeholder((), "float64", name="x")
        y = x ** 4
        (d1,) = gc.grad(y, [x])
        (d2,) = gc.grad(d1, [x])
        (d3,) = gc.grad(d2, [x])
        got = gc.evaluate([d1, d2, d3], {"x": np.float64(1.5)})
    np.testing.assert_allclose(got, [4 * 1.5 ** 3, 12 * 1.5 ** 2, 24 * 1.5], rtol=1e-12)


def test_second_order_through_nn_composition():
    x0 = arr(2, 3)
    with gc.Graph():
        x = gc.placeholder((2, 3), "float64", name="x")
        w = gc.constant(arr(3, 3))
        f = gc.nn.softmax_cross_entropy(gc.tanh(x @ w), gc.constant(np.array([0, 2], np.int32))).sum()
        (g,) = gc.grad(f, [x])
        gnorm = (g * g).sum()
        (hg,) = gc.grad(gnorm, [x])
        got = gc.evaluate(hg, {"x": x0})
        fd = numeric_grad(lambda: float(gc.evaluate(gnorm, {"x": x0})), x0)
    assert rel_error(got, fd) < 1e-6


def test_gradient_graph_prints_readably():
    g = gc.Graph("tiny")
    with g:
        x = gc.placeholder((2,), name="x")
        w = gc.variable(np.ones(2, np.float32), name="w")
        (gw,) = gc.grad((gc.tanh(x * w)).sum(), [w])
    text = str(g)
    assert "tanh(" in text and "mul(" in text and "sub(" in text
    assert text.count("\n") == len(g.nodes) + 1
    assert gw.node.type_str() == "f32[2]"


def test_vjp_with_cotangents():
    with gc.Graph():
        x = gc.placeholder((3,), "float64", name="x")
        y = x * x
        (g,) = gc.vjp([y], [x], [gc.constant(np.array([1.0, 2.0, 3.0]))])
        np.testing.assert_allclose(gc.evaluate(g, {"x": np.array([1.0, 1.0, 2.0])}), [2, 4, 12])


def test_stop_gradient_passes_the_value_and_no_gradient():
    with gc.Graph():
        x = gc.placeholder((3,), "float64", name="x")
        y = gc.stop_gradient(x * x) * x + x
        (g,) = gc.grad(y.sum(), [x])
        xv = np.array([1.0, -2.0, 3.0])
        np.testing.assert_allclose(gc.evaluate(y, {"x": xv}), xv ** 3 + xv)
        np.testing.assert_allclose(gc.evaluate(g, {"x": xv}), xv ** 2 + 1)
        out, gx = gc.compile([y, g])(xv)
        np.testing.assert_allclose(out, xv ** 3 + xv)
        np.testing.assert_allclose(gx, xv ** 2 + 1)


def test_softmax_gradients_keep_no_argmax_mask():
    """The max shift is under stop_gradient: the backward pass has no compare (argmax
    mask) and matches finite differences."""
    with gc.Graph():
        x = gc.placeholder((4, 5), "float64", name="x")
        r = gc.constant(np.random.default_rng(0).standard_normal((4, 5)))
        y = (gc.softmax(x) * r).sum() + (gc.log_softmax(x) * r).sum() + \
            (gc.logsumexp(x, axis=1) * r[:, 0]).sum()
        (g,) = gc.grad(y, [x])
        forward = {n.id for n in y.graph.ancestors([y.node])}
        assert not [n for n in g.graph.ancestors([g.node])
                    if n.op == "compare" and n.id not in forward]
    check_grad(lambda x: gc.softmax(x) + gc.log_softmax(x, axis=0) +
               gc.logsumexp(x, axis=1, keepdims=True),
               {"x": np.random.default_rng(1).standard_normal((3, 4))})
