"""The CUDA executor: loads an executable's PTX with pycuda and launches its kernels.

pycuda (extra `cuda`) is imported only when the program first runs; without it, or
without a GPU, running raises DeviceError (compiling and saving need neither). The arena,
the variables and the constants live on the device across calls: a call copies the
inputs in and the outputs out, unless they are device arrays already.
"""
from __future__ import annotations

import threading

import numpy as np

from . import dims, forks
from .cuda_context import _driver, context
from .device_array import DeviceArray
from .dtypes import NUMPY, type_str
from .errors import DeviceError, FeedError
from .feeds import bind_inputs, bind_symbols, check_array, sizes


VECTOR_ALIGN = 16     # kernels use 16-byte loads and stores (pycuda allocates 256-aligned)


class CudaProgram:
    def __init__(self, ptx: str, arch: str, launches: list, signature, arena_bytes: int,
                 variables: dict, constants: list):
        self.ptx, self.arch, self.launches = ptx, arch, launches
        self.signature = signature
        # a symbolic program sizes its arena at the call (kept for the largest size seen)
        self.arena_size = arena_bytes if isinstance(arena_bytes, dims.Dim) else None
        self.arena_bytes = 0 if self.arena_size is not None else int(arena_bytes)
        self._host_variables = {n: np.array(variables[n], dtype=NUMPY[d], copy=True)
                                for n, _, d in signature.variables}
        self.constants = [np.ascontiguousarray(c) for c in constants]
        self._names = [n for n, _, _ in signature.inputs]
        self._inputs = [(n, s, NUMPY[d], d, type_str(s, d)) for n, s, d in signature.inputs]
        self._outputs = [(s, NUMPY[d]) for _, s, d in signature.outputs]
        self._state = None
        self.lock = threading.Lock()
        forks.guard(self)

    # -- device state, created on first use ---------------------------------------------
    def _ready(self):
        if self._state is not None:
            return self._state
        drv = _driver()
        import pycuda.gpuarray as gpuarray
        ctx = context(0)
        ctx.push()
        try:
            module = drv.module_from_buffer(self.ptx.encode())
            functions = {name: module.get_function(name) for name in _kernel_names(self.launches)}
            arena = drv.mem_alloc(max(self.arena_bytes, 256))
            variables = {n: gpuarray.to_gpu(v) for n, v in self._host_variables.items()}
            constants = [gpuarray.to_gpu(c) for c in self.constants]
        finally:
            ctx.pop()
        self._state = {"drv": drv, "gpuarray": gpuarray, "ctx": ctx, "functions": functions,
                       "arena": arena, "variables": variables, "constants": constants,
                       "sizes": {}, "size_args": []}
        return self._state

    @property
    def variables(self) -> dict:
        """Host copies of the variables (they live on the device)."""
        if self._state is None:
            return dict(self._host_variables)
        st = self._state
        st["ctx"].push()
        try:
            return {n: v.get() for n, v in st["variables"].items()}
        finally:
            st["ctx"].pop()

    def _bind_sizes(self, st, env: dict) -> None:
        """The symbols' values for this call's launches (kernel arguments, grid sizes,
        offsets), and an arena grown to this call's size."""
        st["sizes"] = env
        st["size_args"] = [np.int64(env[n]) for n in self.signature.symbols]
        if self.arena_size is not None:
            need = self.arena_size.evaluate(env)
            if need > self.arena_bytes:
                st["arena"].free()
                st["arena"] = st["drv"].mem_alloc(max(need, 256))
                self.arena_bytes = need

    def run(self, args: tuple, kwargs: dict, timings: list | None = None) -> list:
        """One step; with `timings` (a list), appends (kernel name, milliseconds) per
        launch, measured with CUDA events around each launch."""
        st = self._ready()
        values = bind_inputs(self._names, args, kwargs)
        gpuarray = st["gpuarray"]
        with self.lock:
            st["ctx"].push()
            try:
                device_in, env = [], {}
                for value, (name, shape, npd, dname, tstr) in zip(values, self._inputs):
                    shape = bind_symbols(name, shape, value, env)
                    data = getattr(value, "_data", None)
                    if data is not None and getattr(value, "device", "").startswith("cuda"):
                        if tuple(value.shape) != shape or np.dtype(value.dtype) != npd:
                            raise FeedError(f"input {name!r}: expected {tstr}, got device "
                                            f"array {value.dtype}{list(value.shape)}")
                        if int(data.gpudata) % VECTOR_ALIGN:
                            raise DeviceError(f"input {name!r}: device memory at an address "
                                              f"not aligned to {VECTOR_ALIGN} bytes (kernels "
                                              f"read 16 bytes at a time); copy it first")
                        device_in.append(data)
                    else:
                        arr = np.ascontiguousarray(check_array(name, value, shape, npd, dname,
                                                               tstr))
                        device_in.append(gpuarray.to_gpu(arr))
                sizes_ = sizes(env)
                self._bind_sizes(st, sizes_)
                outs = [gpuarray.empty(dims.concrete_shape(shape, sizes_), npd)
                        for shape, npd in self._outputs]
                slots = [None] + [int(a.gpudata) for a in device_in + outs +
                                  list(st["variables"].values()) + st["constants"]]
                _execute(st, self.launches, (int(st["arena"]), slots, st), timings)
                if device_in and all(getattr(v, "device", "").startswith("cuda")
                                     for v in values):
                    # device arrays in, device arrays out: nothing crosses the bus
                    return [DeviceArray(o, "cuda:0", o.shape, o.dtype) for o in outs]
                return [o.get() for o in outs]
            finally:
                st["ctx"].pop()


