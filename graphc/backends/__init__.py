"""Backends: kernel IR to native code, one package each, behind one contract (backend.py).

`llvm/` holds what every LLVM-based backend shares (types, values, reductions, symbolic
sizes, float32 math, LLVM feature probes); `cpu/` and `cuda/` are the two backends.
Nothing outside a backend's package compares device names: the driver (graphc.compiler)
looks the backend up with `backend_for(device)`.
"""
from .backend import Backend, Build, Built, backend_for, backends, register_backend

__all__ = ["Backend", "Build", "Built", "backend_for", "backends", "register_backend"]
