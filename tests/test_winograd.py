"""3x3 stride-1 convolutions by Winograd's F(2x2, 3x3) (winograd_conv2d, produced by
passes/conv_to_gemm.py, run per image by backends/cpu/winograd.py): the primitive's rule
and reference against the direct convolution, compiled results against the reference
interpreter (shapes, padding, threads, epilogues, computed filters, float64, gradients),
and when the pass does not use it."""
import numpy as np
import pytest

import graphc as gc
from graphc.api import bind
from graphc.ir.ops.winograd import filter_transform
from graphc.passes import conv_winograd
from graphc.passes.conv_winograd import winograd_fits


def _conv(x, w, padding=((1, 1), (1, 1)), strides=(1, 1), dilation=(1, 1)):
    return bind("conv", x, w, window_strides=strides, padding=padding,
                lhs_dilation=(1, 1), rhs_dilation=dilation, feature_group_count=1)


def _close(got, want, dtype="float32"):
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def test_reference_matches_the_direct_convolution():
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((2, 5, 8, 12))
    wv = rng.standard_normal((7, 5, 3, 3))
    with gc.Graph("reference"):
        x = gc.placeholder(xv.shape, "float64", name="x")
        xp = gc.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        y = bind("winograd_conv2d", xp, gc.constant(filter_transform(wv)))
        want = _conv(x, gc.constant(wv))
        got, ref = gc.evaluate([y, want], {"x": xv})
    assert got.shape == (2, 7, 8, 12)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_rule_names_what_is_wrong():
    with gc.Graph("rule"):
        u = gc.placeholder((16, 8, 4), name="u")
        with pytest.raises(gc.ShapeError, match="static, even output sizes"):
            bind("winograd_conv2d", gc.placeholder((1, 4, 7, 10), name="odd"), u)
        with pytest.raises(gc.ShapeError, match=r"filters \(16, O, C\)"):
            bind("winograd_conv2d", gc.placeholder((1, 5, 6, 6), name="c5"), u)
        with pytest.raises(gc.DTypeError, match="one dtype"):
            bind("winograd_conv2d", gc.placeholder((1, 4, 6, 6), "float64", name="f64"), u)


CASES = [  # (x shape, out channels, padding, threads)
    ((2, 16, 32, 32), 32, ((1, 1), (1, 1)), 2),        # a ResNet stage: whole images
    ((1, 32, 16, 16), 64, ((1, 1), (1, 1)), 2),        # one image: blocks of tile rows
    ((1, 24, 12, 20), 40, ((1, 1), (1, 1)), 3),        # 2 blocks: ranges of channels
    ((3, 16, 22, 14), 16, ((2, 0), (0, 2)), 2),        # asymmetric padding
    ((2, 16, 20, 18), 24, ((0, 0), (0, 0)), 1),        # no padding: 18 x 16 outputs
    # 32 blocks of one tile row (32 tiles each)
    ((1, 48, 64, 64), 32, ((1, 1), (1, 1)), 2),
    # ResNet-50's first stage (56 x 56 x 64): blocks of two tile rows (56 tiles), each
    # row of 28 tiles in a run of 16 and the last 16
    ((1, 64, 56, 56), 64, ((1, 1), (1, 1)), 2),
    ((2, 16, 28, 28), 24, ((1, 1), (1, 1)), 2),        # rows of 14 tiles: runs of 8
    ((2, 32, 14, 14), 32, ((1, 1), (1, 1)), 1),        # rows of 7 tiles: one loop
    # odd outputs (constant filters): one more padded row and column, dropped after
    ((8, 32, 7, 7), 48, ((1, 1), (1, 1)), 2),          # 128 tiles (ODD_MIN_COLUMNS)
    ((2, 16, 9, 30), 16, ((1, 1), (1, 1)), 2),
]


@pytest.mark.parametrize("xs,o,padding,threads", CASES)
def test_compiled_matches_reference(xs, o, padding, threads):
    rng = np.random.default_rng(1)
    wv = rng.standard_normal((o, xs[1], 3, 3)).astype(np.float32)
    with gc.Graph("winograd"):
        x = gc.placeholder(xs, name="x")
        y = _conv(x, gc.constant(wv), padding)
        if not winograd_fits(y.node, x.node, gc.constant(wv).node):
            y = bind("winograd_conv2d", gc.pad(x, ((0, 0), (0, 0)) + padding),
                     gc.constant(filter_transform(wv)))
        exe = gc.compile(y, num_threads=threads)
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    assert "winograd_conv2d(" in exe.dump("optimized")
    got = exe(**feeds)
    _close(got, want)
    # the same bits on one thread: every output is summed in the same order
    one = gc.compile(y, num_threads=1)
    np.testing.assert_array_equal(one(**feeds), got)


