"""The CUDA lowering, checked without a GPU: every primitive and the MLP/CNN training
steps become PTX that ptxas accepts for sm_90 and sm_80; structural checks on the PTX.
Running on a GPU is tested where one exists (skipped here otherwise)."""
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import graphc as gc

from graphc_runtime.dims import is_symbolic
from test_serialize_and_print import every_primitive_graph

PTXAS = shutil.which("ptxas") or ("/usr/local/bin/ptxas" if os.path.exists("/usr/local/bin/ptxas")
                                  else None)
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA toolkit) not found")
HERE = os.path.dirname(os.path.abspath(__file__))


def ptxas(ptx: str, arch: str, tmp_path) -> str:
    src = tmp_path / f"prog_{arch}.ptx"
    src.write_text(ptx)
    r = subprocess.run([PTXAS, f"-arch={arch}", "-v", str(src), "-o", str(tmp_path / "o.cubin")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stderr          # ptxas -v reports on stderr


def every_primitive_without_collectives():
    g, outs = every_primitive_graph()
    symbolic = lambda o: any(is_symbolic(n.shape) or n.op == "dim_size"
                             for n in g.ancestors([o.node]))
    return g, [o for o in outs if o.node.op not in ("all_reduce", "all_gather", "reduce_scatter",
                                                    "send", "recv", "get")     # loops: test_loops_assemble
               and not symbolic(o)]    # symbolic sizes: CPU only (test_symbolic_dims.py)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_every_primitive_assembles(tmp_path, arch):
    g, outs = every_primitive_without_collectives()
    with g:
        exe = gc.compile(outs, device="cuda", arch=arch)
    ptx = exe.dump("ptx")
    assert f".target {arch}" in ptx
    report = ptxas(ptx, arch, tmp_path)
    entries = re.findall(r"\.visible \.entry (\w+)\(", ptx)
    assert len(entries) == exe.stats["kernels"] > 10
    registers = re.findall(r"Used (\d+) registers", report)
    assert len(registers) == len(entries) and all(int(r) <= 255 for r in registers)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_training_steps_assemble(tmp_path, arch):
    from bench.__main__ import cnn_graph, mlp_graph
    for build in (mlp_graph, cnn_graph):
        g, loss, updates = build()
        with g:
            exe = gc.compile({"loss": loss}, updates=updates, device="cuda", arch=arch)
        report = ptxas(exe.dump("ptx"), arch, tmp_path)
        assert "error" not in report.lower()


@needs_ptxas
def test_elementwise_kernels_do_not_spill(tmp_path):
    with gc.Graph():
        x = gc.placeholder((1024, 1024), name="x")
        a = gc.placeholder((1024,), name="a")
        exe = gc.compile([gc.gelu(x * a + 1.0, approximate=True), gc.exp(x) * gc.tanh(x),
                          gc.sigmoid(x) + gc.erf(x)], device="cuda", arch="sm_90")
    report = ptxas(exe.dump("ptx"), "sm_90", tmp_path)
    spills = re.findall(r"(\d+) bytes spill stores", report)
    assert spills and all(s == "0" for s in spills), report
    stacks = re.findall(r"(\d+) bytes stack frame", report)
    assert all(s == "0" for s in stacks), report


def test_ptx_launch_table_and_cross_compilation():
    with gc.Graph():
        x = gc.placeholder((300, 70), name="x")
        exe = gc.compile([gc.softmax(x), x.sum(axis=0)], device="cuda")
    ptx = exe.dump("ptx")
    assert ptx.count(".visible .entry") == exe.stats["kernels"]
    assert "shfl.sync.bfly" in ptx                  # warp reductions
    launches = exe._native.launches
    assert [l["threads"] for l in launches] == [300 * 32, 70 * 32]     # a warp per row
    assert all(l["grid"] * l["block"] >= l["threads"] for l in launches)
    with pytest.raises(gc.CompileError, match="see dump\\('ptx'\\)"):
        exe.dump("llvm")


@needs_ptxas
def test_elementwise_kernels_use_16_byte_accesses(tmp_path):
    with gc.Graph():
        x = gc.placeholder((256, 1024), name="x")
        a = gc.placeholder((1024,), name="a")
        odd = gc.placeholder((100, 30), name="odd")           # 30 % 4 != 0: one per thread
        exe = gc.compile([gc.gelu(x * a + 1.0, approximate=True), odd * 2.0],
                         device="cuda", arch="sm_90")
    ptx = exe.dump("ptx")
    ptxas(ptx, "sm_90", tmp_path)
    launches = exe._native.launches
    assert [l["threads"] for l in launches] == [256 * 1024 // 4, 100 * 30]
    body = ptx.split(".entry")[1]
    assert re.search(r"ld\.global(\.nc)?\.v4\.[bf]32", body)      # x and a: 4 floats at once
    assert re.search(r"st\.global\.v4\.[bf]32", body)      # (LLVM 20 spells it f32)
    assert not re.search(r"\.v4\.", ptx.split(".entry")[2])


def test_collectives_and_bad_arch_are_clear_compile_errors():
    from graphc.api import bind
    with gc.Graph():
        x = gc.placeholder((4,), name="x")
        with pytest.raises(gc.CompileError, match="unknown GPU architecture"):
            gc.compile(x * 2, device="cuda", arch="sm_1")
        with pytest.raises(gc.CompileError, match="not supported on CUDA"):
            gc.compile(bind("all_reduce", x * 2, op="sum", axis_size=2), device="cuda")


@pytest.mark.skipif(not gc.cuda.is_available(), reason="no CUDA device on this machine")
def test_every_primitive_runs_on_the_gpu():
    g, outs = every_primitive_without_collectives()
    feeds = {"x": np.random.default_rng(0).uniform(0.5, 2, (2, 3)).astype(np.float32),
             "i": np.array([2, 0, 1, 1], np.int32), "b": np.array([[1, 0, 1], [0, 0, 1]], bool)}
    with g:
        got = gc.compile(outs, device="cuda")(**feeds)
    for o, a, b in zip(outs, got, gc.evaluate(outs, feeds)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                   rtol=1e-5, atol=1e-6, equal_nan=True, err_msg=o.node.op)


def test_cuda_artifacts_save_and_load_without_a_gpu(tmp_path):
    import graphc_runtime
    with gc.Graph():
        x = gc.placeholder((8, 5), name="x")
        w = gc.variable(np.arange(10, dtype=np.float32).reshape(5, 2), name="w")
        exe = gc.compile({"y": gc.softmax(x @ w)}, updates={w: w * 0.5}, device="cuda")
    path = str(tmp_path / "gpu.gcx")
    exe.save(path)
    model = graphc_runtime.load(path)
    assert model.manifest["device"] == "cuda" and model.manifest["target"]["arch"] == "sm_80"
    assert ".entry" in model.dump("ptx")
    np.testing.assert_array_equal(model.variables["w"], np.arange(10).reshape(5, 2))
    if not gc.cuda.is_available():
        with pytest.raises(gc.DeviceError):
            model(np.ones((8, 5), np.float32))


@needs_ptxas
def test_dots_use_shared_memory_tiles_within_limits(tmp_path):
    with gc.Graph():
        a = gc.placeholder((70, 45), name="a")
        w = gc.placeholder((45, 33), name="w")
        c = gc.placeholder((33,), name="c")
        exe = gc.compile(gc.relu(a @ w + c), device="cuda", arch="sm_90")
    ptx = exe.dump("ptx")
    assert ".shared" in ptx and "bar.sync" in ptx
    report = ptxas(ptx, "sm_90", tmp_path)
    smem = [int(v) for v in re.findall(r"(\d+) bytes smem", report)]
    assert smem and max(smem) <= 48 * 1024
    launch = exe._native.launches[0]
    assert launch["block"] == 256 and launch["grid"] == 5 * 3      # 16x16 tiles of 70x33


@needs_ptxas
def test_column_sums_use_a_thread_per_column(tmp_path):
    with gc.Graph():
        x = gc.placeholder((512, 8192), name="x")
        exe = gc.compile([x.sum(axis=0), (x * x).sum(axis=1)], device="cuda", arch="sm_90")
    ptxas(exe.dump("ptx"), "sm_90", tmp_path)
    threads = [l["threads"] for l in exe._native.launches]
    assert threads == [8192, 512 * 32]     # a thread per column; a warp per row
    column, row = exe.dump("ptx").split(".entry")[1:3]
    assert "shfl.sync" not in column and "shfl.sync" in row


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_loops_assemble_and_their_launch_table_nests_the_regions(tmp_path, arch):
    """scan / while / cond: the regions' kernels are in the PTX; the host runs them from
    the control entries of the launch table."""
    with gc.Graph("loops"):
        xs = gc.placeholder((6, 4, 8), name="xs")
        w = gc.variable(np.eye(8, dtype=np.float32) * 0.5, name="w")
        h, ys = gc.scan(lambda h, x: (gc.tanh(h @ w + x),) * 2, gc.zeros((4, 8)), xs)
        loss = (ys * ys).mean()
        (gw,) = gc.grad(loss, [w])
        n = gc.while_loop(lambda s: s.sum() < 100.0, lambda s: s * 2.0 + 1.0, h)
        r = gc.cond(loss > 1.0, lambda a: a * 2.0, lambda a: a - 1.0, n)
        exe = gc.compile({"loss": loss, "r": r}, updates={w: w - 0.1 * gw}, device="cuda",
                         arch=arch)
    ptx = exe.dump("ptx")
    ptxas(ptx, arch, tmp_path)
    table = exe.manifest()["launches"]
    controls = [e for e in table if "control" in e]
    assert sorted(e["control"] for e in controls) == ["cond", "scan", "scan", "while"]
    entries = set(re.findall(r"\.visible \.entry (\w+)\(", ptx))

    def kernels(t):
        for e in t:
            if "control" in e:
                for body in e["bodies"].values():
                    yield from kernels(body["launches"])
            else:
                yield e["kernel"]
    assert set(kernels(table)) == entries
    scan = next(e for e in controls if e["control"] == "scan")
    assert scan["attrs"]["length"] == 6 and scan["bodies"]["body"]["launches"]


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_symbolic_programs_assemble_and_size_their_launches_at_the_call(tmp_path, arch):
    """Kernels of a program with symbolic dims take the sizes as trailing i64 arguments;
    the launch table keeps thread counts and arena offsets symbolic, and the host sizes
    the grid at the launch (checked here with recording stand-ins for the kernels: the
    kernels themselves need a GPU)."""
    from graphc_runtime.cuda import _execute
    from graphc_runtime.dims import Dim
    rng = np.random.default_rng(0)
    with gc.Graph("sym"):
        xs = gc.placeholder(("T", "batch", 24), name="xs")
        w = gc.variable((rng.standard_normal((24, 40)) * 0.2).astype(np.float32), name="w")
        h = gc.tanh(xs[0] @ w)                                 # a tiled product, M = batch
        loss = gc.nn.softmax_cross_entropy(h, gc.zeros((xs.shape[1],), "int32")).mean()
        _, ys = gc.scan(lambda c, x: (c + x.sum(axis=0), c), gc.zeros((24,)), xs)
        (gw,) = gc.grad(loss + ys.sum(), [w])
        exe = gc.compile({"loss": loss, "ys": ys}, updates={w: w - 0.1 * gw}, device="cuda",
                         arch=arch)
    ptx = exe.dump("ptx")
    ptxas(ptx, arch, tmp_path)
    table = exe._native.launches
    assert any(isinstance(e.get("threads"), Dim) and e["grid"] is None for e in table)
    scan = next(e for e in table if e.get("control") == "scan")
    assert scan["attrs"]["length"] == Dim.symbol("T")
    calls = []

    class Kernel:
        def __init__(self, name):
            self.name = name

        def __call__(self, *args, block, grid):
            calls.append((self.name, args, grid))

    class Driver:
        def memcpy_dtod(self, dst, src, n):
            calls.append(("copy", n))

    names = set(re.findall(r"\.visible \.entry (\w+)\(", ptx))
    sizes = {"T": 3, "batch": 37}
    st = {"functions": {n: Kernel(n) for n in names}, "drv": Driver(), "sizes": sizes,
          "size_args": [np.int64(sizes[s]) for s in exe._native.signature.symbols]}
    slots = [None] + [4096 * (k + 1) for k in range(64)]
    _execute(st, table, (1 << 30, slots, st), None)
    launched = {name for name, *_ in calls if name != "copy"}
    assert launched and launched <= names
    by_name = {e["kernel"]: e for e in table if "kernel" in e}
    for name, args, grid in (c for c in calls if c[0] in by_name):
        e = by_name[name]
        threads = e["threads"].evaluate(sizes) if isinstance(e["threads"], Dim) \
            else e["threads"]
        assert grid == (max(1, min(-(-threads // e["block"]), e["max_grid"])), 1)
        assert [int(a) for a in args[-2:]] == [3, 37]       # T, batch: sorted symbols
    # the scan's body ran once per step: its kernels were launched T times
    body = scan["bodies"]["body"]["launches"]
    first = body[0]["kernel"]
    assert sum(1 for c in calls if c[0] == first) == 3
