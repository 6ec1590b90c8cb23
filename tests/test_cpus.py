"""The default thread count follows the CPUs the process may use: its affinity mask and
its cgroup's CPU quota (graphc_runtime.cpus)."""
import os

import numpy as np
import pytest

import graphc as gc
from graphc_runtime import cpus


def _cgroup(tmp_path, v2=None, v1=None):
    root = tmp_path / "cgroup"
    root.mkdir(parents=True)
    if v2 is not None:
        (root / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (root / "cpu").mkdir()
        (root / "cpu" / "cpu.cfs_quota_us").write_text(f"{v1[0]}\n")
        (root / "cpu" / "cpu.cfs_period_us").write_text(f"{v1[1]}\n")
    return str(root)


def test_cgroup_quotas_are_read(tmp_path):
    assert cpus.cgroup_quota(_cgroup(tmp_path / "a", v2="max 100000")) is None
    assert cpus.cgroup_quota(_cgroup(tmp_path / "b", v2="150000 100000")) == 1.5
    assert cpus.cgroup_quota(_cgroup(tmp_path / "c", v1=(-1, 100000))) is None
    assert cpus.cgroup_quota(_cgroup(tmp_path / "d", v1=(50000, 100000))) == 0.5
    assert cpus.cgroup_quota(str(tmp_path / "none")) is None
    assert cpus.cgroup_quota(_cgroup(tmp_path / "e", v2="garbage")) is None


def test_the_fewest_of_count_affinity_and_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert cpus.usable_cpus(str(tmp_path / "none")) == 4
    assert cpus.usable_cpus(_cgroup(tmp_path / "a", v2="250000 100000")) == 3   # rounded up
    assert cpus.usable_cpus(_cgroup(tmp_path / "b", v2="20000 100000")) == 1
    assert cpus.usable_cpus(_cgroup(tmp_path / "c", v2="max 100000")) == 4


def test_compile_defaults_to_the_usable_cpus(monkeypatch):
    from graphc.backends.cpu import backend
    monkeypatch.delenv("GRAPHC_NUM_THREADS", raising=False)
    monkeypatch.setattr(backend, "usable_cpus", lambda: 1)
    with gc.Graph("threads"):
        x = gc.placeholder((256, 256), "float32", name="x")
        exe = gc.compile(gc.exp(x).sum(axis=1))
        assert exe.stats["num_threads"] == 1
        feed = np.ones((256, 256), np.float32)
        np.testing.assert_allclose(exe(feed), np.full(256, 256 * np.e, np.float32), rtol=1e-5)
        monkeypatch.setenv("GRAPHC_NUM_THREADS", "2")
        assert gc.compile(gc.exp(x).sum(axis=1)).stats["num_threads"] == 2
