"""Loop refinement (merged dimensions iterated as their digits) and concatenate choices
decided outside the inner loops: the kernels they produce against the interpreter."""
import numpy as np
import pytest

import graphc as gc
from graphc.kernels import index as ix
from graphc.kernels import kernel as K
from graphc.kernels.index import affine
from graphc.kernels.refine import refine_loop
from tests.compiled import check_compiled


def _divisions(kern):
    return [n for s in kern.stores for ld in kern.reads()
            for e in ld.index for n in ix.subexpressions(e)
            if isinstance(n, (ix.IDiv, ix.IMod))]


def test_a_merged_dimension_is_iterated_as_its_digits():
    src = K.Buffer(0, (4, 32, 3), "float32", "input")       # read transposed
    out = K.Buffer(1, (4, 96), "float32", "output")
    i0, i1 = ix.var("i0", 4), ix.var("i1", 96)
    load = K.Load("float32", src, (i0, ix.mod(i1, 32), ix.floordiv(i1, 32)))
    kern = K.LoopKernel("k", (4, 96), (i0, i1), [K.Store(out, load, (i0, i1))])
    assert _divisions(kern)
    refined = refine_loop(kern)
    assert refined.shape == (4, 3, 32)
    assert [v.name for v in refined.loop_vars] == ["i0", "i1_0", "i1_1"]
    assert not _divisions(refined)
    assert [ix.show(e) for e in refined.stores[0].value.index] == ["i0", "i1_1", "i1_0"]
    assert affine(ix.linearize(refined.stores[0].index, out.shape)) == \
        ({"i0": 96, "i1_0": 32, "i1_1": 1}, 0)


def test_no_split_for_one_division_at_the_price_of_a_tiny_inner_loop():
    src = K.Buffer(0, (4, 32), "float32", "input")
    out = K.Buffer(1, (4, 64), "float32", "output")
    i0, i1 = ix.var("i0", 4), ix.var("i1", 64)
    load = K.Load("float32", src, (i0, ix.floordiv(i1, 2)))       # each element twice
    kern = K.LoopKernel("k", (4, 64), (i0, i1), [K.Store(out, load, (i0, i1))])
    assert refine_loop(kern) is kern


def test_a_split_must_remove_divisions():
    src = K.Buffer(0, (4, 9), "float32", "input")
    out = K.Buffer(1, (4, 18), "float32", "output")
    i0, i1 = ix.var("i0", 4), ix.var("i1", 18)
    load = K.Load("float32", src, (i0, ix.floordiv(ix.add(i1, ix.const(1)), 2)))
    kern = K.LoopKernel("k", (4, 18), (i0, i1), [K.Store(out, load, (i0, i1))])
    assert refine_loop(kern) is kern


def _patches(x, k=3, pad=1):
    """im2col the way conv_to_gemm builds it: pad, one slice per window offset,
    concatenated, positions flattened."""
    n, c, h, w = x.shape
    xp = gc.pad(x, [(0, 0), (0, 0), (pad, pad), (pad, pad)])
    parts = [xp[:, :, dy:dy + h, dx:dx + w].transpose(1, 0, 2, 3).reshape(c, 1, n * h * w)
             for dy in range(k) for dx in range(k)]
    return gc.concatenate(parts, axis=1).reshape(c * k * k, n * h * w)


@pytest.mark.parametrize("shape", [(2, 3, 14, 14), (4, 8, 7, 5), (1, 1, 28, 28), (3, 2, 1, 9)])
def test_patch_extraction_matches_the_interpreter(graph, shape):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    p = gc.placeholder(shape, name="x")
    check_compiled(_patches(p), {"x": x})
    check_compiled(_patches(gc.relu(p) * 2.0), {"x": x})       # the pad fused, not stored


def test_concatenates_decided_outside_the_inner_loops(graph):
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 5, 17), (2, 5, 17),
                                                                  (4, 5, 17)))
    pa, pb, pc = (gc.placeholder(v.shape, name=n) for n, v in zip("abc", (a, b, c)))
    inner = gc.concatenate([pa, pb], axis=0)                      # nested choices
    out = gc.concatenate([inner * 2.0, gc.exp(pc)], axis=0)
    check_compiled([out, gc.concatenate([pa[:, :, ::-1], pa], axis=2)],
                   {"a": a, "b": b, "c": c})
    # a choice on the innermost axis stays inside the loop
    check_compiled(gc.concatenate([pa, pa * 3.0], axis=2), {"a": a})


from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture
def every_conv_to_gemm(monkeypatch):
    import importlib
    c2g = importlib.import_module("graphc.passes.conv_to_gemm")    # (the package exports
    monkeypatch.setattr(c2g, "MIN_FLOPS", 0)                       # a function of that name)


@pytest.mark.usefixtures("every_conv_to_gemm")
@settings(max_examples=25, deadline=None,
          suppress_health_check=[__import__("hypothesis").HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 3), c=st.integers(1, 4), o=st.integers(1, 5), h=st.integers(3, 12),
       w=st.integers(3, 12), k=st.integers(1, 3), stride=st.integers(1, 2),
       pad=st.integers(0, 2), dil=st.integers(1, 2), seed=st.integers(0, 99))
def test_convolutions_as_patch_products_and_their_gradients(n, c, o, h, w, k, stride, pad,
                                                           dil, seed):
    """Every convolution through conv_to_gemm (patches, refined loops, decided
    concatenates, w @ patches^T), forward and both gradients, against the interpreter
    (the flops threshold is lifted, so small convolutions take that path too)."""
    if (k - 1) * dil + 1 > h + 2 * pad or (k - 1) * dil + 1 > w + 2 * pad:
        return
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    kern = rng.standard_normal((o, c, k, k)).astype(np.float32)
    with gc.Graph():
        px, pk = gc.placeholder(x.shape, name="x"), gc.placeholder(kern.shape, name="k")
        y = gc.relu(gc.nn.conv2d(px, pk, stride=stride, padding=pad, dilation=dil))
        loss = (y * y).sum()
        gx, gk = gc.grad(loss, [px, pk])
        exe = check_compiled([y, gx, gk], {"x": x, "k": kern})
        assert "dot_general" in exe.dump("optimized")
