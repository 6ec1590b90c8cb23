"""gc.function: trace a Python function once per input signature, compile, cache."""
from __future__ import annotations

import functools
import inspect

import numpy as np

from graphc_runtime.errors import GraphcError

from .api import placeholder
from .ir import dtypes
from .ir.graph import Graph


def function(fn=None, *, device: str = "cpu", dims: dict | None = None, **compile_options):
    """Decorator: `f(*arrays)` traces `fn` with placeholders of the arrays' shapes and
    dtypes, compiles the result (a Tensor, list or dict) and caches the executable per
    signature. Non-array arguments are static: each distinct value is its own trace.

    `dims` makes axes symbolic: {argument: (entry per axis)}, a str entry naming the
    symbol that axis is (shared by every argument that names it), None keeping the
    array's size. One trace then serves every size of the symbols: it is redone only
    when a rank, a dtype or a fixed size changes."""
    if fn is None:
        return lambda f: function(f, device=device, dims=dims, **compile_options)
    signature = inspect.signature(fn)
    cache: dict = {}
    dims = dict(dims or {})
    unknown = set(dims) - set(signature.parameters)
    if unknown:
        raise GraphcError(f"{fn.__name__}: dims names {', '.join(sorted(unknown))}, which "
                          f"{'is' if len(unknown) == 1 else 'are'} not an argument")

    def traced_shape(name, shape):
        spec = dims.get(name)
        if spec is None:
            return shape
        spec = tuple(spec)
        if len(spec) != len(shape):
            raise GraphcError(f"{fn.__name__}: argument {name!r} has {len(shape)} axes, dims "
                              f"declares {len(spec)} ({spec})")
        return tuple(d if isinstance(d, str) else n for d, n in zip(spec, shape))

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        key, arrays = [], {}
        for name, value in bound.arguments.items():
            if isinstance(value, (np.ndarray, np.generic)):
                value = np.asarray(value)
                key.append((name, traced_shape(name, value.shape),
                            dtypes.canonical(value.dtype)))
                arrays[name] = value
            else:
                try:
                    hash(value)
                except TypeError:
                    raise GraphcError(f"{fn.__name__}: argument {name!r} is neither an array "
                                      f"nor hashable, so it cannot be traced") from None
                key.append((name, "static", value))
        key = tuple(key)
        exe = cache.get(key)
        if exe is None:
            from .compiler import compile as compile_
            graph = Graph(fn.__name__)
            with graph:
                traced = {name: placeholder(traced_shape(name, a.shape),
                                            dtypes.canonical(a.dtype), name=name)
                          for name, a in arrays.items()}
                call_args = {name: traced.get(name, value)
                             for name, value in bound.arguments.items()}
                out = fn(**call_args)
                exe = compile_(out, inputs=list(traced.values()), device=device,
                               **compile_options)
            cache[key] = exe
        return exe(**arrays)

    wrapper.cache = cache
    return wrapper
