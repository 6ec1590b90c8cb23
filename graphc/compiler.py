"""gc.compile: graph -> optimized program -> fused kernels -> one native module."""
from __future__ import annotations

import time

from graphc_runtime.cpu import Signature
from graphc_runtime.dims import Dim, shape_symbols
from graphc_runtime.errors import CompileError, GraphcError

from . import program_cache
from .api import Tensor, checked_updates, flatten_outputs, _graph_of, structure_of
from .artifact_info import describe_program
from .backends import Build, backend_for
from .backends.llvm.symbols import program_symbols
from .executable import Executable
from .ir import dtypes
from .ir.source import user_location
from .passes.autocast import PRECISIONS
from .passes.manager import PassManager
from .passes.pipeline import graph_pipeline
from .passes.program import Program
from .passes.rematerialize import plan_peak, rematerialize
from .schedule import fusion, memory
from .schedule.lower import lower

DRIVER_OPTIONS = {"dump_dir", "fuse", "distributed", "winograd", "memory_budget",
                  "precision"}
BUDGET_ROUNDS, VALUES_PER_ROUND = 12, 8     # memory_budget: lowerings at most, values each


def compile(outputs, inputs=None, updates=None, device: str = "cpu", **options) -> Executable:  # noqa: A001
    """Compile `outputs` (a Tensor, list or dict) and `updates` ({variable: new value})."""
    start = time.perf_counter()
    use_cache = not options.pop("_no_program_cache", False)
    loc = user_location()
    backend = backend_for(device, options, loc, common=DRIVER_OPTIONS)
    winograd = options.get("winograd", True)
    if not isinstance(winograd, bool):
        raise CompileError(f"winograd must be True or False, got {winograd!r}", loc)
    requested = options.get("precision", "float32")
    precision = PRECISIONS.get(requested) if isinstance(requested, str) else None
    if precision is None:
        raise CompileError(f"precision must be one of {', '.join(map(repr, PRECISIONS))}, "
                           f"got {requested!r}", loc)
    budget = options.get("memory_budget")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or
                               budget < 0):
        raise CompileError(f"memory_budget must be a number of bytes (int >= 0), got "
                           f"{budget!r}", loc)
    flat, rebuild = flatten_outputs(outputs)
    upd_vars, upd_vals = checked_updates(updates)
    if not flat + upd_vals:
        raise CompileError("nothing to compile: no outputs and no updates", loc)
    graph = _graph_of(flat + upd_vals + upd_vars)
    roots = {"outputs": [t.node.id for t in flat], "structure": structure_of(outputs),
             "updates": [[v.name, nv.node.id] for v, nv in zip(upd_vars, upd_vals)],
             "inputs": None if inputs is None else
             [t.node.id if isinstance(t, Tensor) else repr(t) for t in inputs]}
    cache_name, cache_state, graph_arrays = program_cache.key(graph, roots, backend, options) \
        if use_cache else (None, "not used: compiled again for its module", {})
    if cache_name is not None:
        exe = program_cache.load(cache_name, graph, rebuild, lambda: compile(
            outputs, inputs, updates, device, _no_program_cache=True, **options),
            graph_arrays)
        if exe is not None:
            exe.stats.update(program_cache="hit", compile_seconds=time.perf_counter() - start,
                             pass_seconds={"program_cache": time.perf_counter() - start})
            return exe
    graph_arrays = frozenset(graph_arrays)    # a miss keeps their names, not their bytes
    source = Program(graph, [t.node for t in flat],
                     [(v.name, nv.node) for v, nv in zip(upd_vars, upd_vals)],
                     {"winograd": winograd, "precision": precision})

    passes = graph_pipeline(backend.lowering_passes())
    policy = backend.policy()
    pm = PassManager(passes, options.get("dump_dir"))
    optimized = pm.run(source)
    seconds = dict(pm.seconds)
    t0 = time.perf_counter()
    plan = fusion.plan(optimized, policy)
    seconds["fusion"] = time.perf_counter() - t0
    input_nodes = _input_nodes(optimized, inputs, loc)
    _check_symbols(optimized, input_nodes, loc)

    def compile_body(program, params):          # loop and branch bodies, alike
        program.annotations.update(source.annotations)     # winograd=, precision=
        body = PassManager(passes, texts=False).run(program)
        by_name = {n.attrs["name"]: n for n in body.graph.placeholders()}
        return lower(body, fusion.plan(body, policy),
                     [by_name.get(p.attrs["name"], p) for p in params], policy, compile_body)
    t0 = time.perf_counter()
    lowered = lower(optimized, plan, input_nodes, policy, compile_body)
    seconds["schedule_and_memory"] = time.perf_counter() - t0
    budget_stats = None
    if budget is not None:
        optimized, plan, lowered, budget_stats = fit_memory_budget(
            optimized, plan, lowered, budget,
            lambda prog: fusion.plan(prog, policy),
            lambda prog, pl: lower(prog, pl, _same_inputs(prog, input_nodes), policy,
                                   compile_body))
        input_nodes = _same_inputs(optimized, input_nodes)
        seconds["memory_budget"] = budget_stats.pop("seconds")

    built = backend.build(Build(graph.name, graph, optimized, plan, lowered,
                                _signature(graph, input_nodes, lowered, outputs), seconds))
    stats = _stats(plan, lowered, built.kernels, seconds, start, **built.stats)
    info = describe_program(optimized, plan, lowered, built.target, built.code,
                            structure_of(outputs), device=backend.kind, source=source)
    info["manifest"].update(built.manifest)
    if built.profile_object is not None:
        info["profile_object"] = built.profile_object
    exe = Executable(built.native, rebuild, stats, _dumps(pm, plan, lowered, **built.dumps),
                     device=backend.device, module=built.module, info=info)
    exe.stats["program_cache"] = "miss" if cache_name else cache_state
    if budget_stats is not None:
        exe.stats["memory_budget"] = budget_stats
    if options.get("distributed") is not None:
        options["distributed"].setup(exe, optimized)
    if cache_name is not None:
        program_cache.store(cache_name, exe, graph_arrays)
    return exe


