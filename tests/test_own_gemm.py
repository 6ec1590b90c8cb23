"""graphc's own GEMM kernels (backends/cpu/gemm.py) for small products: chosen where they
beat OpenBLAS, exact against numpy in float64, every tail of rows / columns, transposed
operands, batches, symbolic sizes, and the same bits for any thread count."""
import re

import numpy as np
import pytest

import graphc as gc
from graphc.backends.cpu.dot_plan import own_form


def _compile(shapes, fn, dtype="float32", threads=None):
    with gc.Graph("own_gemm"):
        ps = [gc.placeholder(s, dtype, name=f"p{i}") for i, s in enumerate(shapes)]
        return gc.compile(fn(*ps), num_threads=threads)


def _feeds(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return {f"p{i}": rng.standard_normal(s).astype(dtype) for i, s in enumerate(shapes)}


def _check(exe, feeds, expected, dtype):
    got = exe(**feeds)
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * np.abs(expected).max())


# (M, K, N): full tiles, row tails (M % 6 on AVX-512, % 4 on AVX2: tiles of 4, 2, 1),
# column tails (N % 64, % 32, % 16, < 16)
NN_SHAPES = [(32, 256, 1024), (4, 64, 32), (13, 40, 70), (9, 33, 47), (127, 100, 33),
             (11, 50, 100), (23, 64, 200),
             (5, 1000, 48), (8, 1, 4096), (1, 2048, 1024), (1, 300, 200),
             (20, 2500, 40), (9, 1025, 33), (64, 3000, 64),     # k in passes
             (16, 40, 9000),                                    # B packed (over 1 MB)
             (300, 70, 130), (1000, 200, 64),                   # rows in blocks of 128
             (64, 300, 49), (40, 96, 196),      # B's rows not whole lines apart: copied,
             (40, 1500, 50), (48, 100, 45),     # the last columns as a zero-padded panel
             (43, 64, 36), (40, 96, 104),       # (as many vectors as they need: 1-4)
             (40, 96, 88)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mkn", NN_SHAPES)
def test_nn_form_matches_numpy(mkn, dtype):
    m, k, n = mkn
    exe = _compile([(m, k), (k, n)], lambda a, b: a @ b, dtype)
    feeds = _feeds([(m, k), (k, n)], dtype)
    if m * n * k >= 1 << 15:
        assert "graphc_own_gemm_nn" in exe.dump("llvm")
    _check(exe, feeds, feeds["p0"].astype(np.float64) @ feeds["p1"], dtype)


@pytest.mark.parametrize("first", [0, 1, 5])
def test_b_off_the_cache_lines_is_read_right(first):
    """B a view starting `first` columns into its buffer (and its rows 64 + 8 floats
    apart): its panels are copied to aligned ones, tails masked."""
    m, k, n = 96, 130, 49
    exe = _compile([(m, k), (k, 72)], lambda a, b: a @ b[:, first:first + n])
    feeds = _feeds([(m, k), (k, 72)], "float32")
    assert "graphc_own_gemm_nn" in exe.dump("llvm")
    _check(exe, feeds, feeds["p0"].astype(np.float64) @ feeds["p1"][:, first:first + n],
           "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mkn", [(32, 1024, 256), (1, 128, 300), (7, 128, 50), (64, 80, 13),
                                 (3, 4096, 9),
                                 (8, 50176, 9), (3, 8192, 5)])   # few outputs, long sums
def test_nt_form_matches_numpy(mkn, dtype):
    """a @ w.T with w (N, K): each output a dot product along k."""
    m, k, n = mkn
    exe = _compile([(m, k), (n, k)], lambda a, w: a @ w.T, dtype)
    assert "graphc_own_gemm_nt" in exe.dump("llvm")
    feeds = _feeds([(m, k), (n, k)], dtype)
    _check(exe, feeds, feeds["p0"].astype(np.float64) @ feeds["p1"].T, dtype)


def test_transposed_a_batches_and_an_epilogue():
    """A read through its transpose (a_col = lda), a batch of products, a fused epilogue."""
    shapes = [(6, 64, 20), (6, 64, 96), (96,)]
    exe = _compile(shapes, lambda a, b, c: gc.tanh(gc.matmul(a.transpose(0, 2, 1), b) + c))
    feeds = _feeds(shapes, "float32")
    a, b, c = (feeds[f"p{i}"].astype(np.float64) for i in range(3))
    assert "graphc_own_gemm_nn" in exe.dump("llvm")
    _check(exe, feeds, np.tanh(np.transpose(a, (0, 2, 1)) @ b + c), "float32")


@pytest.mark.parametrize("threads", [2, 3])
def test_same_bits_for_any_thread_count(threads):
    shapes = [(32, 256), (256, 1000), (1000, 256)]

    def fn(h, w, v):
        return [h @ w, (h @ w) @ w.T, gc.matmul(h, v.T)]
    feeds = _feeds(shapes, "float32", seed=1)
    one = _compile(shapes, fn, threads=1)(**feeds)
    many = _compile(shapes, fn, threads=threads)(**feeds)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)


