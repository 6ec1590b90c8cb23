"""Parameter initializers returning numpy arrays, for gc.variable.

Each call without a `seed` draws fresh numbers: layers of the same shape get different
weights. The draws come from one stream seeded by `seed_all(n)` (0 at import), so a
program that builds its layers in the same order gets the same weights in every run;
`seed=` fixes one call's numbers on their own.
"""
from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_stream = np.random.SeedSequence(0)


def seed_all(seed: int) -> None:
    """Restart the stream the initializers draw from when called without a seed."""
    global _stream
    with _lock:
        _stream = np.random.SeedSequence(int(seed))


def _rng(seed) -> np.random.Generator:
    if seed is not None:
        return np.random.default_rng(seed)
    with _lock:
        child = _stream.spawn(1)[0]
    return np.random.default_rng(child)


def _fans(shape) -> tuple[int, int]:
    shape = tuple(shape)
    if len(shape) == 2:                 # linear: (in, out)
        return shape[0], shape[1]
    if len(shape) >= 3:                 # conv: (out, in, *window)
        rf = int(np.prod(shape[2:]))
        return shape[1] * rf, shape[0] * rf
    n = shape[0] if shape else 1
    return n, n


def glorot_uniform(shape, seed: int | None = None, dtype="float32") -> np.ndarray:
    """Glorot/Xavier uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(shape)
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return _rng(seed).uniform(-a, a, shape).astype(dtype)


def he_normal(shape, seed: int | None = None, dtype="float32") -> np.ndarray:
    """He/Kaiming normal: N(0, 2 / fan_in), for ReLU layers."""
    fan_in, _ = _fans(shape)
    return (_rng(seed).standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(dtype)


def zeros(shape, dtype="float32") -> np.ndarray:
    return np.zeros(shape, dtype)
