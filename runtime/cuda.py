"""The CUDA executor: loads an executable's PTX with pycuda and launches its kernels.

pycuda (extra `cuda`) is imported only when the program first runs; without it, or
without a GPU, running raises DeviceError (compiling and saving need neither). The arena,
the variables and the constants live on the device across calls: a call copies the
inputs in and the outputs out, unless they are device arrays already.
"""
from __future__ import annotations

import threading

import numpy as np

from .cuda_context import _driver, context
from .device_array import DeviceArray
from .dtypes import NUMPY, type_str
from .errors import DeviceError, FeedError
from .feeds import bind_inputs, check_array


VECTOR_ALIGN = 16     # kernels use 16-byte loads and stores (pycuda allocates 256-aligned)


class CudaProgram:
    def __init__(self, ptx: str, arch: str, launches: list, signature, arena_bytes: int,
                 variables: dict, constants: list):
        self.ptx, self.arch, self.launches = ptx, arch, launches
        self.signature = signature
        self.arena_bytes = int(arena_bytes)
        self._host_variables = {n: np.array(variables[n], dtype=NUMPY[d], copy=True)
                                for n, _, d in signature.variables}
        self.constants = [np.ascontiguousarray(c) for c in constants]
        self._names = [n for n, _, _ in signature.inputs]
        self._inputs = [(n, s, NUMPY[d], d, type_str(s, d)) for n, s, d in signature.inputs]
        self._outputs = [(s, NUMPY[d]) for _, s, d in signature.outputs]
        self._state = None
        self.lock = threading.Lock()

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
            functions = [module.get_function(l["kernel"]) for l in self.launches]
            arena = drv.mem_alloc(max(self.arena_bytes, 256))
            variables = {n: gpuarray.to_gpu(v) for n, v in self._host_variables.items()}
            constants = [gpuarray.to_gpu(c) for c in self.constants]
        finally:
            ctx.pop()
        self._state = {"drv": drv, "gpuarray": gpuarray, "ctx": ctx, "functions": functions,
                       "arena": arena, "variables": variables, "constants": constants}
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

    def run(self, args: tuple, kwargs: dict, timings: list | None = None) -> list:
        """One step; with `timings` (a list), appends (kernel name, milliseconds) per
        launch, measured with CUDA events around each launch."""
        st = self._ready()
        values = bind_inputs(self._names, args, kwargs)
        gpuarray = st["gpuarray"]
        with self.lock:
            st["ctx"].push()
            try:
                device_in = []
                for value, (name, shape, npd, dname, tstr) in zip(values, self._inputs):
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
                outs = [gpuarray.empty(shape, npd) for shape, npd in self._outputs]
                slots = [None] + device_in + outs + list(st["variables"].values()) + \
                    st["constants"]
                base = int(st["arena"])
                for fn, launch in zip(st["functions"], self.launches):
                    if launch["threads"] == 0:
                        continue
                    ptrs = [np.uintp(base + w["offset"]) if "offset" in w
                            else np.uintp(int(slots[w["slot"]].gpudata)) for w in launch["buffers"]]
                    if timings is not None:
                        start, end = st["drv"].Event(), st["drv"].Event()
                        start.record()
                    fn(*ptrs, block=(launch["block"], 1, 1), grid=(launch["grid"], 1))
                    if timings is not None:
                        end.record()
                        end.synchronize()
                        timings.append((launch["kernel"], start.time_till(end)))
                if device_in and all(getattr(v, "device", "").startswith("cuda")
                                     for v in values):
                    # device arrays in, device arrays out: nothing crosses the bus
                    return [DeviceArray(o, "cuda:0", o.shape, o.dtype) for o in outs]
                return [o.get() for o in outs]
            finally:
                st["ctx"].pop()