def test_a_symbolic_batch_of_products():
    """The number of products known at the call only."""
    with gc.Graph("sym"):
        x = gc.placeholder(("b", 16, 256), name="x")
        w = gc.placeholder(("b", 256, 64), name="w")
        exe = gc.compile(gc.matmul(x, w))
    assert "graphc_own_gemm_nn" in exe.dump("llvm")
    rng = np.random.default_rng(2)
    for batch in (1, 3, 20):
        x0 = rng.standard_normal((batch, 16, 256)).astype(np.float32)
        w0 = rng.standard_normal((batch, 256, 64)).astype(np.float32)
        _check(exe, {"x": x0, "w": w0}, x0.astype(np.float64) @ w0, "float32")


def test_gradients_through_the_own_kernels():
    """An RNN-sized step's gradients (the nt form for dh) against float64 numpy."""
    rng = np.random.default_rng(3)
    h0 = rng.standard_normal((16, 128)).astype(np.float32)
    w0 = (rng.standard_normal((128, 512)) * 0.1).astype(np.float32)
    with gc.Graph("grad"):
        h = gc.placeholder(h0.shape, name="h")
        w = gc.placeholder(w0.shape, name="w")
        loss = gc.tanh(h @ w).sum()
        dh, dw = gc.grad(loss, [h, w])
        exe = gc.compile([dh, dw])
    got_dh, got_dw = exe(h=h0, w=w0)
    hd, wd = h0.astype(np.float64), w0.astype(np.float64)
    g = 1 - np.tanh(hd @ wd) ** 2
    np.testing.assert_allclose(got_dh, g @ wd.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_dw, hd.T @ g, rtol=1e-4, atol=1e-4)


def test_where_the_own_kernels_are_chosen():
    plan = lambda M, N, K, ta=111, tb=111: {"M": M, "N": N, "K": K, "trans_a": ta,
                                            "trans_b": tb}
    assert own_form(plan(32, 1024, 256)) == "nn"
    assert own_form(plan(2048, 1024, 1024)) is None      # OpenBLAS's packed kernels
    assert own_form(plan(2048, 1024, 512)) == "nn"       # short sums: any size
    assert own_form(plan(2048, 64, 256)) == "nn"         # few columns, many rows
    assert own_form(plan(1, 1024, 2048)) == "nn"         # a matrix-vector product
    assert own_form(plan(2, 1024, 256)) is None
    assert own_form(plan(32, 1024, 4096)) == "nn"        # in blocks of k
    assert own_form(plan(32, 16, 256)) is None           # too few columns
    assert own_form(plan(32, 256, 1024, tb=112)) == "nt"
    assert own_form(plan(32, 256, 1000, tb=112)) is None  # K not a multiple of 16
    assert own_form(plan(32, 256, 1024, ta=112, tb=112)) is None
    assert own_form(plan(8, 9, 50176, tb=112)) == "nt"   # few outputs: any length
    assert own_form(plan(16, 72, 12544, tb=112)) is None  # 1,152 outputs: OpenBLAS
    assert own_form(plan(8, 9, 50177, tb=112)) is None


