"""Loading a ~10 MB artifact with graphc_runtime.load vs numpy loading the same weights.

Run: python bench/artifact_load.py
"""
from __future__ import annotations

import os
import statistics
import tempfile
import time

import numpy as np

import graphc as gc
import graphc_runtime


def main() -> dict:
    rng = np.random.default_rng(0)
    with gc.Graph("ten_mb"):
        x = gc.placeholder((32, 1024), name="x")
        ws = [gc.variable(rng.standard_normal((1024, 1024)).astype(np.float32) * 0.03,
                          name=f"w{k}") for k in range(2)]
        h = x
        for w in ws:
            h = gc.relu(h @ w)
        exe = gc.compile(h)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.gcx")
        exe.save(path)
        npz = os.path.join(d, "w.npz")
        np.savez(npz, **{k: v for k, v in exe.variables.items()})
        size = os.path.getsize(path)
        t_load = statistics.median(_time(lambda: graphc_runtime.load(path)) for _ in range(7))
        t_np = statistics.median(_time(lambda: dict(np.load(npz))) for _ in range(7))
    print(f"artifact {size / 1e6:.1f} MB: graphc_runtime.load {t_load * 1e3:.1f} ms, "
          f"numpy load of the weights alone {t_np * 1e3:.1f} ms (ratio {t_load / t_np:.2f})")
    return {"bytes": size, "load_ms": t_load * 1e3, "numpy_ms": t_np * 1e3}


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
