"""Products larger than a scratch that only their epilogue reads, run block by block
(backends/cpu/dot_plan.product_block): each block of C's rows (or columns; a 1x1
convolution's image rows) in the kernel's scratch, the epilogue right after it. Against the reference interpreter, the
same bits as the whole product and for any thread count, the side chosen, and no arena
room for the product."""
import importlib

import numpy as np
import pytest

import graphc as gc

dot_plan = importlib.import_module("graphc.backends.cpu.dot_plan")


def _blocks_recorded(monkeypatch):
    chosen = []
    real = dot_plan.product_block

    def spy(k, plan):
        found = real(k, plan)
        chosen.append(found)
        return found
    monkeypatch.setattr(dot_plan, "product_block", spy)
    return chosen


def _mlp(shape, n, seed=0):
    """x @ w + b through GELU: x of `shape` (..., K)."""
    rng = np.random.default_rng(seed)
    x = gc.placeholder(shape, name="x")
    w = gc.constant(rng.standard_normal((shape[-1], n)).astype(np.float32) * 0.1)
    b = gc.constant(rng.standard_normal(n).astype(np.float32))
    return gc.nn.gelu(x @ w + b), {"x": rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("shape,n,axis", [
    ((1000, 48), 192, 0),         # positions x channels: blocks of rows (B is small)
    ((1000, 40), 260, 0),         # rows not a multiple of the block (4 x 248 + 8)
    ((96, 256), 3000, 1),         # tokens x FFN: blocks of columns (A is small)
])
def test_blocks_match_the_whole_product(monkeypatch, shape, n, axis):
    _check_blocks(monkeypatch, lambda: _mlp(shape, n), axis)


def _check_blocks(monkeypatch, build, axis):
    """The graph `build()` makes (its output, feeds) compiled for 1, 2 and 3 threads
    against the reference, its products in blocks along `axis`; the same bits for every
    thread count and as the whole product."""
    chosen = _blocks_recorded(monkeypatch)
    results = {}
    for threads in (1, 2, 3):
        with gc.Graph("blocks"):
            y, feeds = build()
            exe = gc.compile(y, num_threads=threads)
            want = gc.evaluate(y, feeds)
        results[threads] = exe(**feeds)
        np.testing.assert_allclose(results[threads], want, rtol=2e-5,
                                   atol=2e-5 * np.abs(want).max())
    assert {c[0] for c in chosen if c is not None} == {axis}
    monkeypatch.setattr(dot_plan, "SCRATCH_BLOCK_BYTES", 1 << 40)   # one block: none
    with gc.Graph("blocks"):
        y, _ = build()
        whole = gc.compile(y, num_threads=2)
    np.testing.assert_array_equal(whole(**feeds), results[1])
    for threads in (2, 3):
        np.testing.assert_array_equal(results[threads], results[1])


def test_no_blocks_where_both_operands_are_large(monkeypatch):
    """128 x 4,096 @ 4,096 x 3,072: each block of columns would read A's 2 MB again (and
    each block of rows B's 48 MB): the whole product."""
    chosen = _blocks_recorded(monkeypatch)
    with gc.Graph("large"):
        y, feeds = _mlp((128, 4096), 3072)
        exe = gc.compile(y, num_threads=2)
        want = gc.evaluate(y, feeds)
    assert chosen and all(c is None for c in chosen)
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_blocked_product_takes_no_arena_room(monkeypatch):
    with gc.Graph("arena"):
        y, feeds = _mlp((1000, 48), 192)
        blocked = gc.compile(y)
    monkeypatch.setattr(dot_plan, "SCRATCH_BLOCK_BYTES", 1 << 40)
    with gc.Graph("arena"):
        y, _ = _mlp((1000, 48), 192)
        whole = gc.compile(y)
    product = 1000 * 192 * 4
    assert blocked._native.arena_bytes + product <= whole._native.arena_bytes
    np.testing.assert_array_equal(blocked(**feeds), whole(**feeds))


def _pointwise(shape, cout, seed=0):
    """A 1x1 convolution of x (N, C, H, W) to `cout` channels with a bias, a residual
    sum and ReLU: its product's columns are the image's rows and columns, merged."""
    rng = np.random.default_rng(seed)
    x = gc.placeholder(shape, name="x")
    r = gc.placeholder((shape[0], cout) + tuple(shape[2:]), name="r")
    w = gc.constant(rng.standard_normal((cout, shape[1], 1, 1)).astype(np.float32) * 0.1)
    b = gc.constant(rng.standard_normal((1, cout, 1, 1)).astype(np.float32))
    y = gc.relu(gc.nn.conv2d(x, w) + b + r)
    return y, {"x": rng.standard_normal(shape).astype(np.float32),
               "r": rng.standard_normal((shape[0], cout) + tuple(shape[2:])).astype(np.float32)}


@pytest.mark.parametrize("shape,cout,axis", [
    ((2, 64, 56, 56), 256, 1),     # blocks of the image's rows (the weights are small)
    ((1, 24, 30, 37), 160, 1),     # 11 rows of 37 a block, the last 8
    ((1, 64, 28, 28), 1024, 0),    # blocks of channels (the image is small)
])
def test_merged_columns_run_in_blocks(monkeypatch, shape, cout, axis):
    _check_blocks(monkeypatch, lambda: _pointwise(shape, cout), axis)
