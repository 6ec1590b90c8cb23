"""Lowering of a control-flow group (scan, while, cond) to a ControlKernel: each region is
compiled on its own by the driver's body compiler (handed down through `lower`: the same
passes, fusion options and memory planning as the main program) into kernels over its
own parameters, results and arena; the enclosing program gives it buffers for its
operands, results, loop-carried values and temporaries."""
from __future__ import annotations

from graphc_runtime.errors import CompileError

from ..ir.ops.control import output_types
from ..ir.region import Region
from ..passes.program import Program
from ..kernels import kernel as K

ARENA_WORD = 8


def lower_region(region: Region, compile_body):
    """The region as a Lowered program, through the driver's `compile_body(program,
    params)` (inputs in the region's parameter order)."""
    if compile_body is None:
        raise CompileError("internal: lowering a loop or branch body needs the driver's "
                           "compile_body")
    return compile_body(Program(region.graph, list(region.outputs), []), list(region.params))


def regions(node) -> dict:
    return {k: v for k, v in node.attrs.items() if isinstance(v, Region)}


def build_control(group, name: str, buffer_of, dests, new_buffer, add_constant,
                  compile_body):
    """The ControlKernel of a control group; `new_buffer(shape, dtype, name)` makes an
    outer temporary, `add_constant(array)` an outer constant buffer; `compile_body`
    compiles a region's program (the driver's, handed down)."""
    node = group.anchor
    operands = [buffer_of(i) for i in node.inputs]
    types = output_types(node)
    by_index = {}
    for r in group.roots:
        if r.attrs["index"] in by_index:
            raise CompileError(f"internal: two get nodes read result {r.attrs['index']} of "
                               f"{node.describe()} (CSE merges them)")
        by_index[r.attrs["index"]] = dests(r)[0]
    results = [by_index.get(k) or new_buffer(s, d, f"{name}_unused{k}")
               for k, (s, d) in enumerate(types)]
    bodies = {role: lower_region(region, compile_body)
              for role, region in regions(node).items()}
    for role, low in bodies.items():          # names unique in the module
        for k in nested_kernels(low.kernels):
            k.name = f"{name}_{role}_{k.name}"
    spare, flag = [], None
    if node.op in ("scan", "while"):
        carried = node.attrs["num_carry"] if node.op == "scan" else node.attrs["num_state"]
        spare = [new_buffer(s, d, f"{name}_carry{j}") for j, (s, d) in
                 enumerate(types[:carried])]
    if node.op == "while":
        flag = new_buffer((), "bool", f"{name}_flag")
    arenas, constants = {}, {}
    for role, low in bodies.items():
        size = low.memory.arena_bytes
        arenas[role] = new_buffer((-(-size // ARENA_WORD),), "int64", f"{name}_{role}_arena") \
            if size else None
        constants[role] = [add_constant(b, value) for b, value in low.constants]
    attrs = {k: v for k, v in node.attrs.items() if not isinstance(v, Region)}
    return K.ControlKernel(name, node.op, attrs, bodies, operands, results, spare, arenas,
                           constants, flag)


def nested_kernels(kernels) -> list:
    """Every kernel of a schedule, the regions' kernels (recursively) included."""
    out = []
    for k in kernels:
        out.append(k)
        if isinstance(k, K.ControlKernel):
            for low in k.bodies.values():
                out += nested_kernels(low.kernels)
    return out
