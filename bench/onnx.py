"""graphc against onnxruntime on the ONNX models of bench/onnx_models.py: `python -m
bench.onnx` (in `make bench`). onnxruntime runs with the CPU execution provider, all graph
optimizations and intra-op threads = cores (its default spinning: without it, its small
models wait on thread wake-ups; bench.contention runs each engine in its own process);
both are timed alternately in the same run at batch 1 and 32 (`--real`: the CNNs at
224 x 224, batch 1 and 8), and each figure is printed as the ratio onnxruntime / graphc
(> 1: graphc is faster), with the geometric mean. Outputs are checked against each other
first. `--precision bf16`: graphc's products and convolutions in bfloat16
(gc.compile's precision option; onnxruntime stays float32): the ratio is then across
precisions, and outputs agree to 2e-2. Compile times: graphc's first compile (cold caches), its second (the program from
the program cache, graphc/program_cache.py) and onnxruntime's session creation;
`python -m bench.compile_time` measures them in fresh processes."""
from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _time(fn, repeat):
    from .__main__ import median_ms
    return median_ms(fn, repeat)


def run(batches=(1, 32), models=None, repeat: int = 20, rounds: int = 3,
        real: bool = False, precision: str = "float32") -> list[dict]:
    import onnxruntime as ort
    import graphc.onnx as gonnx
    from .onnx_models import MODELS, REAL_MODELS
    MODELS = REAL_MODELS if real else MODELS
    rng = np.random.default_rng(0)
    cores = os.cpu_count() or 1
    rows = []
    for name in models or list(MODELS):
        for batch in batches:
            model, make_feeds = MODELS[name](batch)
            feeds = make_feeds(rng)
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            opts.intra_op_num_threads = cores
            t0 = time.perf_counter()
            sess = ort.InferenceSession(model.SerializeToString(), opts,
                                        providers=["CPUExecutionProvider"])
            session_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            exe = gonnx.compile(model, precision=precision)
            compile_s = time.perf_counter() - t0
            t0 = time.perf_counter()               # again: the program from the cache
            gonnx.compile(model, precision=precision)
            cached_s = time.perf_counter() - t0
            want = sess.run(None, feeds)[0]
            got = next(iter(exe(**feeds).values()))
            err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
            g_ms, o_ms = [], []
            for _ in range(rounds):                     # alternate: same load for both
                g_ms.append(_time(lambda: exe(**feeds), repeat))
                o_ms.append(_time(lambda: sess.run(None, feeds), repeat))
            g, o = min(g_ms), min(o_ms)
            rows.append({"model": name, "batch": batch, "graphc_ms": g, "onnxruntime_ms": o,
                         "ratio": o / g, "rel_err": err, "compile_s": compile_s,
                         "cached_compile_s": cached_s, "session_s": session_s})
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true", help="batch 1 only, fewer repeats")
    p.add_argument("--models", nargs="*")
    p.add_argument("--real", action="store_true",
                   help="the CNNs at 224 x 224 (ResNet-50-, MobileNetV2-sized, ConvNeXt-style) "
                        "at batch 1 and 8")
    p.add_argument("--precision", default="float32", choices=["float32", "bf16"],
                   help="graphc's products and convolutions (onnxruntime: float32)")
    args = p.parse_args(argv)
    try:
        import onnx  # noqa: F401
        import onnxruntime
    except ImportError as e:
        print(f"bench.onnx: skipped ({e}; install the bench extra)")
        return 0
    import tempfile
    with tempfile.TemporaryDirectory() as cache:    # a cold object cache: first compiles
        os.environ["GRAPHC_CACHE_DIR"] = cache       # miss, second ones hit
        batches = (1,) if args.quick else (1, 8) if args.real else (1, 32)
        rows = run(batches=batches, models=args.models, repeat=5 if args.quick else 20,
                   rounds=2 if args.quick else 3, real=args.real,
                   precision=args.precision)
    print(f"graphc vs onnxruntime {onnxruntime.__version__} (CPU EP, ORT_ENABLE_ALL, "
          f"{os.cpu_count()} intra-op threads); ratio = onnxruntime / graphc, > 1: graphc "
          f"faster; graphc precision {args.precision}")
    print(f"{'model':<12} {'batch':>5} {'graphc ms':>10} {'ort ms':>9} {'ratio':>6} "
          f"{'rel err':>8} {'compile s':>9} {'cached s':>8} {'ort session s':>13}")
    for r in rows:
        print(f"{r['model']:<12} {r['batch']:>5} {r['graphc_ms']:>10.3f} "
              f"{r['onnxruntime_ms']:>9.3f} {r['ratio']:>6.2f} {r['rel_err']:>8.1e} "
              f"{r['compile_s']:>9.2f} {r['cached_compile_s']:>8.2f} {r['session_s']:>13.2f}")
    geo = float(np.exp(np.mean([np.log(r["ratio"]) for r in rows])))
    print(f"geometric mean ratio: {geo:.2f}")
    bad = [r for r in rows if r["rel_err"] > (1e-3 if args.precision == "float32" else 2e-2)]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
