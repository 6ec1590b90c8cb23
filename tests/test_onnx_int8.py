"""ONNX 8-bit integer products onto graphc's byte products (graphc/onnx/int8_products.py):
MatMulInteger and QLinearMatMul for every pair of uint8/int8 operands and every kind
of zero point, bit for bit against numpy's exact product; a QDQ model (quantized by
onnxruntime.quantization) multiplies integers and agrees with onnxruntime's int8 run."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphc.onnx as gonnx  # noqa: E402

NP = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "int8", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    return model


def _values(rng, etype, shape):
    lo, hi = (0, 256) if etype == TensorProto.UINT8 else (-128, 128)
    return rng.integers(lo, hi, shape).astype(NP[etype])


def _packed_products(exe) -> int:
    return exe.dump("optimized").count("packed_int8=")


@pytest.mark.parametrize("ta", [TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("tb", [TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("zeros", ["none", "scalar", "per row and column"])
def test_matmul_integer_is_exact_for_every_pair_of_types(ta, tb, zeros):
    rng = np.random.default_rng(ta * 10 + tb)
    m, k, n = 24, 70, 40
    a, b = _values(rng, ta, (m, k)), _values(rng, tb, (k, n))
    inputs = ["a", "b"]
    inits, za, zb = [], np.int64(0), np.int64(0)
    if zeros != "none":
        za = _values(rng, ta, (m,) if zeros != "scalar" else ())
        zb = _values(rng, tb, (n,) if zeros != "scalar" else ())
        inits = [numpy_helper.from_array(za, "za"), numpy_helper.from_array(zb, "zb")]
        inputs += ["za", "zb"]
    model = _model([helper.make_node("MatMulInteger", inputs, ["y"])],
                   [helper.make_tensor_value_info("a", ta, [m, k]),
                    helper.make_tensor_value_info("b", tb, [k, n])],
                   [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])], inits)
    exe = gonnx.compile(model)
    got = exe(a=a, b=b)["y"]
    za64 = np.asarray(za, np.int64).reshape(-1, 1) if np.ndim(za) else np.int64(za)
    want = (a.astype(np.int64) - za64) @ (b.astype(np.int64) - np.asarray(zb, np.int64))
    np.testing.assert_array_equal(got, want.astype(np.int32))
    assert got.dtype == np.int32
    assert _packed_products(exe) == 1


@pytest.mark.parametrize("etype", [TensorProto.UINT8, TensorProto.INT8])
def test_qlinear_matmul_requantizes_the_exact_product(etype):
    """QLinearMatMul, batched (3-D @ 2-D): the integer product is exact, so the result
    is the reference's (round half to even, saturation) bit for bit."""
    rng = np.random.default_rng(11)
    a, b = _values(rng, etype, (2, 16, 48)), _values(rng, etype, (48, 24))
    sa, sb, sy = np.float32(0.02), np.float32(0.015), np.float32(0.3)
    za, zb, zy = (_values(rng, etype, ()) for _ in range(3))
    inits = [numpy_helper.from_array(np.asarray(v), name) for name, v in
             (("sa", sa), ("za", za), ("sb", sb), ("zb", zb), ("sy", sy), ("zy", zy))]
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                            ["y"])
    model = _model([node], [helper.make_tensor_value_info("a", etype, list(a.shape)),
                            helper.make_tensor_value_info("b", etype, list(b.shape))],
                   [helper.make_tensor_value_info("y", etype, [2, 16, 24])], inits)
    exe = gonnx.compile(model)
    got = exe(a=a, b=b)["y"]
    acc = (a.astype(np.int64) - np.int64(za)) @ (b.astype(np.int64) - np.int64(zb))
    scaled = acc.astype(np.float32) * (sa * sb / sy)
    lo, hi = np.iinfo(NP[etype]).min, np.iinfo(NP[etype]).max
    want = np.clip(np.round(scaled) + np.int64(zy), lo, hi).astype(NP[etype])
    np.testing.assert_array_equal(got, want)
    assert _packed_products(exe) == 1


def _dq(name, q, scale, zero, axis=None):
    attrs = {} if axis is None else {"axis": axis}
    return helper.make_node("DequantizeLinear", [q, scale, zero], [name], **attrs)


