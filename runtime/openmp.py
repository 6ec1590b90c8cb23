"""OpenMP's thread team (libgomp, through its C ABI) for code compiled before graphc's own
pool (graphc_runtime.pool): artifacts saved by earlier versions still run on it.

Such native code holds three pointers, `graphc_gomp_parallel`, `graphc_gomp_thread_num` and
`graphc_gomp_num_threads`, that `bind()` fills with libgomp's `GOMP_parallel`,
`omp_get_thread_num` and `omp_get_num_threads` when the library is present: kernels then run on OpenMP's persistent, spin-waiting team instead
of threads started for each call (which cost tens of microseconds). Without libgomp, or
with GRAPHC_OPENMP=0, the pointers stay null and the code starts its own threads for
large kernels. Both paths split kernels into the same chunks, so graphc's kernels give
the same bits either way. With the team, OpenBLAS runs one thread per call and the team
splits large products (see graphc_runtime.blas); without it, OpenBLAS threads itself.

libgomp's team does not survive fork(): a forked child (multiprocessing) gets the
pointers cleared and starts its own threads.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
import weakref

SYMBOLS = ("graphc_gomp_parallel", "graphc_gomp_thread_num", "graphc_gomp_num_threads")
_lock = threading.Lock()
_lib = False            # False: not looked for yet; None: absent
_bound: "weakref.WeakSet" = weakref.WeakSet()


def library():
    """libgomp (ctypes.CDLL), or None when absent or disabled by GRAPHC_OPENMP=0."""
    global _lib
    with _lock:
        if _lib is False:
            _lib = find() if os.environ.get("GRAPHC_OPENMP", "1") != "0" else None
        return _lib


def find():
    """libgomp loaded (ctypes.CDLL) if this machine has it, else None (whatever
    GRAPHC_OPENMP says)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1")
    except OSError:
        return None


class _Slots:
    """The addresses of one loaded program's pointers (kept for fork handling)."""

    def __init__(self, addresses):
        self.addresses = addresses

    def fill(self, values) -> None:
        for address, value in zip(self.addresses, values):
            ctypes.c_void_p.from_address(address).value = value


def bind(engine, owner) -> bool:
    """Point a loaded program at libgomp. `owner` keeps the binding alive (the program);
    True when kernels will use OpenMP's team."""
    addresses = [engine.get_global_value_address(name) for name in SYMBOLS]
    if not all(addresses):
        return False                       # code compiled before this existed
    lib = library()
    if lib is None:
        return False
    slots = _Slots(addresses)
    slots.fill([ctypes.cast(getattr(lib, f), ctypes.c_void_p).value
                for f in ("GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads")])
    owner._openmp_slots = slots
    _bound.add(slots)
    return True


def _after_fork_in_child() -> None:
    for slots in list(_bound):
        slots.fill([None] * len(SYMBOLS))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
