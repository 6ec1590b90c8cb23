"""A well-kept BLAS (scipy-openblas32) for large matrix products inside compiled code.

Generated code calls `graphc_sgemm` / `graphc_dgemm` (CBLAS signatures, 32-bit ints);
`register()` binds those names to the library's functions before native code is loaded.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading

from . import forks, openmp, pool
from .errors import CompileError

SYMBOLS = {"graphc_sgemm": "scipy_cblas_sgemm", "graphc_dgemm": "scipy_cblas_dgemm"}
_lock = threading.Lock()
forks.guard_module_lock(sys.modules[__name__], "_lock")
_lib = None


def library():
    """The loaded OpenBLAS (ctypes.CDLL), or None when scipy-openblas32 is missing.

    Where graphc's pool runs its kernels (graphc_runtime.pool), OpenBLAS runs one
    thread per call and the pool splits large products instead: one set of threads for
    everything, and results that do not depend on the thread count (OpenBLAS's own sums
    depend on how many threads it uses; its one-thread products do not depend on how the
    rows or columns are split)."""
    global _lib
    fresh = _lib is None
    lib = _load()
    if fresh and lib is not None and _shared_threads():
        _set(lib, 1)
    return lib


def _load():
    global _lib
    with _lock:
        if _lib is None:
            try:
                import scipy_openblas32
            except ImportError:
                return None
            path = _library_path(scipy_openblas32)
            if path is None:
                return None
            _lib = ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_GLOBAL", 0))
        return _lib


def _library_path(package) -> str | None:
    """The OpenBLAS shared library inside scipy-openblas32's lib folder (older releases
    keep libgfortran and libquadmath beside it)."""
    directory = package.get_lib_dir()
    names = sorted(f for f in os.listdir(directory) if "openblas" in f and
                   (".so" in f or f.endswith((".dylib", ".dll"))))
    return os.path.join(directory, names[0]) if names else None


def available() -> bool:
    return library() is not None


def register(llvm_binding) -> None:
    """Make the graphc_* BLAS names resolvable by the JIT linker."""
    lib = library()
    if lib is None:
        return
    for ours, theirs in SYMBOLS.items():
        address = ctypes.cast(getattr(lib, theirs), ctypes.c_void_p).value
        llvm_binding.add_symbol(ours, address)



def require(object_code: bytes) -> None:
    """CompileError if this native code calls BLAS and no BLAS is installed."""
    if any(name.encode() in object_code for name in SYMBOLS) and not available():
        raise CompileError("this program calls BLAS (scipy-openblas32), which is not installed")


def set_threads(n: int) -> None:
    """Threads OpenBLAS may use for graphc's products (e.g. cores per MPI process); one
    where graphc's pool splits the products (see library())."""
    lib = library()
    if lib is not None:
        _set(lib, 1 if _shared_threads() else n)


def _shared_threads() -> bool:
    """Whether graphc's threads split the products: its pool, or OpenMP's team that code
    compiled before the pool runs on."""
    return pool.enabled() or openmp.library() is not None


def _set(lib, n: int) -> None:
    setter = getattr(lib, "scipy_openblas_set_num_threads", None)
    if setter is not None:
        setter(int(n))
