"""Products of 8-bit integers (gc.matmul_8bit, dot_general's packed_int8): on AMX tiles
(tests/test_amx_int8.py) or AVX512-VNNI's vpdpbusd (backends/cpu/vnni.py) where the CPU
has them, else in the loop nest; every result against numpy's exact int64 product, bit
for bit. The code for a VNNI CPU is built and assembled on every x86-64 machine; the
CUDA lowering assembles."""
import os
import re

import numpy as np
import pytest

import graphc as gc
from graphc.backends.cpu import amx_int8, vnni
from graphc.tensor import bind
from graphc_runtime import host

from bf16_checks import assembly_for, jit_product

VNNI = "+avx512f,+avx512bw,+avx512vl,+avx512vnni"
X86 = host.llvm().get_process_triple().startswith("x86_64")
has_vnni = vnni.usable(host.host_features())
needs_vnni = pytest.mark.skipif(not has_vnni, reason="this CPU has no AVX512-VNNI")


def low_bytes(v, signed):
    """The values matmul_8bit multiplies: each int32's low byte."""
    return v.astype(np.int64).astype(np.int8 if signed else np.uint8).astype(np.int64)


def exact(a, b):
    """The int32 product (wrapping as int32 does) of a's unsigned and b's signed bytes."""
    return np.matmul(low_bytes(a, False), low_bytes(b, True)).astype(np.int32)


def words(v, axis):
    """v's low bytes packed four to an int32 along axis (as gc.pack_bytes does)."""
    v = np.moveaxis(v.astype(np.int64) & 0xFF, axis, -1)
    pad = -v.shape[-1] % 4
    v = np.concatenate([v, np.zeros(v.shape[:-1] + (pad,), np.int64)], -1)
    w = (v.reshape(v.shape[:-1] + (-1, 4)) << (8 * np.arange(4))).sum(-1)
    return np.ascontiguousarray(np.moveaxis(w.astype(np.uint32).view(np.int32), -1, axis))


@pytest.mark.skipif(not X86, reason="vpdpbusd is x86-64 code")
def test_the_code_builds_for_a_cpu_with_vnni_everywhere():
    for form in (vnni.UNSIGNED_A, vnni.SIGNED_A):
        asm = assembly_for(form.build, "icelake-server", VNNI)
        assert "vpdpbusd" in asm and "zmm" in asm


def test_which_cpus_run_the_vnni_kernel(monkeypatch):
    assert vnni.usable("+avx512f,+avx512vnni")
    assert not vnni.usable("+avx512f")
    assert not vnni.usable("+avx2,+avxvnni")
    monkeypatch.setenv("GRAPHC_VNNI", "0")
    assert not vnni.usable("+avx512f,+avx512vnni")


def _call(product, a, b_, m, n, q, a_strides, b_strides, ldc):
    c = np.full((m, ldc), -7, np.int32)
    product(m, n, q, a.ctypes.data, *a_strides, b_.ctypes.data, *b_strides, c.ctypes.data,
            ldc)
    return c


@pytest.mark.skipif(not X86, reason="vpdpbusd is x86-64 code")
def test_a_product_without_heap_for_its_packed_copies_runs_unpacked():
    """Where malloc returns NULL the product reads its words where they lie (vpdpbusd
    never runs, so this runs on any x86-64 CPU)."""
    product, _keep = jit_product(vnni.build, vnni.NAME, VNNI, "no_heap")
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (13, 22))
    bt = rng.integers(-128, 128, (9, 22))                # B given transposed
    aw, bw = words(a, 1), words(bt, 1)
    c = _call(product, aw, bw, 13, 9, 6, (6, 1), (1, 6), 11)
    np.testing.assert_array_equal(c[:, :9], exact(a, bt.T))
    assert (c[:, 9:] == -7).all()


@needs_vnni
@pytest.mark.parametrize("m,k,n", [(1, 4, 1), (8, 8, 32), (37, 51, 29), (64, 768, 100),
                                   (9, 1000, 17), (130, 64, 48), (1, 2048, 1000),
                                   (5, 300, 64)])
