"""gc.checkpoint: gradients through recomputed regions equal the plain ones, the
recomputation survives the optimizer (after-barriers) and the arena shrinks."""
import numpy as np
import pytest

import graphc as gc
from gradcheck import check_grad


def _mlp_grads(checkpointed, layers=6, batch=32, width=128, dtype="float32", seed=0,
               dropout_key=None):
    rng = np.random.default_rng(seed)
    x = gc.placeholder((batch, width), dtype, name="x")
    ws = [gc.variable((rng.standard_normal((width, width)) * 0.1).astype(dtype), name=f"w{i}")
          for i in range(layers)]

    def block(h, w, k):
        a = gc.tanh(h @ w)
        if dropout_key is not None:
            a = gc.nn.dropout(a, 0.25, gc.random.fold_in(dropout_key, k))
        return gc.sigmoid(a @ w) + h

    f = gc.checkpoint(block) if checkpointed else block
    h = x
    for k, w in enumerate(ws):
        h = f(h, w, k)
    loss = (h * h).mean()
    return loss, gc.grad(loss, [x] + ws)


def _compiled(checkpointed, **kw):
    with gc.Graph():
        loss, grads = _mlp_grads(checkpointed, **kw)
        exe = gc.compile([loss] + grads)
        optimized = exe.dump("optimized")
    return exe, optimized


def test_gradients_through_checkpointed_blocks_equal_the_plain_ones_and_the_reference():
    xv = np.random.default_rng(1).standard_normal((32, 128)).astype(np.float32)
    plain, _ = _compiled(False)
    ck, _ = _compiled(True)
    got, want = ck(xv), plain(xv)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    with gc.Graph():
        loss, grads = _mlp_grads(True)
        ref = gc.evaluate([loss] + grads, {"x": xv})
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_recomputation_is_not_merged_back_and_the_arena_shrinks():
    plain, plain_text = _compiled(False, layers=8, batch=64, width=256)
    ck, ck_text = _compiled(True, layers=8, batch=64, width=256)
    # each block's two products run again in the backward pass: CSE did not merge them
    assert plain_text.count("dot_general") + 16 <= ck_text.count("dot_general")
    assert "after" in ck_text
    assert ck.stats["arena_bytes"] <= 0.75 * plain.stats["arena_bytes"], (
        ck.stats["arena_bytes"], plain.stats["arena_bytes"])


def test_dropout_inside_a_checkpoint_recomputes_the_same_mask():
    xv = np.random.default_rng(2).standard_normal((32, 128)).astype(np.float32)
    outs = []
    for checkpointed in (False, True):
        with gc.Graph():
            loss, grads = _mlp_grads(checkpointed, dropout_key=gc.random.key(7))
            outs.append(gc.compile([loss] + grads)(xv))
    for a, b in zip(*outs):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)


def test_checkpoint_gradient_matches_finite_differences_in_float64():
    def build(x, w):
        def f(h):
            y = gc.tanh(h @ w)
            return gc.exp(y) * h, y.sum()
        a, s = gc.checkpoint(f)(x)
        b, _ = gc.checkpoint(f)(a)
        return b * s

    rng = np.random.default_rng(3)
    check_grad(build, {"x": rng.standard_normal((3, 4)) * 0.5,
                       "w": rng.standard_normal((4, 4)) * 0.5})


def test_nested_checkpoints_and_a_scan_inside_one():
    def inner(h, w):
        return gc.tanh(h @ w)

    def outer(h, w):
        h = gc.checkpoint(inner)(h, w)
        _, ys = gc.scan(lambda c, r: (c + r, gc.sin(c + r)), h[0], h)
        return ys * h

    def build(x, w):
        return gc.checkpoint(outer)(x, w)

    rng = np.random.default_rng(4)
    check_grad(build, {"x": rng.standard_normal((3, 4)), "w": rng.standard_normal((4, 4))})


def test_checkpoint_inside_a_scan_body():
    def build(x, w):
        def step(c, r):
            c = gc.checkpoint(lambda a, b: gc.tanh(a @ w + b))(c, r)
            return c, c.sum()
        c, ys = gc.scan(step, x[0], x)
        return c * ys.sum()

    rng = np.random.default_rng(5)
    check_grad(build, {"x": rng.standard_normal((5, 3)), "w": rng.standard_normal((3, 3))})


def test_training_with_checkpointed_blocks_follows_plain_training():
    rng = np.random.default_rng(6)
    xv = rng.standard_normal((16, 32)).astype(np.float32)
    finals = []
    for checkpointed in (False, True):
        with gc.Graph():
            loss, _ = _mlp_grads(checkpointed, layers=3, batch=16, width=32)
            ws = [n for n in loss.graph.variable_nodes()]
            exe = gc.compile(loss, updates=gc.optim.adam(loss, [gc.Tensor(w) for w in ws],
                                                         1e-2))
            losses = [float(exe(xv)) for _ in range(5)]
            finals.append((losses, {k: np.array(v) for k, v in exe.variables.items()}))
    np.testing.assert_allclose(finals[0][0], finals[1][0], rtol=1e-5)
    for k in finals[0][1]:
        np.testing.assert_allclose(finals[0][1][k], finals[1][1][k], rtol=1e-4, atol=1e-6)


def test_checkpoint_refuses_what_is_not_a_function():
    with pytest.raises(gc.GraphcError, match="expected a function"):
        gc.checkpoint(3)


def _deep_mlp_step(**options):
    rng = np.random.default_rng(0)
    with gc.Graph():
        x = gc.placeholder((64, 256), name="x")
        ws = [gc.variable((rng.standard_normal((256, 256)) * 0.05).astype(np.float32),
                          name=f"w{i}") for i in range(8)]
        h = x
        for w in ws:
            h = gc.tanh(h @ w) * 1.5 + gc.sin(h)
        loss = (h * h).mean()
        return gc.compile(loss, updates=gc.optim.sgd(loss, ws, 0.1), **options)


def test_memory_budget_recomputes_values_until_the_arena_fits_and_results_hold():
    xv = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    plain = _deep_mlp_step()
    budget = int(plain.stats["arena_bytes"] * 0.9)
    fit = _deep_mlp_step(memory_budget=budget)
    report = fit.stats["memory_budget"]
    assert report["met"] and report["values_recomputed"] > 0, report
    assert fit.stats["arena_bytes"] <= budget < plain.stats["arena_bytes"]
    assert fit.dump("fused").count("after") > 0          # the copies wait for the backward
    for _ in range(3):
        np.testing.assert_allclose(fit(xv), plain(xv), rtol=1e-5)
    for k in plain.variables:
        np.testing.assert_allclose(fit.variables[k], plain.variables[k], rtol=1e-5, atol=1e-7)


def test_memory_budget_out_of_reach_or_already_met_and_bad_values():
    xv = np.random.default_rng(2).standard_normal((64, 256)).astype(np.float32)
    plain = _deep_mlp_step()
    tight = _deep_mlp_step(memory_budget=1)
    report = tight.stats["memory_budget"]
    assert not report["met"] and report["arena"] <= report["arena_before"]
    np.testing.assert_allclose(tight(xv), plain(xv), rtol=1e-5)
    roomy = _deep_mlp_step(memory_budget=1 << 40)
    assert roomy.stats["memory_budget"]["met"]
    assert roomy.stats["memory_budget"]["values_recomputed"] == 0
    with pytest.raises(gc.CompileError, match="memory_budget must be a number of bytes"):
        _deep_mlp_step(memory_budget=-5)
    with pytest.raises(gc.CompileError, match="memory_budget must be a number of bytes"):
        _deep_mlp_step(memory_budget="1GB")
