"""fork() safety for what the runtime owns: every executable's call lock and the
module-level locks (LLVM's set-up, OpenBLAS's thread setting).

A fork copies a lock as it stands: were another thread inside a call, the child would
inherit the lock held by a thread it does not have, and its first call would wait
forever. Before a fork the runtime therefore takes every registered executable's lock,
waiting at most FORK_WAIT_S in all for calls in flight to finish, so the child sees each
program between two calls; both sides then get the locks back free. A program whose call
did not finish in time is marked in the child: its variables may be half-updated, and a
call there raises a GraphcError saying so instead of hanging or computing from them.
(The thread pool is reset in the child by graphc_runtime.pool.)
"""
from __future__ import annotations

import os
import threading
import time
import warnings
import weakref

from .errors import GraphcError

FORK_WAIT_S = 10.0

_guarded: "weakref.WeakSet" = weakref.WeakSet()
_module_locks: list = []          # (module, attribute name) of module-level locks
_held: list = []                  # programs whose lock this fork holds
_helper_child = False             # set while forking a child that runs no program


class TornLock:
    """The lock of a program that was mid-call in another thread when the process
    forked: entering it raises instead of running on half-written state."""

    def __init__(self, what: str):
        self.what = what

    def _refuse(self):
        raise GraphcError(f"{self.what} was running in another thread when this process "
                          f"forked, so its variables and arena may be half-updated here; "
                          f"load or compile it again in the child process")

    def __enter__(self):
        self._refuse()

    def __exit__(self, *exc):
        return False

    def acquire(self, *args, **kwargs):
        self._refuse()

    def release(self):
        pass


def guard(program) -> None:
    """Register an object whose `lock` attribute serializes its calls."""
    _guarded.add(program)


def guard_module_lock(module, name: str) -> None:
    """Register a module-level lock (module.name) to be replaced by a free one in a child."""
    _module_locks.append((module, name))


def helper_fork() -> int:
    """os.fork() for a child that only computes and exits (the compiler's LLVM workers):
    no wait for calls in flight, and every program is marked torn in the child."""
    global _helper_child
    _helper_child = True
    try:
        with warnings.catch_warnings():          # Python 3.12+: fork with threads running
            warnings.simplefilter("ignore", DeprecationWarning)
            return os.fork()
    finally:
        _helper_child = False


def _before() -> None:
    deadline = time.monotonic() + FORK_WAIT_S
    _held.clear()
    if _helper_child:
        return
    for program in list(_guarded):
        lock = getattr(program, "lock", None)
        if lock is None or isinstance(lock, TornLock):
            continue
        if lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            _held.append(program)


def _after_in_parent() -> None:
    for program in _held:
        program.lock.release()
    _held.clear()


def _after_in_child() -> None:
    held = {id(p) for p in _held}
    for program in list(_guarded):
        if isinstance(getattr(program, "lock", None), TornLock):
            continue
        if id(program) in held:
            program.lock = threading.Lock()
        else:
            program.lock = TornLock(f"{type(program).__name__} {getattr(program, 'name', '')}"
                                    .strip())
    _held.clear()
    for module, name in _module_locks:
        setattr(module, name, threading.Lock())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before, after_in_parent=_after_in_parent,
                        after_in_child=_after_in_child)
