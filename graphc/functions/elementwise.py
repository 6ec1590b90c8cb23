"""numpy-like elementwise functions: promotion, broadcasting, arithmetic, math, logic."""
from __future__ import annotations

import math

import numpy as np

from graphc_runtime.dims import Dim
from graphc_runtime.errors import DTypeError, GraphcError, ShapeError

from ..tensor import Tensor, bind, constant, dim_size
from ..ir import dtypes
from ..ir.graph import current_graph, graph_for
from ..ir.source import user_location


# -- promotion and broadcasting ---------------------------------------------------------

def _graph_for(values):
    """The graph a result goes into (graphc.ir.graph.graph_for: the operands' graph, or
    the innermost of nested ones, a loop body reading its enclosing graphs' tensors)."""
    graphs = [v.graph for v in values if isinstance(v, Tensor)]
    graph = graph_for(graphs)
    if graph is None:
        other = next((g for g in graphs if not (g.encloses(graphs[0]) or
                                               graphs[0].encloses(g))), graphs[-1])
        raise GraphcError(f"tensors of graphs {graphs[0].name!r} and {other.name!r} cannot "
                          f"be combined", user_location())
    return graph


def result_dtype(values, what: str) -> str:
    """The promoted dtype of a mix of tensors, arrays and weak Python scalars."""
    strong, weak = [], []
    for v in values:
        if isinstance(v, Tensor):
            strong.append(v.dtype)
        elif isinstance(v, (np.ndarray, np.generic)):
            strong.append(dtypes.canonical(v.dtype))
        else:
            k = dtypes.scalar_kind(v)
            if k is None:
                if isinstance(v, (list, tuple)):
                    strong.append(dtypes.canonical(np.asarray(
                        constant_array(v)).dtype))
                    continue
                raise DTypeError(f"{what}: cannot use a {type(v).__name__} as an operand",
                                 user_location())
            weak.append(k)
    if strong:
        dt = strong[0]
        for d in strong[1:]:
            dt = dtypes.promote(dt, d)
    else:
        dt = dtypes.default_dtype(max(weak, key=["bool", "int", "float"].index))
    for k in weak:
        dt = dtypes.promote_weak(dt, k)
    return dt


def constant_array(v):
    from ..tensor import _literal_array
    return _literal_array(v)


