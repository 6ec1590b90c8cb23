"""Layout epilogues (K.layout_epilogue, merge_rules.layout_fits): a CPU product with one
batch axis writes a rearranged copy of its result (the padded input of a depthwise
convolution, its phase planes, a transpose) per image, right after that image's product,
reading it back from the kernel's scratch, and a depthwise window sum over that copy
next. Compiled results against the reference interpreter, the same bits for any thread
count, and the cases that must stay apart."""
import numpy as np
import pytest

import graphc as gc
from graphc.api import bind


def _conv(x, w, stride=1, groups=1, pad=1):
    return bind("conv", x, w, window_strides=(stride, stride), padding=((pad, pad),) * 2,
                lhs_dilation=(1, 1), rhs_dilation=(1, 1), feature_group_count=groups)


def _groups(exe) -> list:
    return [line for line in exe.dump("fused").splitlines() if line.startswith("group")]


def _dot_group(exe) -> str:
    dots = [g for g in _groups(exe) if "[dot]" in g]
    assert len(dots) == 1, dots
    return dots[0]


def _pointwise_then_depthwise(batch, stride, rng, cin=16, cout=32, size=16):
    """1x1 convolution cin -> cout channels, bias, ReLU6, then a 3x3 depthwise one."""
    xs = (batch, cin, size, size)
    x = gc.placeholder(xs, name="x")
    w1 = gc.constant(rng.standard_normal((cout, cin, 1, 1)).astype(np.float32) * 0.3)
    b1 = gc.constant(rng.standard_normal(cout).astype(np.float32))
    w2 = gc.constant(rng.standard_normal((cout, 1, 3, 3)).astype(np.float32))
    h = gc.minimum(gc.maximum(_conv(x, w1, pad=0) + b1.reshape((1, cout, 1, 1)), 0.0), 6.0)
    y = _conv(h, w2, stride, groups=cout)
    return y, {"x": rng.standard_normal(xs).astype(np.float32)}


@pytest.mark.parametrize("stride,cin,cout,size", [
    (1, 16, 32, 16), (2, 16, 32, 16),
    (1, 8, 32, 64),      # the padded copy (557 KB an image) too large for a scratch
])
def test_pointwise_product_writes_the_depthwise_input(stride, cin, cout, size):
    """Stride 1: the padded input; stride 2: its phase planes (pad, reshape, transpose).
    One kernel computes the product, bias, ReLU6, that layout and then the depthwise
    window sum over it, per image (the layout in a scratch when it fits)."""
    def build(seed):
        return _pointwise_then_depthwise(4, stride, np.random.default_rng(seed), cin, cout,
                                         size)
    with gc.Graph("layout"):
        y, feeds = build(stride)
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    assert len(_groups(exe)) == 1
    dot = _dot_group(exe)
    assert all(f":{op}" in dot for op in ("pad", "max", "min", "window_view", "mul"))
    if stride == 2:
        assert ":transpose" in dot
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    for threads in (1, 3):       # every element computed the same way on any split
        with gc.Graph("layout"):
            y2, _ = build(stride)
            other = gc.compile(y2, num_threads=threads)
        np.testing.assert_array_equal(other(**feeds), got)
    exe._native.poison_arena = True
    np.testing.assert_array_equal(exe(**feeds), got)


