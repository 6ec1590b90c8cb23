"""Multithreaded kernels: the same bits for any thread count."""
import numpy as np
import pytest

import graphc as gc


def build():
    g = gc.Graph("threads")
    with g:
        x = gc.placeholder((1100, 1000), name="x")
        w = gc.placeholder((1000, 64), name="w")
        k = gc.placeholder((8, 3, 3, 3), name="k")
        img = gc.placeholder((64, 3, 64, 64), name="img")
        outs = [gc.softmax(x, axis=1), gc.nn.layer_norm(x, gc.ones(1000), gc.zeros(1000)),
                x.sum(axis=1), x.sum(axis=0), x.max(), gc.tanh(x) * 3 + x, x @ w,
                gc.nn.conv2d(img, k, padding=1), gc.exp(x).sum(axis=1) / x.mean(axis=1),
                bind_int(x)]
    return g, outs


def bind_int(x):
    return gc.cast(x * 100, "int32").sum(axis=1)


@pytest.mark.parametrize("threads", [2, 3, 7])
def test_results_are_bitwise_identical_for_any_thread_count(threads):
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1100, 1000)).astype(np.float32),
             "w": rng.standard_normal((1000, 64)).astype(np.float32),
             "k": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
             "img": rng.standard_normal((64, 3, 64, 64)).astype(np.float32)}
    g, outs = build()
    with g:
        one = gc.compile(outs, num_threads=1)(**feeds)
        many_exe = gc.compile(outs, num_threads=threads)
        many = many_exe(**feeds)
    assert many_exe.stats["num_threads"] == threads
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)
    assert "pthread_create" in many_exe.dump("llvm")


def test_thread_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("GRAPHC_NUM_THREADS", "3")
    with gc.Graph():
        x = gc.placeholder((4,), name="x")
        assert gc.compile(x * 2).stats["num_threads"] == 3
    with gc.Graph():
        x = gc.placeholder((4,), name="x")
        with pytest.raises(gc.CompileError, match="num_threads must be a positive int"):
            gc.compile(x * 2, num_threads=0)


def test_long_reductions_are_split_and_shared_by_threads():
    x = np.random.default_rng(1).standard_normal((2, 1 << 21)).astype(np.float32)
    with gc.Graph():
        p = gc.placeholder(x.shape, name="x")
        outs = [p.sum(axis=1), p.max(axis=1), (p * p).sum()]
        one = gc.compile(outs, num_threads=1)
        two = gc.compile(outs, num_threads=2)
    assert "split_reductions" in two.stats["pass_seconds"]
    assert "pthread_create" in two.dump("llvm")
    a, b = one(x), two(x)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_allclose(a[0], x.astype(np.float64).sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(a[1], x.max(axis=1))


def test_loaded_artifacts_run_on_the_same_pool(tmp_path):
    import graphc_runtime
    from graphc_runtime import pool
    x = np.random.default_rng(3).standard_normal((600, 700)).astype(np.float32)
    with gc.Graph():
        p = gc.placeholder(x.shape, name="x")
        exe = gc.compile(gc.tanh(p) * 2 + gc.softmax(p, axis=1), num_threads=2)
    exe.save(str(tmp_path / "m.gcx"))
    loaded = graphc_runtime.load(str(tmp_path / "m.gcx"))
    assert loaded._native.on_pool == exe._native.on_pool == (pool.pool() is not None)
    np.testing.assert_array_equal(loaded(x), exe(x))