def _qdq_product(rng, rows: int, k: int, n: int, trans_b: bool = False):
    """(op(DQ(Q(x)), DQ(w)), x, graphc's executable, the float64 product of the
    dequantized values): x per tensor (scale 0.05, zero 100), w int8 per output column;
    op MatMul, or Gemm with transB=1 over w stored (n, k)."""
    w = rng.integers(-127, 128, (n, k) if trans_b else (k, n)).astype(np.int8)
    sw = (rng.random(n) * 0.01 + 0.001).astype(np.float32)
    inits = [numpy_helper.from_array(w, "wq"), numpy_helper.from_array(sw, "sw"),
             numpy_helper.from_array(np.zeros(n, np.int8), "zw"),
             numpy_helper.from_array(np.float32(0.05), "sx"),
             numpy_helper.from_array(np.uint8(100), "zx")]
    product = helper.make_node("Gemm", ["xd", "wd"], ["y"], transB=1) if trans_b else \
        helper.make_node("MatMul", ["xd", "wd"], ["y"])
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             _dq("xd", "xq", "sx", "zx"), _dq("wd", "wq", "sw", "zw", axis=0 if trans_b else 1),
             product]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])], inits)
    x = rng.standard_normal((rows, k)).astype(np.float32) * 3
    xq = np.clip(np.round(x / np.float32(0.05)) + 100, 0, 255)
    wf = w.astype(np.float64) * (sw[:, None] if trans_b else sw)
    return x, gonnx.compile(model), ((xq - 100) * 0.05) @ (wf.T if trans_b else wf)


def test_a_per_channel_qdq_product_multiplies_integers():
    """MatMul(DQ(Q(x)), DQ(w)) with w per column: the exact integer product scaled once,
    within float32 rounding of the float product of the dequantized values."""
    x, exe, want = _qdq_product(np.random.default_rng(12), 8, 64, 48)
    np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert _packed_products(exe) == 1


@pytest.mark.parametrize("activations", ["QUInt8", "QInt8"])
def test_a_quantized_bert_style_model_agrees_with_onnxruntimes_int8_run(tmp_path,
                                                                        activations):
    pytest.importorskip("onnxruntime.quantization")
    from bench.int8 import quantized, steps_off
    from bench.onnx_models import bert
    model, make_feeds = bert(1, seq=32, hidden=64, heads=4, layers=1)
    _, dst = quantized(model, make_feeds, str(tmp_path), activations)
    exe, off, step = steps_off(dst, make_feeds(np.random.default_rng(0)))
    assert off <= step
    assert _packed_products(exe) >= 6       # the four projections, two attention products


def _conv_ref(x, w, stride, pad):
    """The exact int64 convolution of centred integer images (N, C, H, W) by filters."""
    x = np.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + (oh - 1) * stride + 1:stride, j:j + (ow - 1) * stride + 1:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


@pytest.mark.parametrize("etype", [TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("kernel,stride,pad", [(3, 1, 1), (1, 1, 0), (3, 2, 1), (7, 2, 3)])
def test_conv_integer_and_qlinear_conv_are_exact(etype, kernel, stride, pad):
    """ConvInteger (exact int32) and QLinearConv (requantized: the reference's bits) of
    an 8-bit image by a constant int8 filter run as byte products; the padding counts
    as the zero point."""
    rng = np.random.default_rng(kernel * 10 + stride)
    x = _values(rng, etype, (2, 6, 11, 9))
    w = rng.integers(-128, 128, (5, 6, kernel, kernel)).astype(np.int8)
    zx = _values(rng, etype, ())
    attrs = dict(kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(zx, "zx"),
             numpy_helper.from_array(np.int8(0), "zw")]
    shape = list(_conv_ref(np.zeros((2, 6, 11, 9), np.int64), w, stride, pad).shape)
    model = _model([helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["y"], **attrs)],
                   [helper.make_tensor_value_info("x", etype, list(x.shape))],
                   [helper.make_tensor_value_info("y", TensorProto.INT32, shape)], inits)
    exe = gonnx.compile(model)
    want = _conv_ref(x.astype(np.int64) - np.int64(zx), w.astype(np.int64), stride, pad)
    np.testing.assert_array_equal(exe(x=x)["y"], want.astype(np.int32))
    assert _packed_products(exe) == 1
    sx, sy = np.float32(0.05), np.float32(0.7)
    sw = (rng.random(5) * 0.02 + 0.005).astype(np.float32)
    bias = rng.integers(-500, 500, 5).astype(np.int32)
    zy = _values(rng, etype, ())
    inits += [numpy_helper.from_array(v, name) for name, v in
              (("sx", sx), ("sw", sw), ("sy", sy), ("zy", zy), ("b", bias))]
    node = helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"],
                            ["y"], **attrs)
    model = _model([node], [helper.make_tensor_value_info("x", etype, list(x.shape))],
                   [helper.make_tensor_value_info("y", etype, shape)], inits)
    exe = gonnx.compile(model)
    acc = (want + bias.reshape(1, -1, 1, 1)).astype(np.float32)
    scaled = acc * (sx * sw / sy).reshape(1, -1, 1, 1)
    lo, hi = np.iinfo(NP[etype]).min, np.iinfo(NP[etype]).max
    expect = np.clip(np.round(scaled) + np.int64(zy), lo, hi).astype(NP[etype])
    np.testing.assert_array_equal(exe(x=x)["y"], expect)
    assert _packed_products(exe) == 1


