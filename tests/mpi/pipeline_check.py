"""Run under mpiexec -n 2 or 4 (tests/test_distributed.py): pipeline-parallel training
(GPipe, 1F1B and interleaved 1F1B with 2 stages per rank; on 4 ranks also 2 stages x 2
data-parallel replicas) against the same
model in one process on the whole batch, float64, 20 steps: losses and variables within
1e-9, bitwise equal across two runs. Prints 'pipeline ok <rank>'."""
import numpy as np

import graphc as gc

RANK, SIZE = gc.distributed.rank(), gc.distributed.size()
MB, STEPS, LAYERS = 3, 20, 4


def model(batch, stages, microbatches=None, schedule=None, recompute=False, chunks=1):
    with gc.Graph("mlp"):
        x = gc.placeholder((batch, 8), "float64", name="x")
        y = gc.placeholder((batch,), "int32", name="y")
        rng = np.random.default_rng(0)
        params, h = [], x
        for k in range(LAYERS):
            w = gc.variable(rng.standard_normal((8, 8)) * 0.4, name=f"w{k}")
            b = gc.variable(np.zeros(8), name=f"b{k}")
            params += [w, b]
            h = gc.tanh(h @ w + b) + h
            if stages > 1 and (k + 1) % (LAYERS // stages) == 0 and k < LAYERS - 1:
                h = gc.distributed.stage_boundary(h)
        loss = gc.nn.softmax_cross_entropy(h, y).mean()
        if stages == 1 and microbatches is None:
            return gc.compile({"loss": loss}, updates=gc.optim.adam(loss, params, lr=0.02))
        pipe = gc.distributed.Pipeline(microbatches, schedule, recompute, chunks=chunks)
        return pipe.compile(loss, params, gc.optim.adam, lr=0.02)


def data(total):
    rng = np.random.default_rng(42)
    return [(rng.standard_normal((total, 8)), rng.integers(0, 8, total).astype(np.int32))
            for _ in range(STEPS)]


def check(stages, replicas, m, schedule, recompute=False, chunks=1):
    total = MB * m * replicas
    want = model(total, 1)
    want_losses = [float(want(x, y)["loss"]) for x, y in data(total)]
    runs = []
    for _ in range(2):
        step = model(MB, stages, m, schedule, recompute, chunks)
        replica = RANK // (stages // chunks)
        part = slice(replica * MB * m, (replica + 1) * MB * m)
        losses = [float(step(x=x[part], y=y[part])["loss"]) for x, y in data(total)]
        runs.append((losses, {k: np.array(v) for k, v in step.variables.items()}))
    (l1, v1), (l2, v2) = runs
    assert l1 == l2, (stages, replicas, schedule, "losses differ between runs")
    assert np.abs(np.array(l1) - want_losses).max() <= 1e-9, (l1, want_losses)
    mine = [k for k in v1 if k.startswith(("w", "b")) and "/" not in k]
    assert mine, v1.keys()
    for k in mine:
        assert np.array_equal(v1[k], v2[k]), (k, "differs between runs")
        diff = np.abs(v1[k] - want.variables[k]).max()
        assert diff <= 1e-9, (stages, replicas, schedule, k, diff)
    s = step.stats
    print(f"rank {RANK}: {stages} stages x {replicas} replicas, {schedule}, m={m}, "
          f"recompute={recompute}: stage "
          f"{s['stages']} bubble {s['bubble']:.2f} (ideal {s['ideal_bubble']:.2f}), "
          f"params {sorted(mine)}", flush=True)


configs = [(SIZE, 1, 4, "gpipe", False), (SIZE, 1, 4, "1f1b", False),
           (SIZE, 1, 4, "1f1b", True), (SIZE, 1, 1, "1f1b", False)]
if SIZE == 2:       # 4 stages on 2 processes, 2 each (interleaved)
    configs += [(4, 1, 4, "interleaved", False, 2), (4, 1, 2, "interleaved", True, 2)]
if SIZE == 4:
    configs += [(2, 2, 4, "1f1b", False), (4, 2, 4, "interleaved", False, 2)]
for config in configs:
    check(*config)
print(f"pipeline ok {RANK}", flush=True)