def _jit_kernels(features):
    """The own-GEMM functions (nn, nt, nnw) built for `features`' register layout,
    compiled for this machine: {(form, dtype): callable}."""
    import ctypes

    import llvmlite.ir as ir

    from graphc.backends.llvm import features as llvm_features
    from graphc.backends.cpu.gemm import GemmBuilder
    from graphc_runtime.cpu import host_target_machine, llvm
    b = llvm()
    module = ir.Module("own_gemm_test")
    module.triple = b.get_process_triple()
    gb = GemmBuilder(module, features)
    names = {}
    for form in ("nn", "nt", "nnw"):
        for dtype in ("float32", "float64"):
            fn = gb.function(form, dtype)
            fn.linkage = "external"
            names[form, dtype] = fn.name
    parsed = b.parse_assembly(str(module))
    parsed.verify()
    tm = host_target_machine(2)
    llvm_features.optimize(parsed, tm, 2)
    engine = b.create_mcjit_compiler(parsed, tm)
    engine.finalize_object()
    P, L = ctypes.c_void_p, ctypes.c_int64
    proto = ctypes.CFUNCTYPE(None, L, L, L, P, L, L, P, L, P, L)
    windowed = ctypes.CFUNCTYPE(None, L, L, L, L, P, L, L, P, L, P, P, L, L, L)
    return engine, {k: (windowed if k[0] == "nnw" else proto)(engine.get_function_address(v))
                    for k, v in names.items()}


@pytest.mark.parametrize("features", ["+avx2,+fma", "+avx512f"])
def test_kernels_for_each_register_layout(features):
    """256-bit (AVX2: nn's tiles 4 x 3 vectors, nt's 4 x 2) and 512-bit (6 x 4, 8 x 2)
    layouts, every tail, strided A and a ldc wider than N, called directly."""
    from graphc_runtime.cpu import host_features
    if features == "+avx512f" and "+avx512f" not in host_features().split(","):
        pytest.skip("this machine has no AVX-512")
    engine, kernels = _jit_kernels(features)
    rng = np.random.default_rng(4)
    for (form, dtype), fn in kernels.items():
        if form == "nnw":
            continue
        for m, n, k in [(1, 300, 48), (3, 5, 16), (9, 33, 32), (17, 70, 64), (8, 16, 16),
                        (11, 50, 48), (40, 49, 64),            # B's rows off the lines
                        (9, 40, 2048), (20, 9000, 64)]:        # k in blocks; B packed
            a = rng.standard_normal((m, k + 3)).astype(dtype)      # lda = k + 3
            bmat = rng.standard_normal((k, n) if form == "nn" else (n, k)).astype(dtype)
            c = np.full((m, n + 2), -7.0, dtype)                   # ldc = n + 2
            fn(m, n, k, a.ctypes.data, k + 3, 1, bmat.ctypes.data, bmat.shape[1],
               c.ctypes.data, n + 2)
            ref = a[:, :k].astype(np.float64) @ (bmat if form == "nn" else bmat.T)
            tol = 1e-5 if dtype == "float32" else 1e-12
            np.testing.assert_allclose(c[:, :n], ref, rtol=tol, atol=tol * np.abs(ref).max(),
                                       err_msg=f"{form} {dtype} {m}x{n}x{k}")
            assert (c[:, n:] == -7.0).all()                        # nothing past N written
    del engine


