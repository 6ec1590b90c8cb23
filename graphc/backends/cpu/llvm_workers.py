"""Compile jobs in several processes at once: LLVM holds one global lock per process,
so a large program's parts (module_parts.py) compile in parallel only in forked
children.

The jobs (largest first) are numbered into a pipe before the fork; this process and each
child take the next number from it until none is left (a pipe read of 4 bytes takes one
whole record), so a process that drew small jobs takes more of them. A child sends its
results back when the queue is empty and exits. A child that dies, fails or has not
answered by the deadline is killed, and this process compiles the jobs it did not
return: the result never depends on the children.

`Background` runs jobs in one forked child while this process goes on with other work
(the own GEMM kernels while the program's code is generated), on the same terms.

GRAPHC_COMPILE_PROCESSES caps the processes (default: the CPUs this process may use,
at most MAX_PROCESSES); 1 compiles everything here.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import struct
import time

MAX_PROCESSES = 8
GRACE_S = 30.0              # a child may answer this long after this process is done (+ 4x its time)
RECORD = struct.Struct("<I")


def processes() -> int:
    from graphc_runtime.cpus import usable_cpus
    setting = os.environ.get("GRAPHC_COMPILE_PROCESSES", "").strip()
    try:
        cap = int(setting) if setting else MAX_PROCESSES
    except ValueError:
        from graphc_runtime.errors import CompileError
        raise CompileError(f"GRAPHC_COMPILE_PROCESSES must be a whole number, "
                           f"got {setting!r}") from None
    return max(1, min(cap, usable_cpus(), MAX_PROCESSES))


def run(jobs: list, work, n_processes: int) -> list:
    """[work(job) for job in jobs], computed by up to `n_processes` processes."""
    n_children = min(n_processes, len(jobs)) - 1
    if n_children < 1 or not hasattr(os, "fork"):
        return [work(job) for job in jobs]
    from graphc_runtime.forks import helper_fork
    queue_r, queue_w = os.pipe()
    os.write(queue_w, b"".join(RECORD.pack(k) for k in range(len(jobs))))
    os.close(queue_w)
    children = []
    try:
        for _ in range(n_children):
            result_r, result_w = os.pipe()
            pid = helper_fork()
            if pid == 0:                                      # the child
                os.close(result_r)
                _child(queue_r, result_w, jobs, work)
            os.close(result_w)
            children.append((pid, result_r))
        started = time.monotonic()
        results = _take(queue_r, jobs, work)
        deadline = time.monotonic() + GRACE_S + 4 * (time.monotonic() - started)
        for pid, fd in children:
            results.update(_collect(pid, fd, deadline))
        children = []
    finally:
        os.close(queue_r)
        for pid, fd in children:                               # an error here: no orphans
            _kill(pid)
            os.close(fd)
    return [results[k] if k in results else work(job) for k, job in enumerate(jobs)]


class Background:
    """Jobs computed by one forked child while this process goes on: `submit` each as it
    becomes known, `results()` when they are needed ({job: result} of those the child
    returned; a child that died, failed or missed the deadline returns none, and the
    caller computes them), `close()` where they are not (the child is killed)."""

    def __init__(self, work):
        self.work = work
        self.jobs: list = []
        self._pid = self._jobs_w = self._results_r = None
        self._started = 0.0
        self._failed = False

    def submit(self, job) -> None:
        if self._failed or job in self.jobs:
            return
        if self._pid is None and not self._start():
            self._failed = True                    # no fork: every job comes here
            return
        data = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            _write_all(self._jobs_w, RECORD.pack(len(data)) + data)
        except OSError:                            # the child is gone: its jobs come here
            self._failed = True
            return
        self.jobs.append(job)

    def _start(self) -> bool:
        from graphc_runtime.forks import helper_fork
        jobs_r, jobs_w = os.pipe()
        results_r, results_w = os.pipe()
        try:
            pid = helper_fork()
        except OSError:
            pid = None
        if pid == 0:                                              # the child
            os.close(jobs_w)
            os.close(results_r)
            _serve(jobs_r, results_w, self.work)
        os.close(jobs_r)
        os.close(results_w)
        if pid is None:
            os.close(jobs_w)
            os.close(results_r)
            return False
        self._pid, self._jobs_w, self._results_r = pid, jobs_w, results_r
        self._started = time.monotonic()
        return True

    def results(self) -> dict:
        if self._pid is None:
            return {}
        os.close(self._jobs_w)
        self._jobs_w = None
        deadline = time.monotonic() + GRACE_S + 4 * (time.monotonic() - self._started)
        got = _collect(self._pid, self._results_r, deadline)
        self._pid = self._results_r = None
        return {job: got[k] for k, job in enumerate(self.jobs) if k in got}

    def close(self) -> None:
        """Kill the child unless its results were taken (safe to call again)."""
        if self._pid is not None:
            _kill(self._pid)
            for fd in (self._jobs_w, self._results_r):
                if fd is not None:
                    os.close(fd)
            self._pid = self._jobs_w = self._results_r = None


def _serve(jobs_r: int, result_w: int, work) -> None:
    """A Background child: compute each job as it comes, send all results at the end."""
    status = 1
    try:
        results, k = {}, 0
        with os.fdopen(jobs_r, "rb") as jobs:
            while True:
                head = jobs.read(RECORD.size)
                if len(head) < RECORD.size:
                    break
                results[k] = work(pickle.loads(jobs.read(RECORD.unpack(head)[0])))
                k += 1
        _write_all(result_w, pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL))
        status = 0
    finally:
        os._exit(status)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _take(queue_r: int, jobs: list, work) -> dict:
    results = {}
    while True:
        record = os.read(queue_r, RECORD.size)
        if len(record) < RECORD.size:
            return results
        (k,) = RECORD.unpack(record)
        results[k] = work(jobs[k])


def _child(queue_r: int, result_w: int, jobs: list, work) -> None:
    status = 1
    try:
        _write_all(result_w, pickle.dumps(_take(queue_r, jobs, work),
                                          protocol=pickle.HIGHEST_PROTOCOL))
        status = 0
    finally:
        os._exit(status)


def _collect(pid: int, fd: int, deadline: float) -> dict:
    """The child's results, or {} where it failed or missed the deadline."""
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                _kill(pid)
                return {}
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(fd)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        return {}
    try:
        results = pickle.loads(b"".join(chunks))
    except Exception:                         # a child cut short: its jobs are done here
        return {}
    return results if isinstance(results, dict) else {}


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, ChildProcessError):   # already reaped
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
