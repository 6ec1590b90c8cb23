"""Distributed training over MPI: collectives in graphs, and data parallelism.

Run programs with `mpiexec -n N python script.py`; on one process everything runs
unchanged (collectives over one process are the identity).
"""
from __future__ import annotations

import hashlib
import re

from graphc_runtime import collectives as _coll
from graphc_runtime.errors import GraphcError

from .. import functions as F
from ..api import Tensor, bind
from ..ir import dtypes
from ..ir.serialize import dumps


def size() -> int:
    """Number of processes (1 without MPI)."""
    return _coll.world_size()


def rank() -> int:
    return _coll.comm().Get_rank() if size() > 1 else 0


def all_reduce(x: Tensor, op: str = "sum") -> Tensor:
    """Sum, mean or max of x over all processes (replicated result)."""
    return bind("all_reduce", x, op=op, axis_size=size())


def all_gather(x: Tensor, axis: int = 0) -> Tensor:
    """Concatenation of every process's x along `axis` (rank order)."""
    return bind("all_gather", x, axis=axis % x.ndim, axis_size=size())


def reduce_scatter(x: Tensor, axis: int = 0) -> Tensor:
    """Sum over processes of x, each process keeping its block of `axis`."""
    return bind("reduce_scatter", x, axis=axis % x.ndim, axis_size=size())


def send(x: Tensor, peer: int, tag: int = 0) -> Tensor:
    """Send x to process `peer` (without waiting for it to arrive); returns a token (a
    scalar 0) that must reach the program's outputs, or order a later `recv`, for the
    send to run. Differentiable: x's cotangent is received back from `peer` (tag + 1)."""
    return bind("send", x, peer=peer, tag=tag)


def recv(shape, dtype, peer: int, tag: int = 0, after: Tensor | None = None) -> Tensor:
    """The array of `shape` and `dtype` that process `peer` sends with `tag`, received
    after the token `after` (default: a scalar 0). Its cotangent is sent back to `peer`
    (tag + 1). Waits at most GRAPHC_COLLECTIVE_TIMEOUT seconds for the message."""
    dtype = dtypes.canonical(dtype)
    token = after if after is not None else F.zeros((), dtype)
    return bind("recv", token, shape=tuple(shape), dtype=dtype, peer=peer, tag=tag)


def _bucketed_all_reduce(grads: list, op: str, world: int, bucket_bytes: int) -> list:
    """all_reduce(op) of every gradient, through a few flat buffers (concatenated up to
    `bucket_bytes` each, one dtype per bucket)."""
    out: list = [None] * len(grads)
    buckets, current, nbytes = [], [], 0
    for k, g in enumerate(grads):
        if current and (nbytes + g.node.nbytes > bucket_bytes or
                        g.dtype != grads[current[0]].dtype):
            buckets.append(current)
            current, nbytes = [], 0
        current.append(k)
        nbytes += g.node.nbytes
    if current:
        buckets.append(current)
    for bucket in buckets:
        flat = F.concatenate([F.reshape(grads[k], (-1,)) for k in bucket])
        reduced = bind("all_reduce", flat, op=op, axis_size=world)
        offset = 0
        for k in bucket:
            n = grads[k].size
            out[k] = F.reshape(reduced[offset:offset + n], grads[k].shape)
            offset += n
    return out


class TensorParallel:
    """Gradients for a model whose layers are sharded across processes (gc.nn's
    column_parallel_linear / row_parallel_linear) and whose loss every process computes
    identically.

    Autodiff differentiates the sum of the processes' losses; this divides the loss by
    the number of processes, so sharded parameters get the gradient of the one loss, and
    sums the gradients of replicated parameters (one bucketed all-reduce).
    """

    def __init__(self, bucket_bytes: int = 32 << 20):
        self.bucket_bytes = bucket_bytes
        self.world = size()

    def gradients(self, loss: Tensor, sharded, replicated=()) -> tuple[list, list]:
        from ..autodiff import grad
        sharded, replicated = list(sharded), list(replicated)
        grads = grad(loss * (1.0 / self.world), sharded + replicated)
        g_sharded, g_repl = grads[:len(sharded)], grads[len(sharded):]
        if self.world > 1 and g_repl:
            g_repl = _bucketed_all_reduce(g_repl, "sum", self.world, self.bucket_bytes)
        return g_sharded, g_repl

    def setup(self, exe, program) -> None:
        _check_same_program(self.world, program)


