"""graphc's own GEMM kernels compile in a child process while the program's code is
still being written (backends/cpu/backend.py: GemmPrefetch, llvm_workers.Background):
the same bits as compiled in one process, each kernel an object of its own kept for the
process, and a child that fails, hangs or is not needed never changes the result."""
import os
import re
import time

import numpy as np

import graphc as gc
from graphc.backends.cpu import gemm_ir, llvm_workers


def _double(job):
    return job * 2


def test_background_jobs_come_back():
    worker = llvm_workers.Background(_double)
    for job in (1, 2, 3, 2):
        worker.submit(job)
    assert worker.jobs == [1, 2, 3]
    assert worker.results() == {1: 2, 2: 4, 3: 6}
    worker.close()                                   # nothing left to close
    assert llvm_workers.Background(_double).results() == {}     # never started


def test_a_failed_or_hung_background_child_returns_nothing(monkeypatch):
    parent = os.getpid()

    def dies_in_children(job):
        if os.getpid() != parent:
            os._exit(3)
        return job

    def hangs_in_children(job):
        if os.getpid() != parent:
            time.sleep(600)
        return job
    worker = llvm_workers.Background(dies_in_children)
    worker.submit(1)
    assert worker.results() == {}
    monkeypatch.setattr(llvm_workers, "GRACE_S", 0.5)
    worker = llvm_workers.Background(hangs_in_children)
    worker.submit(1)
    started = time.monotonic()
    assert worker.results() == {}
    assert time.monotonic() - started < 30


def test_a_background_child_not_needed_is_killed():
    worker = llvm_workers.Background(lambda job: time.sleep(600))
    worker.submit(1)
    pid = worker._pid
    worker.close()
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive                                 # killed and reaped: no zombie


def _mlp(seed):
    rng = np.random.default_rng(seed)
    with gc.Graph("prefetch"):
        x = gc.placeholder((96, 64), name="x")
        w1 = gc.constant(rng.standard_normal((64, 128)).astype(np.float32))
        w2 = gc.constant(rng.standard_normal((128, 32)).astype(np.float32))
        return gc.compile(gc.tanh(x @ w1) @ w2)


def test_own_gemm_kernels_compile_while_the_code_is_written(monkeypatch):
    monkeypatch.setenv("GRAPHC_CACHE", "0")
    x = np.random.default_rng(1).standard_normal((96, 64)).astype(np.float32)
    monkeypatch.setenv("GRAPHC_COMPILE_PROCESSES", "1")
    monkeypatch.setattr(gemm_ir, "_COMPILED", {})
    one = _mlp(0)
    submitted = []
    original = llvm_workers.Background.submit

    def spy(self, job):
        submitted.append(job)
        original(self, job)
    monkeypatch.setattr(llvm_workers.Background, "submit", spy)
    monkeypatch.setenv("GRAPHC_COMPILE_PROCESSES", "2")
    monkeypatch.setattr(gemm_ir, "_COMPILED", {})
    two = _mlp(0)
    own = set(re.findall(r'^define [^@]*@"?(graphc_own_gemm_\w+)"?\(', two.dump("llvm"),
                         re.M))
    assert own and {job[1] for job in submitted} == own
    assert np.array_equal(one(x), two(x))
    submitted.clear()
    again = _mlp(0)                                  # this process has them now
    assert submitted == [] and np.array_equal(again(x), one(x))
