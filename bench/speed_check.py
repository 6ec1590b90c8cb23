"""A short speed check for CI's dependency-range run: `python -m bench.speed_check`.

W1-W3 (gelu, softmax, layer norm over a 4096x4096 float32 array) are timed against a
copy of the same footprint measured right before and after each (bench's probe), and
their optimized LLVM IR must hold float vectors. It fails when a kernel runs below
`--floor` of the copy bandwidth or stays scalar: what an llvmlite whose LLVM does not
vectorize graphc's IR gives (LLVM 20 with llvm.ldexp ran W1 at ~4% of it, ~9x slower).
With numba installed, it is imported first, so its pinned llvmlite is the one measured.
"""
from __future__ import annotations

import argparse
import re
import sys

import numpy as np

try:                                   # the environment a numba user has
    import numba
except ImportError:
    numba = None

import graphc as gc

from .__main__ import bracketed_ms, machine_probes, toolchain


def kernels(n: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(np.float32)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    with gc.Graph("w1"):
        p = [gc.placeholder(v.shape, name=k) for k, v in (("x", x), ("a", a), ("b", b))]
        w1 = gc.compile(gc.gelu(p[0] * p[1] + p[2], approximate=True))
    with gc.Graph("w2"):
        w2 = gc.compile(gc.softmax(gc.placeholder(x.shape, name="x"), axis=1))
    with gc.Graph("w3"):
        p = [gc.placeholder(v.shape, name=k) for k, v in (("x", x), ("g", a), ("b", b))]
        w3 = gc.compile(gc.nn.layer_norm(*p))
    return x, [("W1 gelu_tanh(x*a+b)", w1, (x, a, b)), ("W2 softmax rows", w2, (x,)),
               ("W3 layer norm", w3, (x, a, b))]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--floor", type=float, default=0.15,
                        help="least fraction of copy bandwidth each kernel must reach")
    args = parser.parse_args(argv)
    versions = toolchain()
    if numba is not None:
        versions["numba"] = numba.__version__
    print("toolchain: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    x, work = kernels(args.n)
    (copy, copy_bytes), _ = machine_probes(x.size)
    failures = []
    for name, exe, feeds in work:
        widths = [int(w) for w in re.findall(r"<(\d+) x float>", exe.dump("llvm"))]
        width = max(widths, default=1)
        _, best, copy_best = bracketed_ms(lambda: exe(*feeds), copy, args.repeat)
        fraction = (2 * x.nbytes / best) / (copy_bytes / copy_best)
        print(f"{name:22} {best:8.2f} ms  copy {copy_best:6.2f} ms  {fraction:5.0%} of copy "
              f"bandwidth  vector width {width}")
        if width < 4:
            failures.append(f"{name}: the loop is not vectorized")
        if fraction < args.floor:
            failures.append(f"{name}: {fraction:.0%} of copy bandwidth, below {args.floor:.0%}")
    for f in failures:
        print("SPEED CHECK FAILED: " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
