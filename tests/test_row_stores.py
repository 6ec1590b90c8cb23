"""A row kernel's stores over the reduced dims whose values need no result of its last
reduction are made in that reduction's loop (kernels/build_row.py: stage_stores): one
pass over the row, the shared values computed once. The bias gradient of a ReLU layer
is the case: the masked gradient is written and summed in one loop. And a max pool's
gradient, moved back from its windows, is written by its own kernel before a row kernel
sums it (schedule/merge_rules.py)."""
import numpy as np
import pytest

import graphc as gc
from graphc.backends.cpu import module as codegen
from graphc.kernels import kernel as K


def _row_kernels(monkeypatch, outputs, updates=None, **feeds):
    seen = []
    real = codegen.emit_module

    def spy(name, lowered, threads, profile=False, **kwargs):
        seen.append(lowered)
        return real(name, lowered, threads, profile, **kwargs)
    monkeypatch.setattr(codegen, "emit_module", spy)
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    exe = gc.compile(outputs, updates=updates)
    return exe, [k for k in seen[0].kernels if isinstance(k, K.RowKernel)]


@pytest.mark.parametrize("threads", [1, 2])
def test_a_masked_gradient_is_written_and_summed_in_one_loop(monkeypatch, threads):
    monkeypatch.setenv("GRAPHC_NUM_THREADS", str(threads))
    rng = np.random.default_rng(0)
    g0 = rng.standard_normal((16, 8, 12, 12)).astype(np.float32)
    x0 = rng.standard_normal((16, 8, 12, 12)).astype(np.float32)
    with gc.Graph("relu_grad"):
        g = gc.placeholder(g0.shape, name="g")
        x = gc.placeholder(x0.shape, name="x")
        masked = g * (x > 0.0).astype("float32")
        exe, rows = _row_kernels(monkeypatch, {"masked": masked,
                                               "bias": masked.sum(axis=(0, 2, 3))})
    (row,) = rows
    assert len(row.stage_stores) == 1 and not row.full_stores
    out = exe(g=g0, x=x0)
    want = g0 * (x0 > 0)
    assert np.array_equal(out["masked"], want)
    np.testing.assert_allclose(out["bias"], want.astype(np.float64).sum(axis=(0, 2, 3)),
                               rtol=1e-5, atol=1e-4)


def test_a_store_that_needs_the_last_result_stays_after_it(monkeypatch):
    x0 = np.random.default_rng(1).standard_normal((32, 50)).astype(np.float32)
    with gc.Graph("softmax"):
        x = gc.placeholder(x0.shape, name="x")
        exe, rows = _row_kernels(monkeypatch, gc.softmax(x, axis=-1))
    assert rows and all(not r.stage_stores and r.full_stores for r in rows)
    e = np.exp(x0.astype(np.float64) - x0.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(exe(x=x0), e / e.sum(axis=-1, keepdims=True), rtol=1e-5)


def test_a_variable_updated_in_the_loop_that_sums_it(monkeypatch):
    """The new value is written over the variable in the same loop that reads it for
    the sum, at the same index: every step matches numpy."""
    w0 = np.random.default_rng(2).standard_normal((64, 24)).astype(np.float32)
    with gc.Graph("update"):
        w = gc.variable(w0, name="w")
        new = w * 0.5 + 1.0
        exe, rows = _row_kernels(monkeypatch, {"total": (new * new).sum(axis=0)},
                                 updates={w: new})
    assert any(r.stage_stores for r in rows)
    want = w0.astype(np.float64)
    for _ in range(3):
        got = exe()["total"]
        want = want * 0.5 + 1.0
        np.testing.assert_allclose(got, (want * want).sum(axis=0), rtol=1e-5)
        np.testing.assert_allclose(exe.variables["w"], want, rtol=1e-6)



def test_a_max_pool_gradient_is_put_back_by_its_own_kernel(monkeypatch):
    """The gradient of a 2 x 2 max pool is moved back from its windows in runs of two
    elements; the row kernel that sums it for a bias gradient reads it written once,
    not recomputed through that move in each of its passes (merge_rules._short_runs).
    The step gives what the plan without the rule gives."""
    from bench.__main__ import cnn_graph
    from graphc.schedule import merge_rules
    rng = np.random.default_rng(4)
    feeds = {"x": rng.standard_normal((4, 1, 28, 28)).astype(np.float32),
             "y": rng.integers(0, 10, 4).astype(np.int32)}
    steps = {}
    for rule in (True, False):
        if not rule:
            monkeypatch.setattr(merge_rules, "_short_runs", lambda node: False)
        g, loss, updates = cnn_graph(batch=4)
        with g:
            exe, rows = _row_kernels(monkeypatch, {"loss": loss}, updates)
        bias_rows = [r for r in rows if r.kept_shape in ((8,), (16,))]
        assert len(bias_rows) == 2
        read = [{ld.buffer.id for ld in K.loads_of([red.value for red in r.reductions])}
                for r in bias_rows]
        assert all(len(ids) == 1 for ids in read) == rule
        steps[rule] = [float(exe(**feeds)["loss"]) for _ in range(3)] + \
            [exe.variables[k] for k in sorted(exe.variables)]
    for a, b in zip(steps[True], steps[False]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
