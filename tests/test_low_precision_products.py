"""Products and convolutions of bfloat16 / float16 operands run on the float32 kernels
(passes/low_precision_products.py): the reference's arithmetic (float32, one rounding),
the same kernels as float32 (BLAS, own GEMM), and their gradients. (Where the host has
AMX tiles or AVX512-BF16, bfloat16 products run on them instead:
tests/test_amx_products.py, tests/test_bf16_pairs.py; here they are turned off.)"""
import re

import numpy as np
import pytest

import graphc as gc


def _storage(dtype):
    return gc.ir.dtypes.to_numpy(dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,k,n", [(512, 384, 256), (16, 96, 48), (1, 64, 33)])
def test_products_match_the_reference_on_the_float32_kernels(dtype, m, k, n, monkeypatch):
    from graphc_runtime import host
    monkeypatch.setattr(host, "_amx", False)
    monkeypatch.setenv("GRAPHC_BF16_PAIRS", "0")
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)).astype(_storage(dtype))
    b = rng.standard_normal((k, n)).astype(_storage(dtype))
    with gc.Graph():
        x, y = gc.placeholder((m, k), dtype, name="x"), gc.placeholder((k, n), dtype, name="y")
        out = gc.tanh(x @ y)
        exe = gc.compile(out)
        want = gc.evaluate(out, {"x": a, "y": b})
    got = exe(a, b)
    assert got.dtype == want.dtype
    tol = 1e-2 if dtype == "bfloat16" else 2e-3          # one rounding of either side
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32),
                               rtol=tol, atol=tol)
    assert ": f32[" in exe.dump("optimized").split("dot_general", 1)[1].split("\n")[0]
    with gc.Graph():                                  # the kernels a float32 product gets
        x, y = gc.placeholder((m, k), name="x"), gc.placeholder((k, n), name="y")
        wide = gc.compile(gc.tanh(x @ y))
    kernels = lambda e: set(re.findall(r"@(graphc_sgemm|graphc_own_gemm_\w+)", e.dump("llvm")))
    assert kernels(exe) == kernels(wide)
    if m >= 16:
        assert kernels(exe)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_convolutions_and_gradients(dtype):
    rng = np.random.default_rng(3)
    img = rng.standard_normal((2, 8, 12, 12)).astype(_storage(dtype))
    w0 = (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(_storage(dtype))
    with gc.Graph():
        x = gc.placeholder(img.shape, dtype, name="x")
        w = gc.variable(w0, name="w")
        y = gc.nn.conv2d(x, w, padding=1)
        loss = gc.mean(gc.cast(y, "float32") ** 2)
        (gw,) = gc.grad(loss, [w])
        exe = gc.compile({"y": y, "gw": gw})
        want = gc.evaluate({"y": y, "gw": gw}, {"x": img})
    got = exe(x=img)
    tol = 2e-2 if dtype == "bfloat16" else 3e-3
    for key in ("y", "gw"):
        assert got[key].dtype == want[key].dtype
        np.testing.assert_allclose(got[key].astype(np.float32), want[key].astype(np.float32),
                                   rtol=tol, atol=tol * float(np.abs(want[key].astype(
                                       np.float32)).max()))
