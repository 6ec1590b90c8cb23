"""Sharded optimizer state (ZeRO stages 1 and 2) for data parallelism.

Each dtype's parameters are laid end to end in one flat vector, padded to a multiple of
the number of processes N, and cut into N equal shards. Rank r keeps shard r of the
optimizer's state and of the parameters' master copy ("zero/master/<dtype>", a variable
of 1/N of the parameters): the optimizer (gc.optim.sgd, momentum, adam) runs on that
shard only, so its state variables are 1/N the size. Stage 1 all-reduces the gradients
and keeps its shard of the mean; stage 2 reduce-scatters them (no process ever holds the
whole mean gradient). The updated master shards are all-gathered into every process's
full parameters, so each process still runs the whole model.
"""
from __future__ import annotations

import math

import numpy as np

from graphc_runtime.errors import GraphcError

from .. import functions as F
from ..api import Tensor, bind, variable
from ..ir.source import user_location


class Shard:
    """One dtype's parameters, flattened: their order, the shard length, the names of
    the per-rank variables (master shard, optimizer state shards)."""

    def __init__(self, params: list, world: int):
        self.params = params
        self.total = sum(int(p.size) for p in params)
        self.length = max(1, math.ceil(self.total / world))
        self.padded = self.length * world
        self.master = ""
        self.sharded: list[str] = []        # variables whose value differs per rank

    def flat(self, tensors) -> Tensor:
        parts = [F.reshape(t, (-1,)) for t in tensors]
        if self.padded > self.total:
            parts.append(F.zeros((self.padded - self.total,), tensors[0].dtype))
        return F.concatenate(parts) if len(parts) > 1 else parts[0]

    def master_value(self, values: list, rank: int) -> np.ndarray:
        flat = np.concatenate([np.asarray(v).reshape(-1) for v in values])
        flat = np.pad(flat, (0, self.padded - self.total))
        return flat[rank * self.length:(rank + 1) * self.length]


def sharded_updates(dp, optimizer, loss: Tensor, params: list, kwargs: dict) -> dict:
    """`optimizer`'s updates with its state sharded over dp's processes (dp.zero 1 or 2)."""
    from ..autodiff import grad
    loc = user_location()
    for p in params:
        if not isinstance(p, Tensor) or p.node.op != "variable":
            raise GraphcError(f"DataParallel(zero={dp.zero}).optimize: parameters must be "
                              f"variables, got {p!r}", loc)
    if "grads" in kwargs:
        raise GraphcError("DataParallel.optimize computes the gradients itself; do not "
                          "pass grads=", loc)
    updates, shards = shard_optimizer(dp.zero, optimizer, params, grad(loss, params), kwargs,
                                      dp.world, None)
    dp.shards += shards
    return updates


def shard_optimizer(zero: int, optimizer, params: list, grads: list, kwargs: dict,
                    world: int, group: tuple | None) -> tuple[dict, list]:
    """The updates of `optimizer` on this process's shard of `params`, given each
    process's local gradients `grads` (averaged here over the `world` processes of
    `group`, None: all); and the Shards (what `initialize` fills per process)."""
    graph = params[0].graph
    on = {"group": tuple(group)} if group is not None else {}
    by_dtype: dict[str, list[int]] = {}
    for k, p in enumerate(params):
        by_dtype.setdefault(p.dtype, []).append(k)
    updates: dict = {}
    shards = []
    for dtype, members in by_dtype.items():
        shard = Shard([params[k] for k in members], world)
        flat_g = shard.flat([grads[k] for k in members])
        if zero == 2:
            g = bind("reduce_scatter", flat_g, axis=0, axis_size=world, **on) * (1.0 / world)
        else:
            mean = bind("all_reduce", flat_g, op="mean", axis_size=world, **on)
            with graph:
                rank = variable(np.zeros((1,), np.int32), name=graph.unique_name("zero/rank"))
            g = F.reshape(F.take(F.reshape(mean, (world, shard.length)), rank, axis=0),
                          (shard.length,))
            shard.sharded.append(rank.name)
        with graph:
            master = variable(np.zeros(shard.length, dtype),
                              name=graph.unique_name(f"zero/master/{dtype}"))
        shard.master = master.name
        step = optimizer(None, [master], grads=[g], **kwargs)
        new_master = step[master]
        for v in step:
            if v.shape == master.shape:
                shard.sharded.append(v.name)
        updates.update(step)
        full = bind("all_gather", new_master, axis=0, axis_size=world, **on)
        offset = 0
        for p in shard.params:
            n = int(p.size)
            updates[p] = F.reshape(full[offset:offset + n], p.shape)
            offset += n
        shard.sharded.append(master.name)
        shards.append(shard)
    return updates, shards


def initialize(shards: list, variables, index: int) -> None:
    """A process's per-process variables: its master shards of the (already equal)
    parameters, its index among the processes sharing the state (stage 1)."""
    for shard in shards:
        values = [dict.__getitem__(variables, p.name) for p in shard.params]
        dict.__getitem__(variables, shard.master)[...] = shard.master_value(values, index)
        for name in shard.sharded:
            if name.startswith("zero/rank"):
                dict.__getitem__(variables, name)[...] = index


def sharded_names(shards: list) -> set:
    return {name for shard in shards for name in shard.sharded}
