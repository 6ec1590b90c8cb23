"""send and recv: one array to or from one peer process (the graph ops of
graphc/ir/ops/point_to_point.py, run by the reference interpreter and the runtime).

A send copies its operand and starts sending it (MPI Isend); it never waits for the
receiver, so neighbouring processes that send to each other cannot deadlock. Started
sends complete by `finish_sends` (and are reaped as later sends start). A recv waits for
its message with the collectives' deadline (GRAPHC_COLLECTIVE_TIMEOUT) and checks that
the message holds exactly the bytes expected. Messages to this process itself (one
process running every pipeline stage, or no MPI at all) go through an in-process queue
per tag, in order, as MPI keeps them.
"""
from __future__ import annotations

import collections
import time

import numpy as np

from . import collectives
from .errors import GraphcError

OPS = ("send", "recv")
_pending: list = []                                  # (request, buffer, what)
_loopback: dict = collections.defaultdict(collections.deque)
_stats = {"recv_wait_seconds": 0.0}
MAX_TAG = 32767                                     # the largest tag MPI guarantees


def recv_wait_seconds() -> float:
    """Seconds this process has spent in recv, waiting for messages, so far."""
    return _stats["recv_wait_seconds"]


def run(op: str, attrs: dict, src: np.ndarray, dst: np.ndarray) -> None:
    """send: src to rank attrs["peer"] (dst, the token, becomes 0). recv: the message
    from attrs["peer"] into dst (src is the token that orders it)."""
    peer, tag, me = attrs["peer"], attrs["tag"], collectives.rank()
    if op == "send":
        dst[...] = 0
        data = np.array(src, copy=True, order="C")
        if peer == me:
            _loopback[tag].append(data)
            return
        _check_peer(peer, "send to")
        _reap()
        what = f"send of {data.dtype}{list(data.shape)} to rank {peer} (tag {tag})"
        _pending.append((collectives.comm().Isend(data, dest=peer, tag=tag), data, what))
        return
    what = f"recv of {dst.dtype}{list(dst.shape)} from rank {peer} (tag {tag})"
    if peer == me:
        queue = _loopback[tag]
        if not queue:
            raise GraphcError(f"{what}: this process sent itself nothing with that tag "
                              f"(it would wait forever); a send must run first")
        data = queue.popleft()
        if data.shape != dst.shape or data.dtype != dst.dtype:
            raise GraphcError(f"{what}: the message holds {data.dtype}{list(data.shape)}")
        dst[...] = data
        return
    _check_peer(peer, "recv from")
    start = time.perf_counter()
    try:
        count = _wait(collectives.comm().Irecv(dst, source=peer, tag=tag), what)
    finally:
        _stats["recv_wait_seconds"] += time.perf_counter() - start
    if count != dst.nbytes:
        raise GraphcError(f"{what}: the message holds {count} bytes, not {dst.nbytes}: the "
                          f"sender's graph sends another shape or dtype")


def finish_sends(what: str = "the sends this process started") -> None:
    """Wait, with the deadline, until every started send has been received."""
    while _pending:
        request, _, detail = _pending[0]
        _wait(request, f"{what}: {detail}")
        _pending.pop(0)


def _reap() -> None:
    """Drop the sends that have completed (their copies with them)."""
    _pending[:] = [p for p in _pending if not p[0].Test()]


def _check_peer(peer: int, verb: str) -> None:
    size = collectives.comm().Get_size()
    if not 0 <= peer < size:
        raise GraphcError(f"{verb} rank {peer}: this run has {size} process(es); run under "
                          f"mpiexec with more, or send to rank {collectives.rank()} (this one)")


def _wait(request, what: str) -> int:
    """Wait for a point-to-point request with the collectives' deadline; the bytes it
    moved. Past the deadline the peer is named (no other rank takes part)."""
    from mpi4py import MPI
    status = MPI.Status()

    def hung(what, limit):
        raise collectives.CollectiveError(
            f"{what} did not complete within {limit:g} s (GRAPHC_COLLECTIVE_TIMEOUT): that "
            f"process hung, is gone or never takes part; end the job")
    try:
        collectives.wait(request, what, status, hung)
    except MPI.Exception as e:
        raise GraphcError(f"{what} failed: {e} (the two graphs disagree on the message's "
                          f"size)") from None
    return status.Get_count(MPI.BYTE)


def clear_loopback() -> None:
    """Forget messages this process sent itself and never received (a step that failed
    halfway leaves them)."""
    _loopback.clear()
