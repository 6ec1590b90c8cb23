"""Control-flow primitives: scan, while, cond, and get (one result of one of them).

Each control node owns its bodies as Regions (graphc.ir.region) in its attributes and
produces a tuple (dtype "tuple", shape ()); `get {index}` nodes project its results.

- scan(init..., xs..., captures...) {body, length, reverse, num_carry, num_xs}: body
  params (carry..., x slice..., captures...), outputs (new carry..., y...); results
  (final carry..., stacked ys...), ys of shape (length, *y).
- while(init..., cond captures..., body captures...) {cond, body, num_state,
  num_cond_captures}: cond params (state..., its captures...) -> (bool[],); body params
  (state..., its captures...) -> new state; results: the final state.
- cond(pred, operands..., true captures..., false captures...) {true, false,
  num_operands, num_true_captures}: both branches take (operands..., own captures...)
  and return the same types; results: the taken branch's outputs.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim, concrete_shape

from graphc_runtime.errors import DTypeError, GraphcError, ShapeError

from .. import dtypes
from ..graph import TUPLE
from ..primitive import define
from ..printer import type_string
from ..region import Region


def _check_region(region, what: str) -> Region:
    if not isinstance(region, Region):
        raise GraphcError(f"{what} must be a Region, got {type(region).__name__}")
    return region


def _match(expected, got, what: str) -> None:
    """Shape/dtype equality of one value against what a region declares."""
    (es, ed), (gs, gd) = expected, got
    if tuple(es) != tuple(gs):
        raise ShapeError(f"{what}: expected {type_string(es, ed)}, got {type_string(gs, gd)}")
    if ed != gd:
        raise DTypeError(f"{what}: expected {type_string(es, ed)}, got {type_string(gs, gd)}")


def _match_region(region, types, what: str) -> None:
    """The values a node passes to `region` against its parameters."""
    for k, (t, p) in enumerate(zip(types, region.param_types())):
        _match(p, t, f"{what} operand {k}")


def _operand_types(inputs) -> list:
    for x in inputs:
        if x.dtype == TUPLE:
            raise GraphcError(f"a control-flow node's operand {x!r} is itself a tuple")
    return [(x.shape, x.dtype) for x in inputs]


# -- scan ------------------------------------------------------------------------------

def scan_output_types(attrs) -> list:
    body, nc = attrs["body"], attrs["num_carry"]
    outs = body.output_types()
    return outs[:nc] + [((attrs["length"],) + tuple(s), d) for s, d in outs[nc:]]


def _scan_rule(inputs, attrs):
    body = _check_region(attrs["body"], "scan body")
    nc, nx, length = attrs["num_carry"], attrs["num_xs"], attrs["length"]
    if isinstance(length, bool) or not isinstance(length, (int, Dim)) or length < 0:
        raise ShapeError(f"scan length must be a non-negative int or a symbolic size, got "
                         f"{length!r}")
    types = _operand_types(inputs)
    params = body.param_types()
    if len(types) != len(params):
        raise GraphcError(f"scan: {len(types)} operands for a body of {len(params)} parameters")
    for k, (t, p) in enumerate(zip(types, params)):
        if nc <= k < nc + nx:
            if not t[0] or t[0][0] != length:
                raise ShapeError(f"scan: sequence {k - nc} is {type_string(*t)}, its leading "
                                 f"dimension must be the length {length}")
            t = (t[0][1:], t[1])
        _match(p, t, f"scan operand {k}")
    outs = body.output_types()
    if len(outs) < nc:
        raise GraphcError(f"scan: the body returns {len(outs)} values for {nc} carries")
    for k in range(nc):
        _match(params[k], outs[k], f"scan carry {k}: the body's new value")
    return (), TUPLE


def _scan_impl(args, attrs, node):
    from ..interpreter import run_region
    body, nc, nx = attrs["body"], attrs["num_carry"], attrs["num_xs"]
    length, reverse = attrs["length"], attrs["reverse"]
    carry, xs, caps = list(args[:nc]), args[nc:nc + nx], list(args[nc + nx:])
    types = scan_output_types(attrs)
    env = getattr(node, "env", None) or {}
    ys = [np.empty(concrete_shape(s, env), dtypes.to_numpy(d)) for s, d in types[nc:]]
    for i in range(length):
        t = length - 1 - i if reverse else i
        out = run_region(body, carry + [x[t] for x in xs] + caps, getattr(node, "env", None))
        carry = out[:nc]
        for y, v in zip(ys, out[nc:]):
            y[t] = v
    return tuple(carry + ys)


# -- while -----------------------------------------------------------------------------

def while_output_types(attrs) -> list:
    return attrs["body"].output_types()


def _while_rule(inputs, attrs):
    cond = _check_region(attrs["cond"], "while_loop cond")
    body = _check_region(attrs["body"], "while_loop body")
    ns, ncc = attrs["num_state"], attrs["num_cond_captures"]
    types = _operand_types(inputs)
    state, ccaps, bcaps = types[:ns], types[ns:ns + ncc], types[ns + ncc:]
    if len(cond.params) != ns + ncc or len(body.params) != ns + len(bcaps):
        raise GraphcError("while_loop: operands do not match the regions' parameters")
    _match_region(cond, state + ccaps, "while_loop cond")
    _match_region(body, state + bcaps, "while_loop body")
    if cond.output_types() != [((), "bool")]:
        got = ", ".join(type_string(*t) for t in cond.output_types())
        raise DTypeError(f"while_loop: cond_fn must return one bool scalar, got {got}")
    outs = body.output_types()
    if len(outs) != ns:
        raise GraphcError(f"while_loop: the body returns {len(outs)} values for {ns} "
                          f"state values")
    for k in range(ns):
        _match(state[k], outs[k], f"while_loop state {k}: the body's new value")
    return (), TUPLE


def _while_impl(args, attrs, node):
    from ..interpreter import run_region
    ns, ncc = attrs["num_state"], attrs["num_cond_captures"]
    state, ccaps, bcaps = list(args[:ns]), list(args[ns:ns + ncc]), list(args[ns + ncc:])
    while bool(run_region(attrs["cond"], state + ccaps, getattr(node, "env", None))[0]):
        state = run_region(attrs["body"], state + bcaps, getattr(node, "env", None))
    return tuple(state)


# -- cond ------------------------------------------------------------------------------

def cond_output_types(attrs) -> list:
    return attrs["true"].output_types()


def _cond_rule(inputs, attrs):
    tb = _check_region(attrs["true"], "cond true branch")
    fb = _check_region(attrs["false"], "cond false branch")
    no, ntc = attrs["num_operands"], attrs["num_true_captures"]
    types = _operand_types(inputs)
    if types[0] != ((), "bool"):
        raise DTypeError(f"cond: the predicate must be a bool scalar, got "
                         f"{type_string(*types[0])}")
    ops, tcaps, fcaps = types[1:1 + no], types[1 + no:1 + no + ntc], types[1 + no + ntc:]
    if len(tb.params) != no + ntc or len(fb.params) != no + len(fcaps):
        raise GraphcError("cond: operands do not match the branches' parameters")
    _match_region(tb, ops + tcaps, "cond true-branch")
    _match_region(fb, ops + fcaps, "cond false-branch")
    to, fo = tb.output_types(), fb.output_types()
    if len(to) != len(fo):
        raise GraphcError(f"cond: the true branch returns {len(to)} values, the false "
                          f"branch {len(fo)}")
    for k, (a, b) in enumerate(zip(to, fo)):
        _match(a, b, f"cond output {k}: the false branch's value")
    return (), TUPLE


def _cond_impl(args, attrs, node):
    from ..interpreter import run_region
    no, ntc = attrs["num_operands"], attrs["num_true_captures"]
    ops = list(args[1:1 + no])
    if bool(args[0]):
        return tuple(run_region(attrs["true"], ops + list(args[1 + no:1 + no + ntc]),
                                getattr(node, "env", None)))
    return tuple(run_region(attrs["false"], ops + list(args[1 + no + ntc:]),
                            getattr(node, "env", None)))


# -- get -------------------------------------------------------------------------------

OUTPUT_TYPES = {"scan": scan_output_types, "while": while_output_types,
                "cond": cond_output_types}


def output_types(node) -> list:
    """(shape, dtype) of each result of control node `node`."""
    return OUTPUT_TYPES[node.op](node.attrs)


def _get_rule(inputs, attrs):
    (src,) = inputs
    if src.dtype != TUPLE or src.op not in OUTPUT_TYPES:
        raise GraphcError(f"get: operand {src!r} is not a control-flow node")
    types = output_types(src)
    k = attrs["index"]
    if not isinstance(k, int) or not 0 <= k < len(types):
        raise GraphcError(f"get: index {k!r} is out of range for {len(types)} results")
    return types[k]


define("scan", "control", _scan_rule, _scan_impl)
define("while", "control", _while_rule, _while_impl)
define("cond", "control", _cond_rule, _cond_impl)
define("get", "control", _get_rule, lambda args, attrs, node: args[0][attrs["index"]], arity=1)
