"""dot_general (batched matmul with explicit contraction/batch dims) and conv (NC*spatial).

dot_general's result dims are: batch dims, lhs free dims, rhs free dims (as in XLA).
An int32 dot_general with packed_int8="us" (or "su") multiplies bytes: each int32 of
its operands packs four 8-bit integers (byte t of the word at position q of the
contracted axis is element 4q + t; "us": the lhs bytes unsigned, the rhs bytes signed;
"su" the other way round), and each term of a sum is the sum of a word pair's four byte
products: AVX512-VNNI's vpdpbusd, one contracted axis each side (gc.matmul_8bit packs
the words).
conv: lhs (N, C, *spatial), rhs (O, C/groups, *window), result (N, O, *out); window
strides, (low, high) padding per spatial dim (negative crops), lhs (input) dilation, rhs
(window) dilation and feature_group_count, like XLA's ConvGeneralDilated in NCHW/OIHW.
"""
from __future__ import annotations

import itertools

import numpy as np

from graphc_runtime import dims as sym
from graphc_runtime.errors import DTypeError, ShapeError

from .. import dtypes
from ..primitive import define


def _dims(attrs, key, ndim, side):
    dims = tuple(attrs[key])
    if any(not isinstance(d, int) or not 0 <= d < ndim for d in dims) or len(set(dims)) != len(dims):
        raise ShapeError(f"{key} {dims} are invalid for the {side} of rank {ndim}")
    return dims


def _dot_rule(inputs, attrs):
    lhs, rhs = inputs
    if lhs.dtype != rhs.dtype:
        raise DTypeError(f"operands must have equal dtypes, got {lhs.type_str()} and "
                         f"{rhs.type_str()}")
    if lhs.dtype == "bool":
        raise DTypeError("dot_general of bool operands; cast them first")
    lc = _dims(attrs, "lhs_contracting", lhs.ndim, "lhs")
    rc = _dims(attrs, "rhs_contracting", rhs.ndim, "rhs")
    lb = _dims(attrs, "lhs_batch", lhs.ndim, "lhs")
    rb = _dims(attrs, "rhs_batch", rhs.ndim, "rhs")
    if len(lc) != len(rc) or len(lb) != len(rb) or set(lc) & set(lb) or set(rc) & set(rb):
        raise ShapeError(f"contracting {lc}/{rc} and batch {lb}/{rb} dims do not pair up")
    for a, b in zip(lc, rc):
        if lhs.shape[a] != rhs.shape[b]:
            raise ShapeError(f"contracting dimension {a} of lhs {lhs.type_str()} (size "
                             f"{lhs.shape[a]}) differs from dimension {b} of rhs "
                             f"{rhs.type_str()} (size {rhs.shape[b]})")
    for a, b in zip(lb, rb):
        if lhs.shape[a] != rhs.shape[b]:
            raise ShapeError(f"batch dimension {a} of lhs {lhs.type_str()} differs from "
                             f"dimension {b} of rhs {rhs.type_str()}")
    packed = attrs.get("packed_int8")
    if packed and (packed not in PACKED_SIGNS or lhs.dtype != "int32" or len(lc) != 1):
        raise DTypeError(f"packed_int8={packed!r} needs int32 operands, one contracted "
                         f"axis each and is one of {tuple(PACKED_SIGNS)} (got "
                         f"{lhs.type_str()}, contracting {lc})")
    lfree = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    shape = ([lhs.shape[d] for d in lb] + [lhs.shape[d] for d in lfree]
             + [rhs.shape[d] for d in rfree])
    return tuple(shape), lhs.dtype


PACKED_SIGNS = {"us": (np.uint8, np.int8), "su": (np.int8, np.uint8)}   # lhs, rhs bytes


def _bytes(words: np.ndarray, axis: int, dtype) -> np.ndarray:
    """The 8-bit integers packed in int32 words along `axis` (four to a word, the low
    byte first), as int64 along that axis."""
    w = np.ascontiguousarray(np.moveaxis(words.astype("<i4", copy=False), axis, -1))
    values = w.view(dtype).reshape(w.shape[:-1] + (w.shape[-1] * 4,))
    return np.moveaxis(values.astype(np.int64), -1, axis)


def _dot_impl(args, attrs, node):
    lhs, rhs = args
    if attrs.get("packed_int8"):
        signs = PACKED_SIGNS[attrs["packed_int8"]]
        lhs = _bytes(lhs, attrs["lhs_contracting"][0], signs[0])
        rhs = _bytes(rhs, attrs["rhs_contracting"][0], signs[1])
    compute = dtypes.to_numpy(dtypes.compute_dtype(node.dtype))
    lhs, rhs = lhs.astype(compute, copy=False), rhs.astype(compute, copy=False)
    lc, rc = attrs["lhs_contracting"], attrs["rhs_contracting"]
    lb, rb = attrs["lhs_batch"], attrs["rhs_batch"]
    lfree = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    size = lambda x, ds: sym.prod([x.shape[d] for d in ds])
    b, m, k, n = size(lhs, lb), size(lhs, lfree), size(lhs, lc), size(rhs, rfree)
    l3 = np.transpose(lhs, list(lb) + lfree + list(lc)).reshape(b, m, k)
    r3 = np.transpose(rhs, list(rb) + list(rc) + rfree).reshape(b, k, n)
    out = np.matmul(l3, r3).reshape(node.shape)
    return out.astype(dtypes.to_numpy(node.dtype), copy=False)


