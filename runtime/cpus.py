"""How many CPUs this process may actually use: the fewest of the CPU count, its affinity
mask (taskset, a container's cpuset) and its cgroup's CPU quota (docker --cpus, a
Kubernetes limit), rounded up. A thread team larger than that waits for CPUs that never
come free at once."""
from __future__ import annotations

import math
import os

CGROUP_ROOT = "/sys/fs/cgroup"


def usable_cpus(cgroup_root: str = CGROUP_ROOT) -> int:
    count = os.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        try:
            count = min(count, len(os.sched_getaffinity(0)) or count)
        except OSError:
            pass
    quota = cgroup_quota(cgroup_root)
    if quota is not None:
        count = min(count, max(1, math.ceil(quota)))
    return max(1, count)


def cgroup_quota(root: str = CGROUP_ROOT) -> float | None:
    """CPUs' worth of time the cgroup may use per period, or None (no limit, no cgroup)."""
    try:                                        # cgroup v2: "max 100000" or "150000 100000"
        with open(os.path.join(root, "cpu.max")) as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:                                        # cgroup v1: -1 means no limit
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us")) as f:
            quota = int(f.read())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us")) as f:
            period = int(f.read())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None
