"""The CPU backend's loops come out vectorized on every supported llvmlite/LLVM: a
structural check of the optimized IR (a scalar loop is several times slower, as LLVM 20
made every exp-based kernel when it met llvm.ldexp)."""
import re

import numpy as np
import pytest

import graphc as gc

N = 4096


def vector_width(exe) -> int:
    """The widest float vector in the executable's optimized LLVM IR (1: none)."""
    widths = [int(w) for w in re.findall(r"<(\d+) x float>", exe.dump("llvm"))]
    return max(widths, default=1)


def scalar_math(exe) -> list:
    """Scalar math left in the optimized IR: library calls, or float32 intrinsics that a
    vectorized loop would call as <N x float> (the static trip counts here leave no
    scalar remainder loops)."""
    ir_text = exe.dump("llvm")
    return re.findall(r"call [^@]*@\"?(expf|logf|tanhf|erff|exp2f|ldexpf)\b", ir_text) + \
        re.findall(r"call [^@]*@\"?llvm\.(fmuladd|ldexp|rint|exp|log)\.f32", ir_text) + \
        re.findall(r"call [^@]*@\"?(graphc_scalef\w*)", ir_text)    # widened and inlined


ELEMENTWISE = {
    "exp": gc.exp, "log": lambda x: gc.log(gc.abs(x) + 1), "tanh": gc.tanh,
    "sigmoid": gc.sigmoid, "erf": gc.erf, "sqrt": lambda x: gc.sqrt(gc.abs(x)),
    "rsqrt": lambda x: gc.rsqrt(gc.abs(x) + 1), "abs": gc.abs, "relu": gc.relu,
    "gelu": gc.gelu, "gelu_tanh": lambda x: gc.gelu(x, approximate=True),
    "maximum": lambda x: gc.maximum(x, 0.5 * x), "minimum": lambda x: gc.minimum(x, 1.0),
    "floor": gc.floor, "where": lambda x: gc.where(x > 0, x, 2 * x),
    "x*a+b": lambda x: x * 3.0 + 1.0,
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_float32_elementwise_loops_are_vectorized(name):
    with gc.Graph():
        x = gc.placeholder((N,), name="x")
        exe = gc.compile(ELEMENTWISE[name](x), num_threads=1)
    assert vector_width(exe) >= 4, f"{name}: the loop stayed scalar"
    assert scalar_math(exe) == []
    v = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    np.testing.assert_allclose(exe(v), gc.evaluate(ELEMENTWISE[name](gc.constant(v))),
                               rtol=2e-6, atol=1e-6)


REDUCTIONS = {
    "softmax": lambda x: gc.softmax(x, axis=1),
    "layer_norm": lambda x: gc.nn.layer_norm(x, gc.ones(256), gc.zeros(256)),
    "row max": lambda x: x.max(axis=1), "row sum": lambda x: x.sum(axis=1),
    "sum of exp": lambda x: gc.exp(x).sum(axis=1),
}                     # (not logsumexp: its log runs once per row, scalar by nature)


@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_row_reductions_are_vectorized(name):
    with gc.Graph():
        x = gc.placeholder((64, 256), name="x")
        exe = gc.compile(REDUCTIONS[name](x), num_threads=1)
    assert vector_width(exe) >= 4, f"{name}: the reduction stayed scalar"
    assert scalar_math(exe) == []


@pytest.mark.parametrize("size", [8, 16, 32])
def test_padding_small_images_vectorizes_rows_not_columns(size):
    """Bias, relu and a one-pixel pad over images of 8 to 32 pixels a row: the row loop
    is the vectorized one. LLVM unrolled a 16-iteration row fully and vectorized the
    loop over rows around it with gathers and scatters a row apart (5x slower); loops
    holding an inner loop of 8 or more iterations are marked not to be vectorized."""
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((1, 64, size, size)).astype(np.float32)
    bv = rng.standard_normal(64).astype(np.float32)
    with gc.Graph():
        x = gc.placeholder(xv.shape, name="x")
        b = gc.placeholder((64,), name="b")
        y = gc.pad(gc.relu(x + b.reshape((1, 64, 1, 1))), ((0, 0), (0, 0), (1, 1), (1, 1)))
        exe = gc.compile(y, num_threads=1)
    ir_text = exe.dump("llvm")
    assert "masked.gather" not in ir_text and "masked.scatter" not in ir_text
    assert vector_width(exe) >= 8
    want = np.pad(np.maximum(xv + bv.reshape(1, 64, 1, 1), 0), ((0, 0), (0, 0), (1, 1), (1, 1)))
    np.testing.assert_array_equal(exe(xv, bv), want)


@pytest.mark.parametrize("size", [4, 8, 16])
def test_pooling_over_adjacent_axes_is_one_vectorized_loop(size):
    """A global average pool (bias, ReLU6, mean over the last two axes): the adjacent
    reduced axes are one loop of size * size, which the vectorizer takes. Kept as two,
    LLVM unrolled the inner loop of 8 into a chain of scalar adds (4.6x slower over
    32 x 256 maps of 8 x 8); reductions over axes that are not adjacent keep a loop
    each, and are still right."""
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((2, 32, size, size)).astype(np.float32)
    bv = rng.standard_normal(32).astype(np.float32)
    with gc.Graph():
        x = gc.placeholder(xv.shape, name="x")
        b = gc.placeholder((32,), name="b")
        y = gc.minimum(gc.relu(x + b.reshape((1, 32, 1, 1))), 6.0)
        pooled = gc.mean(y, axis=(2, 3))
        spread = gc.sum(y, axis=(1, 3))
        exe = gc.compile(pooled, num_threads=1)
        other = gc.compile(spread, num_threads=1)
    assert re.search(r"llvm\.vector\.reduce\.fadd\.v(8|16)f32|fadd reassoc <(8|16) x float>",
                     exe.dump("llvm"))
    y_ref = np.minimum(np.maximum(xv + bv.reshape(1, 32, 1, 1), 0), 6)
    np.testing.assert_allclose(exe(xv, bv), y_ref.mean(axis=(2, 3)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(other(xv, bv), y_ref.sum(axis=(1, 3)), rtol=1e-5, atol=1e-5)


def test_a_long_chain_of_dependent_ops_runs_four_vectors_side_by_side():
    """A loop kernel computing 48 or more primitives an element (a quantized model's
    GELU with its quantize/dequantize pairs) interleaves four vectors in its innermost
    loop, so each division's latency overlaps the other vectors' work."""
    xv = np.random.default_rng(0).standard_normal((64, 1024)).astype(np.float32) * 50
    with gc.Graph():
        x = gc.placeholder((64, 1024), name="x")
        v = x
        for k in range(12):                     # 12 divisions, each after the last
            v = gc.round(v / (1.5 + k)) * (1.25 + k) + gc.tanh(v)
        exe = gc.compile(v, num_threads=1)
        want = gc.evaluate(v, {"x": xv})
    np.testing.assert_allclose(exe(xv), want, rtol=1e-5, atol=1e-3)
    divisions = re.findall(r"fdiv (?:fast |arcp |contract |afn |reassoc |nnan |ninf |nsz )*"
                           r"<\d+ x float>", exe.dump("llvm"))
    assert len(divisions) >= 4 * 12, len(divisions)
