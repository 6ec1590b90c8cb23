"""graphc.onnx: import_model / compile, its errors, specialization on shapes and values,
fine-tuning hooks, and the `graphc import` / `graphc viz` commands on .onnx files."""
import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the onnx extra is not installed")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import graphc as gc  # noqa: E402
import graphc.onnx as gonnx  # noqa: E402
from graphc.onnx import backend  # noqa: E402
from graphc_runtime.errors import FeedError, GraphcError  # noqa: E402

GRAPHC = os.path.join(os.path.dirname(sys.executable), "graphc")


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _mlp():
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, "w")
    b = numpy_helper.from_array(np.ones(4, np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Add", ["h", "b"], ["z"]),
             helper.make_node("Relu", ["z"], ["y"])]
    return _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 4])], [w, b])


def test_import_model_exposes_inputs_outputs_and_graph(rng):
    imported = gonnx.import_model(_mlp())
    assert list(imported.inputs) == ["x"] and list(imported.outputs) == ["y"]
    assert imported.params == {} and imported.opset == 17
    x = rng.normal(size=(2, 3)).astype(np.float32)
    with imported.graph:
        exe = gc.compile(imported.outputs["y"], inputs=[imported.inputs["x"]])
    want = np.maximum(x @ (np.arange(12).reshape(3, 4) / 10) + 1, 0)
    np.testing.assert_allclose(exe(x), want, rtol=1e-5)


def test_compile_is_fed_by_onnx_names_and_returns_a_dict(rng):
    exe = gonnx.compile(_mlp())
    x = rng.normal(size=(2, 3)).astype(np.float32)
    out = exe(x=x)
    assert list(out) == ["y"] and out["y"].shape == (2, 4)
    np.testing.assert_allclose(exe(x)["y"], out["y"])


def test_trainable_initializers_become_variables_and_fine_tune(rng):
    imported = gonnx.import_model(_mlp(), trainable=True)
    assert set(imported.params) == {"w", "b"}
    x = rng.normal(size=(2, 3)).astype(np.float32)
    target = rng.normal(size=(2, 4)).astype(np.float32)
    with imported.graph:
        loss = ((imported.outputs["y"] - gc.constant(target)) ** 2).mean()
        step = gc.compile({"loss": loss}, inputs=[imported.inputs["x"]],
                          updates=gc.optim.sgd(loss, list(imported.params.values()), lr=0.1))
    losses = [float(step(x)["loss"]) for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0]


def test_files_and_bytes_import(tmp_path, rng):
    path = tmp_path / "m.onnx"
    onnx.save(_mlp(), str(path))
    x = rng.normal(size=(2, 3)).astype(np.float32)
    a = gonnx.compile(str(path))(x=x)["y"]
    b = gonnx.compile(path.read_bytes())(x=x)["y"]
    np.testing.assert_array_equal(a, b)


def test_malformed_and_missing_files_are_graphc_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not protobuf\xff\xff")
    with pytest.raises(GraphcError, match="not a readable ONNX model"):
        gonnx.import_model(str(bad))
    with pytest.raises(GraphcError, match="no such ONNX file"):
        gonnx.import_model(str(tmp_path / "absent.onnx"))
    with pytest.raises(GraphcError, match="takes an onnx.ModelProto"):
        gonnx.import_model(42)


def test_an_input_nobody_produces_is_named():
    m = _model([helper.make_node("Relu", ["ghost"], ["y"])], [_vi("x", [2])], [_vi("y", [2])])
    with pytest.raises(GraphcError, match="'ghost' is produced by no node"):
        gonnx.import_model(m)


def test_unsupported_op_names_node_op_and_opset():
    node = helper.make_node("NonMaxSuppression", ["x", "x"], ["y"], name="nms1")
    m = _model([node], [_vi("x", [1, 2, 4])], [_vi("y", [1, 3], TensorProto.INT64)])
    with pytest.raises(gonnx.UnsupportedError, match=r"node 'nms1' \(NonMaxSuppression, "
                                                      r"opset 17\): this op is not supported"):
        gonnx.import_model(m)


