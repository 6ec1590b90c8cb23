"""Devices: what is present, and moving arrays onto them.

The CPU is always present. CUDA needs the `cuda` extra (pycuda) and an NVIDIA driver;
pycuda is imported only when asked for, and its absence is a clear DeviceError.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.device_array import DeviceArray
from graphc_runtime.errors import DeviceError


class _Cuda:
    """gc.cuda: availability of CUDA devices through pycuda."""

    def device_count(self) -> int:
        try:
            import pycuda.driver as drv
        except ImportError:
            return 0
        try:
            drv.init()
            return drv.Device.count()
        except Exception:                 # no driver, no device: pycuda raises its own types
            return 0

    def is_available(self) -> bool:
        return self.device_count() > 0


cuda = _Cuda()


def devices() -> list[str]:
    """Names of the devices present: 'cpu', then 'cuda:0', 'cuda:1', ..."""
    return ["cpu"] + [f"cuda:{k}" for k in range(cuda.device_count())]


def to_device(array, device: str = "cuda") -> DeviceArray:
    """Copy a numpy array to `device` ('cpu', 'cuda' or 'cuda:N')."""
    array = np.ascontiguousarray(array)
    name = str(device)
    if name in ("cpu", "cpu:0"):
        return DeviceArray(array.copy(), "cpu", array.shape, str(array.dtype))
    kind, _, index = name.partition(":")
    if kind != "cuda":
        raise DeviceError(f"unknown device {device!r}; available: {', '.join(devices())}")
    count = cuda.device_count()
    k = int(index or 0) if (index or "0").isdigit() else -1
    if count == 0:
        raise DeviceError(f"device {device!r}: no CUDA device is available (needs an NVIDIA "
                          f"GPU, its driver and the 'cuda' extra, pycuda)")
    if not 0 <= k < count:
        raise DeviceError(f"device {device!r}: there are {count} CUDA device(s)")
    import pycuda.gpuarray as gpuarray
    from graphc_runtime.cuda_context import context
    ctx = context(k)                  # the primary context, shared with executables
    ctx.push()
    try:
        return DeviceArray(gpuarray.to_gpu(array), f"cuda:{k}", array.shape, str(array.dtype))
    finally:
        ctx.pop()
