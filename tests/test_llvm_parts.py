"""Large programs compile in parts, in several processes (backends/cpu/module_parts.py,
llvm_workers.py): the same results bit for bit as one module, every function defined
once, objects packed for the runtime and artifacts (graphc_runtime/objects.py), and a
worker that fails or hangs never changes the result."""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import graphc as gc
import graphc_runtime
from graphc.backends.cpu import llvm_workers, module_parts
from graphc_runtime import objects
from graphc_runtime.errors import CompileError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def small_parts(monkeypatch):
    """Every kernel in a part of its own, even in a small program."""
    monkeypatch.setattr(module_parts, "SPLIT_MIN_LINES", 0)
    monkeypatch.setattr(module_parts, "KERNEL_MIN_LINES", 0)
    monkeypatch.setattr(module_parts, "PART_LINES", 150)
    monkeypatch.setenv("GRAPHC_CACHE", "0")


def _training_step(processes, monkeypatch):
    """An MLP + Adam step and a loop, compiled with `processes` LLVM processes."""
    monkeypatch.setenv("GRAPHC_COMPILE_PROCESSES", str(processes))
    g = gc.Graph("parts")
    with g:
        x = gc.placeholder((64, 40), name="x")
        y = gc.placeholder((64,), "int32", name="y")
        w1 = gc.variable(np.linspace(-0.5, 0.5, 40 * 96, dtype=np.float32).reshape(40, 96),
                         name="w1")
        w2 = gc.variable(np.linspace(0.3, -0.3, 96 * 10, dtype=np.float32).reshape(96, 10),
                         name="w2")
        h = gc.gelu(gc.nn.layer_norm(x @ w1, gc.constant(np.ones(96, np.float32)),
                                     gc.constant(np.zeros(96, np.float32))))
        loss = gc.nn.softmax_cross_entropy(h @ w2, y).mean()
        updates = gc.optim.adam(loss, [w1, w2], lr=1e-2)
        looped = gc.fori_loop(0, 5, lambda i, c: gc.tanh(c * 1.5) + 0.1, x)
        exe = gc.compile({"loss": loss, "looped": looped.sum()}, updates=updates)
    return exe


def _steps(exe):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(64, 40)).astype(np.float32)
    y = rng.integers(0, 10, 64).astype(np.int32)
    return [exe(x=x, y=y) for _ in range(3)]


def test_a_program_in_parts_gives_the_bits_of_one_module(small_parts, monkeypatch):
    whole = _training_step(1, monkeypatch)
    parts = _training_step(2, monkeypatch)
    own_gemms = set(re.findall(r'^define [^@]*@"?(graphc_own_gemm_\w+)"?\(',
                               whole.dump("llvm"), re.M))
    assert own_gemms                                 # each an object of its own
    assert whole.stats["llvm_parts"] == 1 + len(own_gemms)
    assert parts.stats["llvm_parts"] >= 4 + len(own_gemms)
    for a, b in zip(_steps(whole), _steps(parts)):
        for key in ("loss", "looped"):
            assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), key
    assert np.array_equal(whole.variables["w1"], parts.variables["w1"])
    asm = parts.dump("asm")                          # every part's code, as compiled
    assert "graphc_main" in asm and asm.count(".file\t") == parts.stats["llvm_parts"]
    assert parts.dump("llvm").count("; part ") == parts.stats["llvm_parts"]
    rows = parts.profile(2, x=np.ones((64, 40), np.float32),
                         y=np.zeros(64, np.int32)).rows     # the profiling build, in parts
    assert any(r["kind"] != "host" for r in rows)


