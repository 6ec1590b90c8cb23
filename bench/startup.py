"""Start-up time: `import graphc` and `import graphc_runtime` (what every `graphc` command
and every process that only loads an artifact pays), each in a fresh process, median of
`--repeat`, next to `import numpy` measured the same way: `python -m bench.startup`."""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

PROBE = "import time; t = time.perf_counter(); import {mod}; print(time.perf_counter() - t)"


def import_seconds(mod: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", PROBE.format(mod=mod)], capture_output=True,
                             text=True, check=True)
        times.append(float(out.stdout))
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    numpy_s = import_seconds("numpy", args.repeat)
    print(f"{'import':<16} {'seconds':>8} {'/ numpy':>8}")
    for mod in ("numpy", "graphc_runtime", "graphc"):
        s = numpy_s if mod == "numpy" else import_seconds(mod, args.repeat)
        print(f"{mod:<16} {s:>8.3f} {s / numpy_s:>7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