# -- the launch table ---------------------------------------------------------------------
# A frame is (arena address, slot addresses) of one program: the executable's, or a loop
# body's or branch's (graphc.backends.cuda._launch_table). Control entries run their
# regions' launches from the host: a scan per step, a while_loop until its cond region's
# flag (read back) is false, a cond the branch its predicate (read back) picks.

def _kernel_names(table) -> list:
    names = []
    for entry in table:
        if "control" in entry:
            for body in entry["bodies"].values():
                names += _kernel_names(body["launches"])
        else:
            names.append(entry["kernel"])
    return names


def _size(st, x) -> int:
    """An int of the launch table, or a symbolic size (a Dim) at this call's sizes."""
    return dims.evaluate(x, st["sizes"])


def _address(where: dict, frame) -> int:
    arena, slots, st = frame
    return arena + _size(st, where["offset"]) if "offset" in where else slots[where["slot"]]


def _execute(st, table, frame, timings) -> None:
    for entry in table:
        if "control" in entry:
            _CONTROL[entry["control"]](st, entry, frame, timings)
            continue
        threads = _size(st, entry["threads"])
        if threads == 0:
            continue
        grid = entry["grid"]
        if grid is None:                   # a symbolic thread count: sized now
            grid = max(1, min(-(-threads // entry["block"]), entry["max_grid"]))
        ptrs = [np.uintp(_address(w, frame)) for w in entry["buffers"]] + st["size_args"]
        fn = st["functions"][entry["kernel"]]
        if timings is not None:
            start, end = st["drv"].Event(), st["drv"].Event()
            start.record()
        fn(*ptrs, block=(entry["block"], 1, 1), grid=(grid, 1))
        if timings is not None:
            end.record()
            end.synchronize()
            timings.append((entry["kernel"], start.time_till(end)))


def _body_frame(entry, role, frame, inputs, outputs):
    body = entry["bodies"][role]
    slots = [None] * body["slots"]
    for k, p in enumerate(list(inputs) + list(outputs)):
        slots[1 + k] = p
    for slot, where in body["constants"]:
        slots[slot] = _address(where, frame)
    arena = _address(body["arena"], frame) if body["arena"] is not None else 0
    return body["launches"], (arena, slots, frame[2])


def _copy(st, dst: int, src: int, nbytes: int) -> None:
    if nbytes:
        st["drv"].memcpy_dtod(dst, src, nbytes)


def _read_bool(st, address: int) -> bool:
    flag = np.empty(1, np.bool_)
    st["drv"].memcpy_dtoh(flag, address)
    return bool(flag[0])


def _carries(st, entry, frame, count: int, final_in_result: bool):
    cells = []
    for j in range(count):
        res = _address(entry["results"][j], frame)
        spare = _address(entry["spare"][j], frame)
        start, other = (res, spare) if final_in_result else (spare, res)
        _copy(st, start, _address(entry["operands"][j], frame),
              _size(st, entry["results"][j]["bytes"]))
        cells.append([start, other])
    return cells


def _run_scan(st, entry, frame, timings) -> None:
    a = entry["attrs"]
    nc, nx, reverse = a["num_carry"], a["num_xs"], a["reverse"]
    T = _size(st, a["length"])
    ops = entry["operands"]
    caps = [_address(w, frame) for w in ops[nc + nx:]]
    xs = [(_address(w, frame), _size(st, w["bytes"]) // max(T, 1)) for w in ops[nc:nc + nx]]
    ys = [(_address(w, frame), _size(st, w["bytes"]) // max(T, 1))
          for w in entry["results"][nc:]]
    cells = _carries(st, entry, frame, nc, T % 2 == 0)
    for i in range(T):
        t = T - 1 - i if reverse else i
        inputs = [c[0] for c in cells] + [base + t * step for base, step in xs] + caps
        outputs = [c[1] for c in cells] + [base + t * step for base, step in ys]
        launches, inner = _body_frame(entry, "body", frame, inputs, outputs)
        _execute(st, launches, inner, timings)
        for c in cells:
            c.reverse()


def _run_while(st, entry, frame, timings) -> None:
    a = entry["attrs"]
    ns, ncc = a["num_state"], a["num_cond_captures"]
    ops = [_address(w, frame) for w in entry["operands"]]
    ccaps, bcaps = ops[ns:ns + ncc], ops[ns + ncc:]
    flag = _address(entry["flag"], frame)
    cells = _carries(st, entry, frame, ns, True)
    odd = False
    while True:
        launches, inner = _body_frame(entry, "cond", frame, [c[0] for c in cells] + ccaps,
                                      [flag])
        _execute(st, launches, inner, timings)
        if not _read_bool(st, flag):
            break
        launches, inner = _body_frame(entry, "body", frame, [c[0] for c in cells] + bcaps,
                                      [c[1] for c in cells])
        _execute(st, launches, inner, timings)
        for c in cells:
            c.reverse()
        odd = not odd
    if odd:                                  # the final state is in the spare buffers
        for j, c in enumerate(cells):
            _copy(st, _address(entry["results"][j], frame), c[0],
                  _size(st, entry["results"][j]["bytes"]))


def _run_cond(st, entry, frame, timings) -> None:
    a = entry["attrs"]
    no, ntc = a["num_operands"], a["num_true_captures"]
    ops = [_address(w, frame) for w in entry["operands"]]
    role = "true" if _read_bool(st, ops[0]) else "false"
    caps = ops[1 + no:1 + no + ntc] if role == "true" else ops[1 + no + ntc:]
    results = [_address(w, frame) for w in entry["results"]]
    launches, inner = _body_frame(entry, role, frame, ops[1:1 + no] + caps, results)
    _execute(st, launches, inner, timings)


_CONTROL = {"scan": _run_scan, "while": _run_while, "cond": _run_cond}