def fit_memory_budget(optimized, plan, lowered, budget, fuse, lower_program):
    """Recompute values (passes/rematerialize.py) until the planned arena fits `budget`
    bytes or nothing is left to recompute; the program kept, and what happened."""
    t0 = time.perf_counter()
    before = lowered.memory.arena_bytes
    recomputed, failed = 0, set()
    for _ in range(BUDGET_ROUNDS):
        arena = lowered.memory.arena_bytes
        if not isinstance(arena, int) or arena <= budget:
            break
        peak, across = plan_peak(plan, lowered)
        smaller, chosen = rematerialize(optimized, arena - budget, peak, across,
                                        VALUES_PER_ROUND, failed)
        if not chosen:
            break
        new_plan = fuse(smaller)
        new_lowered = lower_program(smaller, new_plan)
        if new_lowered.memory.arena_bytes >= arena:      # no better: try the others
            failed.update(chosen)
            continue
        optimized, plan, lowered = smaller, new_plan, new_lowered
        failed = set()                                   # ids of the old program
        recomputed += len(chosen)
    arena = lowered.memory.arena_bytes
    return optimized, plan, lowered, {
        "budget": budget, "arena_before": before, "arena": arena,
        "met": isinstance(arena, int) and arena <= budget, "values_recomputed": recomputed,
        "seconds": time.perf_counter() - t0}


def _same_inputs(program, input_nodes) -> list:
    """`input_nodes`' placeholders in `program`'s graph (a pass rebuilt it), by name."""
    by_name = {n.attrs["name"]: n for n in program.graph.placeholders()}
    return [by_name.get(n.attrs["name"], n) for n in input_nodes]