def conv_output_size(n, k, stride, lo, hi, lhs_dil, rhs_dil):
    """Spatial output size of a conv along one dimension."""
    dilated_in = (n - 1) * lhs_dil + 1 if n > 0 else 0
    dilated_k = (k - 1) * rhs_dil + 1
    span = dilated_in + lo + hi - dilated_k
    return span // stride + 1 if span >= 0 else -1


def _conv_attrs(attrs, nsp):
    out = {}
    for key in ("window_strides", "lhs_dilation", "rhs_dilation"):
        v = tuple(attrs[key])
        if len(v) != nsp or any(not isinstance(s, int) or s < 1 for s in v):
            raise ShapeError(f"{key} {v} must be {nsp} positive integers")
        out[key] = v
    pad = tuple(tuple(p) for p in attrs["padding"])
    if len(pad) != nsp or any(len(p) != 2 for p in pad):
        raise ShapeError(f"padding {pad} must be {nsp} (low, high) pairs")
    out["padding"] = pad
    return out


def _conv_rule(inputs, attrs):
    lhs, rhs = inputs
    if lhs.dtype != rhs.dtype:
        raise DTypeError(f"input {lhs.type_str()} and kernel {rhs.type_str()} dtypes differ")
    if not dtypes.is_float(lhs.dtype):
        raise DTypeError(f"conv needs floating operands, got {lhs.dtype}")
    if lhs.ndim < 3 or rhs.ndim != lhs.ndim:
        raise ShapeError(f"input {lhs.type_str()} must be (N, C, *spatial) and kernel "
                         f"{rhs.type_str()} (O, C/groups, *window) of the same rank")
    nsp = lhs.ndim - 2
    a = _conv_attrs(attrs, nsp)
    groups = attrs["feature_group_count"]
    if not isinstance(groups, int) or groups < 1 or lhs.shape[1] % groups or rhs.shape[0] % groups:
        raise ShapeError(f"feature_group_count {groups!r} must divide the input channels "
                         f"{lhs.shape[1]} and output channels {rhs.shape[0]}")
    if rhs.shape[1] * groups != lhs.shape[1]:
        raise ShapeError(f"kernel {rhs.type_str()} expects {rhs.shape[1] * groups} input "
                         f"channels (with {groups} group(s)), input {lhs.type_str()} has "
                         f"{lhs.shape[1]}")
    out = [lhs.shape[0], rhs.shape[0]]
    for i in range(nsp):
        size = conv_output_size(lhs.shape[2 + i], rhs.shape[2 + i], a["window_strides"][i],
                                *a["padding"][i], a["lhs_dilation"][i], a["rhs_dilation"][i])
        if size < 0:
            raise ShapeError(f"window {rhs.shape[2 + i]} (dilation {a['rhs_dilation'][i]}) "
                             f"is larger than padded spatial dimension {i} of "
                             f"{lhs.type_str()}")
        out.append(size)
    return tuple(out), lhs.dtype


def _conv_impl(args, attrs, node):
    x, w = args
    compute = dtypes.to_numpy(dtypes.compute_dtype(node.dtype))
    x, w = x.astype(compute, copy=False), w.astype(compute, copy=False)
    strides, pad = attrs["window_strides"], attrs["padding"]
    ldil, rdil, groups = attrs["lhs_dilation"], attrs["rhs_dilation"], attrs["feature_group_count"]
    # dilate the input
    if any(d > 1 for d in ldil):
        shape = x.shape[:2] + tuple((n - 1) * d + 1 if n else 0 for n, d in zip(x.shape[2:], ldil))
        dil = np.zeros(shape, compute)
        dil[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in ldil)] = x
        x = dil
    # pad (positive) and crop (negative)
    x = np.pad(x, [(0, 0), (0, 0)] + [(max(lo, 0), max(hi, 0)) for lo, hi in pad])
    x = x[(slice(None), slice(None)) + tuple(
        slice(max(-lo, 0), x.shape[2 + i] - max(-hi, 0)) for i, (lo, hi) in enumerate(pad))]
    n, c = x.shape[:2]
    o = w.shape[0]
    out_sp = node.shape[2:]
    xg = x.reshape((n, groups, c // groups) + x.shape[2:])
    wg = w.reshape((groups, o // groups) + w.shape[1:])
    out = np.zeros((n, groups, o // groups) + out_sp, compute)
    for pos in itertools.product(*[range(k) for k in w.shape[2:]]):
        window = tuple(slice(p * d, p * d + (m - 1) * s + 1, s)
                       for p, d, m, s in zip(pos, rdil, out_sp, strides))
        patch = xg[(slice(None),) * 3 + window]                # n, g, c/g, *out
        kern = wg[(slice(None),) * 3 + pos]                    # g, o/g, c/g
        out += np.einsum("ngc...,goc->ngo...", patch, kern)
    return out.reshape(node.shape).astype(dtypes.to_numpy(node.dtype), copy=False)


define("dot_general", "dot", _dot_rule, _dot_impl, arity=2)
define("conv", "conv", _conv_rule, _conv_impl, arity=2)
