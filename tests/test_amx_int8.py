"""8-bit products on AMX tiles (backends/cpu/amx_int8.py): the code builds and assembles
for a CPU with amx-int8 on every x86-64 machine; where this one has the tiles and the
kernel grants them, every product equals numpy's exact one bit for bit (B's panels
packed and read in place, row, column and word tails, both signednesses, transposed
operands), and compiled programs take the tiles for large products only."""
import numpy as np
import pytest

import graphc as gc
from graphc.backends.cpu import amx, amx_int8, vnni
from graphc_runtime import host

from bf16_checks import jit_product
from test_int8_products import X86, _call, low_bytes, words

FEATURES = "+amx-tile,+amx-int8,+avx512f,+avx512bw,+avx512vl,+avx512vnni"
FORMS = {False: amx_int8.UNSIGNED_A, True: amx_int8.SIGNED_A}
has_tiles = amx_int8.usable(host.host_features())
needs_tiles = pytest.mark.skipif(not has_tiles,
                                 reason="this CPU has no AMX int8 tiles (amx-tile, amx-int8) "
                                        "or the kernel did not grant them")


def _operands(m, k, n, signed_a, seed):
    """(A, B, their exact int32 product): A's bytes signed where signed_a, B's the other
    kind."""
    rng = np.random.default_rng(seed)
    lo_a, hi_a = (-128, 128) if signed_a else (0, 256)
    lo_b, hi_b = (0, 256) if signed_a else (-128, 128)
    a, b_ = rng.integers(lo_a, hi_a, (m, k)), rng.integers(lo_b, hi_b, (k, n))
    want = np.matmul(low_bytes(a, signed_a), low_bytes(b_, not signed_a)).astype(np.int32)
    return a, b_, want


@pytest.mark.skipif(not X86, reason="AMX is x86-64 code")
@pytest.mark.parametrize("signed_a", [False, True])
def test_the_tile_code_builds_for_a_cpu_with_amx_int8_everywhere(signed_a):
    import llvmlite.ir as ir

    from graphc.backends.llvm import features
    form = FORMS[signed_a]
    b = host.llvm()
    module = ir.Module("amx_int8")
    form.build(module).linkage = "external"
    parsed = b.parse_assembly(str(module))
    parsed.link_in(b.parse_assembly(form.block_ir()))
    parsed.verify()
    tm = b.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(
        cpu="sapphirerapids", features=FEATURES, opt=3)
    features.optimize(parsed, tm, 3)
    asm = tm.emit_assembly(parsed)
    assert ("tdpbsud" if signed_a else "tdpbusd") in asm
    assert "ldtilecfg" in asm and "tileloadd" in asm and "tdpbf16ps" not in asm
    # the runtime asks for the tiles before it loads code with this name in it
    assert amx.BLOCK.encode() in tm.emit_object(parsed)


def test_which_cpus_and_products_take_the_tiles(monkeypatch):
    monkeypatch.setattr(host, "_amx", True)             # granted
    assert amx_int8.usable("+amx-tile,+amx-int8,+avx512f")
    assert not amx_int8.usable("+amx-tile,+amx-bf16,+avx512f")
    monkeypatch.setenv("GRAPHC_VNNI", "0")              # 8-bit products in loop nests
    assert not amx_int8.usable("+amx-tile,+amx-int8,+avx512f")
    monkeypatch.delenv("GRAPHC_VNNI")
    monkeypatch.setattr(host, "_amx", False)            # the kernel said no
    assert not amx_int8.usable("+amx-tile,+amx-int8,+avx512f")
    assert amx_int8.worth_tiles(128, 768, 192) and amx_int8.worth_tiles(None, 64, 16)
    assert amx_int8.worth_tiles(16, 768, 192) and amx_int8.worth_tiles(64, 3136, 16)
    assert not amx_int8.worth_tiles(1, 768, 192)        # a single row: vpdpbusd
    assert not amx_int8.worth_tiles(128, 768, 4)        # 16 bytes of k
    assert not amx_int8.worth_tiles(128, 8, 192)
    assert not amx_int8.worth_tiles(16, 3136, 16)       # short both ways


@pytest.mark.skipif(not X86, reason="AMX is x86-64 code")
def test_a_product_without_heap_for_its_packed_copies_runs_unpacked():
    """Where malloc returns NULL the product reads its words where they lie (no tile
    instruction runs, so this runs on any x86-64 CPU)."""
    product, _keep = jit_product(FORMS[False].build, amx_int8.NAME, FEATURES, "no_heap",
                                 extra_ir=amx_int8.block_ir(False))
    a, b_, want = _operands(13, 22, 9, False, 3)
    aw, bw = words(a, 1), words(b_, 0)
    c = _call(product, aw, bw, 13, 9, 6, (6, 1), (9, 1), 11)
    np.testing.assert_array_equal(c[:, :9], want)
    assert (c[:, 9:] == -7).all()


@needs_tiles
@pytest.mark.parametrize("signed_a", [False, True])
@pytest.mark.parametrize("m,k,n", [(1, 4, 1), (37, 51, 29), (64, 768, 100), (9, 1000, 17),
                                   (130, 64, 48), (96, 256, 256), (160, 256, 96),
                                   (33, 300, 65)])
def test_the_function_matches_the_exact_product(m, k, n, signed_a):
    """B read in place (rows of contiguous words in whole tiles of k, 768 and 256
    bytes, at most 128 rows) and packed (the other shapes: 160 rows, short tiles of k,
    the last panel of 100 columns); C with a gap past its columns; then both operands
    given transposed (everything packed)."""
    form = FORMS[signed_a]
    product, _keep = jit_product(form.build, form.NAME, FEATURES, extra_ir=form.block_ir())
    a, b_, want = _operands(m, k, n, signed_a, m * k + n)
    aw, bw = words(a, 1), words(b_, 0)
    q = aw.shape[1]
    c = _call(product, aw, bw, m, n, q, (q, 1), (n, 1), n + 3)
    np.testing.assert_array_equal(c[:, :n], want)
    assert (c[:, n:] == -7).all()
    at, bt = np.ascontiguousarray(aw.T), np.ascontiguousarray(bw.T)
    np.testing.assert_array_equal(_call(product, at, bt, m, n, q, (1, m), (1, q), n), want)


def _compiled_product(a, b_, threads):
    with gc.Graph():
        x = gc.placeholder(a.shape, "int32", name="x")
        y = gc.placeholder(b_.shape, "int32", name="y")
        exe = gc.compile(gc.matmul_8bit(x, y), num_threads=threads)
    return exe, exe(a.astype(np.int32), b_.astype(np.int32))


@needs_tiles
def test_compiled_products_take_the_tiles_when_large_and_threads_agree():
    a, b_, want = _operands(128, 768, 544, False, 11)
    outs = []
    for threads in (1, 2, 3):
        exe, got = _compiled_product(a, b_, threads)
        np.testing.assert_array_equal(got, want)
        outs.append(got)
    assert amx_int8.NAME in exe.dump("llvm") and "tdpbusd" in exe.dump("asm")
    assert vnni.NAME not in exe.dump("llvm")
    a, b_, want = _operands(4, 768, 544, False, 12)     # four rows: vpdpbusd
    exe, got = _compiled_product(a, b_, 2)
    np.testing.assert_array_equal(got, want)
    assert vnni.NAME in exe.dump("llvm") and amx_int8.NAME not in exe.dump("llvm")