@pytest.mark.parametrize("one_d", [False, True])
def test_a_per_channel_qdq_convolution_multiplies_integers(one_d):
    """Conv(DQ(Q(x)), DQ(w)) (2-D, and 1-D as over audio) with w per output channel:
    the exact integer product scaled once, within float32 rounding of the float
    convolution of the dequantized values."""
    rng = np.random.default_rng(13)
    o, c, k = 8, 12, 3
    shape_w = (o, c, k) if one_d else (o, c, k, k)
    shape_x = (1, c, 20) if one_d else (1, c, 10, 10)
    w = rng.integers(-127, 128, shape_w).astype(np.int8)
    sw = (rng.random(o) * 0.01 + 0.001).astype(np.float32)
    inits = [numpy_helper.from_array(w, "wq"), numpy_helper.from_array(sw, "sw"),
             numpy_helper.from_array(np.zeros(o, np.int8), "zw"),
             numpy_helper.from_array(np.float32(0.04), "sx"),
             numpy_helper.from_array(np.uint8(90), "zx")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             _dq("xd", "xq", "sx", "zx"), _dq("wd", "wq", "sw", "zw", axis=0),
             helper.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1] * (1 if one_d else 2))]
    out = [1, o] + [s for s in shape_x[2:]]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape_x))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    x = rng.standard_normal(shape_x).astype(np.float32) * 2
    exe = gonnx.compile(model)
    got = exe(x=x)["y"]
    xq = np.clip(np.round(x / np.float32(0.04)) + 90, 0, 255).astype(np.int64) - 90
    w4 = w[:, :, None] if one_d else w
    x4 = xq[:, :, None] if one_d else xq
    if one_d:       # pad only along the row
        x4 = np.pad(x4, [(0, 0), (0, 0), (0, 0), (1, 1)])
        want = _conv_ref(x4, w4.astype(np.int64), 1, 0)
    else:
        want = _conv_ref(x4, w4.astype(np.int64), 1, 1)
    want = (want * 0.04 * sw.reshape(1, -1, 1, 1).astype(np.float64)).reshape(got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert _packed_products(exe) == 1


@pytest.mark.parametrize("etype", [TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_a_quantize_dequantize_round_trip_stays_in_float_with_the_same_values(etype,
                                                                             per_axis):
    """DQ(Q(x)) with the same scale and zero point is scale * clip(round(x / scale),
    lo - zp, hi - zp) in float (no int32 in between), bit for bit the reference's values,
    saturated ends included; a DQ with another scale keeps the integers."""
    rng = np.random.default_rng(21)
    c = 6
    scale = (rng.random(c) * 0.05 + 0.01).astype(np.float32) if per_axis else np.float32(0.03)
    lo, hi = np.iinfo(NP[etype]).min, np.iinfo(NP[etype]).max
    zero = (rng.integers(lo, hi + 1, c) if per_axis else np.int64(lo + 77)).astype(NP[etype])
    axis = {"axis": 1} if per_axis else {}
    scale2 = np.asarray(scale * np.float32(2), np.float32)     # float32 on numpy 1.x too
    inits = [numpy_helper.from_array(np.asarray(scale), "s"),
             numpy_helper.from_array(np.asarray(zero), "z"),
             numpy_helper.from_array(scale2, "s2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], **axis),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["y"], **axis),
             helper.make_node("DequantizeLinear", ["xq", "s2", "z"], ["y2"], **axis)]
    shape = [4, c, 5]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                    for n in ("y", "y2")], inits)
    x = rng.standard_normal(shape).astype(np.float32) * 6       # beyond both ends too
    x[0, 0, :3] = [0.5 * scale.flat[0], -1.5 * scale.flat[0], 1e30]    # ties, huge
    x[1, 0, :3] = [np.nan, np.inf, -np.inf]
    got = gonnx.compile(model)(x=x)
    b = (1, c, 1) if per_axis else ()
    s, z = np.reshape(scale, b), np.reshape(zero, b).astype(np.float32)
    with np.errstate(invalid="ignore"):
        q = np.clip(np.round(x / s) + z, lo, hi)
    q[np.isnan(q)] = 0                   # what QuantizeLinear gives NaN (as onnxruntime)
    np.testing.assert_array_equal(got["y"], ((q - z) * s).astype(np.float32))
    np.testing.assert_array_equal(got["y2"], (q - z) * np.reshape(scale2, b))
    only_y = _model(nodes[:2], model.graph.input, model.graph.output[:1], inits[:2])
    assert "new_dtype=int32" not in gonnx.compile(only_y).dump("optimized")


def test_a_gemm_weight_read_transposed_is_packed_once_at_compile_time():
    """Gemm(DQ(Q(x)), DQ(w), transB=1), as quantize_static leaves a classifier: the
    weight's transpose and packing are constants, not work at every call."""
    x, exe, want = _qdq_product(np.random.default_rng(22), 3, 64, 40, trans_b=True)
    np.testing.assert_allclose(exe(x=x)["y"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert _packed_products(exe) == 1
    optimized = exe.dump("optimized")
    assert "transpose" not in optimized
    assert not any("slice" in line and "[16,40]" in line for line in optimized.splitlines())