@pytest.mark.parametrize("batch,threads", [(1, 2), (3, 2), (2, 1)])
def test_resnet_block_epilogues(batch, threads):
    """conv -> bias -> relu -> conv -> + x -> relu: the first product's epilogue writes
    the second's padded input, the second's adds the residual; each image's product in
    the kernel's scratch. Bitwise the same with the arena poisoned."""
    rng = np.random.default_rng(2)
    xs = (batch, 32, 16, 16)
    with gc.Graph("block"):
        x = gc.placeholder(xs, name="x")
        w1 = gc.constant(rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1)
        w2 = gc.constant(rng.standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1)
        b1 = gc.constant(rng.standard_normal(32).astype(np.float32))
        h = gc.relu(_conv(x, w1) + b1.reshape((1, 32, 1, 1)))
        y = gc.relu(_conv(h, w2) + x)
        exe = gc.compile(y, num_threads=threads)
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    assert exe.dump("optimized").count("winograd_conv2d(") == 2
    groups = [line for line in exe.dump("fused").splitlines() if line.startswith("group")]
    assert any("[dot]" in g and ":winograd_conv2d" in g and ":pad" in g for g in groups)
    got = exe(**feeds)
    _close(got, want)
    exe._native.poison_arena = True
    np.testing.assert_array_equal(exe(**feeds), got)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_filters_computed_each_call(dtype):
    """Filters that are inputs: their transform is a small product each call."""
    xs, ws = (2, 16, 16, 16), (24, 16, 3, 3)
    with gc.Graph("computed_filters"):
        x = gc.placeholder(xs, dtype, name="x")
        w = gc.placeholder(ws, dtype, name="w")
        y = _conv(x, w)
        exe = gc.compile(y, inputs=[x, w])
        assert "winograd_conv2d(" in exe.dump("optimized")
        for seed in (4, 5):                      # new filters, new transform
            r = np.random.default_rng(seed)
            feeds = {"x": r.standard_normal(xs).astype(dtype),
                     "w": r.standard_normal(ws).astype(dtype)}
            _close(exe(**feeds), gc.evaluate(y, feeds), dtype)


