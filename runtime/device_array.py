"""DeviceArray: an array resident on a device (shared by graphc and the runtime)."""
from __future__ import annotations

import numpy as np


class DeviceArray:
    """An array on `device`; `.numpy()` copies it to the host."""

    def __init__(self, data, device: str, shape, dtype):
        self._data, self.device, self.shape, self.dtype = data, device, tuple(shape), str(dtype)

    def numpy(self) -> np.ndarray:
        if self.device == "cpu":
            return np.array(self._data, copy=True)
        from .cuda_context import context
        ctx = context(int(self.device.partition(":")[2] or 0))
        ctx.push()
        try:
            return self._data.get()
        finally:
            ctx.pop()

    def __repr__(self) -> str:
        return f"DeviceArray({self.dtype}{list(self.shape)} on {self.device})"
