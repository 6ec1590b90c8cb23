"""graphc and onnxruntime on a quiet and on a busy machine: `python -m bench.contention`.

Each figure comes from its own process (a model, an engine, a condition), so that no
engine's threads steal another's cores. "Busy" starts one busy-looping process per 2
cores beside it, as other jobs on a shared machine would. Models: bench/onnx_models.py's
four at batch 1, and "distilbert" (the BERT-style encoder at DistilBERT's width: 768
hidden, 12 heads, sequence 128, 2 layers). Engines: graphc with its
default threads, graphc on one thread (GRAPHC_NUM_THREADS=1), onnxruntime with its
intra-op threads = cores and spinning off. Printed per model: each engine's quiet and
busy median (ms) and its slowdown (busy / quiet); the targets: graphc's busy time at most
1.5x its quiet time, never worse than graphc on one thread, and a slowdown no worse than
onnxruntime's. `--env K=V` sets a variable for graphc's processes (to try settings).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENGINES = ("graphc", "graphc-1", "onnxruntime")


def worker(model_name: str, engine: str, repeat: int) -> dict:
    """Time one model on one engine in this process (median of `repeat` after warm-up)."""
    import numpy as np
    sys.path.insert(0, ROOT)
    from bench.onnx_models import MODELS, bert
    from bench.__main__ import median_ms
    models = dict(MODELS, distilbert=lambda b: bert(b, seq=128, hidden=768, heads=12,
                                                    layers=2))
    model, make_feeds = models[model_name](1)
    feeds = make_feeds(np.random.default_rng(0))
    if engine == "onnxruntime":
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = os.cpu_count() or 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        sess = ort.InferenceSession(model.SerializeToString(), opts,
                                    providers=["CPUExecutionProvider"])
        run = lambda: sess.run(None, feeds)
    else:
        import graphc.onnx as gonnx
        exe = gonnx.compile(model)
        run = lambda: exe(**feeds)
    for _ in range(20):
        run()
    return {"ms": median_ms(run, repeat)}


def _measure(model: str, engine: str, repeat: int, env: dict) -> float:
    environ = dict(os.environ)
    if engine.startswith("graphc"):
        environ.update(env)
    if engine == "graphc-1":
        environ["GRAPHC_NUM_THREADS"] = "1"
    out = subprocess.run([sys.executable, "-m", "bench.contention", "--worker", model, engine,
                          "--repeat", str(repeat)], capture_output=True, text=True, cwd=ROOT,
                         env=environ, timeout=600)
    if out.returncode:
        raise RuntimeError(f"{model} on {engine}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["ms"]


class Busy:
    """One busy-looping process per 2 cores (at least one), while inside."""

    def __enter__(self):
        n = max(1, (os.cpu_count() or 1) // 2)
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                      for _ in range(n)]
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "ENGINE"))
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--models", nargs="*",
                   default=["resnet", "mobilenet", "bert", "gpt", "distilbert"])
    p.add_argument("--engines", nargs="*", default=list(ENGINES))
    p.add_argument("--env", action="append", default=[], help="K=V for graphc's processes")
    args = p.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.repeat)))
        return 0
    env = dict(kv.split("=", 1) for kv in args.env)
    print(f"{os.cpu_count()} cores; busy: {max(1, (os.cpu_count() or 1) // 2)} busy-looping "
          f"process(es); graphc env: {env or 'default'}")
    print(f"{'model':<10} {'engine':<12} {'quiet ms':>9} {'busy ms':>9} {'slowdown':>9}")
    rows = []
    for model in args.models:
        quiet = {e: _measure(model, e, args.repeat, env) for e in args.engines}
        with Busy():
            busy = {e: _measure(model, e, args.repeat, env) for e in args.engines}
        for e in args.engines:
            rows.append({"model": model, "engine": e, "quiet_ms": quiet[e], "busy_ms": busy[e]})
            print(f"{model:<10} {e:<12} {quiet[e]:>9.3f} {busy[e]:>9.3f} "
                  f"{busy[e] / quiet[e]:>8.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