def test_the_function_matches_the_exact_product(m, k, n):
    """B's panels read where they lie (up to 64 rows, B's rows contiguous: the first
    layout; whole 32-column tiles only) and packed (130 rows; the tails; B transposed)."""
    product, _keep = jit_product(vnni.build, vnni.NAME, VNNI)
    rng = np.random.default_rng(m * k + n)
    a, b_ = rng.integers(0, 256, (m, k)), rng.integers(-128, 128, (k, n))
    aw, bw = words(a, 1), words(b_, 0)
    q = aw.shape[1]
    c = _call(product, aw, bw, m, n, q, (q, 1), (n, 1), n + 3)    # ldc > n: gap kept
    np.testing.assert_array_equal(c[:, :n], exact(a, b_))
    assert (c[:, n:] == -7).all()
    # A given transposed (its words down the columns), B transposed
    at, bt = np.ascontiguousarray(aw.T), np.ascontiguousarray(bw.T)
    c = _call(product, at, bt, m, n, q, (1, m), (1, q), n)
    np.testing.assert_array_equal(c, exact(a, b_))


def _compiled(a, b_, constant_b=False, **options):
    with gc.Graph():
        x = gc.placeholder(a.shape, "int32", name="x")
        y = gc.constant(b_.astype(np.int32)) if constant_b else \
            gc.placeholder(b_.shape, "int32", name="y")
        out = gc.matmul_8bit(x, y)
        exe = gc.compile(out, **options)
        ref = gc.evaluate(out, {"x": a} if constant_b else {"x": a, "y": b_})
    got = exe(a) if constant_b else exe(a, b_)
    return exe, got, ref


CASES = [((5, 7), (7, 3)), ((1, 1), (1, 1)), ((33, 130), (130, 47)), ((128, 768), (768, 96)),
         ((2, 17, 64), (64, 40)), ((3, 20, 36), (3, 36, 33)), ((200, 300), (300, 520))]


