"""No call returns or stores a value that another call, input or variable could change:
inputs that share memory with what the program writes, and result arrays under threads."""
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import graphc as gc
import graphc_runtime


def reversing_step(w0):
    """loss = x.sum() + w.sum(); w <- x[::-1] + 0.5 w (read after the in-place write
    would give wrong rows when x is w)."""
    with gc.Graph():
        x = gc.placeholder(w0.shape, name="x")
        w = gc.variable(w0, name="w")
        return gc.compile({"loss": x.sum() + w.sum()}, updates={w: x[::-1] + 0.5 * w})


def expected(x, w0):
    x = np.array(x, copy=True)
    return x.sum() + w0.sum(), x[::-1] + 0.5 * w0


@pytest.fixture
def w0(rng):
    return rng.standard_normal((6, 5)).astype(np.float32)


def views_of(w):
    """Arrays that are, or share memory with, the variable `w` (same shape and dtype)."""
    return {"itself": lambda: w,
            "reshaped view": lambda: w.reshape(-1).reshape(w.shape),
            "frombuffer": lambda: np.frombuffer(w.data, dtype=w.dtype).reshape(w.shape),
            "reversed view": lambda: w[::-1]}


@pytest.mark.parametrize("kind", list(views_of(np.zeros((1, 1)))))
@pytest.mark.parametrize("call", ["keyword", "positional"])
def test_a_variable_fed_as_an_input_is_read_before_it_is_updated(w0, kind, call):
    step = reversing_step(w0)
    live = step.variables["w"]
    feed = views_of(live)[kind]()
    want_loss, want_w = expected(feed, w0)
    out = step(x=feed) if call == "keyword" else step(feed)
    np.testing.assert_allclose(out["loss"], want_loss, rtol=1e-6)
    np.testing.assert_array_equal(step.variables["w"], want_w)
    assert step.variables["w"] is live                   # still updated in place


def test_an_input_inside_a_larger_variable(rng):
    w0 = rng.standard_normal((8, 4)).astype(np.float32)
    with gc.Graph():
        x = gc.placeholder((4, 4), name="x")
        w = gc.variable(w0, name="w")
        step = gc.compile(x.sum(), updates={w: gc.concatenate([x[::-1], x * 2.0], axis=0)})
    feed = step.variables["w"][2:6]                      # a contiguous window of w
    x_copy = feed.copy()
    step(x=feed)
    np.testing.assert_array_equal(step.variables["w"],
                                  np.concatenate([x_copy[::-1], x_copy * 2.0]))


def test_two_inputs_both_inside_the_variable_and_a_mixed_call(rng):
    """A call with positional and keyword inputs takes the checked Python path."""
    w0 = rng.standard_normal((64, 64)).astype(np.float32)   # more than a vector register
    with gc.Graph():
        a = gc.placeholder(w0.shape, name="a")
        b = gc.placeholder(w0.shape, name="b")
        w = gc.variable(w0, name="w")
        step = gc.compile(a.sum() - b.sum(), updates={w: a[::-1] * b.T})
    live = step.variables["w"]
    for call in (lambda: step(a=live, b=live), lambda: step(live, live),
                 lambda: step(live, b=live)):
        before = live.copy()
        call()
        np.testing.assert_array_equal(live, before[::-1] * before.T)


def test_a_loaded_artifact_stages_overlapping_inputs(w0, tmp_path):
    step = reversing_step(w0)
    step.save(tmp_path / "step.gcx")
    model = graphc_runtime.load(str(tmp_path / "step.gcx"))
    live = model.variables["w"]
    want_loss, want_w = expected(live, w0)
    out = model(x=live)
    np.testing.assert_allclose(out["loss"], want_loss, rtol=1e-6)
    np.testing.assert_array_equal(model.variables["w"], want_w)


def test_an_earlier_result_fed_back_is_not_overwritten(rng):
    n = 1 << 18                                          # 1 MiB: results are recycled
    with gc.Graph():
        x = gc.placeholder((n,), name="x")
        exe = gc.compile({"y": x * 2.0 + 1.0})
    a = rng.standard_normal(n).astype(np.float32)
    first = exe(x=a)["y"]
    kept = first.copy()
    second = exe(x=first)["y"]
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(second, kept * 2.0 + 1.0)
    assert second is not first


def test_results_are_recycled_only_when_nothing_else_can_reach_them(rng):
    n = 1 << 18
    with gc.Graph():
        x = gc.placeholder((n,), name="x")
        exe = gc.compile({"y": x * 2.0})
    a = rng.standard_normal(n).astype(np.float32)
    first, second = id(exe(x=a)["y"]), id(exe(x=a)["y"])
    assert first == second                               # dropped at once: memory reused
    held = exe(x=a)["y"]
    assert exe(x=a)["y"] is not held
    weak = exe(x=a)["y"]
    ref = weakref.ref(weak)
    del weak
    again = exe(x=2 * a)["y"]
    assert ref() is None or ref() is not again
    view = again[1:]
    del again
    np.testing.assert_array_equal(view, (4 * a)[1:])
    exe(x=3 * a)
    np.testing.assert_array_equal(view, (4 * a)[1:])     # the view's memory kept its values
    np.testing.assert_array_equal(held, 2 * a)


def test_results_of_concurrent_calls_are_never_another_calls():
    """8 threads calling one executable with a tiny switch interval: every result must be
    the caller's own (the issue saw 4 in 8000 overwritten by another call)."""
    n = 1 << 18
    with gc.Graph():
        x = gc.placeholder((n,), name="x")
        exe = gc.compile({"y": x * 2.0})
    feeds = [np.full(n, float(v), np.float32) for v in range(8)]
    wrong, calls = [], [0] * 8
    deadline = time.monotonic() + 20.0

    def work(k):
        for _ in range(500):
            y = exe(x=feeds[k])["y"]
            time.sleep(0)
            if not (y == 2.0 * k).all():
                wrong.append((k, float(y[0]), float(y[-1])))
            calls[k] += 1
            if time.monotonic() > deadline:
                return

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads)
    assert sum(calls) >= 800
    assert wrong == [], f"{len(wrong)} of {sum(calls)} results held another call's values"
