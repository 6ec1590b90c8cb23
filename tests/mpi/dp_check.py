"""Run under mpiexec -n 2 (see tests/test_distributed.py). Prints 'ok <rank>' on success."""
import sys

import numpy as np

import graphc as gc
from graphc.api import bind

RANK, SIZE = gc.distributed.rank(), gc.distributed.size()
assert SIZE == 2, SIZE


def mlp(batch, dtype, dp, optimizer):
    g = gc.Graph("mlp")
    with g:
        x = gc.placeholder((batch, 12), dtype, name="x")
        y = gc.placeholder((batch,), "int32", name="y")
        rng = np.random.default_rng(0)                 # same init everywhere
        w1 = gc.variable(rng.standard_normal((12, 16)).astype(dtype) * 0.3, name="w1")
        b1 = gc.variable(np.zeros(16, dtype), name="b1")
        w2 = gc.variable(rng.standard_normal((16, 5)).astype(dtype) * 0.3, name="w2")
        loss = gc.nn.softmax_cross_entropy(gc.tanh(x @ w1 + b1) @ w2, y).mean()
        params = [w1, b1, w2]
        grads = dp.gradients(loss, params) if dp else None
        if optimizer == "adam":
            updates = gc.optim.adam(loss, params, lr=0.01, grads=grads)
        else:
            updates = gc.optim.sgd(loss, params, lr=0.5, grads=grads)
        exe = gc.compile({"loss": loss}, updates=updates, distributed=dp)
    return exe


def check_data_parallel(dtype, optimizer, rtol):
    rng = np.random.default_rng(42)
    batches = [(rng.standard_normal((8, 12)).astype(dtype), rng.integers(0, 5, 8).astype(np.int32))
               for _ in range(3)]
    dp_exe = mlp(4, dtype, gc.distributed.DataParallel(bucket_bytes=256), optimizer)
    full_exe = mlp(8, dtype, None, optimizer)
    for x, y in batches:
        half = slice(4 * RANK, 4 * RANK + 4)
        dp_exe(x[half], y[half])
        full_exe(x, y)
    for name in full_exe.variables:
        want = full_exe.variables[name]
        np.testing.assert_allclose(dp_exe.variables[name], want, rtol=rtol,
                                   atol=rtol * np.abs(want).max(),     # relative to the scale
                                   err_msg=f"{dtype} {optimizer} {name}")


def check_collective_gradients():
    """Every collective's VJP against finite differences of the loss summed over ranks."""
    rng = np.random.default_rng(RANK)
    x0 = rng.uniform(-1, 1, (4, 3))
    with gc.Graph("coll"):
        x = gc.placeholder((4, 3), "float64", name="x")
        w = gc.constant(np.random.default_rng(7 + RANK).uniform(0.5, 1.5, (8, 3)))
        loss = (bind("all_reduce", x * x, op="sum", axis_size=2) * x).sum() \
            + (bind("all_reduce", gc.sin(x), op="mean", axis_size=2) ** 2).sum() \
            + (bind("all_reduce", x, op="max", axis_size=2) * x).sum() \
            + (bind("all_gather", x, axis=0, axis_size=2) * w).sum() ** 2 \
            + (bind("reduce_scatter", gc.exp(x), axis=0, axis_size=2) ** 2).sum() \
            + (bind("all_gather", x, axis=1, axis_size=2) ** 3).sum()
        (g,) = gc.grad(loss, [x])
        sym = gc.evaluate(g, {"x": x0})
        total = lambda: gc.distributed._coll.comm().allreduce(float(gc.evaluate(loss, {"x": x0})))
        for r in range(SIZE):                    # rank r perturbs, everyone evaluates
            for i in range(x0.size):
                idx = np.unravel_index(i, x0.shape)
                saved = x0[idx]
                if RANK == r:
                    x0[idx] = saved + 1e-6
                hi = total()
                if RANK == r:
                    x0[idx] = saved - 1e-6
                lo = total()
                if RANK == r:
                    x0[idx] = saved
                    fd = (hi - lo) / 2e-6
                    assert abs(fd - sym[idx]) <= 1e-6 * max(1.0, abs(fd)), (r, idx, fd, sym[idx])
    # the compiled program computes the same gradient
    with gc.Graph("coll2"):
        x = gc.placeholder((4, 3), "float64", name="x")
        loss = (bind("all_reduce", x * x, op="sum", axis_size=2) * x).sum() + \
            (bind("all_gather", x, axis=1, axis_size=2) ** 3).sum() + \
            (bind("reduce_scatter", gc.exp(x), axis=0, axis_size=2) ** 2).sum()
        (g,) = gc.grad(loss, [x])
        exe = gc.compile([loss, g])
        got = exe(x0)
        want = gc.evaluate([loss, g], {"x": x0})
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def check_hash_mismatch():
    g = gc.Graph("different")
    with g:
        x = gc.placeholder((4, 3), name="x")
        w = gc.variable(np.ones((3, 2), np.float32), name="w")
        out = x @ w if RANK == 0 else gc.tanh(x @ w)
        loss = out.sum()
        dp = gc.distributed.DataParallel()
        updates = gc.optim.sgd(loss, [w], 0.1, grads=dp.gradients(loss, [w]))
        try:
            gc.compile(loss, updates=updates, distributed=dp)
        except gc.GraphcError as e:
            assert "built a different graph than rank 0" in str(e), e
        else:
            raise AssertionError("no error for different graphs")


