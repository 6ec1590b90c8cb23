"""The CPU executor: loads an executable's native object code and runs it.

It owns the arena (64-byte aligned), the variables and the constants, checks and binds
the inputs, and runs the whole program with one native call. Calls are serialized by a
lock (variables are updated in place), so an executable is safe to share between threads.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import time
import weakref

import numpy as np

from . import blas, collectives, dims, forks, objects, openmp, point_to_point, pool
from .host import grant_amx, host_features, host_target_machine, llvm  # noqa: F401 (re-exported)
from .dtypes import NUMPY, type_str
from .errors import CompileError, FeedError
from .feeds import bind_inputs, bind_symbols, check_array, sizes

ENTRY_ABI = 2     # graphc_entry returns i32: 0 after a run, k+1 if input k overlaps the
                  # arena or a variable (then nothing ran); the object code says which
                  # contract it has in its `graphc_entry_abi` global
def _numpy_data_offset_ok() -> bool:
    """Does numpy's array struct keep the data pointer where graphc_entry reads it?"""
    probe = np.arange(3.0)
    try:
        return ctypes.c_void_p.from_address(id(probe) + 16).value == probe.ctypes.data
    except (ValueError, OSError):
        return False


def _overlaps(a: np.ndarray, ranges: list) -> bool:
    """Does contiguous `a` share a byte with any (address, nbytes) range?"""
    start, end = a.ctypes.data, a.ctypes.data + a.nbytes
    return a.nbytes > 0 and any(lo < end and start < lo + n for lo, n in ranges if n)


def _refcount(cache: list, k: int) -> int:
    """References to cache[k], counted from the same code position every time."""
    value = cache[k]
    return sys.getrefcount(value)


_ONLY_CACHED = _refcount([np.empty(0)], 0)    # the count when only the cache refers to it


def aligned_empty(nbytes: int, align: int = 64) -> np.ndarray:
    raw = np.empty(nbytes + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + nbytes]


class VariableStore(dict):
    """name -> live array of an executable's variables. Assigning copies the new value
    into the existing array (after checking shape and dtype), so compiled code that holds
    the array's address keeps seeing the current value."""

    def __setitem__(self, name, value):
        if name not in self:
            raise KeyError(f"no variable {name!r}; variables: {', '.join(self)}")
        current = dict.__getitem__(self, name)
        value = np.asarray(value)
        if value.shape != current.shape or value.dtype != current.dtype:
            raise FeedError(f"variable {name!r}: expected shape {current.shape} and dtype "
                            f"{current.dtype}, got {value.shape} {value.dtype}")
        current[...] = value

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def __delitem__(self, name):
        raise TypeError("variables cannot be removed from a compiled executable")

    def pop(self, *args):
        raise TypeError("variables cannot be removed from a compiled executable")


class Signature:
    """Names, shapes and dtype names of an executable's inputs, outputs and variables;
    `symbols`, the names of the symbolic dimensions in the order the native code takes
    their values (shapes hold ints and Dims)."""

    def __init__(self, inputs, outputs, variables, symbols=()):
        self.inputs = [(n, tuple(s), d) for n, s, d in inputs]
        self.outputs = [(n, tuple(s), d) for n, s, d in outputs]
        self.variables = [(n, tuple(s), d) for n, s, d in variables]
        self.symbols = list(symbols)

    def to_json(self) -> dict:
        out = {k: [[n, list(s), d] for n, s, d in getattr(self, k)]
               for k in ("inputs", "outputs", "variables")}
        if self.symbols:
            out["symbols"] = list(self.symbols)
        return out

    @classmethod
    def from_json(cls, data: dict) -> "Signature":
        return cls(**{k: [(n, tuple(dims.as_dim(x) for x in s), d) for n, s, d in data[k]]
                      for k in ("inputs", "outputs", "variables")},
                   symbols=data.get("symbols", ()))


