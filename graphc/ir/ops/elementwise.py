"""Elementwise primitives: unary math, binary arithmetic/logic, compare, select, convert.

Operands of a binary primitive have identical shapes and dtypes: the API inserts the
broadcasts and converts (numpy semantics live there, the IR stays explicit, as in XLA).
float16/bfloat16 are storage types: the reference computes in float32 and rounds back.
Integer division truncates toward zero; x / 0 == 0 and x % 0 == x for integers.
"""
from __future__ import annotations

import math

import numpy as np

from graphc_runtime.errors import DTypeError, ShapeError

from .. import dtypes
from ..primitive import define, fmt_shape

# --- rules --------------------------------------------------------------------------

_ALLOWED = {
    "float": dtypes.FLOAT_DTYPES,
    "numeric": dtypes.INT_DTYPES + dtypes.FLOAT_DTYPES,
    "logical": ("bool",) + dtypes.INT_DTYPES,
    "any": dtypes.ALL_DTYPES,
}


def _check_dtype(dtype: str, allowed: str, what: str = "operand") -> None:
    if dtype not in _ALLOWED[allowed]:
        raise DTypeError(f"{what} has dtype {dtype}; expected one of "
                         f"{', '.join(_ALLOWED[allowed])}")


def _unary_rule(allowed):
    def rule(inputs, attrs):
        (x,) = inputs
        _check_dtype(x.dtype, allowed)
        return x.shape, x.dtype
    return rule


def _same_operands(inputs):
    x, y = inputs
    if x.shape != y.shape:
        raise ShapeError(f"operands must have equal shapes, got {x.type_str()} and "
                         f"{y.type_str()}")
    if x.dtype != y.dtype:
        raise DTypeError(f"operands must have equal dtypes, got {x.type_str()} and "
                         f"{y.type_str()}")
    return x


def _binary_rule(allowed):
    def rule(inputs, attrs):
        x = _same_operands(inputs)
        _check_dtype(x.dtype, allowed)
        return x.shape, x.dtype
    return rule


COMPARE_DIRECTIONS = ("eq", "ne", "lt", "le", "gt", "ge")


def _compare_rule(inputs, attrs):
    x = _same_operands(inputs)
    if attrs.get("direction") not in COMPARE_DIRECTIONS:
        raise ShapeError(f"direction must be one of {COMPARE_DIRECTIONS}, got "
                         f"{attrs.get('direction')!r}")
    return x.shape, "bool"


def _select_rule(inputs, attrs):
    pred, on_true, on_false = inputs
    if pred.dtype != "bool":
        raise DTypeError(f"predicate must be bool, got {pred.type_str()}")
    _same_operands((on_true, on_false))
    if pred.shape != on_true.shape:
        raise ShapeError(f"predicate shape {fmt_shape(pred.shape)} differs from the "
                         f"operands' {fmt_shape(on_true.shape)}")
    return on_true.shape, on_true.dtype


def _convert_rule(inputs, attrs):
    (x,) = inputs
    new = attrs.get("new_dtype")
    if new not in dtypes.ALL_DTYPES:
        raise DTypeError(f"unknown target dtype {new!r}")
    return x.shape, new


# --- reference implementations --------------------------------------------------------

def _in_compute_dtype(fn):
    """Run `fn` on operands widened to the compute dtype, round the result to storage."""
    def impl(args, attrs, node):
        storage = dtypes.to_numpy(node.dtype)
        compute = dtypes.to_numpy(dtypes.compute_dtype(node.dtype))
        with np.errstate(all="ignore"):
            out = fn(*[a.astype(compute, copy=False) if a.dtype != np.bool_ or compute == np.bool_
                       else a for a in args])
        return np.asarray(out).astype(storage, copy=False)
    return impl