@pytest.mark.parametrize("stride", [1, 2])
def test_silu_before_strided_phase_planes_stays_in_the_products_epilogue(stride):
    """SiLU (x * logistic(x)) between the product and a stride-2 depthwise convolution:
    the phase planes would evaluate the logistic per element in their transposed order
    (as the product's layout nest or in their own kernel), so the product's epilogue
    writes the activation along its rows and the planes' kernel only copies it (at
    stride 1 the padded copy still joins the product). Same results either way."""
    rng = np.random.default_rng(21)
    xs = (2, 16, 24, 24)
    with gc.Graph("silu_planes"):
        x = gc.placeholder(xs, name="x")
        w1 = gc.constant(rng.standard_normal((32, 16, 1, 1)).astype(np.float32) * 0.3)
        w2 = gc.constant(rng.standard_normal((32, 1, 3, 3)).astype(np.float32))
        h = _conv(x, w1, pad=0)
        y = _conv(h * gc.sigmoid(h), w2, stride, groups=32)
        exe = gc.compile(y, num_threads=2)
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    dot = _dot_group(exe)
    assert ":logistic" in dot and ":transpose" not in dot
    assert len(_groups(exe)) == (1 if stride == 1 else 3)
    if stride == 2:           # the planes' kernel copies: no math function there
        planes = [g for g in _groups(exe) if ":transpose" in g]
        assert len(planes) == 1 and ":logistic" not in planes[0]
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("batch,stride,threads", [(2, 2, 2), (1, 2, 2), (1, 1, 3)])
def test_large_images_run_the_layouts_block_by_block(batch, stride, threads):
    """An image's product over 512 KB (32 channels at 72 x 72: 648 KB) whose other
    operand is small (8 channels, 162 KB): the layout and the depthwise window sum still
    join the product, run block of 8 rows by block (at batch 1 within each thread's
    rows); every element computed as on one thread."""
    exe, _, _ = _same_bits_as_one_thread(
        lambda: _pointwise_then_depthwise(batch, stride, np.random.default_rng(12), cin=8,
                                          cout=32, size=72), threads)
    assert len(_groups(exe)) == 1


def test_large_images_with_a_large_operand_stay_apart():
    """The same with 128 input channels at 64 x 64: the other operand (2 MB an image)
    would be read again for every block of rows, so the phase planes stay a loop kernel
    of their own."""
    with gc.Graph("large_operand"):
        y, feeds = _pointwise_then_depthwise(1, 2, np.random.default_rng(13), cin=128,
                                             cout=64, size=64)
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    assert ":transpose" not in _dot_group(exe) and len(_groups(exe)) > 1
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def _same_bits_as_one_thread(build, threads):
    """(the executable on `threads` threads, its result, the feeds) for build()'s graph,
    checked against the reference and against the same graph on one thread, bit for
    bit."""
    with gc.Graph("threads"):
        y, feeds = build()
        exe = gc.compile(y, num_threads=threads)
        want = gc.evaluate(y, feeds)
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    with gc.Graph("threads"):
        y1, _ = build()
        single = gc.compile(y1, num_threads=1)
    np.testing.assert_array_equal(single(**feeds), got)
    return exe, got, feeds


def _splits_recorded(monkeypatch):
    """The variables the CPU backend splits dot kernels with layout nests along."""
    from graphc.backends.cpu import parallel
    chosen = []
    real = parallel._blas_split

    def spy(kern, threads):
        split = real(kern, threads)
        if kern.layouts:
            chosen.append(split.name if split is not None else None)
        return split
    monkeypatch.setattr(parallel, "_blas_split", spy)
    return chosen


@pytest.mark.parametrize("stride", [1, 2])
def test_one_image_shared_by_rows(monkeypatch, stride):
    """Batch 1 on 2 threads: the threads share the image by the product's rows
    (channels), each running the layout nests over its own rows; the same bits as on
    one thread."""
    def build():
        return _pointwise_then_depthwise(1, stride, np.random.default_rng(3), cin=32,
                                         cout=64, size=32)
    splits = _splits_recorded(monkeypatch)
    exe, got, feeds = _same_bits_as_one_thread(build, 2)
    assert len(_groups(exe)) == 1 and splits == ["m0"]
    exe._native.poison_arena = True
    np.testing.assert_array_equal(exe(**feeds), got)


def test_one_image_of_the_stem_shared_by_rows(monkeypatch):
    """The same for a product of the output's shape and the depthwise convolution
    after it (its padded copy and window sum both layout nests)."""
    splits = _splits_recorded(monkeypatch)
    with gc.Graph("stem_one"):
        y, feeds = _conv_then_depthwise(1, np.random.default_rng(10), cout=32, size=32)
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    assert len([g for g in _groups(exe) if "[dot]" in g]) == 1 and splits == ["m0"]
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    with gc.Graph("stem_one"):
        y1, _ = _conv_then_depthwise(1, np.random.default_rng(10), cout=32, size=32)
        single = gc.compile(y1, num_threads=1)
    np.testing.assert_array_equal(single(**feeds), got)


