"""Parameter initializers returning numpy arrays (seeded), for gc.variable."""
from __future__ import annotations

import numpy as np


def _fans(shape) -> tuple[int, int]:
    shape = tuple(shape)
    if len(shape) == 2:                 # linear: (in, out)
        return shape[0], shape[1]
    if len(shape) >= 3:                 # conv: (out, in, *window)
        rf = int(np.prod(shape[2:]))
        return shape[1] * rf, shape[0] * rf
    n = shape[0] if shape else 1
    return n, n


def glorot_uniform(shape, seed: int = 0, dtype="float32") -> np.ndarray:
    """Glorot/Xavier uniform: U(-a, a), a = sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _fans(shape)
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return np.random.default_rng(seed).uniform(-a, a, shape).astype(dtype)


def he_normal(shape, seed: int = 0, dtype="float32") -> np.ndarray:
    """He/Kaiming normal: N(0, 2 / fan_in), for ReLU layers."""
    fan_in, _ = _fans(shape)
    return (np.random.default_rng(seed).standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(dtype)


def zeros(shape, dtype="float32") -> np.ndarray:
    return np.zeros(shape, dtype)
