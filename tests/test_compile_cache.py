"""The persistent cache of compiled object code (backends/cpu/object_cache.py): a second
process compiling the same program reuses the object code; corrupt, foreign or not
private entries are ignored and rebuilt; it is bounded in size and can be turned off."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import graphc as gc
from graphc.backends.cpu import object_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = textwrap.dedent("""
    import json, sys, numpy as np, graphc as gc
    x = gc.placeholder((64, 48), "float32", name="x")
    w = gc.constant(np.linspace(-1, 1, 48 * 32, dtype=np.float32).reshape(48, 32))
    exe = gc.compile(gc.softmax(gc.tanh(x @ w) * float(sys.argv[1]), axis=-1))
    out = exe(np.ones((64, 48), np.float32))
    print(json.dumps({"cache": exe.stats["object_cache"], "sum": float(out.sum()),
                      "first": float(out[0, 0]), "llvm": exe.stats["pass_seconds"]["llvm"],
                      "ir": len(exe.dump("llvm"))}))
""")


def _run(tmp_path, scale="2.0", **env):
    import json
    environ = dict(os.environ, GRAPHC_CACHE_DIR=str(tmp_path / "cache"), **env)
    r = subprocess.run([sys.executable, "-c", PROGRAM, scale], capture_output=True,
                       text=True, env=environ, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _entries(tmp_path):
    folder = tmp_path / "cache"
    return sorted(p for p in folder.iterdir() if p.suffix == ".gco") if folder.exists() else []


def test_a_second_process_reuses_the_object_code(tmp_path):
    first = _run(tmp_path)
    second = _run(tmp_path)
    assert (first["cache"], second["cache"]) == ("miss", "hit")
    assert second["first"] == first["first"] and second["sum"] == first["sum"]
    assert second["ir"] == first["ir"]                  # dump("llvm") as before
    assert second["llvm"] < first["llvm"]
    assert len(_entries(tmp_path)) == 1
    assert _run(tmp_path, scale="3.0")["cache"] == "miss"   # another program: its own entry
    assert len(_entries(tmp_path)) == 2


def test_a_corrupt_entry_is_rebuilt(tmp_path):
    want = _run(tmp_path)
    (entry,) = _entries(tmp_path)
    raw = bytearray(entry.read_bytes())
    raw[-10] ^= 0xFF
    entry.write_bytes(bytes(raw))
    got = _run(tmp_path)
    assert got["cache"] == "miss" and got["first"] == want["first"]
    assert _run(tmp_path)["cache"] == "hit"                 # rebuilt, whole again
    entry.write_bytes(b"not an entry")
    assert _run(tmp_path)["cache"] == "miss"


def test_a_foreign_entry_is_not_trusted(tmp_path):
    _run(tmp_path, scale="3.0")
    (other,) = _entries(tmp_path)
    _run(tmp_path)
    mine = next(p for p in _entries(tmp_path) if p != other)
    mine.write_bytes(other.read_bytes())                    # valid, but another key's
    got = _run(tmp_path)
    assert got["cache"] == "miss"
    assert got["first"] == _run(tmp_path, GRAPHC_CACHE="0")["first"]


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")
def test_an_entry_others_may_write_is_not_read(tmp_path):
    _run(tmp_path)
    (entry,) = _entries(tmp_path)
    entry.chmod(0o666)
    assert _run(tmp_path)["cache"] == "miss"
    os.chmod(tmp_path / "cache", 0o777)                      # nor a shared folder
    assert _run(tmp_path)["cache"] == "miss"


def test_it_can_be_turned_off_and_is_bounded(tmp_path):
    assert _run(tmp_path, GRAPHC_CACHE="0")["cache"] == "off"
    assert _entries(tmp_path) == []
    for scale in ("1.0", "2.0", "3.0"):
        _run(tmp_path, scale=scale)
    sizes = [p.stat().st_size for p in _entries(tmp_path)]
    assert len(sizes) == 3
    _run(tmp_path, scale="4.0", GRAPHC_CACHE_MAX_BYTES=str(max(sizes) + 10))
    assert len(_entries(tmp_path)) == 1                      # the newest only


def test_an_unusable_folder_is_skipped(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the folder should be")
    assert _run(tmp_path)["cache"] == "miss"


def test_concurrent_processes_leave_one_whole_entry(tmp_path):
    environ = dict(os.environ, GRAPHC_CACHE_DIR=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, "-c", PROGRAM, "2.0"], env=environ, cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e[-2000:] for _, e in outs]
    assert len(_entries(tmp_path)) == 1
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".tmp-")]
    assert _run(tmp_path)["cache"] == "hit"


def test_the_key_covers_what_decides_the_code(monkeypatch):
    target = {"triple": "x86_64-unknown-linux-gnu", "cpu": "znver4", "features": "+avx2"}
    base = object_cache.key("define void @f() { ret void }", 3, target)
    assert object_cache.key("define void @f() { ret void }", 2, target) != base
    assert object_cache.key("define void @g() { ret void }", 3, target) != base
    assert object_cache.key("define void @f() { ret void }", 3,
                            dict(target, features="+avx512f")) != base
    assert object_cache.key("define void @f() { ret void }", 3, dict(target)) == base
    # graphc's sources: the object holds the own GEMM kernels, which the IR only declares
    from graphc_runtime import cache_store
    monkeypatch.setattr(cache_store, "source_fingerprint", lambda: "an edited gemm.py")
    assert object_cache.key("define void @f() { ret void }", 3, target) != base


def test_in_process_hits_give_the_same_results(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path / "cache"))
    rng = np.random.default_rng(0)
    feed = rng.standard_normal((33, 17)).astype(np.float32)
    results = []
    for _ in range(2):
        with gc.Graph("cached"):
            x = gc.placeholder((33, 17), "float32", name="x")
            exe = gc.compile(gc.log_softmax(x * 3.0, axis=0))
            results.append((exe.stats["object_cache"], exe(feed), exe.dump("llvm"),
                            exe.dump("asm")))
    (miss, out0, ir0, asm0), (hit, out1, ir1, asm1) = results
    assert (miss, hit) == ("miss", "hit")
    np.testing.assert_array_equal(out0, out1)
    assert ir1 == ir0 and asm1 == asm0       # dumps after a hit: the same module
