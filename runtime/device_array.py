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

    def host_view(self) -> np.ndarray:
        """The array itself, read-only, for an array on the CPU (no copy)."""
        if self.device != "cpu":
            raise TypeError(f"{self!r} is not on the CPU: .numpy() copies it there")
        view = self._data.view()
        view.flags.writeable = False
        return view

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"DeviceArray({self.dtype}{list(self.shape)} on {self.device})"
