"""The recipes of docs/extending.md, proved from this one file through the public
registration functions (graphc.extend): a new elementwise primitive compiles on the
CPU, assembles to PTX, differentiates and fuses with its neighbours; a new backend is
one class and one register_backend call."""
import numpy as np
import pytest

import graphc as gc
from graphc import extend
from graphc_runtime.errors import DTypeError

from graphc.backends.cpu.backend import CpuBackend
from test_cuda_ptx import needs_ptxas, ptxas


# -- a primitive: softsign(x) = x / (1 + |x|) ---------------------------------------------

def _rule(inputs, attrs):
    (x,) = inputs
    if x.dtype not in ("float32", "float64"):
        raise DTypeError(f"operand has dtype {x.dtype}; expected float32 or float64")
    return x.shape, x.dtype


def _lower(e, ty, x):
    import llvmlite.ir as ir
    magnitude = e.b.call(e.mb.intrinsic("llvm.fabs", [ty]), [x])
    return e.b.fdiv(x, e.b.fadd(ir.Constant(ty, 1.0), magnitude))


@pytest.fixture(autouse=True)
def own_graph():
    with gc.Graph("extending"):
        yield


@pytest.fixture(scope="module", autouse=True)
def registered():
    """Register the primitive and the backend for this module's tests, and take them out
    again after (the other test files check that every registered primitive is tested)."""
    extend.define("ext_softsign", "elementwise", _rule,
                  lambda args, attrs, node: args[0] / (1 + np.abs(args[0])), arity=1, cost=3)
    extend.register_vjp("ext_softsign",
                        lambda x, out, g, a: (g / ((1.0 + gc.abs(x)) * (1.0 + gc.abs(x))),))
    extend.register_lowering("ext_softsign", float=_lower)
    extend.register_backend("onethread", OneThreadCpu)
    yield
    from graphc import autodiff
    from graphc.backends import backend
    from graphc.backends.llvm import lowerings
    del extend.primitives["ext_softsign"], autodiff.RULES["ext_softsign"]
    del lowerings.FLOAT["ext_softsign"], backend._REGISTRY["onethread"]


def softsign(x):
    return extend.bind("ext_softsign", x)


def test_the_primitive_is_registered_in_every_table():
    prim = extend.primitives["ext_softsign"]
    assert prim.kind == "elementwise" and prim.cost == 3 and not prim.transcendental
    assert extend.lowering_of("ext_softsign", is_float=True) == "table"
    with pytest.raises(gc.GraphcError, match="already has a VJP"):
        extend.register_vjp("ext_softsign", lambda x, out, g, a: (g,))
    with pytest.raises(ValueError, match="defined twice"):
        extend.define("ext_softsign", "elementwise", _rule, None, arity=1)


def test_it_compiles_on_the_cpu_and_fuses_with_its_neighbours():
    rng = np.random.default_rng(0)
    x = gc.placeholder((64, 33), "float32", name="x")
    y = softsign(x * 3.0) + 1.0
    exe = gc.compile(y)
    feed = rng.standard_normal((64, 33)).astype(np.float32) * 4
    np.testing.assert_allclose(exe(feed), gc.evaluate(y, {"x": feed}), rtol=1e-6)
    assert exe.stats["kernels"] == 1                       # mul, softsign, add: one loop
    fused = exe.dump("fused")
    assert "ext_softsign" in fused and "mul" in fused
    with pytest.raises(DTypeError, match="ext_softsign.*int32"):
        softsign(gc.placeholder((3,), "int32"))


def test_its_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    x = gc.placeholder((5, 7), "float64", name="x")
    loss = (softsign(x) * softsign(x * 0.5)).sum()
    (g,) = gc.grad(loss, [x])
    exe = gc.compile([loss, g])
    feed = rng.standard_normal((5, 7)) * 3
    _, got = exe(feed)
    eps, want = 1e-6, np.zeros_like(feed)
    f = gc.compile(loss)
    for i in np.ndindex(feed.shape):
        hi, lo = feed.copy(), feed.copy()
        hi[i] += eps
        lo[i] -= eps
        want[i] = (f(hi) - f(lo)) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_it_assembles_to_ptx(arch, tmp_path):
    x = gc.placeholder((1024,), "float32", name="x")
    w = gc.placeholder((1024,), "float64", name="w")
    exe = gc.compile([softsign(x) * 2.0, softsign(w)], device="cuda", arch=arch)
    ptx = exe.dump("ptx")
    assert "div.rn.f32" in ptx and "abs.f32" in ptx
    ptxas(ptx, arch, tmp_path)


# -- a backend: the CPU's code under another scheduling policy ------------------------------

class OneThreadCpu(CpuBackend):
    """The CPU's emitter on one thread, without chaining or column sums: a backend that
    keeps its own graph passes and scheduling answers."""
    kind = "onethread"

    def __init__(self, index, options, loc=None):
        super().__init__(None, dict(options, num_threads=1), loc)

    def lowering_passes(self):
        return [p for p in super().lowering_passes() if p[0] != "column_sums"]

    def policy(self):
        return extend.SchedulePolicy(threads=1, scratch_of=super().policy().scratch_of)


def test_a_registered_backend_compiles_through_its_own_seams(tmp_path):
    rng = np.random.default_rng(2)
    x = gc.placeholder((512, 96), "float32", name="x")
    y = [x.sum(axis=0), gc.softmax(x, axis=-1)]
    exe = gc.compile(y, device="onethread", dump_dir=str(tmp_path))
    feed = rng.standard_normal((512, 96)).astype(np.float32)
    for got, want in zip(exe(feed), gc.evaluate(y, {"x": feed})):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)    # float32 sums
    assert exe.device == "onethread" and exe.stats["num_threads"] == 1
    passes = sorted(p.name for p in tmp_path.iterdir())
    assert any("conv_to_gemm" in p for p in passes) and not any("column_sums" in p for p in passes)
    assert "onethread" in gc.backends.backends()
    with pytest.raises(gc.CompileError, match="unknown compile option.*arch"):
        gc.compile(y, device="onethread", arch="sm_90")
    with pytest.raises(TypeError, match="not a Backend"):
        extend.register_backend("bad", object)
