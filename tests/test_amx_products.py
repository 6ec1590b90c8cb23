"""bfloat16 products on AMX tiles (backends/cpu/amx.py): the code is checked on every
machine (LLVM builds and assembles it for a CPU with amx-bf16); it runs where this one
has the tiles and the kernel grants them, against the exact product rounded once."""
import numpy as np
import pytest

import graphc as gc
from graphc.backends.cpu import amx, gemm_ir
from graphc_runtime import host
from graphc_runtime.errors import CompileError

from bf16_checks import (BF16, PRODUCT_CASES, close_to_exact, compiled_product_matches, exact,
                         jit_product, same_bits_for_any_thread_count, unpacked_without_heap)


def _tiles_here() -> bool:
    return amx.usable(host.host_features())


needs_tiles = pytest.mark.skipif(not _tiles_here(),
                                 reason="this CPU has no AMX tiles (amx-tile, amx-bf16) "
                                        "or the kernel did not grant them")


def test_the_tile_code_builds_for_a_cpu_with_amx_everywhere():
    """The product function (driver and tile kernel) parses, verifies, optimizes and
    assembles for Sapphire Rapids, whatever CPU runs the test."""
    import llvmlite.ir as ir
    b = host.llvm()
    module = ir.Module("amx")
    amx.build(module).linkage = "external"
    parsed = b.parse_assembly(str(module))
    parsed.link_in(b.parse_assembly(amx.BLOCK_IR))
    parsed.verify()
    tm = b.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(
        cpu="sapphirerapids", features="+amx-tile,+amx-bf16,+avx512f,+avx512bw", opt=3)
    from graphc.backends.llvm import features
    features.optimize(parsed, tm, 3)
    asm = tm.emit_assembly(parsed)
    assert "tdpbf16ps" in asm and "ldtilecfg" in asm and "tileloadd" in asm
    assert amx.BLOCK.encode() in tm.emit_object(parsed)


def test_no_tiles_without_the_cpu_features(monkeypatch):
    assert not amx.usable("+avx512f,+avx512bf16")
    monkeypatch.setattr(host, "_amx", False)        # the kernel said no
    assert not amx.usable("+amx-tile,+amx-bf16,+avx512f")


def test_code_with_tiles_is_refused_where_the_process_may_not_use_them(monkeypatch):
    monkeypatch.setattr(host, "_amx", None)
    monkeypatch.setattr(host, "_request_amx", lambda ask=False: False)
    with pytest.raises(CompileError, match="AMX tiles"):
        host.grant_amx(b"...graphc_amx_block...")
    host.grant_amx(b"object code without tiles")     # nothing asked, nothing raised


@needs_tiles
@pytest.mark.parametrize("m,k,n,form", PRODUCT_CASES)
def test_products_on_tiles_match_the_exact_product(m, k, n, form):
    exe = compiled_product_matches(m, k, n, form)
    if m * n * k >= 1 << 14:              # the tiles ran it (small ones: a loop nest)
        assert amx.NAME in exe.dump("llvm")
        assert "tdpbf16ps" in exe.dump("asm")


@needs_tiles
def test_batched_products_and_a_product_with_itself():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 40, 64)).astype(BF16)
    b = rng.standard_normal((3, 64, 72)).astype(BF16)
    with gc.Graph():
        x = gc.placeholder(a.shape, "bfloat16", name="x")
        y = gc.placeholder(b.shape, "bfloat16", name="y")
        exe = gc.compile({"xy": x @ y, "xx": x @ gc.transpose(x, (0, 2, 1))})
    got = exe(x=a, y=b)
    close_to_exact(got["xy"], exact(a, b))
    close_to_exact(got["xx"], exact(a, np.swapaxes(a, 1, 2)))


@needs_tiles
def test_results_do_not_depend_on_the_thread_count():
    same_bits_for_any_thread_count()


@needs_tiles
def test_gradients_of_a_bfloat16_layer_on_tiles():
    rng = np.random.default_rng(9)
    xv = rng.standard_normal((64, 96)).astype(BF16)
    w0 = (rng.standard_normal((96, 80)) * 0.1).astype(BF16)
    with gc.Graph():
        x = gc.placeholder(xv.shape, "bfloat16", name="x")
        w = gc.variable(w0, name="w")
        loss = gc.sum(gc.cast(gc.tanh(x @ w), "float32") ** 2)
        gx, gw = gc.grad(loss, [x, w])
        exe = gc.compile({"loss": loss, "gx": gx, "gw": gw})
        want = gc.evaluate({"loss": loss, "gx": gx, "gw": gw}, {"x": xv})
    got = exe(x=xv)
    assert "tdpbf16ps" in exe.dump("asm")
    for key in ("gx", "gw"):
        w_, g_ = want[key].astype(np.float32), got[key].astype(np.float32)
        np.testing.assert_allclose(g_, w_, rtol=0.02, atol=0.02 * np.abs(w_).max())
    np.testing.assert_allclose(float(got["loss"]), float(want["loss"]), rtol=1e-2)


@needs_tiles
def test_an_artifact_with_tiles_loads_and_runs(tmp_path):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((128, 64)).astype(BF16)
    b = rng.standard_normal((64, 128)).astype(BF16)
    with gc.Graph():
        x = gc.placeholder(a.shape, "bfloat16", name="x")
        y = gc.placeholder(b.shape, "bfloat16", name="y")
        exe = gc.compile(x @ y)
    path = tmp_path / "m.gcm"
    exe.save(path)
    import graphc_runtime
    loaded = graphc_runtime.load(path)
    assert np.array_equal(loaded(a, b).view(np.uint16), exe(a, b).view(np.uint16))


def test_the_optimized_ir_is_cached_like_the_other_kernels():
    if not _tiles_here():
        pytest.skip("this CPU has no AMX tiles")
    text = gemm_ir.compiled(amx.NAME, host.host_features(), 3)[1]
    assert amx.BLOCK in text and "x86_amx" in text


@needs_tiles
def test_wide_convolutions_run_on_tiles_and_narrow_ones_on_the_float32_kernels():
    """A convolution with 64+ terms per output and 32+ output channels runs over patches
    on the tiles; a digits-sized one stays on the float32 kernels (the tiles would be
    mostly padding). Both match the reference's bfloat16 convolution."""
    rng = np.random.default_rng(13)
    for (c, o, tiles) in ((64, 32, True), (8, 16, False)):
        img = rng.standard_normal((2, c, 12, 12)).astype(BF16)
        k0 = (rng.standard_normal((o, c, 3, 3)) * 0.1).astype(BF16)
        with gc.Graph():
            x = gc.placeholder(img.shape, "bfloat16", name="x")
            k = gc.variable(k0, name="k")
            y = gc.nn.conv2d(x, k, padding=1)
            exe = gc.compile(y)
            want = gc.evaluate(y, {"x": img})
        assert ("tdpbf16ps" in exe.dump("asm")) == tiles
        got, want = exe(img).astype(np.float64), want.astype(np.float64)
        assert np.abs(got - want).max() <= np.abs(want).max() * 2.0 ** -7


def test_a_product_without_heap_for_its_packed_copies_runs_unpacked():
    """Where malloc returns NULL, the tile product reads its operands where they lie
    (B here by its transpose's strides) and still matches the exact product: the tiles
    never run, so this runs on any x86-64 CPU."""
    if not host.llvm().get_process_triple().startswith("x86_64"):
        pytest.skip("the tile code builds for x86-64 only")
    product, _keep = jit_product(amx.build, amx.NAME, "+amx-tile,+amx-bf16", "no_heap",
                                 amx.BLOCK_IR)
    unpacked_without_heap(product)
