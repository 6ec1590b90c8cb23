"""The runtime's thread pool (graphc_runtime.pool): every chunk runs exactly once, with
any number of workers, concurrent callers and after fork; programs bind to it."""
import ctypes
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from graphc_runtime import pool as pools

pytestmark = pytest.mark.skipif(pools.pool() is None,
                                reason="the thread pool needs Linux on x86-64 or AArch64")
BODY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)
RUN = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_int64), ctypes.c_int64)


def runner():
    """(run(jobs), thread()): run a list of (body, arg, n) jobs on the pool."""
    p = pools.pool()
    native = RUN(p.run_address)

    def run(jobs):
        table = (ctypes.c_int64 * (3 * max(len(jobs), 1)))()
        for j, (body, arg, n) in enumerate(jobs):
            table[3 * j:3 * j + 3] = [ctypes.cast(body, ctypes.c_void_p).value, arg, n]
        native(table, len(jobs))
    return run, ctypes.CFUNCTYPE(ctypes.c_int64)(p.thread_address)


def test_every_chunk_runs_exactly_once_on_the_pools_threads():
    run, thread = runner()
    counts = np.zeros(40, np.int64)
    threads = set()

    @BODY
    def body(job, c):
        counts[c] += 1
        threads.add(thread())
    for it in range(600):
        n = it % 40
        counts[:] = 0
        run([(body, 0, n)])
        assert (counts[:n] == 1).all() and (counts[n:] == 0).all(), (n, counts)
    p = pools.pool()
    assert p.started() == p.workers
    assert threads <= set(range(p.workers + 1)) and 0 in threads
    assert thread() == 0                          # a caller is thread 0


def test_jobs_run_in_order_each_after_the_last_chunk_of_the_one_before():
    run, _ = runner()
    log = []
    lock = threading.Lock()

    @BODY
    def body(arg, c):
        with lock:
            log.append((arg or 0, c))
    for _ in range(100):
        log.clear()
        sizes = [3, 1, 1, 5, 0, 2, 1]
        run([(body, j, n) for j, n in enumerate(sizes)])
        assert sorted(log) == [(j, c) for j, n in enumerate(sizes) for c in range(n)]
        assert [a for a, _ in log] == sorted(a for a, _ in log)     # job by job


def test_more_jobs_than_a_job_word_holds_run_on_the_caller():
    run, _ = runner()
    n = pools.MAX_JOBS + 5
    counts = np.zeros(n, np.int64)
    body = BODY(lambda arg, c: counts.__setitem__(arg or 0, counts[arg or 0] + 1))
    run([(body, j, 1) for j in range(n)])
    assert (counts == 1).all()


def test_a_job_of_more_chunks_than_a_job_word_counts_runs_on_the_caller():
    run, _ = runner()
    n = pools.MAX_CHUNKS + 3
    counts = np.zeros(n, np.int64)
    body = BODY(lambda arg, c: counts.__setitem__(c, counts[c] + 1))
    run([(body, 0, 2), (body, 0, n)])
    assert counts[0] == 2 and counts[1] == 2 and (counts[2:] == 1).all()


