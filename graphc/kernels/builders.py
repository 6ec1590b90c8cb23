"""One table of kernel builders by fusion group kind, used alike by fusion (to probe
whether a group can be one kernel) and by lowering (to build it).

A builder is `build(name, group, buffer_of, dests)`: `group` has the kind, roots, members
and anchor of a fusion group (schedule/fusion.py's Group), `buffer_of(node)` the buffer
of a value computed outside it, `dests(node)` where a root's value goes. A builder
raises Illegal where the group cannot be one kernel.
"""
from __future__ import annotations

from graphc_runtime.errors import CompileError

from .build_conv import build_conv
from .build_dot import build_dot
from .build_loop import build_loop, loop_vars
from .build_row import build_row
from .build_scatter import build_scatter
from .expressions import ExprBuilder
from .ir import Buffer, CollectiveKernel, Illegal, LoopKernel, Store
from .refine import refine_loop


def _collective(name, g, buffer_of, dests):
    node = g.anchor
    if node.attrs.get("axis_size") == 1:          # one process: a copy
        vars_ = loop_vars(node.shape)
        value = ExprBuilder({}, buffer_of).value(node.inputs[0], vars_)
        return LoopKernel(name, node.shape, vars_, [Store(b, value, vars_) for b in dests(node)])
    src = buffer_of(node.inputs[0])
    if src is None and node.op == "recv":       # its token only orders it: nothing to read
        src = dests(node)[0]
    if src is None:
        raise CompileError(f"{node.op}: its operand has no buffer")
    if node.dtype not in ("float32", "float64", "int32", "int64"):
        raise CompileError(f"{node.op} of {node.dtype} across processes is not supported "
                           f"(float32, float64, int32, int64 are)")
    return CollectiveKernel(name, node.op, dict(node.attrs), src, dests(node)[0])


BUILDERS = {
    "loop": lambda name, g, buffer_of, dests: refine_loop(
        build_loop(name, g.roots, g.members, buffer_of, dests)),
    "row": lambda name, g, buffer_of, dests: build_row(name, g.roots, g.members, buffer_of,
                                                       dests),
    "dot": lambda name, g, buffer_of, dests: build_dot(name, g.anchor, g.roots, g.members,
                                                       buffer_of, dests),
    "conv": lambda name, g, buffer_of, dests: build_conv(name, g.anchor, g.roots, g.members,
                                                         buffer_of, dests),
    "scatter": lambda name, g, buffer_of, dests: build_scatter(name, g.anchor, g.members,
                                                               buffer_of, dests),
    "collective": _collective,
}


def build(name: str, group, buffer_of, dests):
    """The kernel of a fusion group (a control group is built by schedule/bodies.py)."""
    if group.kind not in BUILDERS:
        raise CompileError(f"unknown group kind {group.kind}")
    return BUILDERS[group.kind](name, group, buffer_of, dests)


def _stand_in(node) -> Buffer:
    """A stand-in for node's buffer in a probe kernel (ids apart, as real buffers')."""
    return Buffer(-1 - node.id, node.shape, node.dtype, "temp")


def probe(group):
    """The kernel `group` would make (over stand-in buffers, not refined), or None where
    it cannot be one."""
    if group.kind not in ("loop", "row", "dot", "conv"):
        return None
    try:
        if group.kind == "loop":            # refining is for the real kernel only
            return build_loop("probe", group.roots, group.members, _stand_in,
                              lambda n: [_stand_in(n)])
        return BUILDERS[group.kind]("probe", group, _stand_in, lambda n: [_stand_in(n)])
    except Illegal:
        return None
