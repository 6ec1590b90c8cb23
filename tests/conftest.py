import os
import sys

import numpy as np
import pytest
from hypothesis import settings

import graphc as gc

# the repository root, so tests can use the benchmark models (bench/)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Compiled object code is cached per user (graphc/backends/cpu/object_cache.py): the suite
# keeps its own cache, so it neither reads nor fills the user's (subprocesses inherit it)
if "GRAPHC_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile
    os.environ["GRAPHC_CACHE_DIR"] = tempfile.mkdtemp(prefix="graphc-test-cache-")
    atexit.register(shutil.rmtree, os.environ["GRAPHC_CACHE_DIR"], True)
# Whole programs are cached by graph (graphc/program_cache.py); tests that patch graphc's
# internals and compile a graph again would be served the program compiled before the
# patch, so the suite turns that cache off; tests/test_program_cache.py turns it on.
os.environ.setdefault("GRAPHC_PROGRAM_CACHE", "0")

# Random graphs explore freely on developer machines; in CI (CI=true) the same examples
# run every time, so a submission's result does not depend on luck.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI", "").lower() == "true":
    settings.load_profile("ci")


def _optional_parts() -> list:
    """(part, present, what it enables or how to get it) of the optional pieces tests use."""
    import importlib.util
    import shutil

    def has(module):
        return importlib.util.find_spec(module) is not None
    chromium = any(n and shutil.which(n) for n in (os.environ.get("GRAPHC_CHROMIUM"),
                                                   "chromium", "chromium-browser",
                                                   "google-chrome"))
    ptxas = shutil.which("ptxas") or os.path.exists("/usr/local/bin/ptxas")
    mpiexec = os.path.exists(os.path.join(os.path.dirname(sys.executable), "mpiexec")) or \
        shutil.which("mpiexec")
    return [
        ("GPU", gc.cuda.is_available(), "GPU execution tests (PTX is still checked)"),
        ("ptxas", bool(ptxas), "PTX assembly checks (CUDA toolkit or nvidia-cuda-nvcc)"),
        ("Chromium", chromium, "viewer browser tests (apt-get install chromium)"),
        ("graphviz dot", bool(shutil.which("dot")), "SVG/PNG drawings (apt-get install "
                                                    "graphviz)"),
        ("MPI", has("mpi4py") and bool(mpiexec),
         "distributed tests (extra 'distributed')"),
        ("onnx + onnxruntime", has("onnx") and has("onnxruntime"),
         "ONNX tests (extras 'onnx', 'test')"),
        ("torch + transformers", has("torch") and has("transformers"),
         "exported-model tests (extra 'export')"),
    ]


def pytest_sessionstart(session):
    """Say at the top of the run (even with -q) which optional parts are missing, and
    what therefore skips; -rs lists each skip's reason at the end."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    missing = [f"  {name}: missing; skipped: {what}"
               for name, present, what in _optional_parts() if not present]
    if not missing:
        reporter.write_line("optional parts: all present")
        return
    reporter.write_line("optional parts missing (their tests skip; the reasons are listed "
                        "at the end):")
    for line in missing:
        reporter.write_line(line)


@pytest.fixture
def graph():
    g = gc.Graph("test")
    with g:
        yield g


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def random_array(rng, shape, dtype="float32", low=-3.0, high=3.0):
    """Fresh random data of a graphc dtype (never all zeros)."""
    from graphc.ir import dtypes
    npd = dtypes.to_numpy(dtypes.canonical(dtype))
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(npd).kind in "iu":
        return rng.integers(int(low) - 2, int(high) + 3, size=shape).astype(npd)
    return rng.uniform(low, high, size=shape).astype(npd)
