"""Checking user-supplied arrays against a signature (shared by runtime and interpreter)."""
from __future__ import annotations

import numpy as np

from .device_array import DeviceArray
from .dims import is_symbolic
from .errors import FeedError


def check_array(label: str, value, shape: tuple, np_dtype: np.dtype, dtype_name: str,
                type_str: str) -> np.ndarray:
    """`value` as an ndarray if it has exactly `shape` and `np_dtype`, else FeedError."""
    if isinstance(value, np.generic):
        value = np.asarray(value)
    elif isinstance(value, DeviceArray):        # the CPU's own, or copied from a GPU
        value = value.host_view() if value.device == "cpu" else value.numpy()
    if not isinstance(value, np.ndarray):
        raise FeedError(f"input {label!r}: expected a numpy array {type_str}, got "
                        f"{type(value).__name__}")
    if value.shape != tuple(shape):
        raise FeedError(f"input {label!r}: expected shape {tuple(shape)}, got {value.shape}")
    if value.dtype != np_dtype:
        raise FeedError(f"input {label!r}: expected dtype {dtype_name}, got {value.dtype}")
    return value


def bind_inputs(names: list, args: tuple, kwargs: dict) -> list:
    """Positional and keyword arguments -> values in signature order (FeedError on
    missing, unknown or doubly given inputs)."""
    if len(args) > len(names):
        raise FeedError(f"expected at most {len(names)} positional inputs "
                        f"({', '.join(names)}), got {len(args)}")
    values = dict(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            known = ", ".join(names) or "none"
            raise FeedError(f"unknown input {k!r}; the inputs are: {known}")
        if k in values:
            raise FeedError(f"input {k!r} given both by position and by name")
        values[k] = v
    missing = [n for n in names if n not in values]
    if missing:
        raise FeedError(f"missing input {missing[0]!r}" +
                        (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    return [values[n] for n in names]


def bind_symbols(label: str, shape: tuple, value, env: dict) -> tuple:
    """The concrete shape the fed `value` (an array, a device array or anything else)
    must have for a declared `shape` of ints and symbols (`shape` itself when it has no
    symbol): each symbol takes its size from the first input that has it (recorded in
    `env` as {symbol: (size, input name)}); a later input giving it another size is a
    FeedError naming the symbol, both inputs and both sizes."""
    if not is_symbolic(shape):
        return shape
    got = getattr(value, "shape", None)
    got = tuple(got) if got is not None else None
    if got is None or len(got) != len(shape):
        return tuple(d if isinstance(d, int) else -1 for d in shape)   # check_array reports
    out = []
    for axis, (d, n) in enumerate(zip(shape, got)):
        if isinstance(d, int):
            out.append(d)
            continue
        (name,) = d.symbols()
        if n < 1:
            raise FeedError(f"input {label!r}: dimension {axis} is the symbol {name!r}, which "
                            f"stands for a size of at least 1; got {n}")
        if name in env and env[name][0] != n:
            size, first = env[name]
            raise FeedError(f"input {label!r}: dimension {axis} is the symbol {name!r}, which "
                            f"input {first!r} gave size {size}; {label!r} gives {n}")
        env.setdefault(name, (n, label))
        out.append(n)
    return tuple(out)


def sizes(env: dict) -> dict:
    """{symbol: size} of a bind_symbols environment."""
    return {k: v[0] for k, v in env.items()}