def broadcast_shapes(shapes, what: str) -> tuple:
    """numpy's broadcast of `shapes`; ShapeError naming them if they do not fit."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        sizes = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0} - {1}
        if len(sizes) > 1:
            symbolic = [d for d in sizes if isinstance(d, Dim)]
            why = ""
            if symbolic:
                names = " and ".join(str(d) for d in sorted(sizes, key=str))
                why = (f": dimension {i - ndim} would need {names} to be equal, which "
                       f"cannot be proven (name the symbols alike if they are the same size)")
            raise ShapeError(f"{what}: shapes {' and '.join(_fmt(s) for s in shapes)} "
                             f"cannot be broadcast together{why}", user_location())
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _fmt(shape) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def broadcast_to_shape(t: Tensor, shape) -> Tensor:
    """Broadcast `t` to `shape` (numpy rules, trailing alignment)."""
    shape = tuple(shape)
    if t.shape == shape:
        return t
    lead = len(shape) - t.ndim
    if lead < 0:
        raise ShapeError(f"cannot broadcast {t.node.type_str()} to the lower-rank shape "
                         f"{shape}", user_location())
    return bind("broadcast_in_dim", t, shape=shape,
                broadcast_dimensions=tuple(range(lead, len(shape))))


def cast(x, dtype) -> Tensor:
    """`x` converted to `dtype` (float -> int truncates toward zero)."""
    dtype = dtypes.canonical(dtype)
    x = x if isinstance(x, Tensor) else constant(x)
    return x if x.dtype == dtype else bind("convert", x, new_dtype=dtype)


def _is_weak(v) -> bool:
    """Python scalars are weak; numpy scalars and arrays carry their dtype."""
    return not isinstance(v, (np.ndarray, np.generic)) and dtypes.scalar_kind(v) is not None


def to_tensor(v, dtype: str, graph) -> Tensor:
    """`v` (tensor, array, list or scalar) as a tensor of `dtype` in `graph`."""
    if isinstance(v, Tensor):
        return cast(v, dtype)
    if _is_weak(v):
        dtypes.check_scalar_fits(v, dtype, "operand")
        return constant(np.asarray(v, dtype=dtypes.to_numpy(dtype)), graph=graph)
    return cast(constant(v, graph=graph), dtype)


def operands(values, what: str, dtype: str | None = None) -> list[Tensor]:
    """Tensors of one dtype (promoted, or `dtype`) and one broadcast shape. A symbolic
    size (a Dim, such as x.shape[0]) is the scalar holding its value at the call."""
    if any(isinstance(v, Dim) for v in values):
        tensors = [v for v in values if isinstance(v, Tensor)]
        graph = _graph_for(tensors) if tensors else current_graph()
        values = [dim_size(v, graph=graph) if isinstance(v, Dim) else v for v in values]
    graph = _graph_for(values)
    dt = dtype or result_dtype(values, what)
    tensors = [to_tensor(v, dt, graph) for v in values]
    shape = broadcast_shapes([t.shape for t in tensors], what)
    return [broadcast_to_shape(t, shape) for t in tensors]


def _binary(op: str, a, b, what: str, dtype: str | None = None) -> Tensor:
    x, y = operands([a, b], what, dtype)
    return bind(op, x, y)


def _no_bool(x: Tensor, what: str) -> None:
    if x.dtype == "bool":
        raise DTypeError(f"{what}: arithmetic on bool tensors; cast to an int or float "
                         f"dtype first (or use &, |, ^)", user_location())


def _arith(op: str, what: str):
    def fn(a, b) -> Tensor:
        x, y = operands([a, b], what)
        _no_bool(x, what)
        return bind(op, x, y)
    fn.__name__ = what
    fn.__doc__ = f"Elementwise {what} with numpy broadcasting and promotion."
    return fn


add = _arith("add", "add")
subtract = _arith("sub", "subtract")
multiply = _arith("mul", "multiply")
maximum = _arith("max", "maximum")
minimum = _arith("min", "minimum")


def divide(a, b) -> Tensor:
    """True division; integer operands give float32 (as jax.numpy)."""
    dt = result_dtype([a, b], "divide")
    if not dtypes.is_float(dt):
        dt = "float32"
    return _binary("div", a, b, "divide", dt)


def floor_divide(a, b) -> Tensor:
    """numpy's `//`: floor of the quotient (integers round toward minus infinity)."""
    x, y = operands([a, b], "floor_divide")
    _no_bool(x, "floor_divide")
    if dtypes.is_float(x.dtype):
        return bind("floor", bind("div", x, y))
    q, r = bind("div", x, y), bind("rem", x, y)
    return where((r != 0) & ((r < 0) != (y < 0)), q - 1, q)


def mod(a, b) -> Tensor:
    """numpy's `%`: the remainder takes the sign of the divisor."""
    x, y = operands([a, b], "mod")
    _no_bool(x, "mod")
    r = bind("rem", x, y)
    return where((r != 0) & ((r < 0) != (y < 0)), r + y, r)


remainder = mod


def power(a, b) -> Tensor:
    """a ** b. Integer tensors take non-negative Python int exponents only."""
    if isinstance(a, Tensor) and not dtypes.is_float(a.dtype) and \
            isinstance(b, (int, np.integer)) and not isinstance(b, bool):
        _no_bool(a, "power")
        if b < 0:
            raise DTypeError(f"power: integer tensor {a.node.type_str()} to the negative "
                             f"power {b}", user_location())
        return _int_power(a, int(b))
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, Tensor) \
            and dtypes.is_float(a.dtype):
        if b == 2:
            return a * a
        if b == 1:
            return a
        if b == 0.5:
            return sqrt(a)
    dt = result_dtype([a, b], "power")
    if not dtypes.is_float(dt):
        raise DTypeError(f"power: a tensor exponent needs float operands, got {dt}; cast first",
                         user_location())
    return _binary("pow", a, b, "power", dt)


def _int_power(x: Tensor, n: int) -> Tensor:
    result, base = None, x
    if n == 0:                       # x**0 is 1 for every x, inf and nan included
        one = constant(np.ones((), dtypes.to_numpy(x.dtype)), graph=x.graph)
        return bind("broadcast_in_dim", one, shape=x.shape, broadcast_dimensions=()) \
            if x.shape else one
    while n:
        if n & 1:
            result = base if result is None else result * base
        n >>= 1
        if n:
            base = base * base
    return result


def _compare(direction: str, what: str):
    def fn(a, b) -> Tensor:
        x, y = operands([a, b], what)
        return bind("compare", x, y, direction=direction)
    fn.__name__ = what
    fn.__doc__ = f"Elementwise {what}, a bool tensor."
    return fn


equal = _compare("eq", "equal")
not_equal = _compare("ne", "not_equal")
less = _compare("lt", "less")
less_equal = _compare("le", "less_equal")
greater = _compare("gt", "greater")
greater_equal = _compare("ge", "greater_equal")