check_data_parallel("float64", "adam", 1e-12)
check_data_parallel("float32", "sgd", 1e-6)
check_collective_gradients()
check_hash_mismatch()
print(f"ok {RANK}")
sys.stdout.flush()


def check_tensor_parallel_mlp():
    """Column- then row-sharded MLP == the unsharded MLP: forward, gradients, 3 Adam steps."""
    rng = np.random.default_rng(3)
    full = {"w1": rng.standard_normal((12, 16)) * 0.4, "b1": rng.standard_normal(16) * 0.1,
            "w2": rng.standard_normal((16, 5)) * 0.4, "b2": rng.standard_normal(5) * 0.1}
    batches = [(rng.standard_normal((6, 12)), rng.integers(0, 5, 6).astype(np.int32))
               for _ in range(3)]
    cols = slice(8 * RANK, 8 * RANK + 8)

    def build(sharded):
        g = gc.Graph("tp" if sharded else "dense")
        with g:
            x = gc.placeholder((6, 12), "float64", name="x")
            y = gc.placeholder((6,), "int32", name="y")
            if sharded:
                w1 = gc.variable(full["w1"][:, cols], name="w1")
                b1 = gc.variable(full["b1"][cols], name="b1")
                w2 = gc.variable(full["w2"][cols, :], name="w2")
                b2 = gc.variable(full["b2"], name="b2")
                h = gc.relu(gc.nn.column_parallel_linear(x, w1, b1))
                logits = gc.nn.row_parallel_linear(h, w2, b2)
                gathered = gc.nn.column_parallel_linear(x, w1, b1, gather_output=True)
                loss = gc.nn.softmax_cross_entropy(logits, y).mean()
                tp = gc.distributed.TensorParallel()
                (gw1, gb1, gw2), (gb2,) = tp.gradients(loss, [w1, b1, w2], [b2])
                grads = [gw1, gb1, gw2, gb2]
            else:
                w1, b1, w2, b2 = (gc.variable(full[k], name=k) for k in ("w1", "b1", "w2", "b2"))
                gathered = x @ w1 + b1
                loss = gc.nn.softmax_cross_entropy(gc.relu(gathered) @ w2 + b2, y).mean()
                grads = gc.grad(loss, [w1, b1, w2, b2])
                tp = None
            params = [w1, b1, w2, b2]
            exe = gc.compile({"loss": loss, "gathered": gathered, "grads": grads},
                             updates=gc.optim.adam(loss, params, lr=0.05, grads=grads),
                             distributed=tp)
        return exe

    tp_exe, dense = build(True), build(False)
    for step, (x, y) in enumerate(batches):
        a, b = tp_exe(x, y), dense(x, y)
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-12)
        if step == 0:
            np.testing.assert_allclose(a["gathered"], b["gathered"], rtol=1e-12)
            np.testing.assert_allclose(a["grads"][0], b["grads"][0][:, cols], rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(a["grads"][1], b["grads"][1][cols], rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(a["grads"][2], b["grads"][2][cols, :], rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(a["grads"][3], b["grads"][3], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(tp_exe.variables["w1"], dense.variables["w1"][:, cols], rtol=1e-10)
    np.testing.assert_allclose(tp_exe.variables["w2"], dense.variables["w2"][cols, :], rtol=1e-10)
    np.testing.assert_allclose(tp_exe.variables["b2"], dense.variables["b2"], rtol=1e-10)


check_tensor_parallel_mlp()
print(f"tp ok {RANK}")
