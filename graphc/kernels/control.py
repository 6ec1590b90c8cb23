"""Lowering of a control-flow group (scan, while, cond) to a ControlKernel: each region is
compiled on its own, through the same passes, fusion and memory planning as a program,
into kernels over its own parameters, results and arena; the enclosing program gives it
buffers for its operands, results, loop-carried values and temporaries."""
from __future__ import annotations

from graphc_runtime.errors import CompileError

from ..ir.ops.control import output_types
from ..ir.region import Region
from ..passes import fusion
from ..passes.manager import PassManager
from ..passes.program import Program
from . import kernel as K

ARENA_WORD = 8


def lower_region(region: Region, lower, annotations: dict | None = None):
    """The region as a Lowered program (through `lower`, graphc.kernels.lower.lower):
    inputs in the region's parameter order; `annotations` the enclosing program's
    (its device and compile choices)."""
    from ..passes.pipeline import default_pipeline
    program = Program(region.graph, list(region.outputs), [],
                      dict(annotations or {"device": "cpu"}))
    optimized = PassManager(default_pipeline()).run(program)
    plan = fusion.plan(optimized)
    by_name = {n.attrs["name"]: n for n in optimized.graph.placeholders()}
    inputs = [by_name.get(p.attrs["name"], p) for p in region.params]
    return lower(optimized, plan, inputs)


def regions(node) -> dict:
    return {k: v for k, v in node.attrs.items() if isinstance(v, Region)}


def build_control(group, name: str, buffer_of, dests, new_buffer, add_constant, lower,
                  annotations: dict | None = None):
    """The ControlKernel of a control group; `new_buffer(shape, dtype, name)` makes an
    outer temporary, `add_constant(array)` an outer constant buffer; `lower` compiles a
    region's program."""
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
    bodies = {role: lower_region(region, lower, annotations)
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