def _logic(op: str, what: str):
    def fn(a, b) -> Tensor:
        x, y = operands([a, b], what)
        if dtypes.is_float(x.dtype):
            raise DTypeError(f"{what}: needs bool or integer operands, got {x.dtype}",
                             user_location())
        return bind(op, x, y)
    fn.__name__ = what
    return fn


bitwise_and = logical_and = _logic("and", "bitwise_and")
bitwise_or = logical_or = _logic("or", "bitwise_or")
bitwise_xor = logical_xor = _logic("xor", "bitwise_xor")


def _as(x) -> Tensor:
    return x if isinstance(x, Tensor) else constant(x)


def logical_not(x) -> Tensor:
    x = _as(x)
    if dtypes.is_float(x.dtype):
        raise DTypeError(f"logical_not/~ needs a bool or integer tensor, got {x.dtype}",
                         user_location())
    return bind("not", x)


def _float_unary(op: str, what: str):
    def fn(x) -> Tensor:
        x = _as(x)
        if not dtypes.is_float(x.dtype):
            x = cast(x, "float32")
        return bind(op, x)
    fn.__name__ = what
    fn.__doc__ = f"Elementwise {what} (integer inputs are computed in float32)."
    return fn


exp = _float_unary("exp", "exp")
log = _float_unary("log", "log")
log1p = _float_unary("log1p", "log1p")
expm1 = _float_unary("expm1", "expm1")
tanh = _float_unary("tanh", "tanh")
sigmoid = _float_unary("logistic", "sigmoid")
sqrt = _float_unary("sqrt", "sqrt")
rsqrt = _float_unary("rsqrt", "rsqrt")
sin = _float_unary("sin", "sin")
cos = _float_unary("cos", "cos")
erf = _float_unary("erf", "erf")


def _rounding(op: str):
    def fn(x) -> Tensor:
        x = _as(x)
        return bind(op, x) if dtypes.is_float(x.dtype) else x
    fn.__name__ = op
    return fn


floor = _rounding("floor")
ceil = _rounding("ceil")
round = _rounding("round")


def negative(x) -> Tensor:
    x = _as(x)
    _no_bool(x, "negative")
    return bind("neg", x)


def abs(x) -> Tensor:  # noqa: A001
    x = _as(x)
    _no_bool(x, "abs")
    return bind("abs", x)


def sign(x) -> Tensor:
    x = _as(x)
    _no_bool(x, "sign")
    return bind("sign", x)


def square(x) -> Tensor:
    return _as(x) * _as(x)


def stop_gradient(x) -> Tensor:
    """x's value; gradients treat it as a constant (no cotangent flows through)."""
    return bind("stop_gradient", _as(x))


def relu(x) -> Tensor:
    """max(x, 0)."""
    return maximum(x, 0)


def gelu(x, approximate: bool = False) -> Tensor:
    """Gaussian error linear unit: exact (erf) form, or the tanh approximation."""
    x = _as(x)
    if approximate:
        # 0.5 x (1 + tanh(u)) == x * sigmoid(2u): the same function with one exp
        c = 2.0 * math.sqrt(2.0 / math.pi)
        return x * sigmoid(x * (c + (c * 0.044715) * (x * x)))
    return 0.5 * x * (1.0 + erf(x * (1.0 / math.sqrt(2.0))))


def where(condition, x, y) -> Tensor:
    """Elementwise choice: x where `condition` is true, else y (numpy broadcasting)."""
    graph = _graph_for([condition, x, y])
    c = _as(condition) if isinstance(condition, Tensor) else constant(condition, graph=graph)
    if c.dtype != "bool":
        raise DTypeError(f"where: condition must be bool, got {c.node.type_str()}",
                         user_location())
    dt = result_dtype([x, y], "where")
    tx, ty = to_tensor(x, dt, graph), to_tensor(y, dt, graph)
    shape = broadcast_shapes([c.shape, tx.shape, ty.shape], "where")
    return bind("select", broadcast_to_shape(c, shape), broadcast_to_shape(tx, shape),
                broadcast_to_shape(ty, shape))


def clip(x, lo=None, hi=None) -> Tensor:
    """Clamp `x` into [lo, hi] (either bound may be None)."""
    out = _as(x)
    if lo is not None:
        out = maximum(out, lo)
    if hi is not None:
        out = minimum(out, hi)
    return out


def isfinite(x) -> Tensor:
    x = _as(x)
    if not dtypes.is_float(x.dtype):
        return (x == x)
    return abs(x) < float("inf")


def isnan(x) -> Tensor:
    x = _as(x)
    return x != x