def test_unsupported_dtype_and_custom_domain_are_refused():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2], TensorProto.UINT64)],
               [_vi("y", [2], TensorProto.UINT64)])
    with pytest.raises(gonnx.UnsupportedError, match="input 'x': ONNX element type UINT64"):
        gonnx.import_model(m)
    m = _model([helper.make_node("Foo", ["x"], ["y"], domain="com.example")],
               [_vi("x", [2])], [_vi("y", [2])])
    with pytest.raises(gonnx.UnsupportedError, match="custom domain 'com.example'"):
        gonnx.import_model(m)


@pytest.mark.parametrize("elem,np_dtype", [(TensorProto.UINT8, np.uint8),
                                           (TensorProto.INT8, np.int8),
                                           (TensorProto.UINT16, np.uint16),
                                           (TensorProto.INT16, np.int16),
                                           (TensorProto.UINT32, np.uint32)])
def test_narrow_integers_wrap_like_their_onnx_type(elem, np_dtype, rng):
    nodes = [helper.make_node("Mul", ["a", "b"], ["p"]),
             helper.make_node("Add", ["p", "a"], ["s"]),
             helper.make_node("Div", ["s", "two"], ["y"]),
             helper.make_node("Greater", ["s", "a"], ["g"])]
    two = numpy_helper.from_array(np.array(2, np_dtype), "two")
    m = _model(nodes, [_vi("a", [64], elem), _vi("b", [64], elem)],
               [_vi("y", [64], elem), _vi("g", [64], TensorProto.BOOL)], [two])
    info = np.iinfo(np_dtype)
    a = rng.integers(info.min, info.max, 64, endpoint=True).astype(np_dtype)
    b = rng.integers(info.min, info.max, 64, endpoint=True).astype(np_dtype)
    exe = gonnx.compile(m)
    out = exe(a=a, b=b)
    with np.errstate(over="ignore"):
        s = a * b + a                       # numpy wraps like the ONNX type
    assert out["y"].dtype == np_dtype and out["g"].dtype == np.bool_
    want = (s.astype(np.int64) // 2).astype(np_dtype) if info.min == 0 else \
        np.trunc(s.astype(np.float64) / 2).astype(np_dtype)
    np.testing.assert_array_equal(out["y"], want)
    np.testing.assert_array_equal(out["g"], s > a)
    with pytest.raises(FeedError, match="expected " + np.dtype(np_dtype).name):
        exe(a=a.astype(np.int64), b=b)


@pytest.mark.parametrize("to", ["INT4", "UINT4"])
def test_out_of_range_casts_to_4_bit_wrap_like_onnxruntime(to):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is missing")
    t = getattr(TensorProto, to)
    nodes = [helper.make_node("Cast", ["x"], ["q"], to=t),
             helper.make_node("Cast", ["q"], ["y"], to=TensorProto.INT32)]
    m = _model(nodes, [_vi("x", [8])], [_vi("y", [8], TensorProto.INT32)], opset=21)
    m.ir_version = 10
    x = np.array([-9, -8, -1, 0, 7, 8, 15, 16], np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(gonnx.compile(m)(x=x)["y"], want)


def test_symbolic_dims_stay_symbolic_or_the_backend_specializes(rng):
    m = _model([helper.make_node("Sigmoid", ["x"], ["y"])], [_vi("x", ["batch", 3])],
               [_vi("y", ["batch", 3])])
    assert str(gonnx.import_model(m).inputs["x"].shape[0]) == "batch"
    with pytest.raises(gonnx.NeedsInputShapes, match="symbolic dimension 'batch'"):
        gonnx.import_model(m, symbolic=False)
    exe = gonnx.compile(m, input_shapes={"x": (5, 3)})
    assert exe(x=np.zeros((5, 3), np.float32))["y"].shape == (5, 3)
    rep = backend.prepare(m)                     # one symbolic executable for every size
    for n in (1, 7, 1):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        np.testing.assert_allclose(rep.run([x])[0], 1 / (1 + np.exp(-x)), rtol=1e-5)
    assert rep.exe is not None and not rep.exes
    # a shape computation that needs the size itself: compiled per size at the first run
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("ConstantOfShape", ["s"], ["z"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])),
             helper.make_node("Add", ["x", "z"], ["y"])]
    m = _model(nodes, [_vi("x", ["batch", 3])], [_vi("y", ["batch", 3])])
    exe = gonnx.compile(m)                       # ConstantOfShape(Shape(x)): a broadcast
    for n in (1, 4):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        np.testing.assert_allclose(exe(x=x)["y"], x + 2, rtol=1e-6)
    def range_model(step):
        nodes = [helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
                 helper.make_node("Squeeze", ["s", "zero"], ["n"]),
                 helper.make_node("Range", ["zero0", "n", "step"], ["r"]),
                 helper.make_node("Cast", ["r"], ["rf"], to=TensorProto.FLOAT),
                 helper.make_node("ReduceSum", ["rf"], ["total"], keepdims=0),
                 helper.make_node("Add", ["x", "total"], ["y"])]
        consts = [helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
                  helper.make_tensor("zero0", TensorProto.INT64, [], [0]),
                  helper.make_tensor("step", TensorProto.INT64, [], [step])]
        return _model(nodes, [_vi("x", ["batch", 3])], [_vi("y", ["batch", 3])],
                      inits=consts)
    exe = gonnx.compile(range_model(1))          # 0, 1, ... up to the batch: an iota
    for n in (1, 6):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        np.testing.assert_allclose(exe(x=x)["y"], x + np.arange(n).sum(), rtol=1e-6)
    m = range_model(2)
    with pytest.raises(gonnx.NeedsInputShapes, match="Range.*'x'"):
        gonnx.import_model(m)                    # ceil(batch / 2) steps: needs the size
    rep = backend.prepare(m)
    for n in (1, 7, 1):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        np.testing.assert_allclose(rep.run([x])[0], x + np.arange(0, n, 2).sum(), rtol=1e-6)
    assert len(rep.exes) == 2


