"""rng: counter-based random numbers (Threefry-2x32, 20 rounds), keyed by an int32[2].

Element i (row-major) of the result is a pure function of (key, i): the same key gives the
same numbers on every backend and thread count. distribution is 'uniform' ([0, 1), float),
'normal' (Box-Muller, float) or 'bits' (raw int32).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import DTypeError, ShapeError

from .. import dtypes
from ..primitive import define

ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
KS_PARITY = 0x1BD11BDA
# significant bits a uniform of each dtype carries (exactly representable, never 1.0)
MANTISSA_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
DISTRIBUTIONS = ("uniform", "normal", "bits")


def threefry2x32(k0, k1, c0, c1):
    """Threefry-2x32-20 of counters (c0, c1) under key (k0, k1); uint32 arrays."""
    u32 = np.uint32
    ks = (u32(k0), u32(k1), u32(k0) ^ u32(k1) ^ u32(KS_PARITY))
    with np.errstate(over="ignore"):
        x0, x1 = c0 + ks[0], c1 + ks[1]
        for block in range(5):
            for r in ROTATIONS[4 * (block % 2): 4 * (block % 2) + 4]:
                x0 = x0 + x1
                x1 = (x1 << u32(r)) | (x1 >> u32(32 - r))
                x1 = x1 ^ x0
            x0 = x0 + ks[(block + 1) % 3]
            x1 = x1 + ks[(block + 2) % 3] + u32(block + 1)
    return x0, x1


def random_words(key: np.ndarray, size: int):
    """The two uint32 words for counters 0..size-1."""
    k = np.asarray(key).astype(np.int64).astype(np.uint32)
    counter = np.arange(size, dtype=np.uint64)
    c0 = (counter & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    c1 = (counter >> np.uint64(32)).astype(np.uint32)
    return threefry2x32(k[0], k[1], c0, c1)


def _rng_rule(inputs, attrs):
    (key,) = inputs
    if key.shape != (2,) or key.dtype != "int32":
        raise DTypeError(f"key must be i32[2], got {key.type_str()}")
    dist, dtype, shape = attrs["distribution"], attrs["dtype"], attrs["shape"]
    if dist not in DISTRIBUTIONS:
        raise ShapeError(f"distribution must be one of {DISTRIBUTIONS}, got {dist!r}")
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise ShapeError(f"shape must be non-negative integers, got {shape!r}")
    if dist == "bits" and dtype != "int32":
        raise DTypeError(f"'bits' produce int32, not {dtype}")
    if dist != "bits" and not dtypes.is_float(dtype):
        raise DTypeError(f"{dist} numbers must be a float dtype, not {dtype}")
    return shape, dtype


def uniform_from_words(w0, w1, dtype: str) -> np.ndarray:
    bits = MANTISSA_BITS[dtype]
    if bits <= 32:
        return (w0 >> np.uint32(32 - bits)).astype(np.float64) * 2.0 ** -bits
    hi = (w0 >> np.uint32(5)).astype(np.float64)      # 27 bits
    lo = (w1 >> np.uint32(6)).astype(np.float64)      # 26 bits
    return (hi * 2.0 ** 26 + lo) * 2.0 ** -53


def _rng_impl(args, attrs, node):
    (key,) = args
    size = node.size
    w0, w1 = random_words(key, size)
    dist, dtype = attrs["distribution"], node.dtype
    if dist == "bits":
        out = w0.view(np.int32)
    elif dist == "uniform":
        out = uniform_from_words(w0, w1, dtype)
    else:
        if dtype == "float64":
            compute = np.float64
            u1 = (w0.astype(np.float64) + 1) * 2.0 ** -32                       # (0, 1]
            u2 = w1.astype(np.float64) * 2.0 ** -32                             # [0, 1)
        else:
            compute = np.float32
            u1 = ((w0 >> np.uint32(8)).astype(np.float32) + 1) * np.float32(2.0 ** -24)
            u2 = (w1 >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
        out = np.sqrt(-2 * np.log(u1)) * np.cos(compute(2 * np.pi) * u2)
    return np.asarray(out).astype(dtypes.to_numpy(dtype)).reshape(node.shape)


define("rng", "rng", _rng_rule, _rng_impl, arity=1, differentiable=False, cost=40)
