"""Run under mpiexec -n 2 with a mode (tests/test_distributed.py):
  hang   rank 1 stops before its first training step; rank 0 must raise CollectiveError
         naming the collective and rank 1 within GRAPHC_COLLECTIVE_TIMEOUT, then end the job
  dies   rank 1 exits before its first step; the job must end (non-zero), not hang
  shape  rank 1 builds the model for another batch size: refused before the first step
  stage  a 2-stage pipeline whose last stage (rank 1) hangs: rank 0 must raise
         CollectiveError naming the receive from rank 1 (its cotangent)
"""
import os
import sys
import time

import numpy as np

import graphc as gc
from graphc_runtime.collectives import CollectiveError

MODE = sys.argv[1]
RANK = gc.distributed.rank()


def step_for(batch):
    dp = gc.distributed.DataParallel()
    with gc.Graph("mlp"):
        x = gc.placeholder((batch, 6), name="x")
        w = gc.variable(np.ones((6, 3), np.float32), name="w")
        loss = gc.tanh(x @ w).mean()
        return gc.compile(loss, updates=dp.optimize(gc.optim.sgd, loss, [w], lr=0.1),
                          distributed=dp)


if MODE == "shape":
    try:
        step_for(4 if RANK == 0 else 5)
    except gc.GraphcError as e:
        print(f"refused {RANK}: {e}", flush=True)
        sys.exit(0)
    print(f"not refused {RANK}", flush=True)
    sys.exit(1)

def pipeline_step():
    with gc.Graph("stages"):
        x = gc.placeholder((2, 6), name="x")
        w0 = gc.variable(np.ones((6, 6), np.float32), name="w0")
        w1 = gc.variable(np.ones((6, 3), np.float32), name="w1")
        h = gc.distributed.stage_boundary(gc.tanh(x @ w0))
        loss = gc.tanh(h @ w1).mean()
        return gc.distributed.Pipeline(2).compile(loss, [w0, w1], gc.optim.sgd, lr=0.1)


step = step_for(4) if MODE != "stage" else pipeline_step()
feeds = {"x": np.ones((4, 6), np.float32)}
step(**feeds)                                      # one step everyone takes
if RANK == 1:
    if MODE == "dies":
        os._exit(3)
    time.sleep(600)                                # hangs
start = time.monotonic()
try:
    step(**feeds)
except CollectiveError as e:
    print(f"rank 0 after {time.monotonic() - start:.1f} s: {e}", flush=True)
    gc.distributed._coll.comm().Abort(5)
print("no error", flush=True)
