"""The graphc command, run as a user would (subprocess), checking output and exit codes."""
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

GRAPHC = os.path.join(os.path.dirname(sys.executable), "graphc")

MODEL = textwrap.dedent("""
    import numpy as np
    import graphc as gc

    def trained():
        g = gc.Graph("tiny")
        with g:
            x = gc.placeholder((4, 3), name="x")
            w = gc.variable(np.arange(6, dtype=np.float32).reshape(3, 2) / 6, name="w")
            y = gc.softmax(x @ w)
            return gc.compile({"y": y, "s": y.sum()}, updates={w: w * 0.5})

    def outputs():
        x = gc.placeholder((4, 3), name="x")
        return gc.relu(x * 2.0 + 0.0).sum(axis=1)

    def symbolic():
        x = gc.placeholder(("batch", 30), name="x")
        w = gc.variable(np.ones((30, 20), np.float32), name="w")
        h = gc.tanh(x @ w)
        return gc.compile({"y": gc.softmax(h @ gc.transpose(w)).sum(axis=1)})
""")


def graphc(*args, cwd=None):
    cmd = [GRAPHC] if os.path.exists(GRAPHC) else [sys.executable, "-m", "graphc.cli"]
    return subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=cwd,
                          timeout=300)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "model.py").write_text(MODEL)
    np.save(d / "x.npy", np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
    r = graphc("compile", "model.py:trained", "-o", "tiny.gcx", cwd=d)
    assert r.returncode == 0, r.stderr
    assert "wrote tiny.gcx" in r.stdout
    return d


def test_console_script_is_installed():
    assert os.path.exists(GRAPHC) or shutil.which("graphc")


def test_help_for_each_subcommand():
    r = graphc("--help")
    assert r.returncode == 0 and "dump" in r.stdout and "viz" in r.stdout
    for sub in ("dump", "viz", "info", "run", "compile", "bench"):
        r = graphc(sub, "--help")
        assert r.returncode == 0 and "usage: graphc " + sub in r.stdout, sub


def test_info(workdir):
    r = graphc("info", "tiny.gcx", cwd=workdir)
    assert r.returncode == 0
    assert "inputs:\n  x: float32[4, 3]" in r.stdout
    assert "y: float32[4, 2]" in r.stdout and "w: float32[3, 2]" in r.stdout
    assert "kernels:" in r.stdout and "arena bytes:" in r.stdout


@pytest.mark.parametrize("stage,needle", [("graph", "parameter()"), ("optimized", "outputs:"),
                                          ("fused", "group 0"), ("memory", "arena"),
                                          ("llvm", "graphc_main"), ("asm", "graphc_main")])
def test_dump_stages_of_an_artifact(workdir, stage, needle):
    r = graphc("dump", "tiny.gcx", "--stage", stage, cwd=workdir)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout


def test_dump_python_target_after_a_pass(workdir):
    r = graphc("dump", "model.py:outputs", "--pass", "input", cwd=workdir)
    assert r.returncode == 0 and "add(" in r.stdout
    r = graphc("dump", "model.py:outputs", "--pass", "simplify", cwd=workdir)
    assert r.returncode == 0 and "add(" not in r.stdout
    r = graphc("dump", "model.py:outputs", "--pass", "nope", cwd=workdir)
    assert r.returncode == 2 and "no pass named 'nope'" in r.stderr


def test_run_writes_outputs(workdir):
    r = graphc("run", "tiny.gcx", "--input", "x=x.npy", "--output-dir", "outs", cwd=workdir)
    assert r.returncode == 0, r.stderr
    y = np.load(workdir / "outs" / "y.npy")
    x = np.load(workdir / "x.npy")
    w = np.arange(6, dtype=np.float32).reshape(3, 2) / 6
    z = x @ w
    want = np.exp(z - z.max(1, keepdims=True))
    np.testing.assert_allclose(y, want / want.sum(1, keepdims=True), rtol=1e-6)
    r = graphc("run", "tiny.gcx", "--input", "x=x.npy", cwd=workdir)
    assert r.returncode == 0 and "y: float32[4, 2]" in r.stdout


def test_errors_go_to_stderr_with_nonzero_exit(workdir):
    r = graphc("run", "tiny.gcx", cwd=workdir)
    assert r.returncode == 1 and "FeedError: missing input 'x'" in r.stderr and not r.stdout
    (workdir / "junk.gcx").write_bytes(b"GRAPHCAR" + b"\0" * 5)
    r = graphc("info", "junk.gcx", cwd=workdir)
    assert r.returncode == 1 and "ArtifactError" in r.stderr and "truncated" in r.stderr
    r = graphc("dump", "nothing_here", cwd=workdir)
    assert r.returncode == 2 and "neither an artifact, an .onnx model nor file.py:attribute" in r.stderr
    r = graphc("dump", cwd=workdir)
    assert r.returncode == 2 and "usage" in r.stderr
    r = graphc("viz", "tiny.gcx", "-o", "out.xyz", cwd=workdir)
    assert r.returncode == 2 and "unknown output format" in r.stderr


def test_viz_dot_parses_and_has_clusters(workdir):
    r = graphc("viz", "tiny.gcx", "-o", "g.dot", cwd=workdir)
    assert r.returncode == 0, r.stderr
    text = (workdir / "g.dot").read_text()
    assert "subgraph \"cluster_0\"" in text and "f32[4,3]" in text
    pydot = pytest.importorskip("pydot")
    graphs = pydot.graph_from_dot_data(text)
    assert graphs and len(graphs[0].get_subgraphs()) >= 1
    if shutil.which("dot"):
        r = graphc("viz", "tiny.gcx", "-o", "g.svg", cwd=workdir)
        assert r.returncode == 0 and (workdir / "g.svg").read_text().startswith("<?xml")
    else:
        r = graphc("viz", "tiny.gcx", "-o", "g.svg", cwd=workdir)
        assert r.returncode == 2 and "Debian package graphviz" in r.stderr


def test_viz_html_and_memory(workdir):
    r = graphc("viz", "tiny.gcx", "-o", "g.html", cwd=workdir)
    assert r.returncode == 0
    page = (workdir / "g.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Memory plan" in page
    assert page.count("<svg") == 3                        # the graph, its minimap, memory
    r = graphc("viz", "model.py:trained", "--memory", "-o", "mem.svg", cwd=workdir)
    assert r.returncode == 0 and "arena" in (workdir / "mem.svg").read_text()


def test_viz_memory_of_a_symbolic_artifact(workdir):
    """A program of symbolic batch draws its memory plan at a size the user gives, or at
    a typical size, and says which on the picture."""
    import re
    r = graphc("compile", "model.py:symbolic", "-o", "sym.gcx", cwd=workdir)
    assert r.returncode == 0, r.stderr
    r = graphc("viz", "sym.gcx", "--memory", "-o", "sym.svg", cwd=workdir)
    assert r.returncode == 0, r.stderr
    typical = (workdir / "sym.svg").read_text()
    assert "drawn at batch=64 (typical)" in typical
    r = graphc("viz", "sym.gcx", "--memory", "--size", "batch=1000", "-o", "big.svg",
               cwd=workdir)
    assert r.returncode == 0, r.stderr
    big = (workdir / "big.svg").read_text()
    assert "drawn at batch=1000;" in big

    def arena(text):
        return int(re.search(r"arena (\d+) bytes", text).group(1))
    assert arena(big) > arena(typical) > 0
    r = graphc("viz", "sym.gcx", "--memory", "--size", "n=3", "-o", "x.svg", cwd=workdir)
    assert r.returncode == 2 and "no symbolic size named 'n'" in r.stderr
    r = graphc("viz", "sym.gcx", "--memory", "--size", "batch=zero", "-o", "x.svg",
               cwd=workdir)
    assert r.returncode == 2 and "--size wants NAME=N" in r.stderr
