"""ONE script for a machine with an NVIDIA GPU: correctness of every primitive and the
MLP/CNN training steps on CUDA against numpy (and the MLP compiled once with a symbolic
batch, run at several sizes), control flow (an LSTM training step through scan, a
conjugate-gradient while_loop, a cond) and the ONNX benchmark models against the same
programs compiled for the CPU, then W1-W3 timings against torch on the same GPU and the
fraction of measured HBM bandwidth. Installs nothing from the network:
pycuda is used if present, else built from a carried sdist (pycuda-*.tar.gz in bench/ or
.whl/). Prints a short table last; meant to finish in well under 4 minutes.

Run: python bench/gpu_check.py
"""
from __future__ import annotations

import glob
import os
import statistics
import subprocess
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.join(ROOT, "bench")]
sys.path.insert(0, ROOT)     # bench/onnx.py must not shadow the onnx package
sys.path.insert(0, os.path.join(ROOT, "tests"))


def ensure_pycuda() -> None:
    try:
        import pycuda  # noqa: F401
        return
    except ImportError:
        pass
    sdists = glob.glob(os.path.join(ROOT, "bench", "pycuda-*.tar.gz")) + \
        glob.glob(os.path.join(ROOT, ".whl", "pycuda-*"))
    if not sdists:
        sys.exit("pycuda is missing and no carried pycuda sdist/wheel was found")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                           "--no-build-isolation", sdists[0]])


