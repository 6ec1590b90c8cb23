"""fork() while another thread is inside a call: the child's calls run (the executable's
lock is not inherited held), and a program whose call was still in flight is refused in
the child with a GraphcError instead of hanging. Each case runs in its own process, the
child watched with a deadline."""
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this OS")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMON = r"""
import os, sys, threading, time, numpy as np, graphc as gc, graphc_runtime

def wait_child(pid, limit=30.0):
    deadline = time.time() + limit
    while time.time() < deadline:
        p, status = os.waitpid(pid, os.WNOHANG)
        if p:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hung"

with gc.Graph("f"):
    x = gc.placeholder((256, 256), "float32", name="x")
    w = gc.variable(np.ones((256, 256), np.float32), name="w")
    exe = gc.compile(gc.tanh(x @ w).sum(axis=1), updates={w: w * 1.0}, num_threads=2)
xv = np.random.default_rng(0).random((256, 256)).astype(np.float32)
want = exe(x=xv)
"""

BUSY = COMMON + r"""
loaded = None
if sys.argv[1] == "artifact":
    exe.save(sys.argv[2])
    loaded = graphc_runtime.load(sys.argv[2])
target = loaded or exe
stop = False
def spin():
    while not stop:
        target(x=xv)
t = threading.Thread(target=spin)
t.start()
codes = []
for _ in range(6):
    time.sleep(0.03)
    pid = os.fork()
    if pid == 0:
        got = target(x=xv)
        os._exit(0 if np.array_equal(got, want) else 3)
    codes.append(wait_child(pid))
stop = True
t.join()
print("codes", codes)
"""

TORN = COMMON + r"""
from graphc_runtime import forks
forks.FORK_WAIT_S = 0.2
held = threading.Event()
release = threading.Event()
def in_flight():                      # stands for a call that outlasts the wait
    with exe._native.lock:
        held.set()
        release.wait()
t = threading.Thread(target=in_flight)
t.start()
held.wait()
pid = os.fork()
if pid == 0:
    try:
        exe(x=xv)
        os._exit(5)
    except gc.GraphcError as e:
        os._exit(0 if "forked" in str(e) else 6)
code = wait_child(pid)
release.set()
t.join()
print("child", code, "parent", np.array_equal(exe(x=xv), want))
"""


def _run(script, *args):
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True,
                         text=True, timeout=180, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.parametrize("which", ["executable", "artifact"])
def test_fork_while_another_thread_calls(which, tmp_path):
    out = _run(BUSY, which, str(tmp_path / "m.gcx"))
    assert "codes [0, 0, 0, 0, 0, 0]" in out, out


def test_program_mid_call_at_fork_is_refused_in_the_child():
    out = _run(TORN)
    assert "child 0 parent True" in out, out