def test_an_artifact_in_parts_loads_in_another_process(small_parts, monkeypatch, tmp_path):
    exe = _training_step(2, monkeypatch)
    assert exe.stats["llvm_parts"] > 1
    path = str(tmp_path / "parts.gcx")
    exe.save(path)
    want = _steps(exe)[0]
    script = textwrap.dedent(f"""
        import numpy as np, graphc_runtime
        model = graphc_runtime.load({path!r})
        rng = np.random.default_rng(3)
        x = rng.normal(size=(64, 40)).astype(np.float32)
        y = rng.integers(0, 10, 64).astype(np.int32)
        out = model(x=x, y=y)
        print(repr(float(out["loss"])), repr(float(out["looped"])))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    loss, looped = map(float, r.stdout.split())
    fresh = _training_step(2, monkeypatch)      # variables as saved: before any step
    first = _steps(fresh)[0]
    assert loss == float(first["loss"]) and looped == float(first["looped"])
    assert float(want["loss"]) == loss


def test_every_function_is_defined_in_exactly_one_part(small_parts, monkeypatch):
    from graphc_runtime.cpu import llvm
    exe = _training_step(1, monkeypatch)
    texts = module_parts.split(_unoptimized_ir(exe, monkeypatch))
    assert texts is not None and len(texts) >= 4
    defined = []
    for text in texts:
        module = llvm().parse_assembly(text)
        module.verify()
        defined += [f.name for f in module.functions if not f.is_declaration]
    assert len(defined) == len(set(defined))
    assert {"graphc_main", "graphc_entry", "graphc_segment_0"} <= set(defined)
    first = llvm().parse_assembly(texts[0])
    assert not first.get_function("graphc_main").is_declaration
    shared = re.findall(r'^@"([^"]+)" = (?!internal constant)', texts[0], re.M)
    assert "graphc_plan_digest" in shared
    for text in texts[1:]:                      # globals other than constants: part 0's
        for name in shared:
            assert re.search(rf'^@"{name}" = external ', text, re.M), name


def _unoptimized_ir(exe, monkeypatch):
    """The IR the code generator emitted for exe's program (compiled again, in one part)."""
    from graphc.backends.cpu import native_module
    seen = []
    original = native_module.NativeModule.__init__

    def spy(self, llvm_ir, *args, **kwargs):
        seen.append(llvm_ir)
        original(self, llvm_ir, *args, **kwargs)
    monkeypatch.setattr(native_module.NativeModule, "__init__", spy)
    _training_step(1, monkeypatch)
    return seen[0]


def test_text_it_does_not_understand_compiles_as_one_module(monkeypatch):
    monkeypatch.setattr(module_parts, "SPLIT_MIN_LINES", 0)
    text = '; ModuleID = "m"\nattributes #0 = { nounwind }\ndefine void @"f"()\n{\nret void\n}'
    assert module_parts.split(text) is None
    assert module_parts.split('define void @"f"()\n{\nret void\n') is None   # no closing }


def test_declarations_keep_types_and_drop_names():
    head = ('define internal void @"k1_dot"(float* noalias %".1", i64 %".2", '
            '{i32, i8*} %"s")\n{\nret void\n}')
    assert module_parts.declaration(head) == \
        'declare void @"k1_dot"(float* noalias, i64, {i32, i8*})'
    for line, want in [('@"a" = internal constant [4 x i64] [i64 0, i64 1, i64 2, i64 3]',
                        '@"a" = external constant [4 x i64]'),
                       ('@"p" = global i8* null', '@"p" = external global i8*'),
                       ('@"s" = global {i32, [2 x i8]} zeroinitializer',
                        '@"s" = external global {i32, [2 x i8]}')]:
        assert module_parts.global_declaration(line) == want


def test_objects_pack_and_unpack():
    one = b"\x7fELF single"
    assert objects.pack([one]) == one and objects.unpack(one) == [one]
    many = [b"\x7fELF a", b"", b"\x7fELF ccc"]
    blob = objects.pack(many)
    assert objects.unpack(blob) == many
    for bad in (blob[:-1], blob + b"x", objects.MAGIC + b"\x01", objects.MAGIC + b"\0" * 4,
                objects.MAGIC + (10 ** 6).to_bytes(4, "little")):
        with pytest.raises(CompileError, match="native code"):
            objects.unpack(bad)


def test_a_program_whose_object_table_is_damaged_is_refused():
    from graphc_runtime.cpu import CpuProgram, Signature
    with pytest.raises(CompileError, match="native code"):
        CpuProgram(objects.MAGIC + b"\x02\0\0\0" + b"\0" * 8, Signature([], [], []), 64, {}, [])


def _double(job):
    return job * 2


def test_workers_give_what_one_process_gives():
    jobs = list(range(40))
    assert llvm_workers.run(jobs, _double, 3) == [2 * j for j in jobs]
    assert llvm_workers.run(jobs[:1], _double, 3) == [0]


def test_a_failing_or_hanging_worker_changes_nothing(monkeypatch):
    parent = os.getpid()

    def crashes_in_children(job):
        if os.getpid() != parent:
            raise RuntimeError("a worker's failure")
        return job * 2

    def hangs_in_children(job):
        if os.getpid() != parent:
            import time
            time.sleep(600)
        return job * 2

    def dies_in_children(job):
        if os.getpid() != parent:
            os._exit(3)
        return job * 2

    assert llvm_workers.run(list(range(12)), crashes_in_children, 2) == list(range(0, 24, 2))
    assert llvm_workers.run(list(range(12)), dies_in_children, 3) == list(range(0, 24, 2))
    monkeypatch.setattr(llvm_workers, "GRACE_S", 0.5)
    assert llvm_workers.run(list(range(6)), hangs_in_children, 2) == list(range(0, 12, 2))


def test_the_process_count_setting(monkeypatch):
    monkeypatch.setenv("GRAPHC_COMPILE_PROCESSES", "1")
    assert llvm_workers.processes() == 1
    monkeypatch.setenv("GRAPHC_COMPILE_PROCESSES", "0")
    assert llvm_workers.processes() == 1
    monkeypatch.setenv("GRAPHC_COMPILE_PROCESSES", "many")
    with pytest.raises(CompileError, match="GRAPHC_COMPILE_PROCESSES"):
        llvm_workers.processes()
    monkeypatch.delenv("GRAPHC_COMPILE_PROCESSES")
    assert 1 <= llvm_workers.processes() <= llvm_workers.MAX_PROCESSES
    assert graphc_runtime.cpus.usable_cpus() >= llvm_workers.processes() or \
        llvm_workers.processes() == 1


def test_format_3_artifacts_still_load_and_version_3_readers_refuse_4(monkeypatch,
                                                                      tmp_path):
    from graphc_runtime import artifact
    with gc.Graph("v3"):
        x = gc.placeholder((8,), name="x")
        exe = gc.compile(gc.exp(x) * 2.0)
    old = str(tmp_path / "v3.gcx")
    monkeypatch.setattr(artifact, "FORMAT_VERSION", 3)       # as the last graphc wrote it
    exe.save(old)
    monkeypatch.undo()
    ones = np.ones(8, np.float32)
    assert np.array_equal(graphc_runtime.load(old)(ones), exe(ones))
    new = str(tmp_path / "v4.gcx")
    exe.save(new)
    monkeypatch.setattr(artifact, "FORMAT_VERSION", 3)       # a version-3 reader
    with pytest.raises(gc.ArtifactError, match="format version 4 by a newer graphc"):
        graphc_runtime.load(new)


def test_an_object_cache_hit_in_parts_dumps_the_same_assembly(small_parts, monkeypatch,
                                                              tmp_path):
    monkeypatch.setenv("GRAPHC_CACHE", "1")
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path / "cache"))
    first = _training_step(2, monkeypatch)
    second = _training_step(2, monkeypatch)
    assert (first.stats["object_cache"], second.stats["object_cache"]) == ("miss", "hit")
    assert second.stats["llvm_parts"] == first.stats["llvm_parts"] > 1
    assert second.dump("asm") == first.dump("asm")
    for a, b in zip(_steps(first), _steps(second)):
        assert np.array_equal(np.asarray(a["loss"]), np.asarray(b["loss"]))