def test_not_when_an_image_per_thread_and_rows_per_thread_are_missing():
    """Batch 1 on 2 threads with 8 channels (fewer than 8 rows a thread): the layout
    stays a loop kernel of its own (a layout nest needs its rows' whole product)."""
    rng = np.random.default_rng(3)
    with gc.Graph("one_image"):
        y, feeds = _pointwise_then_depthwise(1, 2, rng, cin=8, cout=8)
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    assert ":transpose" not in _dot_group(exe)
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    with gc.Graph("one_image"):
        y1, _ = _pointwise_then_depthwise(1, 2, np.random.default_rng(3), cin=8, cout=8)
        single = gc.compile(y1, num_threads=1)
    assert ":transpose" in _dot_group(single)
    np.testing.assert_allclose(single(**feeds), want, rtol=2e-5,
                               atol=2e-5 * np.abs(want).max())


def test_transposed_batched_product():
    """Any batched product: (B, S, D) @ (B, D, T) -> transposed to (B, T, S) + 1."""
    rng = np.random.default_rng(4)
    with gc.Graph("transposed"):
        a = gc.placeholder((6, 48, 64), name="a")
        b = gc.placeholder((6, 64, 40), name="b")
        y = gc.transpose(a @ b, (0, 2, 1)) + 1.0
        exe = gc.compile(y, num_threads=2)
        feeds = {"a": rng.standard_normal((6, 48, 64)).astype(np.float32),
                 "b": rng.standard_normal((6, 64, 40)).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    assert len([g for g in _groups(exe)]) == 1 and ":transpose" in _dot_group(exe)
    got = exe(**feeds)
    assert got.shape == (6, 40, 48)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_reading_another_image_or_a_window_stays_apart():
    """A layout that reads the product at another batch index (reversed batch), or a
    window sum over it (several elements each), is not a layout epilogue: separate
    kernels, same results."""
    rng = np.random.default_rng(5)
    with gc.Graph("apart"):
        a = gc.placeholder((4, 32, 64), name="a")
        b = gc.placeholder((4, 64, 40), name="b")
        p = a @ b
        flipped = gc.transpose(bind("reverse", p, dimensions=(0,)), (0, 2, 1))
        pairs = p[:, :, 1:] + p[:, :, :-1]
        exe = gc.compile([flipped, pairs], num_threads=2)
        feeds = {"a": rng.standard_normal((4, 32, 64)).astype(np.float32),
                 "b": rng.standard_normal((4, 64, 40)).astype(np.float32)}
        want = gc.evaluate([flipped, pairs], feeds)
    dot = _dot_group(exe)
    assert ":reverse" not in dot and ":slice" not in dot
    for g, w in zip(exe(**feeds), want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5 * np.abs(w).max())


def _conv_then_depthwise(batch, rng, cin=3, cout=16, size=16):
    """3x3 convolution cin -> cout (its product already of the output's shape), bias,
    ReLU6, then a 3x3 depthwise convolution of the same shape (a MobileNet stem)."""
    xs = (batch, cin, size, size)
    x = gc.placeholder(xs, name="x")
    w1 = gc.constant(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * 0.3)
    b1 = gc.constant(rng.standard_normal(cout).astype(np.float32))
    w2 = gc.constant(rng.standard_normal((cout, 1, 3, 3)).astype(np.float32))
    h = gc.minimum(gc.maximum(_conv(x, w1) + b1.reshape((1, cout, 1, 1)), 0.0), 6.0)
    return _conv(h, w2, groups=cout), {"x": rng.standard_normal(xs).astype(np.float32)}


def test_depthwise_over_a_product_of_its_own_shape():
    """The depthwise convolution reads the padded copy of a product that already has
    its shape: both the padded copy and the window sum become layout nests of the
    product's kernel (not a same-shape epilogue, which reads one element only)."""
    with gc.Graph("stem"):
        y, feeds = _conv_then_depthwise(4, np.random.default_rng(6))
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    dots = [g for g in _groups(exe) if "[dot]" in g]
    assert len(dots) == 1 and dots[0].count(":window_view") == 2, _groups(exe)
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    with gc.Graph("stem"):
        y1, _ = _conv_then_depthwise(4, np.random.default_rng(6))
        single = gc.compile(y1, num_threads=1)
    np.testing.assert_array_equal(single(**feeds), got)
    exe._native.poison_arena = True
    np.testing.assert_array_equal(exe(**feeds), got)


def test_depthwise_over_a_product_of_its_own_shape_needs_work_for_each_thread():
    """Batch 1 on 2 threads with 8 channels: the window sum stays a kernel of its own."""
    with gc.Graph("stem1"):
        y, feeds = _conv_then_depthwise(1, np.random.default_rng(7), cout=8)
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    assert _dot_group(exe).count(":window_view") == 1
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def _blocks_recorded(monkeypatch, block_bytes):
    """Compile with dots.CHANNEL_BLOCK_BYTES = block_bytes; the blocks chosen are kept."""
    from graphc.backends.cpu import dots
    chosen = []
    real = dots.channel_block

    def spy(k, plan):
        chosen.append(real(k, plan))
        return chosen[-1]
    monkeypatch.setattr(dots, "CHANNEL_BLOCK_BYTES", block_bytes)
    monkeypatch.setattr(dots, "channel_block", spy)
    return chosen


@pytest.mark.parametrize("stride", [1, 2])
def test_channel_blocks_give_the_same_bits(monkeypatch, stride):
    """The product and its layout nests run block of rows (channels) by block; every
    element is computed as without blocks: the same bits for blocks of 8, 16 and none."""
    results = {}
    for block_bytes, rows in ((8 << 10, 8), (16 << 10, 16), (1 << 30, None)):
        chosen = _blocks_recorded(monkeypatch, block_bytes)
        with gc.Graph("blocks"):
            y, feeds = _pointwise_then_depthwise(2, stride, np.random.default_rng(8),
                                                 cin=8, cout=64, size=16)
            exe = gc.compile(y, num_threads=2)
            want = gc.evaluate(y, feeds)
        assert chosen == [rows]
        results[rows] = exe(**feeds)
        np.testing.assert_allclose(results[rows], want, rtol=2e-5,
                                   atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(results[8], results[None])
    np.testing.assert_array_equal(results[16], results[None])


def test_no_channel_blocks_when_a_layout_reads_other_rows(monkeypatch):
    """A layout that reads the product's rows in reverse needs rows of other blocks:
    the kernel runs it over the whole product (and stays right)."""
    chosen = _blocks_recorded(monkeypatch, 8 << 10)
    rng = np.random.default_rng(9)
    with gc.Graph("reversed_rows"):
        a = gc.placeholder((2, 64, 32), name="a")
        b = gc.placeholder((2, 32, 512), name="b")
        y = gc.transpose(bind("reverse", a @ b, dimensions=(1,)), (0, 2, 1)) * 2.0
        exe = gc.compile(y, num_threads=2)
        feeds = {"a": rng.standard_normal((2, 64, 32)).astype(np.float32),
                 "b": rng.standard_normal((2, 32, 512)).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    assert ":reverse" in _dot_group(exe)
    assert chosen == []          # channel_vars refused: no block size asked for
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_kernel_scratch_takes_no_arena_room(monkeypatch):
    """Buffers a kernel keeps in its own scratch (the private product, the private
    padded copy or phase planes) get no room in the arena: the same bits with a
    smaller arena than when the memory plan counts them."""
    from graphc.backends.cpu import backend as cpu_backend

    def build():
        return _pointwise_then_depthwise(4, 2, np.random.default_rng(11), cin=16, cout=32,
                                         size=16)
    with gc.Graph("arena"):
        y, feeds = build()
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    monkeypatch.setattr(cpu_backend, "scratch_buffers", lambda k: set())
    with gc.Graph("arena"):
        y2, _ = build()
        counted = gc.compile(y2, num_threads=2)
    product = 4 * 32 * 16 * 16 * 4          # the pointwise product, batch 4, float32
    assert exe._native.arena_bytes + product <= counted._native.arena_bytes
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(counted(**feeds), got)
    exe._native.poison_arena = True
    np.testing.assert_array_equal(exe(**feeds), got)
