"""send and recv graph ops in one process (messages to itself go through the in-process
queue; tests/mpi/pipeline_check.py runs them between processes), their VJPs against
finite differences, the passes that must leave them alone, their errors; the pipeline
schedules' orders simulated: no deadlock, each step once, the ideal bubble."""
import numpy as np
import pytest

import graphc as gc
from graphc.distributed.pipeline_schedule import ideal_bubble, operations
from gradcheck import check_grad
from graphc_runtime import point_to_point


@pytest.fixture(autouse=True)
def empty_queue():
    point_to_point.clear_loopback()
    yield
    point_to_point.clear_loopback()


def _through_self(x, tag=4):
    token = gc.distributed.send(x, peer=0, tag=tag)
    return gc.distributed.recv(x.shape, x.dtype, peer=0, tag=tag, after=token)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_a_message_to_this_process_arrives_whole(graph, rng, dtype):
    value = (rng.standard_normal((3, 5)) * 10).astype(dtype)
    x = gc.placeholder((3, 5), dtype, name="x")
    y = _through_self(x * 2)
    np.testing.assert_array_equal(gc.evaluate(y, {"x": value}), value * 2)
    exe = gc.compile({"y": y}, inputs=[x])
    for _ in range(2):
        np.testing.assert_array_equal(exe(value)["y"], value * 2)
    assert gc.distributed.send(x, 0).shape == () and gc.distributed.send(x, 0).dtype == dtype


def test_gradients_travel_back_against_finite_differences(graph):
    check_grad(lambda x, w: gc.tanh(_through_self(x @ w) * 1.5) + _through_self(x, 8)[:, :2],
               {"x": np.random.default_rng(0).standard_normal((3, 4)),
                "w": np.random.default_rng(1).standard_normal((4, 2))})


def test_compiled_gradients_equal_the_interpreters(graph, rng):
    x = gc.placeholder((4, 6), "float64", name="x")
    loss = (gc.sin(_through_self(x * x)) ** 2).sum()
    (gx,) = gc.grad(loss, [x])
    value = rng.standard_normal((4, 6))
    want = gc.evaluate(gx, {"x": value})
    np.testing.assert_allclose(gc.compile(gx, inputs=[x])(value), want, rtol=1e-12)
    np.testing.assert_allclose(want, 4 * value * np.sin(value ** 2) * np.cos(value ** 2),
                               rtol=1e-12)


def test_passes_never_merge_or_fold_messages(graph, rng):
    value = rng.standard_normal((2, 3)).astype(np.float32)
    x = gc.placeholder((2, 3), name="x")
    # two identical sends and receives are two messages each (CSE must not merge them)
    t1, t2 = gc.distributed.send(x, 0, 10), gc.distributed.send(x, 0, 10)
    a = gc.distributed.recv((2, 3), "float32", 0, 10, after=t1)
    b = gc.distributed.recv((2, 3), "float32", 0, 10, after=t2 + a.sum() * 0)
    out = gc.compile({"a": a, "b": b}, inputs=[x])(value)
    np.testing.assert_array_equal(out["a"], value)
    np.testing.assert_array_equal(out["b"], value)
    # a receive ordered by a constant is no constant: compiled before anything is sent,
    # it receives at run time what a later program sent
    receive = gc.compile(gc.distributed.recv((2, 3), "float32", 0, 12))
    gc.compile({"t": gc.distributed.send(x, 0, 12)}, inputs=[x])(value)
    np.testing.assert_array_equal(receive(), value)


