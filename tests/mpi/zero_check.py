"""Run under mpiexec -n 2 or 4 (tests/test_distributed.py): data parallelism with the
optimizer state sharded (ZeRO 1 and 2) against one process on the whole batch in float64
over 20 steps; bitwise equal across runs; optimizer state per rank about 1/N."""
import numpy as np

import graphc as gc

RANK, SIZE = gc.distributed.rank(), gc.distributed.size()
BATCH, STEPS = 8, 20


def model(batch, dp, optimizer, kwargs):
    with gc.Graph("mlp"):
        x = gc.placeholder((batch, 12), "float64", name="x")
        y = gc.placeholder((batch,), "int32", name="y")
        rng = np.random.default_rng(0)
        params = [gc.variable(rng.standard_normal((12, 16)) * 0.3, name="w1"),
                  gc.variable(np.zeros(16), name="b1"),
                  gc.variable(rng.standard_normal((16, 5)) * 0.3, name="w2"),
                  gc.variable(np.zeros(5), name="b2")]       # 293 values: padded shards
        w1, b1, w2, b2 = params
        loss = gc.nn.softmax_cross_entropy(gc.tanh(x @ w1 + b1) @ w2 + b2, y).mean()
        if dp is None:
            updates = optimizer(loss, params, **kwargs)
        else:
            updates = dp.optimize(optimizer, loss, params, **kwargs)
        return gc.compile({"loss": loss}, updates=updates, distributed=dp)


def train(exe, local: bool):
    rng = np.random.default_rng(42)
    losses = []
    for _ in range(STEPS):
        x = rng.standard_normal((BATCH * SIZE, 12))
        y = rng.integers(0, 5, BATCH * SIZE).astype(np.int32)
        if local:
            part = slice(BATCH * RANK, BATCH * (RANK + 1))
            loss = float(exe(x[part], y[part])["loss"])
            losses.append(gc.distributed._coll.comm().allreduce(loss) / SIZE)
        else:
            losses.append(float(exe(x, y)["loss"]))
    return np.array(losses), {k: np.array(exe.variables[k]) for k in ("w1", "b1", "w2", "b2")}


for name, optimizer, kwargs in (("adam", gc.optim.adam, {"lr": 0.01}),
                                ("momentum", gc.optim.momentum, {"lr": 0.1})):
    want_losses, want = train(model(BATCH * SIZE, None, optimizer, kwargs), local=False)
    memory = {}
    for zero in (0, 1, 2):
        runs = []
        for _ in range(2):
            dp = gc.distributed.DataParallel(zero=zero)
            exe = model(BATCH, dp, optimizer, kwargs)
            runs.append(train(exe, local=True))
        memory[zero] = exe.stats["memory"]
        (losses, got), (losses2, got2) = runs
        assert np.array_equal(losses, losses2), (name, zero, "losses differ between runs")
        for k in got:
            assert np.array_equal(got[k], got2[k]), (name, zero, k, "differs between runs")
            diff = np.abs(got[k] - want[k]).max()
            assert diff <= 1e-9, (name, zero, k, diff)
        assert np.abs(losses - want_losses).max() <= 1e-9, (name, zero, losses - want_losses)
        # every rank ends with the same parameters
        for k, v in got.items():
            same = gc.distributed._coll.comm().allgather(v.tobytes())
            assert all(s == same[0] for s in same), (name, zero, k)
    plain = memory[0]["optimizer_state"]
    for zero in (1, 2):
        state = memory[zero]["optimizer_state"]
        assert state <= plain / SIZE * 1.05 + 16, (name, zero, state, plain)
        assert memory[zero]["master_shards"] == 8 * -(-293 // SIZE)
    print(f"{name} rank {RANK}: optimizer state {plain} B plain, "
          f"{memory[1]['optimizer_state']} B zero-1, {memory[2]['optimizer_state']} B zero-2")
print(f"zero ok {RANK}")
