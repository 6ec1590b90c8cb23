"""The persistent cache of whole programs keyed by the graph (graphc/program_cache.py): a
second process compiling the same graph loads the program without compiling; the hit
computes the same bits, binds the graph's current variables, dumps, saves and profiles
like the miss; anything that decides the code misses; corrupt or foreign entries are
rebuilt; it can be turned off; compiles it cannot serve say why.

The rest of the suite runs with this cache off (tests/conftest.py), since tests that
patch graphc's internals would otherwise be served programs compiled before the patch."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import graphc as gc
from graphc_runtime import cache_store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# a training step with control flow and a symbolic batch: outputs, updates, a scan
PROGRAM = textwrap.dedent("""
    import json, sys, numpy as np, graphc as gc
    scale, init = float(sys.argv[1]), float(sys.argv[2])
    rng = np.random.default_rng(0)
    with gc.Graph("cached"):
        x = gc.placeholder(("batch", 12), "float32", name="x")
        w = gc.variable(np.full((12, 8), init, np.float32), name="w")
        c = gc.constant(np.linspace(-1, 1, 8, dtype=np.float32) * scale)
        h, hs = gc.scan(lambda s, xt: (gc.tanh(s + xt), s * 2.0), gc.zeros((8,)),
                        gc.tanh(x @ w + c))
        loss = gc.mean((hs - 0.5) ** 2) + gc.sum(h)
        step = gc.optim.sgd(loss, [w], lr=0.05)
        exe = gc.compile({"loss": loss, "h": h}, updates=step)
    feed = rng.standard_normal((5, 12)).astype(np.float32)
    outs = [exe(x=feed) for _ in range(3)]
    print(json.dumps({"cache": exe.stats["program_cache"],
                      "compile": exe.stats["compile_seconds"],
                      "losses": [float(o["loss"]).hex() for o in outs],
                      "h": [float(v).hex() for v in outs[-1]["h"]],
                      "w": [float(v).hex() for v in exe.variables["w"].ravel()],
                      "dumps": {s: exe.dump(s) for s in ("graph", "optimized", "fused",
                                                           "memory", "llvm")}}))
""")


def _run(tmp_path, scale="2.0", init="0.1", **env):
    environ = dict(os.environ, **{"GRAPHC_CACHE_DIR": str(tmp_path / "cache"),
                                  "GRAPHC_PROGRAM_CACHE": "1", **env})
    r = subprocess.run([sys.executable, "-c", PROGRAM, scale, init], capture_output=True,
                       text=True, env=environ, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _entries(tmp_path, suffix=".gcp"):
    folder = tmp_path / "cache"
    return sorted(p for p in folder.iterdir() if p.suffix == suffix) if folder.exists() \
        else []


def _same_results(a, b):
    return all(a[k] == b[k] for k in ("losses", "h", "w"))


def test_a_second_process_loads_the_program(tmp_path):
    first = _run(tmp_path)
    second = _run(tmp_path)
    assert (first["cache"], second["cache"]) == ("miss", "hit")
    assert _same_results(first, second)                 # the same bits, variables too
    assert second["dumps"] == first["dumps"]
    assert second["compile"] < first["compile"]
    assert len(_entries(tmp_path)) == 1


def test_a_hit_binds_the_graphs_variables(tmp_path):
    """The variables' values are not part of the key: a hit runs with this graph's."""
    _run(tmp_path, init="0.1")
    other = _run(tmp_path, init="-0.3")
    assert other["cache"] == "hit"
    fresh = _run(tmp_path, init="-0.3", GRAPHC_PROGRAM_CACHE="0")
    assert fresh["cache"] == "off" and _same_results(other, fresh)


def test_what_decides_the_code_misses(tmp_path):
    _run(tmp_path)
    assert _run(tmp_path, scale="3.0")["cache"] == "miss"             # a constant's bytes
    assert _run(tmp_path, GRAPHC_NUM_THREADS="1")["cache"] == "miss"  # threads
    assert _run(tmp_path, GRAPHC_POOL="0")["cache"] == "miss"         # a GRAPHC_ setting
    assert len(_entries(tmp_path)) == 4
    assert _run(tmp_path)["cache"] == "hit"
    assert _run(tmp_path, GRAPHC_COMPILE_PROCESSES="1")["cache"] == "hit"  # same program


def test_a_corrupt_or_foreign_entry_is_rebuilt(tmp_path):
    want = _run(tmp_path)
    (entry,) = _entries(tmp_path)
    raw = bytearray(entry.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    entry.write_bytes(bytes(raw))
    got = _run(tmp_path)
    assert got["cache"] == "miss" and _same_results(got, want)
    assert _run(tmp_path)["cache"] == "hit"                          # rebuilt, whole again
    _run(tmp_path, scale="3.0")
    other = next(p for p in _entries(tmp_path) if p != entry)
    entry.write_bytes(other.read_bytes())                   # valid, but another key's
    got = _run(tmp_path)
    assert got["cache"] == "miss" and _same_results(got, want)


POOL = textwrap.dedent("""
    import ctypes, numpy as np
    from graphc_runtime import pool
    p = pool.pool()
    print(p is not None and p.run_address != 0 and p.workers >= 0)