def _logistic(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


_erf_scalar = np.frompyfunc(math.erf, 1, 1)


def _erf(x):
    return np.asarray(_erf_scalar(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _int_div(a, b):
    safe = np.where(b == 0, 1, b)
    q = np.floor_divide(a, safe)
    r = a - q * safe
    q = np.where((r != 0) & ((a < 0) != (safe < 0)), q + 1, q)
    return np.where(b == 0, 0, q).astype(a.dtype)


def _div(a, b):
    if a.dtype.kind in "iu":
        return _int_div(a, b)
    return np.true_divide(a, b)


def _rem(a, b):
    if a.dtype.kind in "iu":
        return np.where(b == 0, a, a - _int_div(a, b) * b).astype(a.dtype)
    return np.fmod(a, b)


def _logical(int_fn, bool_fn):
    return lambda a, b: bool_fn(a, b) if a.dtype == np.bool_ else int_fn(a, b)


_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}


def _compare_impl(args, attrs, node):
    a, b = args
    if a.dtype in (np.float16, dtypes.to_numpy("bfloat16")):
        a, b = a.astype(np.float32), b.astype(np.float32)
    return _COMPARE[attrs["direction"]](a, b)


def _select_impl(args, attrs, node):
    pred, t, f = args
    return np.where(pred, t, f).astype(t.dtype, copy=False)


def _convert_impl(args, attrs, node):
    (x,) = args
    target = dtypes.to_numpy(node.dtype)
    with np.errstate(all="ignore"):
        if x.dtype.kind == "f" and target.kind in "iu":
            # float -> int truncates toward zero; NaN -> 0, out of range saturates
            info = np.iinfo(target)
            y = np.trunc(x.astype(np.float64))
            hi, lo = y >= 2.0 ** (info.bits - 1), y < -2.0 ** (info.bits - 1)
            safe = np.where(hi | lo | np.isnan(y), 0, y).astype(target)
            return np.where(hi, info.max, np.where(lo, info.min, safe)).astype(target)
        if x.dtype == dtypes.to_numpy("bfloat16") and target != np.float32:
            return x.astype(np.float32).astype(target)
        return x.astype(target)


UNARY = {
    # name: (allowed dtypes, numpy function)
    "neg": ("numeric", np.negative),
    "exp": ("float", np.exp),
    "log": ("float", np.log),
    "log1p": ("float", np.log1p),
    "expm1": ("float", np.expm1),
    "tanh": ("float", np.tanh),
    "logistic": ("float", _logistic),
    "sqrt": ("float", np.sqrt),
    "rsqrt": ("float", lambda x: 1 / np.sqrt(x)),
    "abs": ("numeric", np.abs),
    "sign": ("numeric", np.sign),
    "sin": ("float", np.sin),
    "cos": ("float", np.cos),
    "floor": ("float", np.floor),
    "ceil": ("float", np.ceil),
    "round": ("float", np.round),      # half to even, as numpy
    "erf": ("float", _erf),
    "not": ("logical", _not),
}

BINARY = {
    "add": ("numeric", np.add),
    "sub": ("numeric", np.subtract),
    "mul": ("numeric", np.multiply),
    "div": ("numeric", _div),
    "pow": ("float", np.power),
    "max": ("numeric", np.maximum),
    "min": ("numeric", np.minimum),
    "rem": ("numeric", _rem),
    "and": ("logical", _logical(np.bitwise_and, np.logical_and)),
    "or": ("logical", _logical(np.bitwise_or, np.logical_or)),
    "xor": ("logical", _logical(np.bitwise_xor, np.logical_xor)),
}

# computed by a math function (a polynomial or the C library's, named here), not an
# instruction: fusion counts them TRANSCENDENTAL_COST, kernels avoid computing them twice
MATH_FUNCTIONS = {
    "exp": ("expf", "exp"), "log": ("logf", "log"), "log1p": ("log1pf", "log1p"),
    "expm1": ("expm1f", "expm1"), "tanh": ("tanhf", "tanh"), "sin": ("sinf", "sin"),
    "cos": ("cosf", "cos"), "erf": ("erff", "erf"), "pow": ("powf", "pow"),
    "logistic": None,                  # through exp
}
SQRT_COST = 6                          # one instruction, but a slow one

for _name, (_allowed, _fn) in {**UNARY, **BINARY}.items():
    define(_name, "elementwise", (_unary_rule if _name in UNARY else _binary_rule)(_allowed),
           _in_compute_dtype(_fn), arity=1 if _name in UNARY else 2,
           differentiable=_allowed != "logical", transcendental=_name in MATH_FUNCTIONS,
           libm=MATH_FUNCTIONS.get(_name), cost=SQRT_COST if "sqrt" in _name else None)
define("compare", "elementwise", _compare_rule, _compare_impl, arity=2, differentiable=False)
define("select", "elementwise", _select_rule, _select_impl, arity=3)
define("convert", "elementwise", _convert_rule, _convert_impl, arity=1)