def test_concurrent_callers_each_get_all_their_chunks():
    run, _ = runner()
    lock = threading.Lock()
    counts = {}

    @BODY
    def body(job, c):
        with lock:
            key = (job or 0, c)
            counts[key] = counts.get(key, 0) + 1

    def caller(k):
        for _ in range(200):
            run([(body, k, 5)])
    ts = [threading.Thread(target=caller, args=(k,)) for k in (1, 2, 3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert counts == {(k, c): 200 for k in (1, 2, 3) for c in range(5)}


OVERSUBSCRIBED = r"""
import os, sys, numpy as np, graphc as gc
from graphc_runtime import pool
rng = np.random.default_rng(0)
x = rng.standard_normal((600, 700)).astype(np.float32)
w = rng.standard_normal((700, 300)).astype(np.float32)
with gc.Graph():
    px, pw = gc.placeholder(x.shape, name="x"), gc.placeholder(w.shape, name="w")
    outs = [gc.softmax(px @ pw, axis=1), gc.tanh(px) * 2 + px.sum(axis=1, keepdims=True)]
    one = gc.compile(outs, num_threads=1)
    many = gc.compile(outs, num_threads=int(sys.argv[1]))
expected = one(x, w)
for _ in range(50):
    got = many(x, w)
    assert all(np.array_equal(a, b) for a, b in zip(expected, got))
print("pool", many._native.on_pool, pool.pool() and pool.pool().started())
pid = os.fork()                       # the workers are gone in a forked child
if pid == 0:
    again = many(x, w)
    ok = all(np.array_equal(a, b) for a, b in zip(expected, again))
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
print("child", os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("workers,chunks", [("8", 5), ("1", 3), ("off", 2)])
def test_same_bits_with_any_pool_size_off_and_after_fork(tmp_path, workers, chunks):
    """Eight workers on this machine's cores, the caller alone, or no pool (threads per
    call): results equal to one thread's, also in a forked child."""
    script = tmp_path / "check.py"
    script.write_text(OVERSUBSCRIBED)
    env = dict(os.environ, GRAPHC_POOL="0" if workers == "off" else "1")
    if workers != "off":
        env["GRAPHC_POOL_THREADS"] = workers
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run([sys.executable, str(script), str(chunks)], capture_output=True,
                         text=True, timeout=300, env=env, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "child 0" in out.stdout
    if workers == "off":
        assert "pool False" in out.stdout
    else:
        assert f"pool True {int(workers) - 1}" in out.stdout


def test_many_short_sequences_back_to_back_in_a_loop_body():
    """A scan whose body has split kernels between serial ones: each step is a short
    sequence of pool jobs right after the last (a worker that read one sequence's final
    word while the next was being published once ran a chunk of it twice, and the step
    never ended). Results equal one thread's, bit for bit."""
    rng = np.random.default_rng(0)
    xs_v = rng.standard_normal((2000, 64, 1024)).astype(np.float32) * 0.1
    import graphc as gc
    with gc.Graph():
        xs = gc.placeholder(xs_v.shape, name="xs")

        def step(carry, x):                           # runs of different lengths,
            h, s = carry                              # split by a conditional
            h = gc.tanh(h + x) * 0.5                  # split: 64K elements
            s = s * 0.9 + h[:2, :4].sum()             # serial: a few elements
            h = gc.cond(s > 0, lambda a: a * 0.5, lambda a: a + 0.25, h)
            h = gc.exp(h * -0.5) + h[:, :1] * 0.125
            s = s + h[:1, :3].sum() * 0.5 + h[3, 4]
            return (h, s), s
        (h, s), ys = gc.scan(step, (gc.zeros((64, 1024)), gc.zeros(())), xs)
        one = gc.compile([h, s, ys], num_threads=1)
        two = gc.compile([h, s, ys], num_threads=2)
    expected = one(xs_v)
    results = []
    runner_thread = threading.Thread(target=lambda: results.extend(
        two(xs_v) for _ in range(3)), daemon=True)      # a hang fails, not stalls
    runner_thread.start()
    runner_thread.join(timeout=120)
    assert len(results) == 3, "the pool did not finish the program within 120 s"
    for got in results:
        for a, b in zip(expected, got):
            np.testing.assert_array_equal(a, b)


def test_workers_spin_briefly_while_other_processes_keep_the_cpus_busy(tmp_path,
                                                                        monkeypatch):
    """Every LOOK_S seconds a run reads how much CPU time other processes took on the
    CPUs this one may use (/proc/stat less this process's own): over BUSY_OTHERS CPUs,
    and calls of LONG_CALL_S or more, the pool's threads spin BUSY_SPINS rounds; else as
    many as a quiet machine pays for. Without /proc/stat nothing changes."""
    p = pools.pool()
    quiet, busy = p._spins[False], p._spins[True]
    assert busy[0] < quiet[0] and busy[1] <= quiet[1]
    stat = tmp_path / "stat"
    monkeypatch.setattr(p, "_stat", str(stat))
    monkeypatch.setattr(p, "_seen", None)
    cpus = sorted(p._cpus) or ["cpu0"]
    monkeypatch.setattr(p, "_cpus", set(cpus))
    hz = os.sysconf("SC_CLK_TCK")
    own, call_s = [0.0], [pools.LONG_CALL_S]
    monkeypatch.setattr(pools.time, "process_time", lambda: own[0])

    def look(now, busy_seconds, own_seconds):
        ticks = int(round(busy_seconds * hz / len(cpus)))
        stat.write_text("cpu  0 0 0 0 0 0 0 0 0 0\n" + "".join(
            f"{c} {ticks} 0 0 999 5 0 0 0 7 7\n" for c in cpus))
        own[0] = own_seconds
        p._call_s = call_s[0]
        p._look(now)
        return p._worker_spins.value, p._caller_spins.value
    try:
        assert look(100.0, 10.0, 1.0) == quiet                   # the first look: a baseline
        assert look(100.1, 10.2, 1.1) == busy                    # others: 0.1 s of 0.1 s
        assert look(100.2, 10.3, 1.2) == quiet                   # all of it this process's
        call_s[0] = pools.LONG_CALL_S / 10                       # short calls: spinning
        assert look(100.3, 10.5, 1.2) == quiet                   # pays even when busy
        call_s[0] = pools.LONG_CALL_S
        assert look(105.0, 20.0, 2.0) == quiet                   # idle meanwhile: a baseline
        stat.unlink()
        p._look(105.1)
        assert (p._worker_spins.value, p._caller_spins.value) == quiet
        assert p._next_look == float("inf")
    finally:
        p._worker_spins.value, p._caller_spins.value = quiet
        p._next_look = 0.0