@pytest.mark.parametrize("features", ["+avx2,+fma", "+avx512f"])
def test_windowed_kernel_for_each_register_layout(features):
    """nnw: B's row k1*K2 + k2 starts at k1*ldb + offsets[k2] (overlapping rows, as a
    convolution's patch matrix read in place), its columns in runs of `row` `pitch`
    apart (an image's output rows); every tail, several passes over k1, a strided A
    and a ldc wider than N, called directly."""
    from graphc_runtime.cpu import host_features
    if features == "+avx512f" and "+avx512f" not in host_features().split(","):
        pytest.skip("this machine has no AVX-512")
    engine, kernels = _jit_kernels(features)
    rng = np.random.default_rng(5)
    for dtype in ("float32", "float64"):
        fn = kernels["nnw", dtype]
        for m, n, k1, offsets, row, pitch in [
                (1, 300, 3, [0, 1, 2], 300, 0), (3, 5, 4, [0, 7], 5, 0),
                (9, 33, 5, [0, 1, 2, 40, 41, 42, 80, 81, 82], 33, 0),
                (17, 70, 130, [0, 2, 3, 11, 19, 20, 30, 31, 33], 70, 0),      # passes
                (8, 16, 2, [5], 16, 0), (40, 1088, 32, [0, 1, 34, 35], 1088, 0),
                (9, 256, 8, [0, 1, 2, 18, 19, 20], 16, 18),     # rows of 16, 18 apart
                (1, 160, 3, [0, 1, 2, 34, 35], 32, 34), (20, 96, 70, [0, 1], 32, 35),
                # fewer than FEW_CHANNELS input channels (a stem's 3 over 7 x 7 taps, the
                # taps then in the inner loop) and the first count with channels inside
                (19, 80, 3, list(range(7)) + list(range(40, 47)), 32, 40),
                (19, 80, 8, list(range(7)) + list(range(40, 47)), 32, 40)]:
            k2 = len(offsets)
            cols = np.array([(j // row) * pitch + j % row for j in range(n)])
            ldb = cols.max() + max(offsets) + 4
            a = rng.standard_normal((m, k1 * k2 + 3)).astype(dtype)  # lda = K + 3
            flat = rng.standard_normal(k1 * ldb).astype(dtype)
            table = np.array(offsets, np.int64)
            c = np.full((m, n + 2), -7.0, dtype)                      # ldc = n + 2
            fn(m, n, k1, k2, a.ctypes.data, k1 * k2 + 3, 1, flat.ctypes.data, ldb,
               table.ctypes.data, c.ctypes.data, n + 2, row, pitch)
            rows = np.stack([flat[i * ldb + o + cols] for i in range(k1)
                             for o in offsets]).astype(np.float64)
            ref = a[:, :k1 * k2].astype(np.float64) @ rows
            tol = 1e-5 if dtype == "float32" else 1e-12
            np.testing.assert_allclose(c[:, :n], ref, rtol=tol, atol=tol * np.abs(ref).max(),
                                       err_msg=f"nnw {dtype} {m}x{n}x{k1}x{k2}")
            assert (c[:, n:] == -7.0).all()
    del engine


def test_small_products_on_the_own_kernels_are_shared_by_threads():
    """A pointwise convolution's 64 x 32 @ 32 x 1024 (2M multiply-adds) is below the
    bound that keeps OpenBLAS's chunks on its standard kernels, but the own kernels sum
    in the same order for any split: it runs on both threads, with the same bits."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((32, 1024)).astype(np.float32)
    with gc.Graph():
        x, y = gc.placeholder(a.shape, name="a"), gc.placeholder(b.shape, name="b")
        one = gc.compile(x @ y, num_threads=1)
        two = gc.compile(x @ y, num_threads=2)
    assert re.search(r"@k\d+_dot_job", two.dump("llvm"))      # a pool job
    assert not re.search(r"@k\d+_dot_job", one.dump("llvm"))
    np.testing.assert_array_equal(one(a, b), two(a, b))
    np.testing.assert_allclose(two(a, b), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
