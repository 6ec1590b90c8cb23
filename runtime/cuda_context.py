"""The CUDA driver (pycuda, imported only when first needed) and each device's primary
context, shared by executables and device arrays."""
from __future__ import annotations

from .errors import DeviceError


def nvidia_driver_present() -> bool:
    """Whether this machine has an NVIDIA driver (its device nodes or libcuda), asked
    without pycuda."""
    import ctypes.util
    import os
    return os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia0") or \
        ctypes.util.find_library("cuda") is not None


def _driver():
    try:
        import pycuda.driver as drv
    except ImportError as e:
        if not nvidia_driver_present():
            raise DeviceError("no GPU is present: this machine has no NVIDIA driver or "
                              "device, so a program compiled for device='cuda' cannot run "
                              "here (compile it for device='cpu')") from None
        raise DeviceError(f"running on CUDA needs pycuda (the 'cuda' extra: pip install "
                          f"'graphc[cuda]'): {e}") from None
    try:
        drv.init()
        count = drv.Device.count()
    except Exception as e:                         # pycuda raises its own error types
        raise DeviceError(f"no usable CUDA driver: {e}") from None
    if count == 0:
        raise DeviceError("no GPU is present: the CUDA driver reports no device, so a "
                          "program compiled for device='cuda' cannot run here")
    return drv


_primary = {}


def context(device: int = 0):
    """The device's primary context (shared with other CUDA libraries), retained once."""
    drv = _driver()
    if device not in _primary:
        if not 0 <= device < drv.Device.count():
            raise DeviceError(f"there is no CUDA device {device}")
        _primary[device] = drv.Device(device).retain_primary_context()
    return _primary[device]
