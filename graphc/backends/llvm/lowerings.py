"""Each elementwise primitive's LLVM lowering, one table per operand class, keyed by
primitive: `register_lowering(op, float=..., int=...)`. An entry takes the emitter `e`
(its builder `e.b`, its module `e.mb`), the LLVM compute type and the operands' values.
Both LLVM backends use these tables; a backend changes one thing through the emitter's
hooks (CUDA's `mb.libm` calls libdevice). A float primitive without an entry is computed
by the float32 polynomials (mathlib.VECTOR_F32) or by its C math library function
(`define(..., libm=...)`); `lowering_of` says which, or why there is none.

No float op carries LLVM's `contract` or fast-math flags: a node has one value in a
program. Fusion may recompute an elementwise node in several loops or kernels; were a
product allowed to fuse into the sum that reads it in one place and not another, the
copies would differ (softmax's x - max(x) would not be 0 at the maximum). A product
fuses into a sum only as the explicit `fma` (kernels/products.py).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...ir.primitive import REGISTRY
from . import mathlib
from .types import F32

FLOAT: dict = {}
INT: dict = {}


def register_lowering(op: str, float=None, int=None) -> None:  # noqa: A002
    """Lower primitive `op` (or a kernel IR operation such as fma) with `float(e, ty,
    *args)` for float operands and `int(e, ty, *args)` for integer and bool ones."""
    if float is not None:
        FLOAT[op] = float
    if int is not None:
        INT[op] = int


def lowering_of(op: str, is_float: bool) -> str | None:
    """How `op` is lowered for float (or integer) operands: 'table', 'polynomial',
    'libm', or None where there is no lowering."""
    if (FLOAT if is_float else INT).get(op) is not None:
        return "table"
    if is_float and op in mathlib.VECTOR_F32:
        return "polynomial"
    if is_float and libm_names(op):
        return "libm"
    return None


def libm_names(op: str) -> tuple | None:
    """The C math library's (float32, float64) names of `op`, if it has them."""
    prim = REGISTRY.get(op)
    return prim.libm if prim is not None else None


def _intrinsic(name):
    return lambda e, ty, *args: e.b.call(e.mb.intrinsic(name, [ty]), list(args))


def _fma(e, ty, a, b, c):
    if not e.mb.has_fma:
        return e.b.fadd(e.b.fmul(a, b), c)
    return e.b.call(e.mb.intrinsic("llvm.fma", [ty]), [a, b, c])


def _rsqrt(e, ty, x):
    return e.b.fdiv(ir.Constant(ty, 1.0), e.b.call(e.mb.intrinsic("llvm.sqrt", [ty]), [x]))


def _sign(e, ty, x):
    b, zero, one = e.b, ir.Constant(ty, 0.0), ir.Constant(ty, 1.0)
    pos = b.fcmp_ordered(">", x, zero)
    neg = b.fcmp_ordered("<", x, zero)
    return b.select(pos, one, b.select(neg, ir.Constant(ty, -1.0), x))


def _logistic(e, ty, x):
    if ty == F32:
        return mathlib.VECTOR_F32["logistic"](e.b, x, e.mb.scalef)
    b, one = e.b, ir.Constant(ty, 1.0)
    ex = b.call(e.mb.libm("exp", ty), [b.fneg(b.call(e.mb.intrinsic("llvm.fabs", [ty]), [x]))])
    d = b.fadd(one, ex)
    return b.select(b.fcmp_ordered(">=", x, ir.Constant(ty, 0.0)), b.fdiv(one, d),
                    b.fdiv(ex, d))


for _op, _fn in {
    "add": lambda e, ty, x, y: e.b.fadd(x, y), "sub": lambda e, ty, x, y: e.b.fsub(x, y),
    "mul": lambda e, ty, x, y: e.b.fmul(x, y), "div": lambda e, ty, x, y: e.b.fdiv(x, y),
    "rem": lambda e, ty, x, y: e.b.frem(x, y), "neg": lambda e, ty, x: e.b.fneg(x),
    "fma": _fma,                   # a product fused into its one use (kernels/products.py)
    "max": _intrinsic("llvm.maximum"), "min": _intrinsic("llvm.minimum"),
    "abs": _intrinsic("llvm.fabs"), "sqrt": _intrinsic("llvm.sqrt"), "rsqrt": _rsqrt,
    "floor": _intrinsic("llvm.floor"), "ceil": _intrinsic("llvm.ceil"),
    "round": _intrinsic("llvm.roundeven"),          # half to even, as numpy
    "sign": _sign, "logistic": _logistic,
}.items():
    register_lowering(_op, float=_fn)


def _divide(op):
    """Integer division truncating toward zero with x / 0 == 0 and x % 0 == x (the
    reference's rule), and no overflow trap at MIN / -1."""
    def lower(e, ty, x, y):
        b, zero, one = e.b, ir.Constant(ty, 0), ir.Constant(ty, 1)
        is_zero = b.icmp_signed("==", y, zero)
        is_m1 = b.icmp_signed("==", y, ir.Constant(ty, -1))
        safe = b.select(b.or_(is_zero, is_m1), one, y)
        if op == "div":
            q = b.select(is_m1, b.sub(zero, x), b.sdiv(x, safe))
            return b.select(is_zero, zero, q)
        r = b.select(is_m1, zero, b.srem(x, safe))
        return b.select(is_zero, x, r)
    return lower


def _int_sign(e, ty, x):
    b, zero = e.b, ir.Constant(ty, 0)
    return b.sub(b.zext(b.icmp_signed(">", x, zero), ty), b.zext(b.icmp_signed("<", x, zero), ty))


for _op, _fn in {
    "add": lambda e, ty, x, y: e.b.add(x, y), "sub": lambda e, ty, x, y: e.b.sub(x, y),
    "mul": lambda e, ty, x, y: e.b.mul(x, y), "div": _divide("div"), "rem": _divide("rem"),
    "max": lambda e, ty, x, y: e.b.select(e.b.icmp_signed(">", x, y), x, y),
    "min": lambda e, ty, x, y: e.b.select(e.b.icmp_signed("<", x, y), x, y),
    "neg": lambda e, ty, x: e.b.sub(ir.Constant(ty, 0), x),
    "abs": lambda e, ty, x: e.b.select(e.b.icmp_signed("<", x, ir.Constant(ty, 0)),
                                       e.b.sub(ir.Constant(ty, 0), x), x),
    "sign": _int_sign,
    "and": lambda e, ty, x, y: e.b.and_(x, y), "or": lambda e, ty, x, y: e.b.or_(x, y),
    "xor": lambda e, ty, x, y: e.b.xor(x, y), "not": lambda e, ty, x: e.b.not_(x),
}.items():
    register_lowering(_op, int=_fn)
