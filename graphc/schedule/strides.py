"""Whether a chain of views reads its buffer as a strided array: the strides a consumer
sees through transposes, slices, reversals, broadcasts and reshapes (numpy's rule for a
reshape without a copy), or None where no strides give it (a reshape that merges
dimensions that are not adjacent in memory, such as attention heads transposed back
and flattened). A product whose operand is such a view is read element by element, far
from the GEMM kernels' speed; fusion writes the view out first instead."""
from __future__ import annotations

from graphc_runtime.dims import hint


def view_strides(node, in_memory) -> list | None:
    """Strides (elements) of `node` read in place from the first node under its views for
    which `in_memory(node)` holds (a contiguous buffer), or None."""
    if in_memory(node) or not node.inputs:
        return contiguous(node.shape)
    x = node.inputs[0]
    inner = view_strides(x, in_memory)
    if inner is None:
        return None
    attrs = node.attrs
    if node.op == "transpose":
        return [inner[p] for p in attrs["permutation"]]
    if node.op == "slice":
        return [s * st for s, st in zip(inner, attrs["strides"])]
    if node.op == "reverse":
        return [-s if d in attrs["dimensions"] else s for d, s in enumerate(inner)]
    if node.op == "broadcast_in_dim":
        out = [0] * len(node.shape)
        for i, d in enumerate(attrs["broadcast_dimensions"]):
            out[d] = inner[i] if hint(x.shape[i]) == hint(node.shape[d]) else 0
        return out
    if node.op == "reshape":
        return reshape_strides([hint(s) for s in x.shape], inner,
                               [hint(s) for s in node.shape])
    return None


def contiguous(shape) -> list:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(hint(size), 1)
    return strides[::-1]


def reshape_strides(old: list, strides: list, new: list) -> list | None:
    """The strides of `old` (with `strides`) reshaped to `new` without a copy, or None:
    runs of old and new dimensions with equal products, each old run contiguous."""
    keep = [(n, s) for n, s in zip(old, strides) if n != 1]
    o_shape, o_strides = [n for n, _ in keep], [s for _, s in keep]
    out, i, j = [], 0, 0
    new_real = [n for n in new if n != 1]
    while i < len(o_shape) and j < len(new_real):
        i1, j1, po, pn = i + 1, j + 1, o_shape[i], new_real[j]
        while po != pn:
            if po < pn:
                if i1 == len(o_shape):
                    return None
                po *= o_shape[i1]
                i1 += 1
            else:
                if j1 == len(new_real):
                    return None
                pn *= new_real[j1]
                j1 += 1
        for k in range(i, i1 - 1):                  # the old run must be one block
            if o_strides[k] != o_strides[k + 1] * o_shape[k + 1]:
                return None
        step = o_strides[i1 - 1]
        run = []
        for k in range(j1 - 1, j - 1, -1):
            run.append(step)
            step *= new_real[k]
        out += run[::-1]
        i, j = i1, j1
    if i != len(o_shape) or j != len(new_real):
        return None
    result, it = [], iter(out)
    for n in new:
        result.append(0 if n == 1 else next(it))
    return result