@pytest.mark.parametrize("sa,sb", CASES)
def test_matmul_8bit_is_the_exact_product(sa, sb):
    rng = np.random.default_rng(len(sa) * 100 + sa[-1])
    a = rng.integers(0, 256, sa).astype(np.int32)
    b_ = rng.integers(-128, 128, sb).astype(np.int32)
    exe, got, ref = _compiled(a, b_)
    np.testing.assert_array_equal(got, exact(a, b_))
    np.testing.assert_array_equal(ref, exact(a, b_))
    words_ = np.prod(sa[:-1]) * sb[-1] * -(-sa[-1] // 4)   # multiply-adds of words
    if has_vnni and words_ >= 1 << 15 and len(sb) == 2:    # AMX tiles or vpdpbusd
        llvm, asm = exe.dump("llvm"), exe.dump("asm")
        assert (vnni.NAME in llvm and "vpdpbusd" in asm) or \
            (amx_int8.NAME in llvm and "tdpbusd" in asm)


def test_values_count_as_their_low_bytes_and_sums_wrap():
    """Out of range values are their low bytes (0..255 and -128..127), everywhere; a
    sum past int32 wraps as the reference's int32 does."""
    rng = np.random.default_rng(5)
    a = rng.integers(-2 ** 31, 2 ** 31, (40, 64)).astype(np.int32)
    b_ = rng.integers(-2 ** 31, 2 ** 31, (64, 48)).astype(np.int32)
    _, got, ref = _compiled(a, b_)
    np.testing.assert_array_equal(got, exact(a, b_))
    np.testing.assert_array_equal(ref, exact(a, b_))
    big_a = np.full((2, 70000), 255, np.int32)
    big_b = np.full((70000, 32), -128, np.int32)
    _, got, ref = _compiled(big_a, big_b)
    want = np.int64(70000 * 255 * -128)
    wrapped = np.int32((want + 2 ** 31) % 2 ** 32 - 2 ** 31)
    assert (got == wrapped).all() and (ref == wrapped).all()


def test_a_constant_operand_is_packed_at_compile_time_and_threads_agree():
    rng = np.random.default_rng(6)
    a = rng.integers(0, 256, (300, 256)).astype(np.int32)
    b_ = rng.integers(-128, 128, (256, 520)).astype(np.int32)
    outs = []
    for threads in (1, 2, 3):
        exe, got, _ = _compiled(a, b_, constant_b=True, num_threads=threads)
        np.testing.assert_array_equal(got, exact(a, b_))
        outs.append(got)
    packed = [line for line in exe.dump("optimized").splitlines() if "packed_int8" in line]
    assert len(packed) == 1
    # the weight's words are a constant: only A's are computed when the program runs
    assert exe.dump("optimized").count("bitwise_and") + \
        exe.dump("optimized").count(" and(") <= 1


@needs_vnni
def test_batched_products_give_each_thread_whole_products():
    """Attention's products (a batch of heads): threads take whole heads, so each call
    of the kernel multiplies all of a head's rows (its packing of B done once), not a
    chunk of them; results equal the exact product."""
    rng = np.random.default_rng(9)
    a = rng.integers(0, 256, (2, 12, 128, 128)).astype(np.int32)
    b_ = rng.integers(-128, 128, (2, 12, 128, 64)).astype(np.int32)
    with gc.Graph():
        pa = gc.placeholder(a.shape, "int32", name="a")
        pb = gc.placeholder(b_.shape, "int32", name="b")
        exe = gc.compile(gc.matmul_8bit(pa, pb), num_threads=2)
    np.testing.assert_array_equal(exe(a, b_), np.einsum(
        "hgik,hgkj->hgij", a.astype(np.int64), b_.astype(np.int64)).astype(np.int32))
    calls = re.findall(r"call \w+ @\"?graphc_own_gemm_(?:vnni|amxi8)_int32\"?\(i64 (\S+),",
                       exe.dump("llvm"))
    assert calls and all(m == "128" for m in calls), calls    # all 128 rows in each call


def test_the_loop_nest_computes_the_same_bits(monkeypatch):
    monkeypatch.setenv("GRAPHC_VNNI", "0")
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (64, 100)).astype(np.int32)
    b_ = rng.integers(-128, 128, (100, 80)).astype(np.int32)
    exe, got, _ = _compiled(a, b_)
    assert vnni.NAME not in exe.dump("llvm") and amx_int8.NAME not in exe.dump("llvm")
    np.testing.assert_array_equal(got, exact(a, b_))


def test_packed_dot_general_reference_and_errors():
    rng = np.random.default_rng(8)
    aw = rng.integers(-2 ** 31, 2 ** 31, (4, 3)).astype(np.int32)
    bw = rng.integers(-2 ** 31, 2 ** 31, (3, 5)).astype(np.int32)
    with gc.Graph():
        x = gc.placeholder(aw.shape, "int32", name="x")
        y = gc.placeholder(bw.shape, "int32", name="y")
        out = bind("dot_general", x, y, lhs_contracting=(1,), rhs_contracting=(0,),
                   lhs_batch=(), rhs_batch=(), packed_int8="us")
        got = gc.evaluate(out, {"x": aw, "y": bw})
        with pytest.raises(gc.DTypeError, match="matmul_8bit: a must be an int32"):
            gc.matmul_8bit(gc.cast(x, "float32"), y)
        f = gc.placeholder((4, 3), "float32", name="f")
        with pytest.raises(gc.DTypeError, match="packed_int8=.us. needs int32"):
            bind("dot_general", f, f, lhs_contracting=(1,), rhs_contracting=(1,),
                 lhs_batch=(), rhs_batch=(), packed_int8="us")
    ua = aw.view(np.uint8).reshape(4, 12).astype(np.int64)
    sb = np.moveaxis(np.ascontiguousarray(bw.T).view(np.int8).reshape(5, 12), 0, 1)
    np.testing.assert_array_equal(got, (ua @ sb.astype(np.int64)).astype(np.int32))