def _check_same_program(world: int, program, any_groups: bool = False) -> None:
    """Refuse processes that built different graphs (with `any_groups`, the process
    groups their collectives name may differ: a Mesh gives each rank its own)."""
    if world == 1:
        return
    c = _coll.comm()
    if c.Get_size() != world:
        raise GraphcError(f"mismatched world sizes: the graph was built for {world} "
                          f"processes, this run has {c.Get_size()}")
    text = dumps(program.graph, program.roots(), include_variables=False)
    if any_groups:
        text = re.sub(r'"group": \{"__tuple__": \[[0-9, ]*\]\}', '"group": "*"', text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    digests = [d.decode() for d in _coll.digests_of_all(digest.encode(),
                                                         "the graph-hash check")]
    differ = [r for r, d in enumerate(digests) if d != digests[0]]
    if differ:
        raise GraphcError(f"rank(s) {differ} built a different graph than rank 0 "
                          f"(graph hash {digests[differ[0]][:12]} vs {digests[0][:12]}); "
                          f"every process must run the same program")


class DataParallel:
    """Data parallelism: each process runs the same graph on its part of the batch.

    `gradients(loss, params)` gives the gradients averaged over processes, all-reduced
    in a few flat buckets (gradients concatenated up to `bucket_bytes` each). Pass it to
    gc.compile(..., distributed=dp): the compile checks that every process built the same
    graph for the same number of processes, and copies rank 0's initial variables to all.

    `DataParallel(zero=1 | 2)` shards the optimizer's state (graphc/distributed/zero.py):
    `updates = dp.optimize(gc.optim.adam, loss, params, lr=...)` keeps 1/N of the state
    and of the parameters' master copy on each process (stage 1 all-reduces the
    gradients, stage 2 reduce-scatters them). `exe.stats["memory"]` gives this process's
    bytes of parameters, optimizer state and arena.
    """

    def __init__(self, bucket_bytes: int = 32 << 20, zero: int = 0):
        if zero not in (0, 1, 2):
            raise GraphcError(f"DataParallel: zero must be 0, 1 or 2, got {zero!r}")
        self.bucket_bytes = bucket_bytes
        self.world = size()
        self.zero = zero
        self.params: dict = {}            # node id -> parameter Tensor (for stats)
        self.shards: list = []

    def gradients(self, loss: Tensor, params) -> list:
        from ..autodiff import grad
        params = list(params)
        self._record(params)
        grads = grad(loss, params)
        if self.world == 1:
            return grads
        return _bucketed_all_reduce(grads, "mean", self.world, self.bucket_bytes)

    def optimize(self, optimizer, loss: Tensor, params, **kwargs) -> dict:
        """The updates of `optimizer` (gc.optim.sgd, momentum, adam: called with the
        averaged gradients and `kwargs`), for gc.compile(..., updates=, distributed=dp)."""
        params = list(params)
        if not self.zero:
            return optimizer(loss, params, grads=self.gradients(loss, params), **kwargs)
        from .zero import sharded_updates
        updates = sharded_updates(self, optimizer, loss, params, kwargs)
        self._record(params)
        return updates

    def _record(self, params) -> None:
        self.params.update({p.node.id: p for p in params if isinstance(p, Tensor)})

    def setup(self, exe, program) -> None:
        """Refuse mismatched processes; give every process rank 0's variables (each its
        own shards of the sharded ones); report memory per process."""
        from . import zero
        _check_same_program(self.world, program)
        sharded = zero.sharded_names(self.shards)
        if self.world > 1:
            for name in exe.variables:
                if name not in sharded:
                    _coll.broadcast(dict.__getitem__(exe.variables, name),
                                    f"the broadcast of variable {name!r}")
        zero.initialize(self.shards, exe.variables, rank())
        params = {p.name for p in self.params.values()}
        masters = {s.master for s in self.shards}
        nbytes = {name: dict.__getitem__(exe.variables, name).nbytes for name in exe.variables}
        exe.stats["memory"] = {
            "rank": rank(), "processes": self.world, "zero": self.zero,
            "parameters": sum(b for n, b in nbytes.items() if n in params),
            "master_shards": sum(b for n, b in nbytes.items() if n in masters),
            "optimizer_state": sum(b for n, b in nbytes.items()
                                   if n not in params and n not in masters),
            "arena": exe.stats.get("arena_bytes", 0)}


_LAZY = {"Mesh": "mesh", "Pipeline": "pipeline", "stage_boundary": "pipeline"}


def __getattr__(name):
    """Mesh, Pipeline and stage_boundary, imported on first use (start-up time)."""
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
