"""Tensor's operators and numpy-like methods, each one of graphc.functions."""
from __future__ import annotations

from . import functions as F
from .tensor import Tensor


class _Methods:
    def __add__(self, o): return F.add(self, o)
    def __radd__(self, o): return F.add(o, self)
    def __sub__(self, o): return F.subtract(self, o)
    def __rsub__(self, o): return F.subtract(o, self)
    def __mul__(self, o): return F.multiply(self, o)
    def __rmul__(self, o): return F.multiply(o, self)
    def __truediv__(self, o): return F.divide(self, o)
    def __rtruediv__(self, o): return F.divide(o, self)
    def __floordiv__(self, o): return F.floor_divide(self, o)
    def __rfloordiv__(self, o): return F.floor_divide(o, self)
    def __mod__(self, o): return F.mod(self, o)
    def __rmod__(self, o): return F.mod(o, self)
    def __pow__(self, o): return F.power(self, o)
    def __rpow__(self, o): return F.power(o, self)
    def __matmul__(self, o): return F.matmul(self, o)
    def __rmatmul__(self, o): return F.matmul(o, self)
    def __neg__(self): return F.negative(self)
    def __pos__(self): return self
    def __abs__(self): return F.abs(self)
    def __invert__(self): return F.logical_not(self)
    def __and__(self, o): return F.bitwise_and(self, o)
    def __rand__(self, o): return F.bitwise_and(o, self)
    def __or__(self, o): return F.bitwise_or(self, o)
    def __ror__(self, o): return F.bitwise_or(o, self)
    def __xor__(self, o): return F.bitwise_xor(self, o)
    def __rxor__(self, o): return F.bitwise_xor(o, self)
    def __eq__(self, o): return F.equal(self, o)            # type: ignore[override]
    def __ne__(self, o): return F.not_equal(self, o)        # type: ignore[override]
    def __lt__(self, o): return F.less(self, o)
    def __le__(self, o): return F.less_equal(self, o)
    def __gt__(self, o): return F.greater(self, o)
    def __ge__(self, o): return F.greater_equal(self, o)
    def __getitem__(self, key): return F.getitem(self, key)

    # -- methods -------------------------------------------------------------------------
    @property
    def T(self) -> "Tensor":
        return F.transpose(self)

    def reshape(self, *shape) -> "Tensor":
        return F.reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int)
                         else shape)

    def transpose(self, *axes) -> "Tensor":
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return F.transpose(self, axes or None)

    def sum(self, axis=None, keepdims=False): return F.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return F.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return F.max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return F.min(self, axis, keepdims)
    def prod(self, axis=None, keepdims=False): return F.prod(self, axis, keepdims)
    def var(self, axis=None, keepdims=False): return F.var(self, axis, keepdims)
    def argmax(self, axis=None, keepdims=False): return F.argmax(self, axis, keepdims)
    def argmin(self, axis=None, keepdims=False): return F.argmin(self, axis, keepdims)
    def astype(self, dtype) -> "Tensor": return F.cast(self, dtype)
    def flatten(self) -> "Tensor": return F.reshape(self, (-1,))
    def squeeze(self, axis=None) -> "Tensor": return F.squeeze(self, axis)


for _name, _member in vars(_Methods).items():
    if _name not in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__",
                     "__hash__"):
        setattr(Tensor, _name, _member)