def test_gradients_through_a_winograd_convolution():
    """Training: the forward convolution runs by Winograd, its gradients (themselves
    convolutions) by whatever form fits; both against the reference interpreter."""
    xs, ws = (2, 16, 16, 16), (24, 16, 3, 3)
    rng = np.random.default_rng(6)
    with gc.Graph("grad"):
        x = gc.placeholder(xs, "float64", name="x")
        w = gc.placeholder(ws, "float64", name="w")
        y = _conv(x, w)
        r = gc.constant(rng.uniform(0.5, 1.5, y.shape))
        loss = (gc.tanh(y) * r).sum()
        gx, gw = gc.grad(loss, [x, w])
        exe = gc.compile({"loss": loss, "gx": gx, "gw": gw}, inputs=[x, w])
        assert "winograd_conv2d(" in exe.dump("optimized")
        feeds = {"x": rng.standard_normal(xs), "w": rng.standard_normal(ws) * 0.2}
        got = exe(**feeds)
        want = gc.evaluate({"loss": loss, "gx": gx, "gw": gw}, feeds)
    for k in ("loss", "gx", "gw"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("xs,ws,kw", [
    ((2, 16, 32, 32), (32, 16, 3, 3), {"strides": (2, 2)}),            # strided
    ((2, 16, 32, 32), (32, 16, 3, 3), {"dilation": (2, 2), "padding": ((2, 2), (2, 2))}),
    ((8, 32, 5, 6), (64, 32, 3, 3), {}),           # odd output rows, fewer than 7
    ((2, 8, 32, 32), (32, 8, 3, 3), {}),                               # few channels
    ((2, 16, 32, 32), (32, 16, 5, 5), {"padding": ((2, 2), (2, 2))}),  # 5x5
    # filters whose transform is past WINOGRAD_FILTER_BYTES (lowered for the test)
    ((1, 64, 8, 8), (64, 64, 3, 3), {"padding": ((1, 1), (1, 1))}),
])
def test_other_convolutions_keep_the_direct_product(xs, ws, kw, monkeypatch):
    monkeypatch.setattr(conv_winograd, "WINOGRAD_FILTER_BYTES", 16 * 64 * 64 * 4 - 1)
    rng = np.random.default_rng(7)
    with gc.Graph("direct"):
        x = gc.placeholder(xs, name="x")
        y = _conv(x, gc.constant(rng.standard_normal(ws).astype(np.float32)), **kw)
        exe = gc.compile(y)
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    assert "winograd_conv2d" not in exe.dump("optimized")
    _close(exe(**feeds), want)


def test_the_compile_option_turns_it_off():
    rng = np.random.default_rng(8)
    with gc.Graph("off"):
        x = gc.placeholder((2, 16, 16, 16), name="x")
        y = _conv(x, gc.constant(rng.standard_normal((16, 16, 3, 3)).astype(np.float32)))
        assert "winograd_conv2d(" in gc.compile(y).dump("optimized")
        off = gc.compile(y, winograd=False)
        assert "winograd_conv2d" not in off.dump("optimized")
        assert "window_view" in off.dump("optimized")
        with pytest.raises(gc.CompileError, match="winograd must be True or False"):
            gc.compile(y, winograd="yes")
        feeds = {"x": rng.standard_normal((2, 16, 16, 16)).astype(np.float32)}
        _close(off(**feeds), gc.evaluate(y, feeds))


def test_devices_without_the_kernel_get_it_decomposed():
    """On CUDA (no Winograd kernel) the primitive becomes slices, sums and a batched
    product: checked here through the same decomposition run on the CPU's interpreter."""
    from graphc.passes.conv_winograd import winograd_decomposed as _winograd_decomposed
    from graphc.passes.program import Builder
    rng = np.random.default_rng(9)
    xv = rng.standard_normal((2, 3, 6, 10))
    uv = rng.standard_normal((16, 5, 3))
    with gc.Graph("decomposed") as g:
        xp = gc.placeholder(xv.shape, "float64", name="xp")
        u = gc.constant(uv)
        y = bind("winograd_conv2d", xp, u)
        z = _winograd_decomposed(Builder(g), y.node, xp.node, u.node)
        from graphc.ir.interpreter import run
        got, want = run(g, [z, y.node], {"xp": xv})
    assert z.shape == y.shape == (2, 5, 4, 8)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_symbolic_batch():
    """One program for every batch size: threads take images, or blocks of rows of one."""
    rng = np.random.default_rng(10)
    wv = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    with gc.Graph("symbolic"):
        x = gc.placeholder(("batch", 16, 16, 16), name="x")
        y = gc.relu(_conv(x, gc.constant(wv)))
        exe = gc.compile(y, num_threads=2)
        assert "winograd_conv2d(" in exe.dump("optimized")
        for batch in (1, 3):
            feeds = {"x": rng.standard_normal((batch, 16, 16, 16)).astype(np.float32)}
            _close(exe(**feeds), gc.evaluate(y, feeds))


def test_artifact_runs_without_the_compiler(tmp_path):
    """A saved program with Winograd kernels (their GEMM linked in) loads in the runtime
    alone and gives the same bits."""
    import graphc_runtime
    rng = np.random.default_rng(11)
    with gc.Graph("artifact"):
        x = gc.placeholder((2, 16, 16, 16), name="x")
        y = gc.relu(_conv(x, gc.constant(rng.standard_normal((32, 16, 3, 3)).astype(np.float32))))
        exe = gc.compile(y)
    path = str(tmp_path / "winograd.gcx")
    exe.save(path)
    model = graphc_runtime.load(path)
    xv = rng.standard_normal((2, 16, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(model(x=xv), exe(x=xv))


def test_artifact_stores_the_filters_once_and_computes_their_transform(tmp_path):
    """The program runs on the filters' Winograd transform U (16/9 their size); the
    artifact keeps only the filters and computes U when loaded, checked against U's
    recorded digest: a file whose filters were changed is refused."""
    import hashlib
    import os
    import graphc_runtime
    from graphc_runtime import artifact
    rng = np.random.default_rng(12)
    filters = [rng.standard_normal((64, 64, 3, 3)).astype(np.float32) for _ in range(3)]
    with gc.Graph("filters"):
        x = gc.placeholder((1, 64, 16, 16), name="x")
        h = x
        for f in filters:
            h = gc.relu(_conv(h, gc.constant(f)))
        exe = gc.compile(h)
    assert "winograd_conv2d" in exe.dump("optimized")
    path = tmp_path / "w.gcx"
    exe.save(str(path))
    model = graphc_runtime.load(str(path))
    assert len(model.manifest["derived"]) == 3
    sections = model.manifest["sections"]
    code = sum(r["length"] for k, r in sections.items() if k.startswith(("object", "dump/")))
    weights = sum(f.nbytes for f in filters)
    assert os.path.getsize(path) <= 1.1 * (weights + code)
    xv = rng.standard_normal((1, 64, 16, 16)).astype(np.float32)
    np.testing.assert_array_equal(model(x=xv), exe(x=xv))
    # the filters changed (checksums recomputed): U computed from them is not the U
    # the program was compiled with
    manifest, parts = artifact.parse(path.read_bytes())
    source = next(iter(manifest["derived"].values()))["from"]
    name = f"tensor/{source}" if f"tensor/{source}" in parts else next(
        k for k, r in manifest["sections"].items() if r["sha256"] == source)
    raw = bytearray(parts[name])
    raw[0] ^= 0x40
    parts[name] = bytes(raw)
    body = {k: v for k, v in manifest.items() if k not in ("sections", "format_version")}
    (tmp_path / "bad.gcx").write_bytes(artifact.encode(body, parts))
    with pytest.raises(gc.ArtifactError, match="differs from the one|digest"):
        graphc_runtime.load(str(tmp_path / "bad.gcx"))
    assert hashlib.sha256(parts[name]).hexdigest() != source


def test_blocks_hold_enough_tiles_for_the_products():
    """A block's tile rows: the most within BLOCK_BYTES, but BLOCK_MIN_TILES tiles at
    least (each of the 16 products that wide), or the whole image."""
    from graphc.backends.cpu.winograd import BLOCK_BYTES, BLOCK_MIN_TILES, block_rows
    assert BLOCK_MIN_TILES == 32
    assert block_rows(16, 16, 32 << 10) == 4            # 32 x 32 x 32: 4 rows in 128 KB
    assert block_rows(28, 28, BLOCK_BYTES - 1) == 2     # 56 x 56: 56 tiles, past the bytes
    assert block_rows(14, 14, 16 * 128 * 14 * 4) == 7   # 28 x 28 x 128: 98 tiles
    assert block_rows(7, 7, 16 * 256 * 7 * 4) == 7      # 14 x 14 x 256: the whole image
    assert block_rows(32, 32, 16 * 48 * 32 * 4) == 1    # one row is 32 tiles
    assert block_rows(5, 5, 1 << 30) == 5               # 25 tiles in all: the image


@pytest.mark.parametrize("tiles", [4, 7, 8, 14, 16, 28, 56, 112])
def test_tile_runs_cover_each_row_once_or_twice(tiles):
    """A row's tiles go through runs of a power-of-two length (the innermost loop), the
    last run overlapping the one before it where the length does not divide the row."""
    from itertools import product
    from graphc.backends.cpu.winograd import RUN_MIN_TILES, RUN_TILES, tile_runs
    from graphc.kernels import index as ix
    seen = []
    runs = tile_runs("k", tiles)
    for loops, tile in runs:
        coefs, const = ix.affine(tile)
        extents = [ix.extent_of(v) if isinstance(v, ix.IVar) else 1 for v in loops]
        for values in product(*map(range, extents)):
            seen.append(const + sum(coefs.get(getattr(v, "name", None), 0) * n
                                    for v, n in zip(loops, values)))
    assert sorted(set(seen)) == list(range(tiles))
    inner = ix.extent_of(runs[0][0][-1])
    if tiles < RUN_MIN_TILES:
        assert len(runs) == 1 and inner == tiles
    else:
        assert inner == min(RUN_TILES, 1 << (tiles.bit_length() - 1))
        assert all(ix.extent_of(loops[-1]) == inner for loops, _ in runs)   # the lanes
        assert len(seen) == tiles // inner * inner + (inner if tiles % inner else 0)


def test_odd_outputs_under_computed_filters_keep_the_direct_product():
    """Odd output sizes take Winograd under constant filters only: a transform per call
    costs more than the padded tiles save (docs/performance.md)."""
    with gc.Graph("odd"):
        x = gc.placeholder((8, 32, 7, 7), name="x")
        w = gc.placeholder((32, 32, 3, 3), name="w")
        exe = gc.compile(_conv(x, w), inputs=[x, w])
        assert "winograd_conv2d" not in exe.dump("optimized")
        fixed = gc.compile(_conv(x, gc.constant(np.ones((32, 32, 3, 3), np.float32))))
        assert "winograd_conv2d(" in fixed.dump("optimized")


def test_odd_outputs_of_few_tiles_keep_the_direct_product():
    """A 7 x 7 output is 16 tiles an image: below ODD_MIN_COLUMNS (128) tiles in all, at
    batch 4, it stays a direct product; at batch 8 it takes Winograd. Both match the
    reference."""
    rng = np.random.default_rng(3)
    wv = rng.standard_normal((48, 32, 3, 3)).astype(np.float32)
    for batch, winograd in ((4, False), (8, True)):
        with gc.Graph("odd"):
            x = gc.placeholder((batch, 32, 7, 7), name="x")
            y = _conv(x, gc.constant(wv), ((1, 1), (1, 1)))
            exe = gc.compile(y)
            feeds = {"x": rng.standard_normal((batch, 32, 7, 7)).astype(np.float32)}
            want = gc.evaluate(y, feeds)
        assert ("winograd_conv2d(" in exe.dump("optimized")) == winograd
        _close(exe(**feeds), want)
