"""Extending graphc: the public registration functions (docs/extending.md).

A new primitive is declared once and registered in one table per layer, each keyed by
its name (as JAX's `Primitive` with `defjvp` and `register_lowering`):

- `define(name, kind, rule, impl, ...)`: its shape/dtype rule, numpy reference and
  facts (cost, transcendental, C math names), graphc/ir/primitive.py;
- `register_vjp(name, rule)`: its reverse-mode rule, graphc/autodiff.py;
- `register_expression(name, rule)`: its kernel expression, where it is not a plain
  elementwise operation, graphc/kernels/expressions.py;
- `register_lowering(name, float=..., int=...)`: its LLVM lowering, shared by the CPU
  and CUDA backends, graphc/backends/llvm/lowerings.py.

`bind(name, *tensors, **attrs)` applies it to Tensors. A new device is a `Backend`
subclass registered with `register_backend(kind, cls)`.
"""
from .api import bind
from .autodiff import register_vjp
from .backends import Backend, Build, Built, register_backend
from .backends.llvm.lowerings import lowering_of, register_lowering
from .ir.primitive import REGISTRY as primitives
from .ir.primitive import define
from .kernels.expressions import register_expression
from .schedule.policy import SchedulePolicy

__all__ = ["Backend", "Build", "Built", "SchedulePolicy", "bind", "define", "lowering_of",
           "primitives", "register_backend", "register_expression", "register_lowering",
           "register_vjp"]