""")


def test_the_pools_code_is_cached_and_checked(tmp_path):
    """The thread pool's native code (runtime/pool.py) is kept in the same folder: built
    once, then read; a corrupt entry is rebuilt."""
    environ = dict(os.environ, GRAPHC_CACHE_DIR=str(tmp_path / "cache"), GRAPHC_POOL="1")

    def run():
        r = subprocess.run([sys.executable, "-c", POOL], capture_output=True, text=True,
                           env=environ, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.strip()
    assert run() == "True"
    (entry,) = _entries(tmp_path, ".gcn")
    stamp = entry.stat().st_mtime_ns
    assert run() == "True" and entry.read_bytes()
    entry.write_bytes(entry.read_bytes()[:-40] + b"x" * 40)          # corrupt
    assert run() == "True"
    (rebuilt,) = _entries(tmp_path, ".gcn")
    assert rebuilt.stat().st_mtime_ns != stamp
    from graphc_runtime import pool
    with gc.Graph("pooled"):                         # and a program runs on it
        x = gc.placeholder((512, 512), "float32", name="x")
        exe = gc.compile(gc.tanh(x @ x), num_threads=2)
    a = np.random.default_rng(5).standard_normal((512, 512)).astype(np.float32)
    np.testing.assert_allclose(exe(x=a), np.tanh(a @ a), rtol=2e-4, atol=2e-5)
    assert pool.enabled() is False or pool.pool() is not None


def test_it_can_be_turned_off(tmp_path):
    assert _run(tmp_path, GRAPHC_PROGRAM_CACHE="0")["cache"] == "off"
    assert _run(tmp_path, GRAPHC_CACHE="0")["cache"] == "off"
    assert _entries(tmp_path) == []


def _model(rng, value=None):
    x = gc.placeholder((6, 10), "float32", name="x")
    w = gc.variable(rng.standard_normal((10, 4)).astype(np.float32) if value is None
                    else value, name="w")
    return x, w, gc.softmax(gc.relu(x @ w) * 3.0, axis=-1)


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("GRAPHC_PROGRAM_CACHE", "1")
    return tmp_path


def test_a_hit_dumps_saves_profiles_and_draws_like_the_miss(cache_on):
    import graphc_runtime
    rng = np.random.default_rng(1)
    feed = rng.standard_normal((6, 10)).astype(np.float32)
    exes = []
    for _ in range(2):
        with gc.Graph("same"):
            _, _, y = _model(np.random.default_rng(2))
            exes.append(gc.compile(y))
    miss, hit = exes
    assert (miss.stats["program_cache"], hit.stats["program_cache"]) == ("miss", "hit")
    assert set(hit.stats["pass_seconds"]) == {"program_cache"}
    assert hit.stats["kernels"] == miss.stats["kernels"]
    np.testing.assert_array_equal(hit(x=feed), miss(x=feed))
    for stage in ("graph", "optimized", "fused", "memory", "llvm", "asm"):
        assert hit.dump(stage) == miss.dump(stage), stage
    for exe, name in ((miss, "miss"), (hit, "hit")):
        exe.save(str(cache_on / f"{name}.gcx"))
    loaded = graphc_runtime.load(str(cache_on / "hit.gcx"))
    np.testing.assert_array_equal(loaded(x=feed), miss(x=feed))
    assert loaded.dump("asm") == miss.dump("asm")
    prof = hit.profile(repeat=2, x=feed)
    assert sorted(r["kernel"] for r in prof.rows) == sorted(r["kernel"] for r in miss.profile(
        repeat=2, x=feed).rows)
    page = hit.viz(str(cache_on / "hit.html"))
    assert os.path.getsize(page) > 1000


def test_a_hit_takes_the_variables_the_graph_has_now(cache_on):
    rng = np.random.default_rng(3)
    feed = rng.standard_normal((6, 10)).astype(np.float32)
    with gc.Graph("vars") as g:
        _, _, y = _model(rng)
        first = gc.compile(y)
        g.variables["w"] = np.ones((10, 4), np.float32)
        second = gc.compile(y)
    assert second.stats["program_cache"] == "hit"
    want = gc.evaluate(y, {"x": feed})
    np.testing.assert_allclose(second(x=feed), want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(first(x=feed), want)


def test_the_graphs_arrays_are_taken_from_the_graph_not_stored(cache_on):
    import graphc_runtime
    big = np.linspace(-1, 1, 256 * 512, dtype=np.float32).reshape(256, 512)   # 512 KB
    feed = np.random.default_rng(4).standard_normal((3, 256)).astype(np.float32)
    exes = []
    for _ in range(2):
        with gc.Graph("big"):
            x = gc.placeholder((3, 256), name="x")
            exes.append(gc.compile(gc.tanh(x @ gc.constant(big)) + 0.5))
    miss, hit = exes
    assert (miss.stats["program_cache"], hit.stats["program_cache"]) == ("miss", "hit")
    (entry,) = _entries(cache_on)
    assert entry.stat().st_size < big.nbytes // 4          # the weights are the graph's
    np.testing.assert_array_equal(hit(x=feed), miss(x=feed))
    hit.save(str(cache_on / "hit.gcx"))                     # an artifact holds them
    np.testing.assert_array_equal(graphc_runtime.load(str(cache_on / "hit.gcx"))(x=feed),
                                  miss(x=feed))


def test_compiles_it_cannot_serve_say_why(cache_on):
    from llvmlite import ir
    from graphc import extend
    with gc.Graph("why"):
        _, _, y = _model(np.random.default_rng(4))
        dumped = gc.compile(y, dump_dir=str(cache_on / "dumps"))
    assert dumped.stats["program_cache"] == "not used: dump_dir="
    from graphc.backends.llvm import lowerings
    extend.define("cache_test_double", "elementwise",
                  lambda ins, attrs: (ins[0].shape, ins[0].dtype),
                  lambda args, attrs, node: args[0] * 2, arity=1)
    extend.register_lowering("cache_test_double", float=lambda e, ty, x: e.b.fmul(
        x, ir.Constant(ty, 2.0)))
    try:
        with gc.Graph("custom"):
            x = gc.placeholder((4,), "float32", name="x")
            exe = gc.compile(extend.bind("cache_test_double", x) + 1.0)
    finally:                                     # the registry is the whole suite's
        del extend.primitives["cache_test_double"], lowerings.FLOAT["cache_test_double"]
    np.testing.assert_array_equal(exe(x=np.arange(4, dtype=np.float32)), [1, 3, 5, 7])
    assert exe.stats["program_cache"].startswith("not used: primitive 'cache_test_double'")


def test_entries_share_the_size_bound(cache_on, monkeypatch):
    for scale in (1.0, 2.0, 3.0):
        with gc.Graph("bound"):
            x = gc.placeholder((5,), "float32", name="x")
            gc.compile(gc.exp(x * scale))
    folder = cache_on / "cache"
    sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
    assert sum(n.endswith(".gcp") for n in sizes) == 3
    monkeypatch.setenv("GRAPHC_CACHE_MAX_BYTES", str(max(sizes.values()) + 10))
    with gc.Graph("bound"):
        x = gc.placeholder((5,), "float32", name="x")
        gc.compile(gc.exp(x * 4.0))
    assert sum(p.stat().st_size for p in folder.iterdir()
               if p.name.endswith(cache_store.SUFFIXES)) <= max(sizes.values()) + 10


OWN_GEMM = textwrap.dedent("""
    import numpy as np, graphc as gc
    a = np.linspace(-1, 1, 32 * 256, dtype=np.float32).reshape(32, 256)
    with gc.Graph("own"):
        x = gc.placeholder((32, 256), name="x")
        w = gc.constant(np.cos(np.arange(256 * 64, dtype=np.float32)).reshape(256, 64))
        exe = gc.compile(gc.tanh(x @ w))
    print(exe.dump("llvm").count("graphc_own_gemm_nn"), float(exe(x=a).sum()).hex())
""")


def test_the_own_gemm_kernels_are_cached_too(tmp_path):
    """graphc's own GEMM kernels (backends/cpu/gemm.py) are compiled once and kept in
    the cache folder: the next process loads the kept object, with the same results."""
    environ = dict(os.environ, GRAPHC_CACHE_DIR=str(tmp_path / "cache"),
                   GRAPHC_PROGRAM_CACHE="0")

    def run():
        r = subprocess.run([sys.executable, "-c", OWN_GEMM], capture_output=True, text=True,
                           env=environ, cwd=ROOT, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        return r.stdout.split()
    first = run()
    assert int(first[0]) >= 1                        # the product runs on the own kernel
    (entry,) = _entries(tmp_path, ".gcg")
    for p in _entries(tmp_path, ".gco"):
        p.unlink()                                   # so the module is compiled again
    os.utime(entry, (1, 1))
    assert run() == first
    assert entry.stat().st_mtime > 1                 # read (a hit marks it used)
    entry.write_bytes(b"GRAPHC-GEMM-CACHE-2\n" + b"x" * 100)    # corrupt: rebuilt
    for p in _entries(tmp_path, ".gco"):
        p.unlink()
    assert run() == first