def test_shape_operands_fed_as_inputs_are_specialized_by_value(rng):
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    m = _model([node], [_vi("x", [2, 6]), _vi("shape", [2], TensorProto.INT64)],
               [_vi("y", ["a", "b"])])
    with pytest.raises(gonnx.NeedsInputValues) as info:
        gonnx.import_model(m)
    assert info.value.inputs == ("shape",)
    x = rng.normal(size=(2, 6)).astype(np.float32)
    exe = gonnx.compile(m, input_values={"shape": np.array([3, 4])})
    np.testing.assert_array_equal(exe(x=x)["y"], x.reshape(3, 4))
    rep = backend.prepare(m)
    for shape in ([4, 3], [12, -1], [4, 3]):
        np.testing.assert_array_equal(rep.run([x, np.array(shape, np.int64)])[0],
                                      x.reshape(shape))
    assert len(rep.exes) == 2
    with pytest.raises(FeedError, match="missing input"):
        rep.run({"x": x})


def test_wrong_input_values_and_shapes_are_named():
    with pytest.raises(GraphcError, match="input_values names 'nope'"):
        gonnx.import_model(_mlp(), input_values={"nope": np.zeros(1)})
    with pytest.raises(GraphcError, match="input_shapes names 'nope'"):
        gonnx.import_model(_mlp(), input_shapes={"nope": (1,)})