PTXAS = os.environ.get("PTXAS") or next(
    (p for p in ("/usr/local/bin/ptxas",) if os.path.exists(p)), None)


@pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA toolkit) not found")
def test_the_cuda_lowering_assembles(tmp_path):
    from test_cuda_ptx import ptxas
    with gc.Graph():
        x = gc.placeholder((64, 96), "int32", name="x")
        y = gc.placeholder((96, 80), "int32", name="y")
        exe = gc.compile(gc.matmul_8bit(x, y), device="cuda", arch="sm_90")
    report = ptxas(exe.dump("ptx"), "sm_90", tmp_path)
    assert "error" not in report.lower()


def _dot_kernels(build, threads=2):
    """The lowered dot kernels of a program computing build() (in a graph of its own)."""
    from test_chaining import _lowered
    g = gc.Graph()
    with g:
        out = build()
    return [k for k in _lowered(g, out, threads).kernels if k.kind == "dot"]


@needs_vnni
def test_a_chain_led_by_an_8bit_product_blocks_only_where_its_other_operand_is_small():
    """A chained follower runs block by block inside the leader's chunks; an 8-bit
    product packs (or reads again) its whole other operand at every call, so where that
    operand is larger than a block, the chunks run whole (module._unblocked_chain)."""
    from graphc.backends.cpu import module as codegen
    from graphc.kernels import index as ix
    rng = np.random.default_rng(13)
    for (m, k, n), unblocked in (((512, 768, 3072), True), ((512, 64, 64), False)):
        y = rng.integers(-128, 128, (k, n)).astype(np.int32)
        kern, = _dot_kernels(lambda: gc.matmul_8bit(
            gc.placeholder((m, k), "int32", name="x"), gc.constant(y)))
        rows = next(v for v in kern.m_vars if isinstance(v, ix.IVar))
        assert codegen._unblocked_chain(kern, rows) is unblocked, (m, k, n)
    # graphc's own float32 kernels keep their blocks
    kern, = _dot_kernels(lambda: gc.placeholder((512, 64), "float32", name="x") @
                         gc.constant(np.ones((64, 64), np.float32)))
    rows = next(v for v in kern.m_vars if isinstance(v, ix.IVar))
    assert not codegen._unblocked_chain(kern, rows)


@needs_vnni
def test_a_long_epilogue_of_an_8bit_product_runs_four_vectors_side_by_side():
    """An epilogue of 48 or more primitives an element (a GELU between quantize pairs)
    interleaves four vectors in its loop, as a loop kernel of that length does."""
    rng = np.random.default_rng(14)
    a = rng.integers(0, 256, (64, 256)).astype(np.int32)
    b_ = rng.integers(-128, 128, (256, 512)).astype(np.int32)
    from graphc.backends.llvm.emitter import CHAIN_INTERLEAVE, chain_interleave

    def gelus(x):
        h = gc.cast(gc.matmul_8bit(x, gc.constant(b_)), "float32") * 1e-3
        for step in (0.05, 0.03, 0.02, 0.04, 0.01, 0.06, 0.07):   # fake quantization
            h = gc.clip(gc.round(h / step), -128.0, 127.0) * step
            h = h * 0.5 * (gc.erf(h * 0.7071) + 1.0)
        return h
    with gc.Graph():
        x = gc.placeholder(a.shape, "int32", name="x")
        h = gelus(x)
        exes = {t: gc.compile(h, num_threads=t) for t in (1, 2)}
        want = gc.evaluate(h, {"x": a})
    got = exes[1](a)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)   # erf: graphc's own
    np.testing.assert_array_equal(exes[2](a), got)
    kern, = _dot_kernels(lambda: gelus(gc.placeholder(a.shape, "int32", name="x")), 1)
    assert chain_interleave(kern.epilogue) == CHAIN_INTERLEAVE     # the product's epilogue
    short, = _dot_kernels(lambda: gc.cast(gc.matmul_8bit(
        gc.placeholder(a.shape, "int32", name="x"), gc.constant(b_)), "float32") * 2.0)
    assert chain_interleave(short.epilogue) == 0
