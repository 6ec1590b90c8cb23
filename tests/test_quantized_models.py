"""Quantized (QDQ) ONNX models: a quantized weight is dequantized once at import (a
constant filter for the product's fast kernels, the reference's bits), activations'
quantize/dequantize pairs fuse into their neighbours, and float -> int conversions are
vectorized; outputs agree with onnxruntime's int8 run of the same file."""
import numpy as np
import pytest

import graphc as gc

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _dequantized_matmul(trainable=False):
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (16, 8)).astype(np.int8)
    inits = [numpy_helper.from_array(w, "w_q"),
             numpy_helper.from_array(np.float32(0.02), "w_scale"),
             numpy_helper.from_array(np.int8(3), "w_zp")]
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"]),
             helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [4, 16])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [4, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, w


def test_a_quantized_weight_is_a_constant_of_the_references_bits():
    import graphc.onnx as gonnx
    model, w = _dequantized_matmul()
    imported = gonnx.import_model(model)
    (y,) = imported.outputs.values() if isinstance(imported.outputs, dict) else imported.outputs
    dot = y.node if y.node.op == "dot_general" else next(
        n for n in y.graph.nodes if n.op == "dot_general")
    weight = dot.inputs[1]
    while weight.op in ("reshape", "transpose", "broadcast_in_dim"):
        weight = weight.inputs[0]
    assert weight.op == "constant"
    want = ((w.astype(np.float32) - np.float32(3)) * np.float32(0.02)).astype(np.float32)
    np.testing.assert_array_equal(weight.attrs["value"], want)
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    got = gonnx.compile(model)(x=x)["y"]
    np.testing.assert_allclose(got, x.astype(np.float64) @ want, rtol=1e-5, atol=1e-5)


def test_float_to_int_conversions_are_vectorized_and_exact():
    import re
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 2147483520.0,
                  2147483648.0, -2147483648.0, -2147483904.0, 3e9, -3e9, 1e20, -1e20,
                  9.2233715e18, -9.223372e18, 9.3e18, 123456.7], np.float32)
    rng = np.random.default_rng(2)
    wide = rng.standard_normal(4096) * 10.0 ** rng.integers(0, 22, 4096)
    for src in ("float32", "float64"):
        for dst in ("int32", "int64"):
            for values in (v.astype(src), wide.astype(src)):
                with gc.Graph():
                    x = gc.placeholder(values.shape, src, name="x")
                    y = gc.cast(x, dst)
                    exe = gc.compile(y, num_threads=1)
                    np.testing.assert_array_equal(exe(values), gc.evaluate(y, {"x": values}))
            assert re.search(r"fptosi <\d+ x", exe.dump("llvm")), (src, dst)
            assert "fptosi.sat" not in exe.dump("llvm")


def test_a_qdq_model_matches_onnxruntimes_int8_run(tmp_path):
    pytest.importorskip("onnxruntime.quantization")
    from bench.int8 import quantized, steps_off
    from bench.onnx_models import MODELS
    model, make_feeds = MODELS["resnet"](1)
    _, dst = quantized(model, make_feeds, str(tmp_path), "QInt8")
    _, off, step = steps_off(dst, make_feeds(np.random.default_rng(0)))
    assert off <= step          # within one quantization step of the output
