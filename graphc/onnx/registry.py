"""The converter registry: ONNX op type -> converter (ctx, operands, attributes) -> output
value(s). The ops* modules fill it when imported."""
from __future__ import annotations

CONVERTERS: dict = {}


def op(*names):
    """Register the decorated converter for the ONNX op types `names`."""
    def register(fn):
        for n in names:
            CONVERTERS[n] = fn
        return fn
    return register