def timed(fn, repeat=20, sync=None) -> float:
    fn()
    if sync:
        sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main() -> int:
    ensure_pycuda()
    import graphc as gc
    if not gc.cuda.is_available():
        print("no CUDA device")
        return 1
    import pycuda.driver as drv
    rows, failures = [], []

    # 1. every primitive (collectives excluded) against the reference interpreter
    from test_serialize_and_print import every_primitive_graph
    g, outs = every_primitive_graph()
    outs = [o for o in outs if o.node.op not in ("all_reduce", "all_gather", "reduce_scatter")]
    feeds = {"x": np.random.default_rng(0).uniform(0.5, 2, (2, 3)).astype(np.float32),
             "i": np.array([2, 0, 1, 1], np.int32), "b": np.array([[1, 0, 1], [0, 0, 1]], bool),
             "s": np.arange(15, dtype=np.float32).reshape(5, 3)}      # a symbolic "batch"
    try:
        with g:
            got = gc.compile(outs, device="cuda")(**feeds)
        for o, a, w in zip(outs, got, gc.evaluate(outs, feeds)):
            if not np.allclose(np.asarray(a, np.float64), np.asarray(w, np.float64), rtol=1e-5,
                               atol=1e-6, equal_nan=True):
                failures.append(f"primitive {o.node.op}")
    except Exception:
        failures.append("primitives: " + traceback.format_exc(limit=3))

    # 2. training steps: three steps on the GPU == three steps on the CPU
    from bench.__main__ import cnn_graph, mlp_graph
    rng = np.random.default_rng(0)
    for name, build, xs, ys in (("MLP", mlp_graph, (256, 784), 256),
                                ("CNN", cnn_graph, (64, 1, 28, 28), 64)):
        try:
            x = rng.standard_normal(xs).astype(np.float32)
            y = rng.integers(0, 10, ys).astype(np.int32)
            g1, l1, u1 = build()
            g2, l2, u2 = build()
            with g1:
                gpu = gc.compile({"loss": l1}, updates=u1, device="cuda")
            with g2:
                cpu = gc.compile({"loss": l2}, updates=u2)
            for _ in range(3):
                a, b = gpu(x, y)["loss"], cpu(x, y)["loss"]
                if not np.allclose(a, b, rtol=1e-4):
                    failures.append(f"{name} loss {a} vs {b}")
            step = timed(lambda: gpu(x, y))
            rows.append((f"{name} step", step, None, ""))
        except Exception:
            failures.append(f"{name}: " + traceback.format_exc(limit=3))

    # 2b. one compile with a symbolic batch: steps at three sizes == the CPU's
    try:
        g1, l1, u1 = mlp_graph(batch="batch")
        g2, l2, u2 = mlp_graph(batch="batch")
        with g1:
            gpu = gc.compile({"loss": l1}, updates=u1, device="cuda")
        with g2:
            cpu = gc.compile({"loss": l2}, updates=u2)
        for n in (1, 37, 256, 37, 256):
            x = rng.standard_normal((n, 784)).astype(np.float32)
            y = rng.integers(0, 10, n).astype(np.int32)
            a, b = gpu(x, y)["loss"], cpu(x, y)["loss"]
            if not np.allclose(a, b, rtol=1e-4):
                failures.append(f"symbolic MLP at batch {n}: loss {a} vs {b}")
        rows.append(("MLP step, symbolic batch at 256", timed(lambda: gpu(x, y)), None, ""))
    except Exception:
        failures.append("symbolic MLP: " + traceback.format_exc(limit=3))

    # 2c. control flow (the host-side loop runner): an LSTM training step through scan,
    # a conjugate-gradient while_loop and a cond, three steps on the GPU == the CPU's
    from bench.control import cg_graphc, lstm_data, poisson_rhs
    try:
        d = lstm_data(T=16, B=8, H=64)
        steps = []
        for device in ("cuda", "cpu"):
            with gc.Graph():
                xs = gc.placeholder(d["xs"].shape, name="xs")
                target = gc.placeholder(d["target"].shape, name="target")
                params = [gc.variable(d[k].copy(), name=k) for k in ("w_ih", "w_hh", "b")]
                ys, _ = gc.nn.lstm(xs, *params)
                loss = ((ys - target) ** 2).mean()
                grads = gc.grad(loss, params)
                steps.append(gc.compile(loss, updates={p: p - 0.01 * g
                                                       for p, g in zip(params, grads)},
                                        device=device))
        for _ in range(3):
            a, b = (float(s(d["xs"], d["target"])) for s in steps)
            if not np.isclose(a, b, rtol=1e-4):
                failures.append(f"LSTM scan step loss {a} vs {b}")
        for k in ("w_ih", "w_hh", "b"):
            if not np.allclose(steps[0].variables[k], steps[1].variables[k], rtol=1e-3,
                               atol=1e-5):
                failures.append(f"LSTM scan step: variable {k} differs after 3 steps")
        rows.append(("LSTM step T=16", timed(lambda: steps[0](d["xs"], d["target"])), None, ""))
    except Exception:
        failures.append("LSTM scan: " + traceback.format_exc(limit=3))
    try:
        rhs = poisson_rhs(64)
        cg_gpu = cg_graphc(64, device="cuda")
        cg_cpu = cg_graphc(64)
        a, b = cg_gpu(rhs), cg_cpu(rhs)
        if abs(int(a["steps"]) - int(b["steps"])) > 2:     # float sums in another order
            failures.append(f"CG while_loop steps {a['steps']} vs {b['steps']}")
        if not np.allclose(a["x"], b["x"], rtol=1e-3, atol=1e-4):
            failures.append("CG while_loop solution differs")
        rows.append((f"CG while {int(a['steps'])} it", timed(lambda: cg_gpu(rhs)), None, ""))
    except Exception:
        failures.append("CG while_loop: " + traceback.format_exc(limit=3))
    try:
        outs = []
        for device in ("cuda", "cpu"):
            with gc.Graph():
                v = gc.placeholder((1000,), name="v")
                y = gc.cond(v.sum() > 0, lambda t: gc.exp(t) * 2, lambda t: t - 1, v)
                outs.append(gc.compile(y, device=device))
        for sign in (1, -1):
            v = sign * np.abs(rng.standard_normal(1000)).astype(np.float32) * 0.1
            if not np.allclose(outs[0](v), outs[1](v), rtol=1e-5):
                failures.append(f"cond (predicate {sign > 0}) differs")
    except Exception:
        failures.append("cond: " + traceback.format_exc(limit=3))

    # 2d. the ONNX benchmark models compiled for the GPU == compiled for the CPU
    try:
        import graphc.onnx as gonnx
        from bench.onnx_models import MODELS
        for name, build in MODELS.items():
            try:
                model, make_feeds = build(4)
                feeds = make_feeds(rng)
                gpu = gonnx.compile(model, device="cuda")
                cpu = gonnx.compile(model)
                a, b = gpu(**feeds), cpu(**feeds)
                for k in b:
                    if not np.allclose(a[k], b[k], rtol=1e-3, atol=1e-4):
                        err = float(np.max(np.abs(a[k] - b[k])))
                        failures.append(f"ONNX {name} output {k}: max abs diff {err:.3g}")
                rows.append((f"ONNX {name} b=4", timed(lambda: gpu(**feeds)), None, ""))
            except Exception:
                failures.append(f"ONNX {name}: " + traceback.format_exc(limit=3))
    except ImportError as e:
        print("ONNX models skipped:", e)

    # 3. bandwidth and W1-W4 against torch on the same GPU
    from graphc_runtime.cuda_context import context
    ctx = context(0)
    ctx.push()               # graphc's own context, current for pycuda's calls below
    try:
        n = 4096
        src = drv.mem_alloc(n * n * 4)
        dst = drv.mem_alloc(n * n * 4)
        copy_ms = timed(lambda: drv.memcpy_dtod(dst, src, n * n * 4),
                        sync=drv.Context.synchronize)
        hbm = 2 * n * n * 4 / (copy_ms / 1e3) / 1e9
        try:
            import torch
            has_torch = torch.cuda.is_available()
        except ImportError:
            has_torch = False
        x = rng.standard_normal((n, n)).astype(np.float32)
        a = rng.standard_normal(n).astype(np.float32)
        bb = rng.standard_normal(n).astype(np.float32)
        dx, da, db = (gc.to_device(v, "cuda") for v in (x, a, bb))
        with gc.Graph():
            p = [gc.placeholder(v.shape, name=k) for k, v in (("x", x), ("a", a), ("b", bb))]
            w1 = gc.compile(gc.gelu(p[0] * p[1] + p[2], approximate=True), device="cuda")
        with gc.Graph():
            w2 = gc.compile(gc.softmax(gc.placeholder(x.shape, name="x"), axis=1), device="cuda")
        with gc.Graph():
            p = [gc.placeholder(v.shape, name=k) for k, v in (("x", x), ("g", a), ("b", bb))]
            w3 = gc.compile(gc.nn.layer_norm(*p), device="cuda")
        sync = drv.Context.synchronize
        for name, fn, torch_fn in (
                ("W1 gelu", lambda: w1(dx, da, db), "gelu"),
                ("W2 softmax", lambda: w2(dx), "softmax"),
                ("W3 layer norm", lambda: w3(dx, da, db), "layernorm")):
            ms = timed(fn, sync=sync)
            peer = None
            if has_torch:
                tx, ta, tb = (torch.from_numpy(v).cuda() for v in (x, a, bb))
                f = {"gelu": lambda: torch.nn.functional.gelu(tx * ta + tb, approximate="tanh"),
                     "softmax": lambda: torch.softmax(tx, 1),
                     "layernorm": lambda: torch.nn.functional.layer_norm(tx, (n,), ta, tb),
                     }[torch_fn]
                peer = timed(f, sync=torch.cuda.synchronize)
            rows.append((name, ms, peer, f"{2 * n * n * 4 / (ms / 1e3) / 1e9 / hbm:.0%} HBM"))
    finally:
        ctx.pop()            # pycuda aborts at exit if a context is left pushed

    print(f"\nHBM copy bandwidth {hbm:.0f} GB/s")
    print(f"{'workload':32} {'graphc ms':>10} {'torch ms':>10} {'ratio':>7} {'':>10}")
    for name, ms, peer, note in rows:
        ratio = f"{peer / ms:.2f}x" if peer else "-"
        print(f"{name:32} {ms:>10.3f} {peer if peer else float('nan'):>10.3f} {ratio:>7} {note:>10}")
    print("correctness:", "all primitives and steps match" if not failures else
          f"{len(failures)} FAILURES")
    for f in failures:
        print("  ", f)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
