"""Kernels of equal structure share one function (kernels/structure.py, the CPU module
builder): emitted once, called with each kernel's buffers; a key that missed something
the emitter reads would show in check mode (GRAPHC_CHECK_KERNEL_STRUCTURES, which the
last test turns on) as an AssertionError, not as a wrong result."""
import numpy as np
import pytest

import graphc as gc
from graphc.backends.cpu import emitter
from graphc_runtime.dims import Dim
from graphc.kernels import index as ix
from graphc.kernels import kernel as K
from graphc.kernels.structure import structure


def _scale(name, src, dst, factor, shape=(4, 8)):
    """dst = src * factor, elementwise."""
    vars_ = K.loop_vars(shape)
    value = K.Prim("float32", "mul", (K.Load("float32", src, vars_),
                                      K.Const("float32", factor)))
    return K.LoopKernel(name, shape, vars_, [K.Store(dst, value, vars_)])


def _buffers(first_id, shape=(4, 8), kind="temp"):
    return [K.Buffer(first_id + k, shape, "float32", kind, f"b{first_id + k}")
            for k in range(2)]


def _key(kernel, bufs):
    return structure(kernel, {b.id: k for k, b in enumerate(bufs)})


def test_the_same_kernel_over_other_buffers_and_names_has_the_same_structure():
    a, b = _buffers(1), _buffers(7)
    assert _key(_scale("k1", *a, 2.0), a) == _key(_scale("k9", *b, 2.0), b)


@pytest.mark.parametrize("other", [
    dict(factor=-2.0), dict(factor=2), dict(shape=(4, 9)), dict(kind="input")])
def test_what_the_code_depends_on_changes_the_structure(other):
    a = _buffers(1)
    b = _buffers(7, shape=other.get("shape", (4, 8)), kind=other.get("kind", "temp"))
    mine = _key(_scale("k", *a, 2.0), a)
    theirs = _key(_scale("k", *b, other.get("factor", 2.0), other.get("shape", (4, 8))), b)
    assert mine != theirs


def test_zero_and_negative_zero_and_the_buffers_order_are_told_apart():
    a = _buffers(1)
    assert _key(_scale("k", *a, 0.0), a) != _key(_scale("k", *a, -0.0), a)
    src, dst = a
    swapped = {src.id: 1, dst.id: 0}
    assert structure(_scale("k", src, dst, 2.0), swapped) != _key(_scale("k", *a, 2.0), a)


def test_arrays_count_by_their_bytes_and_unknown_objects_give_no_structure():
    a = _buffers(1)
    big = np.arange(5000.0)
    other = big.copy()
    other[2500] = -1.0                       # numpy's repr would print both alike
    one, two = (_key(_scale("k", *a, v), a) for v in (big, other))
    assert one != two and one == _key(_scale("k", *a, big.copy()), a)
    assert _key(_scale("k", *a, object()), a) is None


def test_a_symbolic_extent_is_part_of_the_structure():
    n, m = Dim.symbol("n"), Dim.symbol("m")
    for size, same in ((n, True), (m, False)):
        vars_ = (ix.var("i0", n),), (ix.var("i0", size),)
        keys = [structure(v[0], {}) for v in vars_]
        assert keys[0] is not None and (keys[0] == keys[1]) == same


def _repeated_layers(width=48, layers=4):
    rng = np.random.default_rng(0)
    with gc.Graph():
        x = gc.placeholder((16, width), name="x")
        h = x
        for k in range(layers):
            w = gc.variable(rng.standard_normal((width, width)).astype(np.float32) * 0.2,
                            name=f"w{k}")
            h = gc.tanh(h @ w) * 0.5 + h
        exe = gc.compile(gc.sum(h * h, axis=1))
        xv = rng.standard_normal((16, width)).astype(np.float32)
        want = gc.evaluate(gc.sum(h * h, axis=1), {"x": xv})
    return exe, xv, want


def _count_emitted(monkeypatch) -> list:
    emitted = []
    emit = emitter.Emitter.kernel
    monkeypatch.setattr(emitter.Emitter, "kernel",
                        lambda self, k: (emitted.append(k.name), emit(self, k))[1])
    return emitted


def test_repeated_layers_emit_one_function_per_structure(monkeypatch):
    monkeypatch.setenv("GRAPHC_PROGRAM_CACHE", "0")
    emitted = _count_emitted(monkeypatch)
    exe, xv, want = _repeated_layers(layers=6)
    np.testing.assert_allclose(exe(xv), want, rtol=1e-5, atol=1e-5)
    kernels = exe.stats["kernels"]
    # the first layer's product, the repeated layers' one, the last layer's (its tanh
    # and residual go into the row kernel that sums h * h) and that row kernel
    assert kernels >= 7 and len(emitted) <= 4, (kernels, emitted)


def test_check_mode_emits_every_kernel_and_finds_each_match_identical(monkeypatch):
    monkeypatch.setenv("GRAPHC_PROGRAM_CACHE", "0")
    monkeypatch.setenv("GRAPHC_CHECK_KERNEL_STRUCTURES", "1")
    emitted = _count_emitted(monkeypatch)
    exe, xv, want = _repeated_layers(width=40, layers=3)
    np.testing.assert_allclose(exe(xv), want, rtol=1e-5, atol=1e-5)
    assert len(emitted) == exe.stats["kernels"]
