"""bfloat16 products on AVX512-BF16's pair products (backends/cpu/bf16_pairs.py): the
code is checked on every x86-64 machine (LLVM builds and assembles it for a CPU with
avx512bf16); it runs where this one has the instruction and no AMX tiles (those take
bfloat16 products first), against the exact product rounded once."""

import numpy as np
import pytest

import graphc as gc
from graphc.backends.cpu import bf16_pairs
from graphc.backends.cpu.dot_plan import native_bf16
from graphc_runtime import host

from bf16_checks import (BF16, PRODUCT_CASES, assembly_for, close_to_exact,
                         compiled_product_matches, exact,
                         jit_product, same_bits_for_any_thread_count, unpacked_without_heap)
PAIRS = "+avx512f,+avx512bw,+avx512vl,+avx512bf16"
X86 = host.llvm().get_process_triple().startswith("x86_64")

needs_pairs = pytest.mark.skipif(
    native_bf16(host.host_features()) != "dpbf16",
    reason="this CPU has no AVX512-BF16 (or has AMX tiles, which run bfloat16 products)")


@pytest.mark.skipif(not X86, reason="the pair products are x86-64 code")
def test_the_code_builds_for_a_cpu_with_pair_products_everywhere():
    asm = assembly_for(bf16_pairs.build, "znver4", PAIRS)
    assert "vdpbf16ps" in asm and "zmm" in asm


def test_which_form_runs_bfloat16_products(monkeypatch):
    monkeypatch.setattr(host, "_amx", False)
    assert native_bf16("+avx512f,+avx512bf16") == "dpbf16"
    assert native_bf16("+avx512f") is None
    assert native_bf16("+avx2,+avx512bf16") is None
    monkeypatch.setenv("GRAPHC_BF16_PAIRS", "0")
    assert native_bf16("+avx512f,+avx512bf16") is None


@pytest.mark.skipif(not X86, reason="the pair products are x86-64 code")
def test_a_product_without_heap_for_its_packed_copies_runs_unpacked():
    """Where malloc returns NULL the product reads its operands where they lie (the pair
    products never run, so this runs on any x86-64 CPU)."""
    product, _keep = jit_product(bf16_pairs.build, bf16_pairs.NAME, PAIRS, "no_heap")
    unpacked_without_heap(product)


@needs_pairs
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (8, 2, 32), (37, 51, 29), (64, 64, 64),
                                   (100, 77, 300), (9, 1000, 17)])
def test_the_function_matches_the_exact_product(m, k, n):
    product, _keep = jit_product(bf16_pairs.build, bf16_pairs.NAME, PAIRS)
    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    c = np.full((m, n + 3), np.nan, BF16)            # ldc > n: the gap stays untouched
    product(m, n, k, a.ctypes.data, k, 1, b.ctypes.data, n, 1, c.ctypes.data, n + 3)
    close_to_exact(c[:, :n], exact(a, b))
    assert np.isnan(c[:, n:].astype(np.float32)).all()


@needs_pairs
@pytest.mark.parametrize("m,k,n,form", PRODUCT_CASES)
def test_compiled_products_run_on_pair_products(m, k, n, form):
    exe = compiled_product_matches(m, k, n, form)
    if m * n * k < 1 << 14:             # small ones: a loop nest
        return
    assert bf16_pairs.NAME in exe.dump("llvm") and "vdpbf16ps" in exe.dump("asm")


@needs_pairs
def test_results_do_not_depend_on_the_thread_count():
    same_bits_for_any_thread_count()


@needs_pairs
def test_mixed_precision_training_step_and_a_wide_convolution():
    """precision="bf16": forward and backward products on pair products, float32
    master weights; a convolution with 64+ terms an output runs over patches on them."""
    rng = np.random.default_rng(9)
    xv = rng.standard_normal((64, 96)).astype(np.float32)
    w0 = (rng.standard_normal((96, 80)) * 0.1).astype(np.float32)
    with gc.Graph():
        x = gc.placeholder(xv.shape, name="x")
        w = gc.variable(w0, name="w")
        loss = gc.sum(gc.tanh(x @ w) ** 2)
        (gw,) = gc.grad(loss, [w])
        exe = gc.compile({"loss": loss, "gw": gw}, precision="bf16")
        want = gc.evaluate({"loss": loss, "gw": gw}, {"x": xv})
    got = exe(x=xv)
    assert exe.dump("asm").count("vdpbf16ps") >= 1
    np.testing.assert_allclose(got["gw"], want["gw"], rtol=0.03,
                               atol=0.03 * np.abs(want["gw"]).max())
    img = rng.standard_normal((2, 64, 12, 12)).astype(BF16)
    k0 = (rng.standard_normal((32, 64, 3, 3)) * 0.1).astype(BF16)
    with gc.Graph():
        x = gc.placeholder(img.shape, "bfloat16", name="x")
        k = gc.variable(k0, name="k")
        y = gc.nn.conv2d(x, k, padding=1)
        conv = gc.compile(y)
        ref = gc.evaluate(y, {"x": img})
    assert "vdpbf16ps" in conv.dump("asm")
    out, ref = conv(img).astype(np.float64), ref.astype(np.float64)
    assert np.abs(out - ref).max() <= np.abs(ref).max() * 2.0 ** -7


@needs_pairs
def test_turned_off_the_float32_kernels_run_them(monkeypatch):
    monkeypatch.setenv("GRAPHC_BF16_PAIRS", "0")
    a = np.ones((64, 64), BF16)
    with gc.Graph():
        x = gc.placeholder(a.shape, "bfloat16", name="x")
        exe = gc.compile(x @ x)
    assert bf16_pairs.NAME not in exe.dump("llvm")
    assert np.array_equal(exe(a).astype(np.float32), np.full((64, 64), 64.0, np.float32))