def _input_nodes(optimized, inputs, loc) -> list:
    """The executable's input placeholders, in order: `inputs` as given (unused ones
    accepted), else every placeholder the program needs."""
    needed = {n.id for n in optimized.live_nodes() if n.op == "parameter"}
    if inputs is None:
        return [n for n in optimized.graph.placeholders() if n.id in needed]
    by_name = {n.attrs["name"]: n for n in optimized.graph.placeholders()}
    input_nodes = []
    for t in inputs:
        if not isinstance(t, Tensor) or t.node.op != "parameter":
            raise GraphcError(f"inputs must be placeholders, got {t!r}", loc)
        input_nodes.append(by_name.get(t.node.attrs["name"]) or t.node)
    missing = needed - {n.id for n in input_nodes}
    if missing:
        names = [n.attrs["name"] for n in optimized.graph.nodes if n.id in missing]
        raise GraphcError(f"the outputs need placeholder(s) {', '.join(names)} that are "
                          f"not in `inputs`", loc)
    return input_nodes


def _symbols_of(node) -> set:
    out = shape_symbols(node.shape)
    if node.op == "dim_size" and isinstance(node.attrs["size"], Dim):
        out |= node.attrs["size"].symbols()
    return out


def _check_symbols(program, input_nodes, loc) -> None:
    """Every symbolic size the program uses must come from one of its inputs (that is
    where the call binds it)."""
    bound = set()
    for n in input_nodes:
        bound |= shape_symbols(n.shape)
    for n in program.live_nodes():
        missing = _symbols_of(n) - bound
        if missing:
            raise CompileError(f"{n.describe()} uses the symbolic size {sorted(missing)[0]!r}, "
                               f"which no input of the executable has, so no call could give "
                               f"it a value", loc)


def _stats(plan, lowered, kernels: int, seconds: dict, start: float, **extra) -> dict:
    """Executable.stats: kernel count, memory figures, per-pass and total compile time."""
    return {
        "kernels": kernels,
        "fusion_groups": len(plan.groups),
        "arena_bytes": lowered.memory.arena_bytes,
        "live_bytes_lower_bound": lowered.memory.live_bytes_lower_bound,
        "naive_bytes": lowered.naive_bytes,
        "compile_seconds": time.perf_counter() - start,
        "pass_seconds": seconds,
        "kernel_bytes": [{"kernel": n, "read": r, "written": w} for n, r, w in lowered.traffic],
        "in_place_updates": list(lowered.in_place_updates),
        "copied_updates": list(lowered.copied_updates),
        **extra,
    }


def _dumps(pm, plan, lowered, **code) -> dict:
    """Text of every stage; `code` adds the backend's (llvm= or ptx=)."""
    return {"graph": pm.dumps["input"], "optimized": pm.dumps["dce"],
            "fused": fusion.describe(plan),
            "memory": memory.describe(lowered.memory, {b.id: b.name for b in
                                                       lowered.buffers.values()}),
            **code}


def output_names(outputs, count: int) -> list:
    """Readable names for the flattened outputs: dict keys, else out0, out1..."""
    names = []

    def walk(obj, prefix):
        if isinstance(obj, Tensor):
            names.append(prefix)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, str(k) if prefix == "out" else f"{prefix}.{k}")
        else:
            for k, v in enumerate(obj):
                walk(v, f"{prefix}{k}" if prefix == "out" else f"{prefix}.{k}")
    walk(outputs, "out")
    return names if len(names) == count else [f"out{k}" for k in range(count)]


def _signature(graph, input_nodes, lowered, outputs):
    return Signature(
        symbols=program_symbols(lowered.buffers.values()),
        inputs=[(n.attrs["name"], n.shape, n.dtype) for n in input_nodes],
        outputs=[(name, b.shape, b.dtype) for name, b in
                 zip(output_names(outputs, len(lowered.outputs)), lowered.outputs)],
        variables=[(name, graph.variables[name].shape,
                    dtypes.canonical(graph.variables[name].dtype)) for name in lowered.variables])
