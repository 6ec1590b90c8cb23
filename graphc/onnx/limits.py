"""An ONNX file is untrusted input: what importing one may allocate, and how every failure
of a converter becomes a ModelError naming the node.

A 300-byte file can ask for a constant of any size:

- A value computed at import (ConstantOfShape, Range, Tile of constants...) is made a
  numpy constant only up to MAX_IMPORT_BYTES; a larger one stays a graph operation,
  computed when the program runs (a broadcast or a ramp costs nothing to store).
- A size past ADDRESS_SPACE_BYTES (x86-64 and AArch64 user space: 2^47 bytes) can never
  be allocated: it is refused with a ModelError naming the node, before anything is
  allocated.
- ONNX's own shape inference is not run on a model it would crash on (inference_safe).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import GraphcError

import graphc as gc
from graphc.ir import dtypes

from .errors import ModelError

MAX_IMPORT_BYTES = 64 << 20
ADDRESS_SPACE_BYTES = 1 << 47


def nbytes(shape, dtype) -> int | None:
    """Bytes of a static shape of `dtype` (numpy or graphc name); None if symbolic."""
    count = 1
    for d in shape:
        if not isinstance(d, (int, np.integer)):
            return None
        count *= int(d)
    return count * np.dtype(_numpy(dtype)).itemsize


def check_size(shape, dtype, what: str) -> int | None:
    """nbytes(shape, dtype), or a ModelError where no address space can hold it."""
    if any(isinstance(d, (int, np.integer)) and d < 0 for d in shape):
        raise ModelError(f"{what} has a negative size in its shape {tuple(shape)}")
    size = nbytes(shape, dtype)
    if size is not None and size > ADDRESS_SPACE_BYTES:
        raise ModelError(f"{what} of shape {tuple(int(d) for d in shape)} would take "
                         f"{size / 2**40:.3g} TiB, more than any address space holds")
    return size


def fits_in_import(shape, dtype, what: str) -> bool:
    """Whether a value of this shape may be computed at import (else: a graph op)."""
    size = check_size(shape, dtype, what)
    return size is not None and size <= MAX_IMPORT_BYTES


def _numpy(dtype):
    if isinstance(dtype, str):
        try:
            return dtypes.to_numpy(dtypes.canonical(dtype))
        except Exception:      # noqa: BLE001 - a numpy name
            return np.dtype(dtype)
    return dtype


# what a converter raises on a value out of its range (a division by a zero stride, an
# index past a list): the model is malformed, and the error names the node
_MALFORMED = (ArithmeticError, IndexError, KeyError, ValueError, TypeError, MemoryError,
              OverflowError, RecursionError)


def converted(ctx, convert, args, attrs) -> list:
    """The converter's results as a list; every failure is a GraphcError naming the node,
    and no result may be larger than an address space."""
    try:
        outs = convert(ctx, args, attrs)
    except ModelError as e:
        if e.bare_message.startswith(ctx.where()):
            raise
        raise ModelError(f"{ctx.where()}: {e.bare_message}") from None
    except GraphcError:
        raise
    except _MALFORMED as e:
        raise ModelError(f"{ctx.where()}: the node cannot be imported: "
                         f"{type(e).__name__}: {e}") from e
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for k, o in enumerate(outs):
        if isinstance(o, gc.Tensor):
            try:
                check_size(o.shape, o.dtype, f"output #{k}")
            except ModelError as e:
                raise ModelError(f"{ctx.where()}: {e.bare_message}") from None
    return outs


# integer attributes that ONNX's C++ shape inference divides by: at 0 or below, onnx
# 1.17 dies of SIGFPE (strides of Conv and the pools); such a model is refused by the
# converters with a ModelError instead, so inference is not run on it
_DIVISOR_ATTRIBUTES = ("strides", "dilations", "kernel_shape", "group", "blocksize")


def inference_safe(graph) -> bool:
    """No node (in subgraphs too) has a divisor attribute below 1."""
    for node in graph.node:
        for a in node.attribute:
            if a.name in _DIVISOR_ATTRIBUTES and (any(v < 1 for v in a.ints) or
                                                  a.type == a.INT and a.i < 1):
                return False
            if a.type == a.GRAPH and not inference_safe(a.g):
                return False
            if a.type == a.GRAPHS and not all(inference_safe(g) for g in a.graphs):
                return False
    return True
