"""Optimizers: updates match hand-computed numpy references step by step."""
import numpy as np
import pytest

import graphc as gc


def quadratic_problem(dtype="float64"):
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (5, 3)).astype(dtype)
    t = rng.uniform(-1, 1, (5,)).astype(dtype)
    w0 = rng.uniform(-1, 1, (3,)).astype(dtype)
    return a, t, w0


def np_grad(a, t, w):
    # loss = mean((a @ w - t)^2)  ->  grad = 2/n a^T (a w - t)
    return 2.0 / len(t) * a.T @ (a @ w - t)


def run_steps(make_updates, steps=4, dtype="float64"):
    a, t, w0 = quadratic_problem(dtype)
    g = gc.Graph("opt")
    with g:
        w = gc.variable(w0, name="w")
        x = gc.placeholder(a.shape, dtype, name="a")
        y = gc.placeholder(t.shape, dtype, name="t")
        loss = gc.nn.mse(x @ w, y)
        updates = make_updates(loss, w)
    history = []
    for _ in range(steps):
        gc.evaluate(loss, {"a": a, "t": t}, updates=updates)
        history.append(g.variables["w"].copy())
    return history, (a, t, w0), g


def test_sgd():
    hist, (a, t, w), _ = run_steps(lambda loss, w: gc.optim.sgd(loss, [w], lr=0.1))
    for got in hist:
        w = w - 0.1 * np_grad(a, t, w)
        np.testing.assert_allclose(got, w, rtol=1e-12)


def test_momentum():
    hist, (a, t, w), g = run_steps(lambda loss, w: gc.optim.momentum(loss, [w], lr=0.1, beta=0.8))
    v = np.zeros_like(w)
    for got in hist:
        v = 0.8 * v + np_grad(a, t, w)
        w = w - 0.1 * v
        np.testing.assert_allclose(got, w, rtol=1e-12)
    np.testing.assert_allclose(g.variables["w/velocity"], v, rtol=1e-12)


@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-12), ("float32", 2e-5)])
def test_adam_first_steps_against_numpy(dtype, rtol):
    lr, b1, b2, eps = 0.05, 0.9, 0.999, 1e-8
    hist, (a, t, w), g = run_steps(
        lambda loss, w: gc.optim.adam(loss, [w], lr=lr, b1=b1, b2=b2, eps=eps), 5, dtype)
    a, t, w = a.astype(np.float64), t.astype(np.float64), w.astype(np.float64)
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    for step, got in enumerate(hist, start=1):
        grad = np_grad(a, t, w)
        m = b1 * m + (1 - b1) * grad
        v = b2 * v + (1 - b2) * grad * grad
        mhat = m / (1 - b1 ** step)
        vhat = v / (1 - b2 ** step)
        w = w - lr * mhat / (np.sqrt(vhat) + eps)
        np.testing.assert_allclose(got, w, rtol=rtol)
    assert int(g.variables["adam/step"]) == 5
    np.testing.assert_allclose(g.variables["w/adam_m"], m, rtol=rtol)
    np.testing.assert_allclose(g.variables["w/adam_v"], v, rtol=rtol)


def test_optimizer_rejects_non_variables():
    with gc.Graph():
        x = gc.placeholder((3,), name="x")
        with pytest.raises(gc.GraphcError, match="must be variables"):
            gc.optim.sgd((x * x).sum(), [x], 0.1)


def test_initializers_are_seeded_and_scaled():
    a = gc.nn.init.glorot_uniform((300, 200), seed=1)
    b = gc.nn.init.glorot_uniform((300, 200), seed=1)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.float32 and np.abs(a).max() <= np.sqrt(6 / 500)
    h = gc.nn.init.he_normal((16, 8, 3, 3), seed=2)
    assert abs(h.std() - np.sqrt(2 / 72)) < 0.02


def test_initializers_without_a_seed_draw_fresh_weights_reproducibly():
    """Layers of the same shape get different weights unless a seed is given; the draws
    follow one global stream, so the same program gets the same weights every run."""
    init = gc.nn.init
    init.seed_all(123)
    first = [init.glorot_uniform((20, 10)), init.glorot_uniform((20, 10)),
             init.he_normal((20, 10))]
    assert not np.array_equal(first[0], first[1])
    init.seed_all(123)
    again = [init.glorot_uniform((20, 10)), init.glorot_uniform((20, 10)),
             init.he_normal((20, 10))]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    init.seed_all(124)
    assert not np.array_equal(init.glorot_uniform((20, 10)), first[0])
    np.testing.assert_array_equal(init.glorot_uniform((20, 10), seed=5),
                                  init.glorot_uniform((20, 10), seed=5))
