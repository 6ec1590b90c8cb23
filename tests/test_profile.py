"""The kernel profiler: a profiling build with native timestamps, its report, the Chrome
trace, `graphc profile` on an artifact, and a normal build that carries none of it."""
import json
import os

import numpy as np
import pytest

import graphc as gc
import graphc_runtime
from graphc.cli import main as cli
from graphc_runtime import pool


def mlp_step(rng, batch=64):
    from bench.__main__ import mlp_graph
    g, loss, updates = mlp_graph(batch=batch, sizes=(64, 128, 10))
    with g:
        exe = gc.compile({"loss": loss}, updates=updates, num_threads=2)
    feeds = {"x": rng.standard_normal((batch, 64)).astype(np.float32),
             "y": rng.integers(0, 10, batch).astype(np.int32)}
    return exe, feeds


def test_profile_reports_every_kernel_and_leaves_the_variables(rng):
    exe, feeds = mlp_step(rng)
    before = {k: v.copy() for k, v in exe.variables.items()}
    report = exe.profile(repeat=5, **feeds)
    assert len(report.rows) == exe.stats["kernels"]
    assert {r["kernel"] for r in report.rows} == {k["name"] for k in exe.manifest()["kernels"]}
    times = [r["ms"] for r in report.rows]
    assert times == sorted(times, reverse=True) and all(t >= 0 for t in times)
    assert sum(times) > 0
    assert abs(sum(r["percent"] for r in report.rows) - 100) < 1e-6
    assert sum(times) <= report.profiled_ms * 1.05       # kernels run inside the call
    dots = [r for r in report.rows if r["kind"] == "dot"]
    assert dots and all(r["flops"] > 0 and r["gflops"] > 0 for r in dots)
    assert all(r["bytes"] > 0 for r in report.rows)
    for name, value in exe.variables.items():
        np.testing.assert_array_equal(value, before[name])
    table = report.table()
    assert table.splitlines()[1].split()[0] == report.rows[0]["kernel"]
    assert "dot_general" in table and "GB/s" in table
    # the normal build has no timestamps
    assert "graphc_profile" not in exe.dump("llvm")


def test_chrome_trace_has_an_event_per_kernel_per_call(rng, tmp_path):
    exe, feeds = mlp_step(rng)
    report = exe.profile(repeat=3, **feeds)
    path = tmp_path / "trace.json"
    report.save_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    main = [e for e in events if e["ph"] == "X" and e["tid"] == 0]
    assert len(main) == 3 * exe.stats["kernels"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 and e["pid"] == 1 for e in main)
    first = sorted(main, key=lambda e: e["ts"])[:exe.stats["kernels"]]
    assert [e["name"] for e in first] == [k["name"] for k in exe.manifest()["kernels"]]
    assert any(e["ph"] == "M" and e["args"]["name"].startswith("step") for e in events)


@pytest.mark.skipif(pool.pool() is None, reason="no thread pool (it needs Linux on x86-64 or AArch64)")
@pytest.mark.parametrize("threads", [2, 3])
def test_split_kernels_get_a_multiple_of_the_threads_in_chunks(rng, threads):
    """A product of 1599 columns has room for 3 chunks of 512: as 2 on 2 threads (3
    left one thread a chunk more than the other, and the product at 1.35x its one-thread
    rate); a long elementwise loop as whole rounds of chunks too."""
    with gc.Graph():
        a = gc.placeholder((512, 1536), name="a")
        b = gc.placeholder((1536, 1599), name="b")
        x = gc.placeholder((5 << 20,), name="x")
        exe = gc.compile([gc.matmul(a, b), gc.tanh(x) * 2.0 + x], num_threads=threads)
    report = exe.profile(repeat=1, a=rng.standard_normal((512, 1536)).astype(np.float32),
                         b=rng.standard_normal((1536, 1599)).astype(np.float32),
                         x=rng.standard_normal(5 << 20).astype(np.float32))
    chunks = {}
    for e in report.events:
        if e["ph"] == "X" and e["tid"] > 0 and e["cat"] != "waiting":
            chunks.setdefault(e["name"].split(" [")[0], set()).add(e["args"]["chunk"])
    assert len(chunks) == 2
    assert all(len(c) % threads == 0 for c in chunks.values()), chunks


