"""If, Loop and Scan onto gc.cond, gc.scan and gc.while_loop.

A body (an ONNX sub-graph) is converted node by node inside the graphc body being
traced; the outer values it names are captured. If with a predicate known at import runs
the taken branch inline. Loop with a trip count known at import whose condition stays
true becomes a scan (its scan outputs stacked); a loop whose condition depends on the data
becomes a while_loop (without scan outputs: their length would depend on the data).
Scan (opset 9 on) moves each sequence's axis first and reverses the backward ones.
"""
from __future__ import annotations

import numpy as np

import graphc as gc

from .dtypes import to_array
from .registry import op


class _DataDependent(Exception):
    """The loop's condition is not constantly true: not a counted loop."""


def _run_body(ctx, graph, bound: dict) -> list:
    """Convert sub-graph `graph` with its inputs `bound` ({name: value}); its outputs."""
    saved_node, outer = ctx.node, ctx.env
    env = dict(outer)
    for init in graph.initializer:
        env[init.name] = to_array(init)
    env.update(bound)
    try:
        ctx.convert_nodes(graph.node, env)
    finally:
        ctx.node, ctx.env = saved_node, outer
    missing = [o.name for o in graph.output if o.name not in env]
    if missing:
        raise ctx.unsupported(f"the body's output {missing[0]!r} is produced by no node")
    return [env[o.name] for o in graph.output]


def _tensors(ctx, values) -> list:
    return [v if isinstance(v, gc.Tensor) else gc.constant(np.asarray(v)) for v in values]


def _like(ctx, values, carried) -> list:
    """A body's new loop-carried values as Tensors of the carried values' dtypes."""
    return [ctx.tensor(v, c.dtype) for v, c in zip(values, carried)]


def _bool_scalar(ctx, value, what: str):
    v = ctx.tensor(value)
    if v.size != 1:
        raise ctx.unsupported(f"{what} must have one element, got {v.node.type_str()}")
    v = v.reshape(())
    return v if v.dtype == "bool" else v != 0


@op("If")
def _if(ctx, a, at):
    then_g, else_g = at["then_branch"], at["else_branch"]
    if not isinstance(a[0], gc.Tensor):             # known at import: run the taken branch
        taken = then_g if bool(np.asarray(a[0]).reshape(-1)[0]) else else_g
        return _run_body(ctx, taken, {})
    pred = _bool_scalar(ctx, a[0], "the condition")

    def branch(g):
        return lambda: tuple(_tensors(ctx, _run_body(ctx, g, {})))
    try:
        return list(gc.cond(pred, branch(then_g), branch(else_g)))
    except (gc.ShapeError, gc.DTypeError) as e:
        raise ctx.unsupported(f"the branches give different types ({e.bare_message}); "
                              f"graphc's cond needs one type per output") from None


@op("Loop")
def _loop(ctx, a, at):
    body = at["body"]
    trip, cond0, init = (a + [None, None])[0], (a + [None, None])[1], a[2:]
    n_state = len(init)
    n_scan = len(body.output) - 1 - n_state
    if len(body.input) != 2 + n_state:
        raise ctx.unsupported(f"the body takes {len(body.input)} inputs for {n_state} "
                              f"loop-carried values (expected {2 + n_state})")
    names = [i.name for i in body.input]
    state = [ctx.tensor(v) for v in init]
    if n_scan and isinstance(trip, gc.Tensor):
        # stacked outputs need their length at import: an input feeding the trip count
        # raises NeedsInputValues (graphc.onnx.backend specializes on its value)
        trip = ctx.static(trip, "the trip count of a loop with scan outputs")
    static_trip = None if trip is None or isinstance(trip, gc.Tensor) else \
        int(np.asarray(trip).reshape(-1)[0])
    static_cond = None if cond0 is None or isinstance(cond0, gc.Tensor) else \
        bool(np.asarray(cond0).reshape(-1)[0])
    if static_trip is not None and cond0 is not None and static_cond is False:
        static_trip = 0
    if static_trip is not None and (cond0 is None or static_cond is not None):
        try:
            return _counted_loop(ctx, body, names, state, static_trip, n_scan)
        except _DataDependent:        # the condition can turn false: a while_loop below
            pass
    if n_scan:
        raise ctx.unsupported(f"{n_scan} scan output(s) of a loop whose trip count depends "
                              f"on the data (their length would too)")
    return _while_loop(ctx, body, names, state, trip, cond0)


def _counted_loop(ctx, body, names, state, trip: int, n_scan: int) -> list:
    """Loop with a known trip count whose condition stays true: a scan."""
    def step(carry, _):
        i, values = carry
        outs = _run_body(ctx, body, dict(zip(names, [i, np.array(True)] + list(values))))
        keep = outs[0]
        if isinstance(keep, gc.Tensor) or not bool(np.asarray(keep).reshape(-1)[0]):
            raise _DataDependent
        new = _like(ctx, outs[1:1 + len(values)], values)
        return (i + 1, new), _tensors(ctx, outs[1 + len(values):])
    (_, final), ys = gc.scan(step, (gc.constant(np.int64(0)), state), length=trip)
    return list(final) + list(ys)


def _while_loop(ctx, body, names, state, trip, cond0) -> list:
    bound = None if trip is None else ctx.tensor(trip, "int64").reshape(())
    keep0 = gc.constant(True) if cond0 is None else _bool_scalar(ctx, cond0, "the condition")

    def test(s):
        i, keep, _ = s
        return keep if bound is None else keep & (i < bound)

    def step(s):
        i, keep, values = s
        outs = _run_body(ctx, body, dict(zip(names, [i, keep] + list(values))))
        new = _like(ctx, outs[1:], values)
        return i + 1, _bool_scalar(ctx, outs[0], "the body's condition"), new
    _, _, final = gc.while_loop(test, step, (gc.constant(np.int64(0)), keep0, state))
    return list(final)


@op("Scan")
def _scan(ctx, a, at):
    if ctx.opset < 9:
        raise ctx.unsupported("Scan of opset 8 (batched, with sequence_lens)")
    body = at["body"]
    n_in = at["num_scan_inputs"]
    n_state = len(a) - n_in
    states, seqs = [ctx.tensor(v) for v in a[:n_state]], [ctx.tensor(v) for v in a[n_state:]]
    in_axes = list(at.get("scan_input_axes", [0] * n_in))
    in_dirs = list(at.get("scan_input_directions", [0] * n_in))
    n_out = len(body.output) - n_state
    out_axes = list(at.get("scan_output_axes", [0] * n_out))
    out_dirs = list(at.get("scan_output_directions", [0] * n_out))
    moved = []
    for x, axis, d in zip(seqs, in_axes, in_dirs):
        axis = axis % x.ndim
        if axis:
            x = gc.transpose(x, [axis] + [k for k in range(x.ndim) if k != axis])
        moved.append(gc.api.bind("reverse", x, dimensions=(0,)) if d else x)
    names = [i.name for i in body.input]

    def step(carry, xs):
        outs = _run_body(ctx, body, dict(zip(names, list(carry) + list(xs))))
        new = _like(ctx, outs[:n_state], carry)
        return new, _tensors(ctx, outs[n_state:])
    final, ys = gc.scan(step, states, moved)
    results = []
    for y, axis, d in zip(ys, out_axes, out_dirs):
        if d:
            y = gc.api.bind("reverse", y, dimensions=(0,))
        axis = axis % y.ndim
        if axis:
            order = list(range(1, axis + 1)) + [0] + list(range(axis + 1, y.ndim))
            y = gc.transpose(y, order)
        results.append(y)
    return list(final) + results