class CpuProgram:
    """Native code loaded for execution: `run(args, kwargs)` -> list of output arrays.

    `object_code` is a relocatable object file for the host, or several packed by
    objects.py (what the compiler produced, or what an artifact holds); loading it runs
    no optimizer.
    """

    def __init__(self, object_code: bytes, signature: Signature, arena_bytes: int,
                 variables: dict, constants: list, collectives: list | None = None):
        b = llvm()
        self.signature = signature
        self.object_code = bytes(object_code)
        blas.require(self.object_code)
        grant_amx(self.object_code)
        blas.register(b)
        self.target_machine = host_target_machine(0)
        self.engine = b.create_mcjit_compiler(b.parse_assembly(""), self.target_machine)
        try:
            for code in objects.unpack(self.object_code):
                self.engine.add_object_file(b.ObjectFileRef.from_data(code))
            self.engine.finalize_object()
            address = self.engine.get_function_address("graphc_main")
        except Exception as e:                       # llvmlite raises plain RuntimeErrors
            raise CompileError(f"cannot load the native code: {e}") from None
        if not address:
            raise CompileError("the native code has no graphc_main")
        self.on_pool = pool.bind(self.engine, self)        # split kernels on the pool
        self.openmp = openmp.bind(self.engine, self)       # code from before the pool
        self._main = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        n_obj = len(signature.inputs) + len(signature.outputs)
        entry = self.engine.get_function_address("graphc_entry")
        self._entry = None
        self.collectives = list(collectives or [])
        self._segments = [ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
            self.engine.get_function_address(f"graphc_segment_{k}"))
            for k in range(len(self.collectives) + 1)] if self.collectives else []
        abi = self.engine.get_global_value_address("graphc_entry_abi")
        if entry and abi and ctypes.c_int32.from_address(abi).value == ENTRY_ABI and \
                _numpy_data_offset_ok() and not self.collectives:
            self._entry = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p,
                                           *([ctypes.py_object] * n_obj))(entry)
        # a symbolic program sizes its arena at the call (kept for the largest size seen)
        self.arena_size = arena_bytes if isinstance(arena_bytes, dims.Dim) else None
        self.arena_bytes = 0 if self.arena_size is not None else int(arena_bytes)
        self.arena = aligned_empty(max(self.arena_bytes, 64))
        self._dims = (ctypes.c_int64 * max(len(signature.symbols), 1))()
        store = {}
        for name, shape, dtype in signature.variables:
            value = np.array(variables[name], dtype=NUMPY[dtype], order="C", copy=True)
            if value.shape != shape:
                raise FeedError(f"variable {name!r}: expected shape {shape}, got {value.shape}")
            store[name] = value
        self.variables = VariableStore(store)
        self.constants = [np.ascontiguousarray(c) for c in constants]
        self.poison_arena = False
        self.last_sizes: dict = {}         # the symbols' sizes at the last call
        self.lock = threading.Lock()
        forks.guard(self)                  # the lock is free again in a forked child
        n = 1 + len(signature.inputs) + len(signature.outputs) + len(signature.variables) + \
            len(self.constants) + (1 if signature.symbols else 0)
        self._table = (ctypes.c_void_p * n)()
        self._fixed = (ctypes.c_void_p * n)()      # arena, variables, constants: stable
        k = 1 + len(signature.inputs) + len(signature.outputs)
        self._fixed[0] = self.arena.ctypes.data
        for name in self.variables:
            self._fixed[k] = dict.__getitem__(self.variables, name).ctypes.data
            k += 1
        for c in self.constants:
            self._fixed[k] = c.ctypes.data
            k += 1
        if signature.symbols:            # the last slot: the symbols' values (int64[])
            self._fixed[n - 1] = self._table[n - 1] = ctypes.addressof(self._dims)
        self._fixed_address = ctypes.addressof(self._fixed)
        # memory the program writes: an input overlapping it is copied first
        self._written = [(self.arena.ctypes.data, self.arena_bytes)] + \
            [(v.ctypes.data, v.nbytes) for v in dict.values(self.variables)]
        self._names = [e[0] for e in signature.inputs]
        # recycle only large results: small ones are cheap to allocate
        self._recycle = sum(dims.hint(dims.prod(s)) * NUMPY[d].itemsize
                            for _, s, d in signature.outputs) >= (1 << 20)
        self._recycled = [None] * len(signature.outputs)
        self._inputs = [(name, shape, NUMPY[d], d, type_str(shape, d))
                        for name, shape, d in signature.inputs]
        self._outputs = [(shape, NUMPY[d]) for _, shape, d in signature.outputs]
        if signature.symbols:
            self._prepare_symbolic()

    def adopt_variables(self, arrays: dict) -> None:
        """Use `arrays` (name -> array of the same shape and dtype, e.g. another program's
        live variables) as this program's variables of those names: programs that run
        different steps of one model (a pipeline stage's forward, backward and update)
        then read and write one copy."""
        with self.lock:
            first = 1 + len(self.signature.inputs) + len(self.signature.outputs)
            for k, name in enumerate(self.variables):
                if name not in arrays:
                    continue
                mine, theirs = dict.__getitem__(self.variables, name), arrays[name]
                if not isinstance(theirs, np.ndarray) or theirs.shape != mine.shape or \
                        theirs.dtype != mine.dtype or not theirs.flags.c_contiguous:
                    raise FeedError(f"variable {name!r}: cannot share an array other than "
                                    f"a C-contiguous {mine.dtype} {mine.shape}")
                dict.__setitem__(self.variables, name, theirs)
                self._fixed[first + k] = theirs.ctypes.data
            self._written[1:] = [(v.ctypes.data, v.nbytes) for v in dict.values(self.variables)]

    def profile_timestamps(self):
        """(kernels [K, 3]: start, end, CPU ns of the calling thread; chunks [K, C, 4]:
        start, end, thread, CPU ns) int64 nanoseconds (CLOCK_MONOTONIC; CPU time by
        CLOCK_THREAD_CPUTIME_ID) of the last call of a profiling build (see
        graphc.backends.cpu.profiling), or None for a normal build. Zeros mark what did
        not run."""
        shape = self.engine.get_global_value_address("graphc_profile_shape")
        if not shape:
            return None
        k, c = (ctypes.c_int64 * 2).from_address(shape)
        kernels = np.ctypeslib.as_array((ctypes.c_int64 * (3 * max(k, 1))).from_address(
            self.engine.get_global_value_address("graphc_profile_kernels")))
        chunks = np.ctypeslib.as_array((ctypes.c_int64 * (4 * max(k, 1) * c)).from_address(
            self.engine.get_global_value_address("graphc_profile_chunks")))
        return kernels[:3 * k].reshape(k, 3), chunks[:4 * k * c].reshape(k, c, 4)

    def run(self, args: tuple, kwargs: dict) -> list:
        if not self.on_pool:
            return self._dispatch(args, kwargs)
        start = time.monotonic()
        try:
            return self._dispatch(args, kwargs)
        finally:
            self._pool.watch(start, time.monotonic())

    def _dispatch(self, args: tuple, kwargs: dict) -> list:
        if self._entry is not None and not self.poison_arena:
            if kwargs and not args and len(kwargs) == len(self._names):
                try:
                    return self._run_fast(tuple([kwargs[n] for n in self._names]))
                except KeyError:
                    pass                      # an unknown name: the slow path reports it
            elif not kwargs and len(args) == len(self._names):
                return self._run_fast(args)
        return self._run(bind_inputs(self._names, args, kwargs))

    def _prepare_symbolic(self) -> None:
        """Per input, (fixed sizes by axis, symbol index by axis); per output, its shape
        as ints and symbol indices where possible (else the Dim): the fast path's plan."""
        index = {s: k for k, s in enumerate(self.signature.symbols)}

        def plan(shape):     # ints stay, ("s", k) is symbol k, other Dims are evaluated
            return tuple(("s", index[str(d)]) if isinstance(d, dims.Dim) and str(d) in index
                         else d for d in shape)
        self._sym_inputs = [(NUMPY[dt], len(shape),
                             tuple((a, d) for a, d in enumerate(shape) if isinstance(d, int)),
                             tuple((a, index[str(d)]) for a, d in enumerate(shape)
                                   if isinstance(d, dims.Dim)))
                            for _, shape, dt in self.signature.inputs]
        self._sym_unset = [0] * len(self.signature.symbols)
        self._sym_outputs = [(plan(shape), NUMPY[d]) for _, shape, d in self.signature.outputs]
        self._sym_last = None           # (sizes, output shapes) of the last call

    def _run_fast_symbolic(self, args: tuple) -> list:
        """The fast path of a program with symbolic dims: sizes read off the arrays
        inline (anything unusual goes the checked way), one native call."""
        found = self._sym_unset[:]
        for value, (npd, ndim, fixed, symbolic) in zip(args, self._sym_inputs):
            if type(value) is not np.ndarray or value.ndim != ndim or \
                    (value.dtype is not npd and value.dtype != npd) or \
                    not value.flags.c_contiguous:
                return self._run(list(args))
            shape = value.shape
            for a, d in fixed:
                if shape[a] != d:
                    return self._run(list(args))
            for a, k in symbolic:
                if found[k] == 0:
                    found[k] = shape[a]
                elif found[k] != shape[a]:
                    return self._run(list(args))
        key = tuple(found)
        if 0 in key:                      # an empty size: the checked path decides
            return self._run(list(args))
        with self.lock:
            last = self._sym_last
            if last is None or last[0] != key:
                env = dict(zip(self.signature.symbols, key))
                outputs = [(tuple(d if type(d) is int else key[d[1]] if type(d) is tuple
                                  else d.evaluate(env) for d in plan), npd)
                           for plan, npd in self._sym_outputs]
                self._bind_sizes(env)
                self.last_sizes = env
                self._sym_last = last = (key, outputs)
            outs = [np.empty(shape, npd) for shape, npd in last[1]]
            arrays = list(args)
            clash = self._entry(self._fixed_address, *arrays, *outs)
            while clash:
                arrays[clash - 1] = arrays[clash - 1].copy()
                clash = self._entry(self._fixed_address, *arrays, *outs)
        return outs

    def _run_fast(self, args: tuple) -> list:
        """Positional call: checks inline, one native call through graphc_entry."""
        if self.signature.symbols:
            return self._run_fast_symbolic(args)
        arrays = []
        for value, (name, shape, npd, dname, tstr) in zip(args, self._inputs):
            if type(value) is not np.ndarray or value.shape != shape or value.dtype != npd \
                    or not value.flags.c_contiguous:
                value = np.ascontiguousarray(check_array(name, value, shape, npd, dname, tstr))
            arrays.append(value)
        with self.lock:
            outs = self._fresh_outputs()
            clash = self._entry(self._fixed_address, *arrays, *outs)
            while clash:              # input clash-1 shares memory the program writes
                arrays[clash - 1] = arrays[clash - 1].copy()
                clash = self._entry(self._fixed_address, *arrays, *outs)
        return outs

    def _fresh_outputs(self) -> list:
        """Arrays for this call's results (called under the lock). A large result of an
        earlier call is reused when nothing but this executable's private cache refers
        to it (no caller's name, container, view or weak reference): that skips the page
        faults of new memory. The list handed out is never the cache itself, so a result
        on its way back to a caller always has a second reference."""
        outs = []
        cache = self._recycled
        for k, (shape, npd) in enumerate(self._outputs):
            if cache[k] is not None and _refcount(cache, k) == _ONLY_CACHED and \
                    not weakref.getweakrefcount(cache[k]):
                outs.append(cache[k])
            else:
                outs.append(np.empty(shape, npd))
        if self._recycle:
            self._recycled = list(outs)
        return outs

    def _bind(self, values: list):
        """(input arrays, {symbol: size}): the feeds checked against the signature, the
        symbols bound from them (a FeedError when two inputs disagree on one)."""
        env: dict = {}
        arrays = []
        for value, (name, shape, npd, dname, tstr) in zip(values, self._inputs):
            shape = bind_symbols(name, shape, value, env)
            arrays.append(np.ascontiguousarray(check_array(name, value, shape, npd, dname,
                                                           tstr)))
        return arrays, sizes(env)

    def _bind_sizes(self, env: dict) -> None:
        """Hand the symbols' sizes to the native code (the table's last slot) and grow
        the arena to this call's size (under the lock)."""
        for k, name in enumerate(self.signature.symbols):
            self._dims[k] = env[name]
        self._sym_last = None            # the fast path's cached sizes are stale now
        if self.arena_size is None:
            return
        need = self.arena_size.evaluate(env)
        if need > self.arena_bytes:
            self.arena = aligned_empty(need)
            self.arena_bytes = need
            self._fixed[0] = self.arena.ctypes.data
            self._written[0] = (self.arena.ctypes.data, need)

    def _run(self, values: list) -> list:
        arrays, env = self._bind(values)
        if env:
            outs = [np.empty(dims.concrete_shape(shape, env), npd)
                    for shape, npd in self._outputs]
        else:
            outs = [np.empty(shape, npd) for shape, npd in self._outputs]
        with self.lock:
            self.last_sizes = env
            if self.signature.symbols:
                self._bind_sizes(env)
            arrays = [a.copy() if _overlaps(a, self._written) else a for a in arrays]
            table = self._table
            if self.poison_arena:
                self.arena.fill(0xFF)          # NaN in every float format
            table[0] = self.arena.ctypes.data
            k = 1
            for a in arrays + outs:
                table[k] = a.ctypes.data
                k += 1
            for name in self.variables:
                table[k] = dict.__getitem__(self.variables, name).ctypes.data
                k += 1
            for c in self.constants:
                table[k] = c.ctypes.data
                k += 1
            if not self.collectives:
                self._main(ctypes.cast(table, ctypes.c_void_p))
                return outs
            by_slot = [self.arena] + arrays + outs + list(self.variables.values()) + \
                self.constants
            for segment, step in zip(self._segments, self.collectives + [None]):
                segment(ctypes.cast(table, ctypes.c_void_p))
                if step is not None:
                    run = point_to_point.run if step["op"] in point_to_point.OPS else \
                        collectives.run
                    run(step["op"], step["attrs"], self._view(step["src"], by_slot),
                        self._view(step["dst"], by_slot))
        return outs

    def _view(self, where: dict, by_slot: list) -> np.ndarray:
        """The array a collective reads or writes: a table slot's array or arena bytes."""
        npd = NUMPY[where["dtype"]]
        shape = dims.concrete_shape(where["shape"], self.last_sizes)
        if "slot" in where:
            return by_slot[where["slot"]].reshape(shape)
        count = int(np.prod(shape, dtype=np.int64))
        start = dims.evaluate(where["offset"], self.last_sizes)
        return self.arena[start:start + count * npd.itemsize].view(npd).reshape(shape)
