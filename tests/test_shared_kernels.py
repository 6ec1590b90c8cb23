"""Kernels of the same shape share one LLVM function (backends/cpu/module.py, _shared):
the repeated layers of a network are optimized and compiled once; results are those of
the reference, and the profiling build keeps a function per kernel."""
import re

import numpy as np

import graphc as gc
from graphc.backends.cpu import module as codegen


def _three_layers(rng):
    x = gc.placeholder((16, 64), "float32", name="x")
    h = x
    for k in range(3):                        # three layers of one shape, own weights
        w = gc.constant(rng.standard_normal((64, 64)).astype(np.float32) * 0.1)
        b = gc.constant(rng.standard_normal(64).astype(np.float32))
        h = gc.softmax(gc.tanh(h @ w + b), axis=-1)
    return x, h


def _emitted(monkeypatch, y, **options):
    seen = {}
    real = codegen.emit_module

    def spy(name, lowered, threads, profile=False, **kwargs):
        text = real(name, lowered, threads, profile, **kwargs)
        seen.setdefault("profile" if profile else "main", (text, len(lowered.kernels)))
        return text
    monkeypatch.setattr(codegen, "emit_module", spy)
    exe = gc.compile(y, **options)
    return exe, seen


def _kernel_functions(text):
    return set(re.findall(r'define internal void @"?(k\d+_[a-z]+)"?\(', text))


def test_repeated_layers_share_their_functions(monkeypatch):
    rng = np.random.default_rng(0)
    with gc.Graph("layers"):
        x, y = _three_layers(rng)
        exe, seen = _emitted(monkeypatch, y, num_threads=1)
        text, kernels = seen["main"]
        assert len(_kernel_functions(text)) < kernels
        feed = rng.standard_normal((16, 64)).astype(np.float32)
        np.testing.assert_allclose(exe(feed), gc.evaluate(y, {"x": feed}), rtol=1e-5,
                                   atol=1e-5)


def test_the_profiling_build_keeps_a_function_per_kernel(monkeypatch):
    rng = np.random.default_rng(1)
    with gc.Graph("layers"):
        x, y = _three_layers(rng)
        exe, seen = _emitted(monkeypatch, y, num_threads=1)
        exe.profile(repeat=2, x=rng.standard_normal((16, 64)).astype(np.float32))
        text, kernels = seen["profile"]
        assert len(_kernel_functions(text)) == kernels
