"""Symbolic-batch workloads: `python -m bench.symbolic` (in `make bench`).

W5s the MLP Adam step of W5 (784-512-512-10) compiled once with a symbolic batch, run at
    batch 256 and at a short batch of 37, against the same step compiled for that one
    size (the static compile is the peer: ratio static/symbolic, target >= 1/1.1), and
    at 256 against jax and torch's W5 step where they are installed.
W6s the per-call cost of x + y with x, y of symbolic shape (n,) fed (4,) arrays, against
    the static (4,) compile (target: at most 3 us a call) and numpy.
Ratios are peer time / graphc time (> 1: the symbolic compile is faster), measured in the
same run; compile times of both variants are printed too.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import graphc as gc


def _time(fn, repeat):
    from .__main__ import median_ms
    return median_ms(fn, repeat)


def _per_call_us(fn, repeat, calls=2000):
    from .__main__ import median_ms
    return median_ms(lambda: [fn() for _ in range(calls)], repeat) / calls * 1e3


def run(repeat: int = 7, quick: bool = False) -> list[dict]:
    from .__main__ import mlp_graph
    from . import peers
    sizes = (784, 128, 128, 10) if quick else (784, 512, 512, 10)
    rows = []
    g, loss, upd = mlp_graph(batch="batch", sizes=sizes)
    with g:
        t0 = time.perf_counter()
        symbolic = gc.compile({"loss": loss}, updates=upd)
        sym_compile = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    for n in ((64, 9) if quick else (256, 37)):
        gs, ls, us = mlp_graph(batch=n, sizes=sizes)
        with gs:
            t0 = time.perf_counter()
            static = gc.compile({"loss": ls}, updates=us)
            static_compile = time.perf_counter() - t0
        x = rng.standard_normal((n, 784)).astype(np.float32)
        y = rng.integers(0, 10, n).astype(np.int32)
        row = {"workload": f"W5s MLP Adam step, symbolic batch at {n}",
               "graphc_ms": _time(lambda: symbolic(x, y), repeat),
               "static_ms": _time(lambda: static(x, y), repeat),
               "compile_s": sym_compile, "static_compile_s": static_compile}
        row["static_ms"] = min(row["static_ms"], _time(lambda: static(x, y), repeat))
        row["graphc_ms"] = min(row["graphc_ms"], _time(lambda: symbolic(x, y), repeat))
        if not quick and n == 256:           # the frameworks' W5 step (bench/peers.py)
            for peer in [p for p in peers.available() if p != "numpy"]:   # no numpy W5
                fn = peers.workload(peer, "W5 MLP Adam step", {"mlp_x": x, "mlp_y": y})
                if fn is not None:
                    row[f"{peer}_ms"] = _time(fn, repeat)
        rows.append(row)

    with gc.Graph("w6s"):
        p = [gc.placeholder(("n",), name=k) for k in "xy"]
        f_sym = gc.compile(p[0] + p[1])
    with gc.Graph("w6"):
        p = [gc.placeholder((4,), name=k) for k in "xy"]
        f_static = gc.compile(p[0] + p[1])
    a, b = np.ones(4, np.float32), np.ones(4, np.float32)
    row = {"workload": "W6s x+y (n,) at n=4 per call", "kind": "call",
           "graphc_us": _per_call_us(lambda: f_sym(a, b), repeat),
           "static_us": _per_call_us(lambda: f_static(a, b), repeat),
           "numpy_us": _per_call_us(lambda: np.add(a, b), repeat)}
    row["graphc_us"] = min(row["graphc_us"], _per_call_us(lambda: f_sym(a, b), repeat))
    rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="small sizes (for the tests)")
    args = parser.parse_args(argv)
    print("symbolic dimensions: one compile for every batch size; ratio = peer / graphc "
          "(> 1: graphc's symbolic compile is faster)")
    for row in run(args.repeat, args.quick):
        if row.get("kind") == "call":
            cells = [f"static {row['static_us']:.2f}us {row['static_us'] / row['graphc_us']:.2f}x",
                     f"numpy {row['numpy_us']:.2f}us {row['numpy_us'] / row['graphc_us']:.2f}x"]
            print(f"{row['workload']:42} {row['graphc_us']:8.2f}us  " + "  ".join(cells))
            continue
        cells = [f"static {row['static_ms']:.2f}ms {row['static_ms'] / row['graphc_ms']:.2f}x"]
        for peer in ("numpy", "jax", "torch"):
            if f"{peer}_ms" in row:
                ms = row[f"{peer}_ms"]
                cells.append(f"{peer} {ms:.2f}ms {ms / row['graphc_ms']:.2f}x")
        print(f"{row['workload']:42} {row['graphc_ms']:8.2f}ms  " + "  ".join(cells) +
              f"  (compile {row['compile_s']:.2f}s, static {row['static_compile_s']:.2f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
