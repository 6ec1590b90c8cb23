"""What the bfloat16 product tests share (test_amx_products.py, test_bf16_pairs.py; the
8-bit ones, test_int8_products.py, use the kernel helpers): the exact product rounded
once, the closeness asked of a product in bfloat16, the same product compiled for
several thread counts, a product kernel assembled for another CPU or run alone."""
import numpy as np

import graphc as gc

BF16 = gc.ir.dtypes.to_numpy("bfloat16")


def exact(a, b):
    """The product in float64 rounded to bfloat16 once (through float32: the same
    rounding for every value here)."""
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32) \
        .astype(BF16)


def close_to_exact(got, want):
    """Within one bfloat16 step of the exactly rounded product, scaled to the largest
    term (the float32 sums run in another order than float64's), and nearly every
    element equal to it."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.abs(g - w).max() <= np.abs(w).max() * 2.0 ** -8
    assert np.mean(g != w) < 0.01


def same_bits_for_any_thread_count(seed: int = 7) -> None:
    """relu(x @ y) of bfloat16 operands compiled for 1, 2 and 3 threads: the same bits."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((300, 256)).astype(BF16)
    b = rng.standard_normal((256, 520)).astype(BF16)
    outs = []
    for threads in (1, 2, 3):
        with gc.Graph():
            x = gc.placeholder(a.shape, "bfloat16", name="x")
            y = gc.placeholder(b.shape, "bfloat16", name="y")
            outs.append(gc.compile(gc.relu(x @ y), num_threads=threads)(a, b))
    assert all(np.array_equal(o.view(np.uint16), outs[0].view(np.uint16)) for o in outs)


PRODUCT_CASES = [(64, 64, 64, "nn"), (100, 77, 300, "nt"), (1, 512, 96, "nn"),
                 (33, 65, 47, "tn"), (3, 4, 5, "nn"), (200, 1000, 40, "nt")]


def compiled_product_matches(m, k, n, form):
    """A bfloat16 product of form 'nn', 'nt' (B given transposed) or 'tn' (A given
    transposed), compiled and checked against the exact product; returns the
    executable (the caller asks what ran it)."""
    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((k, m) if form == "tn" else (m, k)).astype(BF16)
    b = rng.standard_normal((n, k) if form == "nt" else (k, n)).astype(BF16)
    with gc.Graph():
        x = gc.placeholder(a.shape, "bfloat16", name="x")
        y = gc.placeholder(b.shape, "bfloat16", name="y")
        lhs = gc.transpose(x) if form == "tn" else x
        rhs = gc.transpose(y) if form == "nt" else y
        exe = gc.compile(lhs @ rhs)
    got = exe(a, b)
    assert got.dtype == BF16
    close_to_exact(got, exact(a.T if form == "tn" else a, b.T if form == "nt" else b))
    return exe


def jit_product(build, name: str, features: str, allocator: str = "", extra_ir: str = ""):
    """(the product function `name` that build(module[, allocator]) defines, compiled for
    this process with `features` added to the host's; what keeps its code alive).
    `allocator`: a malloc that returns NULL, defined beside it; `extra_ir`: IR text
    linked in (amx.BLOCK_IR)."""
    import ctypes

    import llvmlite.ir as ir
    from graphc.backends.llvm import features as llvm_features
    from graphc_runtime import host
    b = host.llvm()
    module = ir.Module(name)
    if allocator:
        i8p = ir.PointerType(ir.IntType(8))
        fail = ir.Function(module, ir.FunctionType(i8p, [ir.IntType(64)]), allocator)
        ir.IRBuilder(fail.append_basic_block("entry")).ret(ir.Constant(i8p, None))
        build(module, allocator=allocator).linkage = "external"
    else:
        build(module).linkage = "external"
    parsed = b.parse_assembly(str(module))
    if extra_ir:
        parsed.link_in(b.parse_assembly(extra_ir))
    parsed.verify()
    tm = b.Target.from_default_triple().create_target_machine(
        cpu=b.get_host_cpu_name(), features=host.host_features() + "," + features, opt=3)
    llvm_features.optimize(parsed, tm, 3)
    engine = b.create_mcjit_compiler(parsed, tm)
    engine.finalize_object()
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE(None, i64, i64, i64, ptr, i64, i64, ptr, i64, i64, ptr, i64)(
        engine.get_function_address(name))
    return fn, (engine, tm, parsed)


def unpacked_without_heap(product) -> None:
    """A product whose malloc returns NULL still matches the exact product (B read by
    its transpose's strides)."""
    rng = np.random.default_rng(17)
    a = rng.standard_normal((37, 50)).astype(BF16)
    bt = rng.standard_normal((29, 50)).astype(BF16)
    c = np.full((37, 29), np.nan, BF16)
    product(37, 29, 50, a.ctypes.data, 50, 1, bt.ctypes.data, 1, 50, c.ctypes.data, 29)
    close_to_exact(c, exact(a, bt.T))


def assembly_for(build, cpu: str, features: str) -> str:
    """The x86-64 assembly of the product function build(module) defines, optimized
    and assembled for `cpu` with `features` (whatever this machine has)."""
    import llvmlite.ir as ir
    from graphc.backends.llvm import features as llvm_features
    from graphc_runtime import host
    b = host.llvm()
    module = ir.Module("product")
    build(module).linkage = "external"
    parsed = b.parse_assembly(str(module))
    parsed.verify()
    tm = b.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(
        cpu=cpu, features=features, opt=3)
    llvm_features.optimize(parsed, tm, 3)
    return tm.emit_assembly(parsed)