def test_bad_messages_are_clear_errors(graph):
    x = gc.placeholder((2, 3), name="x")
    with pytest.raises(gc.GraphcError, match="tag must be an int in"):
        gc.distributed.send(x, 0, tag=-1)
    with pytest.raises(gc.GraphcError, match="tag must be an int in"):
        gc.distributed.send(x, 0, tag=32767)
    with pytest.raises(gc.GraphcError, match="peer must be a process rank"):
        gc.distributed.send(x, peer=-2)
    with pytest.raises(gc.GraphcError, match="cannot send bool"):
        gc.distributed.send(x > 0, 0)
    with pytest.raises(gc.GraphcError, match="its operand is a token"):
        gc.distributed.recv((2,), "float32", 0, after=x)
    with pytest.raises(gc.GraphcError, match="cannot recv"):
        gc.distributed.recv((2,), "bool", 0)
    receive = gc.distributed.recv((2, 3), "float32", 0, 14)
    with pytest.raises(gc.GraphcError, match="sent itself nothing with that tag"):
        gc.evaluate(receive, {})
    gc.evaluate(gc.distributed.send(gc.zeros((3,)), 0, 14), {})
    with pytest.raises(gc.GraphcError, match=r"the message holds float32\[3\]"):
        gc.evaluate(receive, {})
    with pytest.raises(gc.GraphcError, match="this run has 1 process|need MPI"):
        gc.evaluate(gc.distributed.send(x, peer=3), {"x": np.zeros((2, 3), np.float32)})


@pytest.mark.parametrize("schedule,p,v,m", [
    ("gpipe", 2, 1, 4), ("gpipe", 4, 1, 3), ("1f1b", 2, 1, 1), ("1f1b", 2, 1, 8),
    ("1f1b", 4, 1, 2), ("1f1b", 4, 1, 8), ("1f1b", 3, 1, 5), ("interleaved", 2, 2, 4),
    ("interleaved", 2, 2, 8), ("interleaved", 4, 2, 8), ("interleaved", 3, 3, 6),
    ("interleaved", 2, 4, 2)])
def test_schedules_finish_with_the_ideal_bubble(schedule, p, v, m):
    """Every process's steps simulated with sends that never wait and receives that
    do, each stage's forward 1 and backward 2 units split over its v chunks: all finish
    (no deadlock), each (stage, micro-batch) forward and backward runs once on its
    process, and the worst process idles (p - 1) / (v m + p - 1)."""
    lists = [operations(schedule, p, v, m, r) for r in range(p)]
    for r, ops in enumerate(lists):
        assert sorted(ops) == sorted((k, s, i) for k in "FB" for s in range(r, p * v, p)
                                     for i in range(m))
    assert _simulated_bubble(lists, p * v, v) == pytest.approx(ideal_bubble(p, v, m))
    one = operations(schedule, p, v, m, None)
    assert _simulated_bubble([one], p * v, v) == 0.0
    if schedule == "1f1b":                 # stage s stashes at most p - s micro-batches
        for r, ops in enumerate(lists):
            held = peak = 0
            for kind, s, i in ops:
                held += 1 if kind == "F" else -1
                peak = max(peak, held)
            assert peak <= min(p - r, m)


def _simulated_bubble(lists, stages, v):
    at = [0] * len(lists)
    clock, busy = [0.0] * len(lists), [0.0] * len(lists)
    sent: dict = {}
    while any(k < len(ops) for k, ops in zip(at, lists)):
        moved = False
        for r, ops in enumerate(lists):
            while at[r] < len(ops):
                kind, s, i = ops[at[r]]
                last = s == stages - 1
                if kind == "B" and last:          # ran with its forward, as one program
                    at[r] += 1
                    continue
                need = ("act", s - 1, i) if kind == "F" and s > 0 else \
                    ("ct", s + 1, i) if kind == "B" else None
                if need is not None and need not in sent:
                    break
                start = max(clock[r], sent[need] if need else 0.0)
                cost = (3.0 if last else 1.0 if kind == "F" else 2.0) / v
                clock[r], busy[r] = start + cost, busy[r] + cost
                if kind == "F" and not last:
                    sent[("act", s, i)] = clock[r]
                if (kind == "B" or last) and s > 0:
                    sent[("ct", s, i)] = clock[r]
                at[r] += 1
                moved = True
        assert moved, f"deadlock: every process waits at {at}"
    return max(1 - b / max(clock) for b in busy)
