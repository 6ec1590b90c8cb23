"""Every primitive has what each layer asks of it, found in the tables keyed by primitive:
its reference implementation (define), its VJP where differentiable (autodiff.RULES, or the
control-flow rules), its kernel (an expression rule, an elementwise Prim with an LLVM
lowering for every dtype its rule accepts, or a kernel builder of its kind) on each
backend, or a refusal stated here."""
import numpy as np
import pytest

import graphc as gc
from graphc.autodiff import RULES
from graphc.backends.llvm.lowerings import lowering_of
from graphc.control_vjp import CONTROL_RULES
from graphc.ir import REGISTRY, dtypes
from graphc.kernels.builders import BUILDERS
from graphc.kernels.expressions import EXPRESSIONS
from graphc.kernels.ir import Buffer

# the kernel builder (graphc.kernels.builders) or region compiler for a non-fusible kind
KERNEL_OF_KIND = {"reduce": "row", "dot": "dot", "conv": "conv", "scatter": "scatter",
                  "collective": "collective", "control": "bodies"}
# what a backend does not run as a kernel, and what happens instead
REFUSED = {
    ("cuda", "winograd_conv2d"): "its graph passes (conv_to_patches) decompose it into "
                                 "slices, sums and one batched product",
    ("cuda", "all_reduce"): "collectives run on the CPU (MPI)",
    ("cuda", "all_gather"): "collectives run on the CPU (MPI)",
    ("cuda", "reduce_scatter"): "collectives run on the CPU (MPI)",
    ("cuda", "send"): "messages between processes run on the CPU (MPI)",
    ("cuda", "recv"): "messages between processes run on the CPU (MPI)",
}
LOGICAL_OPS = ("and", "or", "xor", "not")


def test_every_primitive_has_a_reference_and_its_facts():
    for name, p in REGISTRY.items():
        assert callable(p.rule) and callable(p.impl), name
        assert p.cost >= 0, name
        assert not p.remap or p.kind == "view", name
        if p.libm:
            assert len(p.libm) == 2 and p.transcendental, name


def test_every_differentiable_primitive_has_a_vjp():
    # placeholders and variables are the leaves gradients are taken with respect to
    missing = [n for n, p in REGISTRY.items() if p.differentiable and n not in RULES
               and n not in CONTROL_RULES and n not in ("get", "parameter", "variable")]
    assert missing == []
    assert not [n for n in RULES if not REGISTRY[n].differentiable]


def _elementwise_dtypes(name):
    """The dtypes primitive `name`'s rule accepts (for its operands)."""
    ok = []
    for dt in dtypes.ALL_DTYPES:
        with gc.Graph("probe"):
            x = gc.placeholder((2,), dt)
            args = {"compare": (x, x), "select": (x > x if dt != "bool" else x, x, x),
                    "convert": (x,)}.get(name)
            if args is None:
                args = (x,) * REGISTRY[name].arity
            try:
                attrs = {"compare": {"direction": "lt"}, "convert": {"dtype": "float32"}}
                gc.extend.bind(name, *args, **attrs.get(name, {}))
            except gc.GraphcError:
                continue
            ok.append(dt)
    return ok


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_primitive_has_a_kernel_on_each_backend_or_a_stated_refusal(backend):
    for name, p in REGISTRY.items():
        if (backend, name) in REFUSED:
            continue
        if name in EXPRESSIONS or p.kind in ("view", "source", "gather", "rng"):
            assert name in EXPRESSIONS or name in ("parameter", "variable"), name
            continue
        if p.kind == "elementwise":
            accepted = _elementwise_dtypes(name)
            assert accepted, name
            for dt in accepted:
                is_float = dtypes.is_float(dt) and name not in LOGICAL_OPS
                assert lowering_of(name, is_float) is not None, (name, dt)
            continue
        kind = KERNEL_OF_KIND[p.kind]
        assert kind == "bodies" or kind in BUILDERS, name


def test_the_cuda_refusals_are_real():
    """CUDA's pipeline leaves no winograd_conv2d; its emitter says so if one comes."""
    from graphc.backends.cuda.emitter import GpuEmitter
    from graphc.kernels.ir import WinogradKernel
    buf = Buffer(1, (1,), "float32", "temp")
    kern = WinogradKernel("k", buf, (), (), (), (), (), None, None, "float32", [])
    with pytest.raises(gc.CompileError, match="no CUDA kernel"):
        GpuEmitter.winograd(object.__new__(GpuEmitter), kern)
    x = gc.placeholder((1, 16, 8, 8), "float32", name="x")
    w = gc.constant(np.ones((16, 16, 3, 3), np.float32))
    exe = gc.compile(gc.nn.conv2d(x, w, padding=1), device="cuda", arch="sm_90")
    assert "winograd" not in exe.dump("optimized")