def test_shape_subgraphs_fold_to_constants():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
             helper.make_node("Concat", ["b", "rest"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.array([0], np.int64), "i0"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest")]
    m = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", [2, 12])], inits)
    imported = gonnx.import_model(m)
    ops = {n.op for n in imported.graph.nodes}
    assert "reshape" in ops and not ops & {"concatenate", "gather"}, ops


@pytest.mark.parametrize("inverse,onesided", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_dft_matches_numpy_fft_in_float64(inverse, onesided, rng):
    signal = rng.normal(size=(2, 16)) + 1j * rng.normal(size=(2, 16))
    if inverse and onesided:
        spectrum = np.fft.rfft(rng.normal(size=(2, 16)), axis=1)
        x = np.stack([spectrum.real, spectrum.imag], -1)
        want = np.fft.irfft(spectrum, 16, axis=1)[..., None]
    else:
        x = np.stack([signal.real, signal.imag], -1)
        fn = np.fft.ifft if inverse else np.fft.fft
        full = fn(signal, axis=1)
        full = full[:, :9] if onesided else full
        want = np.stack([full.real, full.imag], -1)
    node = helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=inverse,
                            onesided=onesided)
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    m = _model([node], [_vi("x", list(x.shape), TensorProto.DOUBLE)],
               [_vi("y", list(want.shape), TensorProto.DOUBLE)], [axis], opset=20)
    np.testing.assert_allclose(gonnx.compile(m)(x=x)["y"], want, atol=1e-12)


def test_backend_supports_devices_and_run_node(rng):
    assert backend.supports_device("CPU") and backend.supports_device("CUDA:0")
    assert not backend.supports_device("TPU")
    x = rng.normal(size=(3, 4)).astype(np.float32)
    (y,) = backend.run_node(helper.make_node("Softmax", ["x"], ["y"], axis=1), [x])
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)


def test_cli_import_writes_an_artifact_and_viz_draws_the_model(tmp_path, rng):
    path = tmp_path / "m.onnx"
    onnx.save(_mlp(), str(path))
    out = tmp_path / "m.gcx"
    r = subprocess.run([GRAPHC, "import", str(path), "-o", str(out)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "inputs x float32[2, 3]" in r.stdout
    import graphc_runtime
    x = rng.normal(size=(2, 3)).astype(np.float32)
    np.testing.assert_allclose(graphc_runtime.load(str(out))(x=x)["y"],
                               gonnx.compile(_mlp())(x=x)["y"])
    page = tmp_path / "m.html"
    r = subprocess.run([GRAPHC, "viz", str(path), "-o", str(page)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "<html" in page.read_text()[:2000].lower()
    sym = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["n", 3])],
                 [_vi("y", ["n", 3])])
    onnx.save(sym, str(tmp_path / "sym.onnx"))
    r = subprocess.run([GRAPHC, "import", str(tmp_path / "sym.onnx"), "-o", str(out)],
                       capture_output=True, text=True)     # a symbolic dim stays symbolic
    assert r.returncode == 0 and "inputs x float32[n, 3]" in r.stdout, r.stderr
    model = graphc_runtime.load(str(out))
    for n in (1, 5):
        x = rng.normal(size=(n, 3)).astype(np.float32)
        np.testing.assert_array_equal(model(x=x)["y"], np.maximum(x, 0))
    r = subprocess.run([GRAPHC, "import", str(tmp_path / "sym.onnx"), "-o", str(out),
                        "--input-shape", "x=4,3"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([GRAPHC, "import", str(tmp_path / "sym.onnx"), "-o", str(out),
                        "--input-shape", "x:4"], capture_output=True, text=True)
    assert r.returncode == 2 and "--input-shape wants" in r.stderr


@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("with_c", [False, True])
def test_batch_norm_after_gemm_folds(trans_b, with_c, rng):
    from graphc.onnx.rewrites import fold_batch_norm
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (test extra) is missing")
    w = rng.normal(size=(5, 3) if trans_b else (3, 5)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")]
    names = ["x", "w"]
    if with_c:
        inits.append(numpy_helper.from_array(rng.normal(size=5).astype(np.float32), "c"))
        names.append("c")
    for n, v in (("g", rng.uniform(0.5, 1.5, 5)), ("b", rng.normal(size=5)),
                 ("m", rng.normal(size=5)), ("v", rng.uniform(0.5, 1.5, 5))):
        inits.append(numpy_helper.from_array(v.astype(np.float32), n))
    nodes = [helper.make_node("Gemm", names, ["h"], transB=trans_b, alpha=0.5, beta=2.0),
             helper.make_node("BatchNormalization", ["h", "g", "b", "m", "v"], ["y"])]
    m = _model(nodes, [_vi("x", [4, 3])], [_vi("y", [4, 5])], inits)
    folded, count = fold_batch_norm(m)
    assert count == 1 and [n.op_type for n in folded.graph.node] == ["Gemm"]
    x = rng.normal(size=(4, 3)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(gonnx.compile(m)(x=x)["y"], want, rtol=1e-5, atol=1e-5)


def test_cli_import_says_which_integer_types_it_widens(tmp_path):
    m = _model([helper.make_node("Add", ["a", "a"], ["y"])], [_vi("a", [4], TensorProto.UINT8)],
               [_vi("y", [4], TensorProto.UINT8)])
    onnx.save(m, str(tmp_path / "u8.onnx"))
    r = subprocess.run([GRAPHC, "import", str(tmp_path / "u8.onnx"), "-o",
                        str(tmp_path / "u8.gcx")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "a uint8 as int32, y uint8 as int32" in r.stdout
    import graphc_runtime
    out = graphc_runtime.load(str(tmp_path / "u8.gcx"))(a=np.array([1, 100, 200, 255], np.int32))
    np.testing.assert_array_equal(out["y"], [2, 200, 144, 254])


# -- control flow: If / Loop / Scan onto gc.cond / gc.scan / gc.while_loop -----------------

def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime (extra 'test') is missing")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_if_with_a_data_dependent_predicate_is_a_cond():
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [],
                               [_vi("t", [3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                               [_vi("e", [3])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(
                 np.float32(0), "zero")),
             helper.make_node("Greater", ["s", "zero"], ["p"]),
             helper.make_node("If", ["p"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = _model(nodes, [_vi("x", [3])], [_vi("y", [3])])
    imported = gonnx.import_model(m)
    assert "cond(" in str(imported.graph)
    exe = gonnx.compile(m)
    for v in (np.array([1.0, 2.0, -0.5], np.float32), np.array([-1.0, 0.2, -0.5], np.float32)):
        np.testing.assert_allclose(exe(x=v)["y"], _ort(m, {"x": v})[0], rtol=1e-6)


def _loop_body(cond_expr):
    """Loop body: y <- y * 0.5 + x; scan output y; condition from `cond_expr`."""
    half = numpy_helper.from_array(np.float32(0.5), "half")
    nodes = [helper.make_node("Constant", [], ["half"], value=half),
             helper.make_node("Mul", ["y_in", "half"], ["m"]),
             helper.make_node("Add", ["m", "x"], ["y_out"]),
             helper.make_node("Identity", ["y_out"], ["scan_out"])] + cond_expr
    return nodes


def test_counted_loop_with_scan_outputs_is_a_scan():
    nodes = _loop_body([helper.make_node("Identity", ["cond_in"], ["cond_out"])])
    body = helper.make_graph(nodes, "body", [_vi("i", [], TensorProto.INT64),
                                             _vi("cond_in", [], TensorProto.BOOL),
                                             _vi("y_in", [2])],
                             [_vi("cond_out", [], TensorProto.BOOL), _vi("y_out", [2]),
                              _vi("scan_out", [2])])
    trip = numpy_helper.from_array(np.int64(5), "trip")
    cond = numpy_helper.from_array(np.array(True), "cond")
    m = _model([helper.make_node("Loop", ["trip", "cond", "y0"], ["y", "ys"], body=body)],
               [_vi("x", [2]), _vi("y0", [2])], [_vi("y", [2]), _vi("ys", [5, 2])],
               [trip, cond])
    assert "scan(" in str(gonnx.import_model(m).graph)
    feeds = {"x": np.array([1.0, -2.0], np.float32), "y0": np.array([0.5, 0.25], np.float32)}
    got, want = gonnx.compile(m)(**feeds), _ort(m, feeds)
    np.testing.assert_allclose(got["y"], want[0], rtol=1e-6)
    np.testing.assert_allclose(got["ys"], want[1], rtol=1e-6)


def test_loop_with_a_data_dependent_condition_is_a_while_loop():
    limit = numpy_helper.from_array(np.float32(10.0), "limit")
    cond = [helper.make_node("Constant", [], ["limit"], value=limit),
            helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "limit"], ["cond_out"])]
    nodes = [n for n in _loop_body(cond) if n.output[0] != "scan_out"]
    body = helper.make_graph(nodes, "body", [_vi("i", [], TensorProto.INT64),
                                             _vi("cond_in", [], TensorProto.BOOL),
                                             _vi("y_in", [2])],
                             [_vi("cond_out", [], TensorProto.BOOL), _vi("y_out", [2])])
    trip = numpy_helper.from_array(np.int64(100), "trip")
    cond0 = numpy_helper.from_array(np.array(True), "cond0")
    m = _model([helper.make_node("Loop", ["trip", "cond0", "y0"], ["y"], body=body)],
               [_vi("x", [2]), _vi("y0", [2])], [_vi("y", [2])], [trip, cond0])
    assert "while(" in str(gonnx.import_model(m).graph)
    exe = gonnx.compile(m)
    for x in ([1.0, 2.0], [3.0, 4.0], [0.01, 0.02]):
        feeds = {"x": np.array(x, np.float32), "y0": np.zeros(2, np.float32)}
        np.testing.assert_allclose(exe(**feeds)["y"], _ort(m, feeds)[0], rtol=1e-6)


def test_scan_with_axes_and_directions():
    body = helper.make_graph([helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
                              helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])], "body",
                             [_vi("s_in", [3]), _vi("x_t", [3])],
                             [_vi("s_out", [3]), _vi("y_t", [3])])
    m = _model([helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                                 scan_input_axes=[1], scan_input_directions=[1],
                                 scan_output_axes=[1], scan_output_directions=[1])],
               [_vi("s0", [3]), _vi("x", [3, 4])], [_vi("s", [3]), _vi("y", [3, 4])])
    rng = np.random.default_rng(0)
    feeds = {"s0": rng.normal(size=3).astype(np.float32),
             "x": rng.normal(size=(3, 4)).astype(np.float32)}
    got, want = gonnx.compile(m)(**feeds), _ort(m, feeds)
    np.testing.assert_allclose(got["s"], want[0], rtol=1e-5)
    np.testing.assert_allclose(got["y"], want[1], rtol=1e-5)


def _shared_ones_model():
    """Two LayerNorm-like scalings whose weights an exporter merged into one initializer
    of ones (read by two nodes), and a BatchNormalization with running statistics."""
    ones = numpy_helper.from_array(np.ones(4, np.float32), "ln.weight")
    stats = [numpy_helper.from_array(v, n) for v, n in (
        (np.full(4, 0.5, np.float32), "bn.scale"), (np.zeros(4, np.float32), "bn.bias"),
        (np.full(4, 0.1, np.float32), "bn.mean"), (np.full(4, 2.0, np.float32), "bn.var"))]
    nodes = [helper.make_node("Mul", ["x", "ln.weight"], ["a"]),
             helper.make_node("Tanh", ["a"], ["t"]),
             helper.make_node("Mul", ["t", "ln.weight"], ["b"]),
             helper.make_node("Unsqueeze", ["b", "axes"], ["b4"]),
             helper.make_node("BatchNormalization",
                              ["b4", "bn.scale", "bn.bias", "bn.mean", "bn.var"], ["n4"]),
             helper.make_node("Squeeze", ["n4", "axes"], ["y"])]
    axes = numpy_helper.from_array(np.array([2, 3], np.int64), "axes")
    return _model(nodes, [_vi("x", [3, 4])], [_vi("y", [3, 4])], [ones, axes] + stats)


def test_shared_initializers_are_untied_for_training(rng):
    """Each node reading a merged initializer trains its own copy (the layers were
    separate parameters), with its own gradient; tie_shared=True keeps one."""
    model = _shared_ones_model()
    imported = gonnx.import_model(model, trainable=True)
    assert set(imported.params) == {"ln.weight", "ln.weight.1", "bn.scale", "bn.bias"}
    x = rng.normal(size=(3, 4)).astype(np.float32)
    with imported.graph:
        loss = (imported.outputs["y"] ** 2).sum()
        names = sorted(imported.params)
        grads = gc.grad(loss, [imported.params[n] for n in names])
        got = dict(zip(names, gc.evaluate(grads, {"x": x})))
    # by hand: y = bn(tanh(x * w0) * w1), bn(v) = (v - 0.1) / sqrt(2 + 1e-5) * 0.5
    s = 0.5 / np.sqrt(2.0 + 1e-5)
    t = np.tanh(x)
    y = (t - 0.1) * s
    dy = 2 * y
    np.testing.assert_allclose(got["ln.weight.1"], (dy * s * t).sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(got["ln.weight"], (dy * s * (1 - t * t) * x).sum(axis=0),
                               rtol=1e-5)
    tied = gonnx.import_model(model, trainable=True, tie_shared=True)
    assert set(tied.params) == {"ln.weight", "bn.scale", "bn.bias"}
    # the statistics are constants: an optimizer never touches them
    assert not {"bn.mean", "bn.var"} & set(imported.params)
    with imported.graph:
        exe = gc.compile(imported.outputs["y"], inputs=[imported.inputs["x"]])
    np.testing.assert_allclose(exe(x), y, rtol=1e-5, atol=1e-6)


def test_provenance_survives_import_passes_and_fusion(rng, tmp_path):
    """Each graphc node says which ONNX node (name, op type) or initializer it came from,
    in the dumps, the viewer's data, the kernels of the artifact and the profile."""
    import graphc_runtime
    w = numpy_helper.from_array(rng.normal(size=(3, 4)).astype(np.float32), "encoder.dense.w")
    nodes = [helper.make_node("MatMul", ["x", "encoder.dense.w"], ["h"],
                              name="encoder/dense/MatMul"),
             helper.make_node("Tanh", ["h"], ["y"], name="encoder/act/Tanh")]
    path = tmp_path / "prov.onnx"
    onnx.save(_model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 4])], [w]), str(path))
    imported = gonnx.import_model(str(path))
    locs = {n.op: n.loc for n in imported.graph.nodes}
    assert locs["dot_general"] == "prov.onnx node 'encoder/dense/MatMul' (MatMul)"
    assert locs["tanh"] == "prov.onnx node 'encoder/act/Tanh' (Tanh)"
    assert locs["parameter"] == "prov.onnx input 'x'"
    const = next(n for n in imported.graph.nodes if n.op == "constant")
    assert const.name == "encoder.dense.w" and "initializer 'encoder.dense.w'" in const.loc
    exe = gonnx.compile(str(path))
    for stage in ("graph", "optimized"):
        assert "encoder/dense/MatMul" in exe.dump(stage)
    exe.save(str(tmp_path / "prov.gcx"))
    model = graphc_runtime.load(str(tmp_path / "prov.gcx"))
    sources = [s for k in model.manifest["kernels"] for s in k.get("sources", [])]
    assert any("encoder/act/Tanh" in s for s in sources), model.manifest["kernels"]
    table = model.profile(2, x=rng.normal(size=(2, 3)).astype(np.float32)).table()
    assert "encoder/" in table
    from graphc import viewer
    page = viewer.model_page(model)
    assert "encoder/dense/MatMul" in page


def test_shape_inference_sees_large_weights_as_declared_inputs():
    """ONNX's shape inference is given the model with its large initializers declared as
    inputs (narrow._weights_declared): the element types it infers are those of the whole
    model, and the model passed in keeps its weights."""
    from graphc.onnx import narrow
    big = numpy_helper.from_array(np.arange(4096, dtype=np.uint8).reshape(64, 64), "big")
    shape = numpy_helper.from_array(np.array([4096], np.int64), "shape")
    nodes = [helper.make_node("Add", ["x", "big"], ["s"]),
             helper.make_node("Reshape", ["s", "shape"], ["flat"]),
             helper.make_node("Cast", ["flat"], ["y"], to=TensorProto.INT16)]
    m = _model(nodes, [_vi("x", [64, 64], TensorProto.UINT8)],
               [_vi("y", [4096], TensorProto.INT16)], [big, shape])
    whole = onnx.shape_inference.infer_shapes(m)
    want = {vi.name: vi.type.tensor_type.elem_type
            for vi in list(whole.graph.value_info) + list(whole.graph.output)}
    assert narrow.inferred_types(m) == want and want["s"] == TensorProto.UINT8
    light = narrow._weights_declared(m)
    assert [t.name for t in light.graph.initializer] == ["shape"]
    assert "big" in {i.name for i in light.graph.input}
    assert [t.name for t in m.graph.initializer] == ["big", "shape"]
    assert np.array_equal(numpy_helper.to_array(m.graph.initializer[0]),
                          np.arange(4096, dtype=np.uint8).reshape(64, 64))
