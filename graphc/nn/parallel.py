"""Tensor-parallel (Megatron-style) linear layers over MPI processes.

column_parallel_linear: each process holds a block of the weight's columns and computes
that block of the output (optionally all-gathered). row_parallel_linear: each process
holds a block of the weight's rows, multiplies its block of the input and the partial
products are summed with all_reduce. An MLP alternates them: column, activation, row.
Gradients: see graphc.distributed.TensorParallel.
"""
from __future__ import annotations

from .. import functions as F
from ..api import Tensor, bind
from ..distributed import size


def _over(group) -> tuple[int, dict]:
    """(number of processes, the collectives' group attribute) for `group` (None: all)."""
    if group is None:
        return size(), {}
    group = tuple(int(r) for r in group)
    return len(group), {"group": group}


def column_parallel_linear(x: Tensor, w_shard: Tensor, b_shard: Tensor | None = None,
                           gather_output: bool = False, group=None) -> Tensor:
    """x (replicated) @ w_shard (in, out/n) (+ b_shard): this process's block of columns;
    with gather_output, the full output (all_gather along the last axis). `group`: the
    world ranks sharing the layer (default all; e.g. a Mesh's tp_group)."""
    n, on = _over(group)
    y = F.matmul(x, w_shard)
    if b_shard is not None:
        y = y + b_shard
    if gather_output and n > 1:
        y = bind("all_gather", y, axis=y.ndim - 1, axis_size=n, **on)
    return y


def row_parallel_linear(x_shard: Tensor, w_shard: Tensor, b: Tensor | None = None,
                        group=None) -> Tensor:
    """all_reduce(x_shard @ w_shard (in/n, out)) (+ b, replicated): the full output."""
    n, on = _over(group)
    y = F.matmul(x_shard, w_shard)
    if n > 1:
        y = bind("all_reduce", y, op="sum", axis_size=n, **on)
    return y if b is None else y + b
