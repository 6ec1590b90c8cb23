"""Keyed, counter-based random numbers (the rng primitive, Threefry-2x32).

A key is an int32[2] tensor. The same key gives the same numbers on every backend;
`split` and `fold_in` derive new, independent keys.
"""
from __future__ import annotations

import numpy as np

from .api import Tensor, _shape_tuple, bind, constant
from .functions.elementwise import _as, bitwise_xor
from .ir import dtypes

_SPLIT_TWEAK = np.array([0x2F6B1D5D, 0x51A7E0C3], np.int32)


def key(seed: int) -> Tensor:
    """A constant key from an integer seed."""
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    words = np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint64).astype(np.uint32).view(np.int32)
    return constant(words)


def key_array(seed: int) -> np.ndarray:
    """The numpy value of `key(seed)`, e.g. to initialize a key variable."""
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    return np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint64).astype(np.uint32).view(np.int32)


def bits(key, shape) -> Tensor:
    return bind("rng", _as(key), shape=_shape_tuple(shape, "bits"), dtype="int32",
                distribution="bits")


def split(key, num: int = 2) -> Tensor:
    """`num` new keys, shape (num, 2), independent of numbers drawn from `key` itself."""
    tweaked = bitwise_xor(_as(key), constant(_SPLIT_TWEAK, graph=_as(key).graph))
    return bits(tweaked, (num, 2))


def fold_in(key, data: int) -> Tensor:
    """A new key determined by `key` and the integer `data`."""
    k = _as(key)
    mixed = bitwise_xor(k, constant(np.array([int(data) & 0x7FFFFFFF, 0x3C6EF372], np.int32),
                                    graph=k.graph))
    return bits(mixed, (2,))


def uniform(key, shape, dtype="float32", minval=0.0, maxval=1.0) -> Tensor:
    """Uniform numbers in [minval, maxval)."""
    u = bind("rng", _as(key), shape=_shape_tuple(shape, "uniform"),
             dtype=dtypes.canonical(dtype), distribution="uniform")
    if (minval, maxval) != (0.0, 1.0):
        u = u * (maxval - minval) + minval
    return u


def normal(key, shape, dtype="float32") -> Tensor:
    """Standard normal numbers (Box-Muller)."""
    return bind("rng", _as(key), shape=_shape_tuple(shape, "normal"),
                dtype=dtypes.canonical(dtype), distribution="normal")


def bernoulli(key, p: float, shape) -> Tensor:
    """Bool tensor, True with probability p."""
    return uniform(key, shape) < p
