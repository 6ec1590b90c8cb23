"""Compile time as a user meets it: `python -m bench.compile_time`.

Each figure is from a fresh process: graphc's first compile of a model (empty caches),
the same compile in a second process (the program cache of graphc/program_cache.py
filled by the first), and the first compile with the program cache off (only LLVM's
object code cached), next to onnxruntime's session creation for the ONNX models (all
graph optimizations). Models: the four ONNX benchmark models (bench/onnx_models.py) and
the ConvNeXt-style CNN (48..384 channels, 224 x 224) at batch 1, and the W5 (MLP Adam) and W8 (CNN Adam) training steps of `python -m bench`.
Median of `--repeat` processes each; the ratio is graphc's second-process compile over
onnxruntime's session creation.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GRAPHC = """
import json, sys, time
kind, name = sys.argv[1], sys.argv[2]
if kind == "onnx":
    import graphc.onnx as gonnx
    from bench.onnx_models import MODELS, convnext
    model, _ = dict(MODELS, convnext=convnext)[name](1)
    gonnx.import_model(model)                   # the importer's modules, imported
    t = time.perf_counter()
    exe = gonnx.compile(model)
else:
    import graphc as gc
    from bench.__main__ import cnn_graph, mlp_graph
    g, loss, updates = {"W5": mlp_graph, "W8": cnn_graph}[name]()
    with g:
        t = time.perf_counter()
        exe = gc.compile({"loss": loss}, updates=updates)
print(json.dumps({"s": time.perf_counter() - t, "cache": exe.stats["program_cache"]}))
"""

ORT = """
import json, sys, time
import onnxruntime as ort
from bench.onnx_models import MODELS, convnext
model, _ = dict(MODELS, convnext=convnext)[sys.argv[1]](1)
data = model.SerializeToString()
opts = ort.SessionOptions()
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
t = time.perf_counter()
ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
print(json.dumps({"s": time.perf_counter() - t}))
"""


def _process(code: str, args, env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, **env), timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{args}: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def measure(kind: str, name: str, repeat: int) -> dict:
    cold, second, objects = [], [], []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cache:
            env = {"GRAPHC_CACHE_DIR": cache, "GRAPHC_PROGRAM_CACHE": "1"}
            first = _process(GRAPHC, (kind, name), env)
            again = _process(GRAPHC, (kind, name), env)
            only_objects = _process(GRAPHC, (kind, name), dict(env, GRAPHC_PROGRAM_CACHE="0"))
        if (first["cache"], again["cache"]) != ("miss", "hit"):
            raise RuntimeError(f"{name}: expected a miss then a hit, got {first['cache']}, "
                               f"{again['cache']}")
        cold.append(first["s"])
        second.append(again["s"])
        objects.append(only_objects["s"])
    row = {"model": name, "cold_s": statistics.median(cold),
           "second_process_s": statistics.median(second),
           "object_cache_only_s": statistics.median(objects), "session_s": None}
    if kind == "onnx":
        try:
            import onnxruntime  # noqa: F401
            row["session_s"] = statistics.median(
                _process(ORT, (name,), {})["s"] for _ in range(repeat))
        except ImportError:
            pass
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--models", nargs="*")
    args = p.parse_args(argv)
    try:
        import onnx  # noqa: F401
        from .onnx_models import MODELS
        onnx_models = list(MODELS) + ["convnext"]
    except ImportError:
        onnx_models = []
    work = [("onnx", m) for m in onnx_models] + [("graph", "W5"), ("graph", "W8")]
    if args.models:
        work = [w for w in work if w[1] in args.models]
    print(f"compile seconds, fresh processes, median of {args.repeat}; ratio = second "
          f"process / onnxruntime session")
    print(f"{'model':<10} {'first':>7} {'second process':>15} {'object cache only':>18} "
          f"{'ort session':>12} {'ratio':>6}")
    rows = []
    for kind, name in work:
        r = measure(kind, name, args.repeat)
        rows.append(r)
        ort = f"{r['session_s']:12.3f}" if r["session_s"] else f"{'-':>12}"
        ratio = f"{r['second_process_s'] / r['session_s']:6.2f}" if r["session_s"] else \
            f"{'-':>6}"
        print(f"{name:<10} {r['cold_s']:7.3f} {r['second_process_s']:15.3f} "
              f"{r['object_cache_only_s']:18.3f} {ort} {ratio}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