@pytest.mark.skipif(pool.pool() is None, reason="no thread pool (it needs Linux on x86-64 or AArch64)")
def test_split_kernels_get_a_track_per_pool_thread(rng):
    n = 1 << 20
    with gc.Graph():
        x = gc.placeholder((n,), name="x")
        exe = gc.compile(gc.tanh(x) * 2.0 + x, num_threads=2)
    report = exe.profile(repeat=2, x=rng.standard_normal(n).astype(np.float32))
    chunks = [e for e in report.events if e["ph"] == "X" and e["tid"] > 0]
    numbers = {e["args"]["chunk"] for e in chunks}      # a large kernel: several a thread
    assert len(numbers) >= 2 and numbers == set(range(len(numbers)))
    assert len({e["tid"] for e in chunks}) >= 1
    # a thread waits for a chunk from the end of its previous one, not from the kernel's
    # start: no wait overlaps a chunk the same thread ran
    work = [e for e in chunks if e["cat"] != "waiting"]
    for w in (e for e in chunks if e["cat"] == "waiting"):
        assert not [e for e in work if e["tid"] == w["tid"] and
                    e["args"]["call"] == w["args"]["call"] and
                    e["ts"] < w["ts"] + w["dur"] - 1e-3 and w["ts"] < e["ts"] + e["dur"] - 1e-3]
    tracks = [e["args"]["name"] for e in report.events if e["ph"] == "M"]
    assert any(t.startswith("pool thread") for t in tracks)


def test_graphc_profile_on_an_artifact(rng, tmp_path, capsys):
    exe, feeds = mlp_step(rng)
    path = str(tmp_path / "mlp.gcx")
    exe.save(path)
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
    trace = tmp_path / "trace.json"
    rc = cli(["profile", path, "--input", f"x={tmp_path / 'x.npy'}",
              "--input", f"y={tmp_path / 'y.npy'}", "--repeat", "3", "-o", str(trace)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "kernel" in out and "GB/s" in out and f"wrote {trace}" in out
    assert len([e for e in json.loads(trace.read_text())["traceEvents"]
                if e["ph"] == "X" and e["tid"] == 0]) == 3 * exe.stats["kernels"]
    model = graphc_runtime.load(path)
    before = {k: v.copy() for k, v in model.variables.items()}
    assert len(model.profile(2, **feeds).rows) == exe.stats["kernels"]
    for name, value in model.variables.items():
        np.testing.assert_array_equal(value, before[name])


def test_profile_errors_are_clear(rng, tmp_path):
    exe, feeds = mlp_step(rng)
    with pytest.raises(gc.GraphcError, match="repeat must be a positive int"):
        exe.profile(repeat=0, **feeds)
    with pytest.raises(gc.FeedError, match="missing input 'y'"):
        exe.profile(repeat=1, x=feeds["x"])
    path = str(tmp_path / "m.gcx")
    exe.save(path)
    model = graphc_runtime.load(path)
    del model._sections["object_profile"]                # as an older graphc wrote it
    with pytest.raises(gc.ArtifactError, match="no profiling build"):
        model.profile(1, **feeds)


def test_overhead_benchmark_runs(capsys):
    from bench.profiler import main
    rows = main(["--calls", "10", "--rounds", "1"])
    assert [r["workload"][:2] for r in rows] == ["W5", "W8", "W1"]
    assert all(r["normal_ms"] > 0 and r["profiled_ms"] > 0 for r in rows)
    assert "ratio" in capsys.readouterr().out


LOADED = r"""
import os, sys, time, multiprocessing as mp, numpy as np, graphc as gc
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})   # one CPU, shared with a spinner

def spin():
    while True:
        pass

with gc.Graph():
    x = gc.placeholder((4096, 4096), name="x")       # a kernel of several time slices
    exe = gc.compile(gc.tanh(gc.exp(x) * 0.5).sum(axis=1), num_threads=1)
data = np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32)
quiet = exe.profile(3, x=data)
spinner = mp.get_context("fork").Process(target=spin, daemon=True)
spinner.start()
time.sleep(0.2)
try:
    loaded = exe.profile(6, x=data)
finally:
    spinner.kill()
for name, p in (("quiet", quiet), ("loaded", loaded)):
    ms = sum(r["ms"] for r in p.rows)
    run = sum(r["running_ms"] for r in p.rows)
    wait = sum(r["waiting_ms"] for r in p.rows)
    print(name, ms, run, wait)
print(loaded.table())
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_waiting_for_a_cpu_is_shown_apart_from_running():
    """With a busy process on the same CPU, a kernel's wall time is about half waiting:
    the profile says so instead of counting it as kernel time (its rates are per running
    time)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    figures = {line.split()[0]: [float(v) for v in line.split()[1:]]
               for line in out.stdout.splitlines() if line.startswith(("quiet ", "loaded "))}
    for ms, run, wait in figures.values():
        assert abs(run + wait - ms) < 1e-6 * max(ms, 1) + 1e-9
    ms, run, wait = figures["loaded"]
    assert wait > 0.2 * ms, out.stdout                 # shared one CPU with a spinner
    assert "wait ms" in out.stdout and "waiting for a CPU" in out.stdout
